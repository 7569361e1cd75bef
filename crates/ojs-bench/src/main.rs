//! `ojs-bench`: benchmarks of the OJS outbox relay. See docs/benchmarks.md and scripts/bench.sh.
//!
//! - `drain`: backlog drain throughput on PostgreSQL per batch size, against a naive relay;
//! - `drain-mysql`: backlog drain on MySQL/MariaDB against its SQL floor;
//! - `latency`: commit-to-delivery latency of the in-process hot path at a steady commit rate;
//! - `memory`: peak RSS of a separate relay process draining a large backlog;
//! - `faults`: what one batch costs the backend when its answer is lost, or when it mixes rows
//!   the backend holds, unique conflicts and poison (requests, job bodies);
//! - `summary`: issue 16's targets as one table, from one run's JSON lines.
//!
//! Each prints a table and appends JSON lines to `--out`. The OJS backend is the
//! `ojs-devserver` binary in a child process, so its CPU is not counted in the relay's.

mod common;
mod drain;
mod drain_mysql;
mod faults;
mod latency;
mod memory;
mod peer_latency;
mod summary;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "ojs-bench",
    version,
    about = "Benchmarks of the OJS outbox relay"
)]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Relay drain throughput (jobs/s) per batch size, with a naive one-row-per-transaction baseline.
    Drain(drain::DrainArgs),
    /// Drain throughput on MySQL or MariaDB against its SQL floor, in the same run.
    DrainMysql(drain_mysql::DrainMysqlArgs),
    /// Commit-to-delivery latency through the in-process hot path at a steady commit rate.
    Latency(latency::LatencyArgs),
    /// Peak RSS of a separate relay process draining a large backlog.
    Memory(memory::MemoryArgs),
    /// Requests and job bodies one batch costs under faults: a lost answer; held, conflicting and poison rows.
    Faults(faults::FaultsArgs),
    /// Issue 16's targets as one table, met or not, from one run's JSON lines.
    Summary(summary::SummaryArgs),
    /// Runs only the relay until SIGTERM (used by `memory` when `ojs-relay` is not built).
    #[command(hide = true)]
    RelayOnly(memory::RelayOnlyArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Bench::Drain(args) => drain::run(args).await,
        Bench::DrainMysql(args) => drain_mysql::run(args).await,
        Bench::Latency(args) => latency::run(args).await,
        Bench::Memory(args) => memory::run(args).await,
        Bench::Faults(args) => faults::run(args).await,
        Bench::Summary(args) => summary::run(args),
        Bench::RelayOnly(args) => memory::relay_only(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ojs-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

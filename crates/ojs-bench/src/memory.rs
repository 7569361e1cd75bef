//! `memory`: peak RSS of a separate relay process while it drains a large backlog on
//! PostgreSQL. The relay is `ojs-relay run` when that binary is beside this one, otherwise this
//! binary's hidden `relay-only` subcommand (the same `Relay::start`, nothing else).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use ojs_outbox::backend::Backend;
use ojs_outbox::{Outbox, Relay, Store};
use serde_json::json;

use crate::common::*;

#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// PostgreSQL URL.
    #[arg(long, env = "OJS_BENCH_DATABASE_URL")]
    pub database_url: String,
    /// Backlog to stage and drain.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: usize,
    /// The relay's `--batch-size` (default: the library's default).
    #[arg(long, default_value_t = ojs_outbox::Config::default().outbox.batch_size)]
    pub batch_size: usize,
    /// Relay binary (default: ojs-relay beside this one, else this binary's `relay-only`).
    #[arg(long)]
    pub relay_bin: Option<PathBuf>,
    /// ojs-devserver binary (default: beside this one).
    #[arg(long)]
    pub devserver_bin: Option<PathBuf>,
    /// RSS sampling period.
    #[arg(long, default_value_t = 50)]
    pub sample_ms: u64,
    /// JSON lines are appended here.
    #[arg(long, default_value = "target/bench/results.jsonl")]
    pub out: PathBuf,
}

const TABLE: &str = "ojs_bench_memory";

pub async fn run(args: MemoryArgs) -> BoxResult<()> {
    let (admin, version, devserver) =
        postgres_setup("memory", &args.database_url, args.devserver_bin.as_deref()).await?;

    drop_table(&admin, TABLE).await?;
    let store = Store::connect(&args.database_url, TABLE).await?;
    store.migrate().await?;
    let outbox = Outbox::connect(config_for(&args.database_url, &devserver.url, TABLE)).await?;
    println!(
        "memory: staging {} rows on PostgreSQL {version}...",
        args.rows
    );
    let staged = stage(&outbox, "bench.memory", args.rows).await?;
    drop(outbox);
    settle_database(&admin, TABLE).await?;
    devserver.reset().await?;
    println!(
        "  staged in {:.1}s ({:.0} rows/s)",
        staged.as_secs_f64(),
        args.rows as f64 / staged.as_secs_f64()
    );

    let (program, relay_kind, mut command) = relay_command(&args, &devserver.url)?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .env("OJS_LOG", "warn")
        .spawn()
        .map_err(|e| err(format!("cannot start {}: {e}", program.display())))?;
    let pid = child.id();
    println!(
        "  relay: {relay_kind} (pid {pid}), batch {}; draining...",
        args.batch_size
    );

    let started = Instant::now();
    let devserver_cpu0 = process_cpu_seconds(&devserver.pid().to_string()).unwrap_or(f64::NAN);
    let machine0 = machine_busy_seconds().unwrap_or(f64::NAN);
    let bench0 = process_cpu_seconds("self").unwrap_or(f64::NAN);
    let postmaster = postmaster_pid(&admin).await;
    let postgres0 = postmaster.and_then(cluster_cpu_seconds).unwrap_or(f64::NAN);
    let mut peak_rss = 0u64;
    let mut hwm = 0u64;
    let mut series = Vec::new();
    let mut next_series = Instant::now();
    let mut next_stats = Instant::now();
    let timeout = Duration::from_secs(900);
    let mut relay_cpu = f64::NAN;
    let drained_at = loop {
        if let Some((rss, high)) = rss_kib(pid) {
            peak_rss = peak_rss.max(rss);
            hwm = hwm.max(high);
            relay_cpu = process_cpu_seconds(&pid.to_string()).unwrap_or(relay_cpu);
            if rss > 0 && Instant::now() >= next_series {
                series.push(round1(rss as f64 / 1024.0));
                next_series += Duration::from_secs(1);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(err(format!("the relay exited early: {status}")));
        }
        if Instant::now() >= next_stats {
            next_stats = Instant::now() + Duration::from_millis(200);
            if devserver.jobs_received().await? >= args.rows as u64 {
                break Instant::now();
            }
        }
        if started.elapsed() > timeout {
            terminate(pid);
            return Err(err(format!("not drained after {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(args.sample_ms)).await;
    };
    // One last reading at the end of the drain (VmHWM is the kernel's own peak).
    if let Some((rss, high)) = rss_kib(pid) {
        peak_rss = peak_rss.max(rss);
        hwm = hwm.max(high);
        series.push(round1(rss as f64 / 1024.0));
    }
    relay_cpu = process_cpu_seconds(&pid.to_string()).unwrap_or(relay_cpu);
    let devserver_cpu =
        process_cpu_seconds(&devserver.pid().to_string()).unwrap_or(f64::NAN) - devserver_cpu0;
    let machine = machine_busy_seconds().unwrap_or(f64::NAN) - machine0;
    let bench = process_cpu_seconds("self").unwrap_or(f64::NAN) - bench0;
    let postgres = postmaster.and_then(cluster_cpu_seconds).unwrap_or(f64::NAN) - postgres0;
    let seconds = (drained_at - started).as_secs_f64();

    terminate(pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let stats = devserver.stats().await?;
    let status = store.status().await?;
    let ok = stats["jobs"].as_u64() == Some(args.rows as u64) && status.sent == args.rows as i64;
    let peak_mib = hwm.max(peak_rss) as f64 / 1024.0;
    let rate = args.rows as f64 / seconds;
    let record = json!({
        "bench": "memory",
        "relay": relay_kind,
        "rows": args.rows,
        "batch_size": args.batch_size,
        "peak_rss_mib": round1(peak_mib),
        "vm_hwm_kib": hwm,
        "max_sampled_rss_kib": peak_rss,
        "rss_mib_each_second": series,
        "drain_seconds": round3(seconds),
        "jobs_per_s": round1(rate),
        "relay_cpu_s": round3(relay_cpu),
        "devserver_cpu_s": round3(devserver_cpu),
        "postgres_cpu_s": round3(postgres),
        "machine_busy_s": round3(machine),
        "bench_process_cpu_s": round3(bench),
        "other_cpu_s": round3(machine - relay_cpu - devserver_cpu - postgres - bench),
        "staging_seconds": round3(staged.as_secs_f64()),
        "relay_exit": exit.map(|s| s.to_string()),
        "devserver_jobs": stats["jobs"],
        "devserver_deliveries": stats["deliveries"],
        "outbox_sent": status.sent,
        "postgres_version": version,
    });
    emit(&args.out, record)?;
    print_table(
        "relay memory while draining (separate process, PostgreSQL fsync on)",
        &[
            "relay",
            "rows",
            "batch",
            "peak RSS MiB",
            "drain s",
            "jobs/s",
            "relay CPU s",
            "pg CPU s",
            "other CPU s",
            "exit",
        ],
        &[vec![
            relay_kind.to_owned(),
            args.rows.to_string(),
            args.batch_size.to_string(),
            format!("{peak_mib:.1}"),
            format!("{seconds:.1}"),
            format!("{rate:.0}"),
            format!("{relay_cpu:.1}"),
            format!("{postgres:.1}"),
            format!(
                "{:.1}",
                machine - relay_cpu - devserver_cpu - postgres - bench
            ),
            exit.map(|s| s.to_string())
                .unwrap_or_else(|| "killed".into()),
        ]],
    );
    drop_table(&admin, TABLE).await?;
    if !ok {
        return Err(err(format!(
            "delivery check failed: devserver {stats}, outbox {status:?}"
        )));
    }
    Ok(())
}

fn relay_command(args: &MemoryArgs, ojs_url: &str) -> BoxResult<(PathBuf, &'static str, Command)> {
    let explicit = args.relay_bin.clone();
    let beside = std::env::current_exe()?
        .parent()
        .map(|d| d.join("ojs-relay"))
        .filter(|p| p.exists());
    if let Some(bin) = explicit.or(beside) {
        let mut command = Command::new(&bin);
        command.args([
            "--database-url",
            &args.database_url,
            "--table",
            TABLE,
            "run",
            "--ojs-url",
            ojs_url,
            "--batch-size",
            &args.batch_size.to_string(),
            "--poll-interval",
            "PT0.05S",
        ]);
        return Ok((bin, "ojs-relay run", command));
    }
    let bin = std::env::current_exe()?;
    let mut command = Command::new(&bin);
    command.args([
        "relay-only",
        "--database-url",
        &args.database_url,
        "--table",
        TABLE,
        "--ojs-url",
        ojs_url,
        "--batch-size",
        &args.batch_size.to_string(),
    ]);
    Ok((bin, "ojs-bench relay-only", command))
}

#[derive(Debug, Args)]
pub struct RelayOnlyArgs {
    #[arg(long)]
    pub database_url: String,
    #[arg(long)]
    pub table: String,
    #[arg(long)]
    pub ojs_url: String,
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    #[arg(long, default_value_t = 50)]
    pub poll_interval_ms: u64,
}

/// Runs only the relay (no hot path) until SIGTERM or SIGINT.
pub async fn relay_only(args: RelayOnlyArgs) -> BoxResult<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut config = config_for(&args.database_url, &args.ojs_url, &args.table);
    config.outbox.batch_size = args.batch_size;
    config.outbox.poll_interval = Duration::from_millis(args.poll_interval_ms);
    let store = Store::connect(&args.database_url, &args.table).await?;
    let relay = Relay::start(store, Backend::new(&config)?, &config, false);
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    relay.shutdown().await;
    Ok(())
}

//! `ojs-relay`: the separate outbox relay process of the OJS Framework Adapter.
//!
//! Every behaviour (schema, claiming, sending, retry, dead-lettering) is the `ojs-outbox`
//! library's; this binary only parses the command line, builds the library's `Config` and
//! calls it. See README.md for the commands, flags, environment variables and exit codes.

mod cli;
mod commands;
mod http;
mod settings;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use ojs_outbox::{Error, ErrorCode};
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return fail(&Error::new(
                ErrorCode::RelayShutDown,
                format!("cannot start the tokio runtime: {e}"),
            ));
        }
    };
    match runtime.block_on(dispatch(&cli)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => fail(&e),
    }
}

async fn dispatch(cli: &Cli) -> ojs_outbox::Result<i32> {
    let run_args = match &cli.command {
        Command::Run(args) => Some(args),
        _ => None,
    };
    let settings = settings::build(cli, run_args)?;
    match &cli.command {
        Command::Migrate => commands::migrate(&settings).await,
        Command::Run(args) => commands::run(&settings, args).await,
        Command::Status { json } => commands::status(&settings, *json).await,
        Command::Dead { command } => commands::dead(&settings, command).await,
    }
}

/// Logs go to stderr, filtered by `OJS_LOG` (tracing env-filter syntax), `info` by default.
fn init_logging() {
    let filter = EnvFilter::try_from_env("OJS_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// `error [CODE]: message` on stderr; exit 2 for usage and configuration errors, 1 otherwise.
fn fail(error: &Error) -> ExitCode {
    eprintln!(
        "error [{}]: {}",
        error.code,
        ojs_outbox::admin::one_line(&error.message, 2000)
    );
    ExitCode::from(exit_code(error.code))
}

fn exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::InvalidConfig | ErrorCode::InvalidDatabaseUrl => 2,
        _ => 1,
    }
}

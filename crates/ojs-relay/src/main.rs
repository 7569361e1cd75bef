//! `ojs-relay`: the separate outbox relay process of the OJS Framework Adapter.
//!
//! Every behaviour (schema, claiming, sending, retry, dead-lettering) is the `ojs-outbox`
//! library's; this binary only parses the command line, builds the library's `Config` and
//! calls it. See README.md for the commands, flags, environment variables and exit codes.

use std::io::IsTerminal;
use std::process::ExitCode;

use ojs_outbox::{Error, ErrorCode};
use ojs_relay::{Cli, Command, Framework, cli, commands, settings};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = cli::parse();
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
        Command::Run(args) => commands::run(&settings, args).await,
        _ => {
            let report = ojs_relay::execute(&Framework::binary(), cli, &settings).await?;
            print!("{}", report.stdout);
            eprint!("{}", report.stderr);
            Ok(report.exit_code)
        }
    }
}

/// Logs go to stderr, filtered by `OJS_LOG` (tracing env-filter syntax), `info` by default.
fn init_logging() {
    let filter = EnvFilter::try_new(log_filter(std::env::var("OJS_LOG").ok().as_deref()))
        .unwrap_or_else(|_| EnvFilter::new(log_filter(None)));
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// The filter of `OJS_LOG` (`info` when unset or empty), with sqlx's own lines held to
/// warnings unless the filter names sqlx itself (`OJS_LOG=info,sqlx=info`). At info sqlx
/// repeats, in its words, what the relay says in its own: a server's notices ("relation ...
/// already exists, skipping" at each migrate) and each pooled connection it finds dead after a
/// server restart, with PostgreSQL's position in its own source ("terminating connection due
/// to administrator command at line 3211", `sqlx_core::pool::inner`); the relay logs a
/// database failure once, in its own words.
fn log_filter(ojs_log: Option<&str>) -> String {
    let filter = ojs_log
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .unwrap_or("info");
    if filter.contains("sqlx") {
        filter.to_owned()
    } else {
        format!("{filter},sqlx=warn")
    }
}

/// `error [CODE]: message` on stderr; exit 2 for usage and configuration errors, 1 otherwise.
fn fail(error: &Error) -> ExitCode {
    eprintln!(
        "error [{}]: {}",
        error.code,
        ojs_outbox::admin::one_line(&error.message, 2000)
    );
    ExitCode::from(ojs_relay::exit_code(error.code) as u8)
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn sqlx_is_held_to_warnings_unless_the_filter_names_it() {
        assert_eq!(log_filter(None), "info,sqlx=warn");
        assert_eq!(log_filter(Some(" ")), "info,sqlx=warn");
        assert_eq!(log_filter(Some("debug")), "debug,sqlx=warn");
        assert_eq!(log_filter(Some("info,sqlx=debug")), "info,sqlx=debug");
    }
}

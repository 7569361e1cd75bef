//! The relay command line of every framework (issue 26): the Node bin `ojs-relay`,
//! `manage.py ojs_relay`, `rake ojs:relay`. The binding passes its argv and a description of
//! itself ([`Framework`] as JSON: its program name, its settings); the core parses the options
//! of `ojs-relay` (`ojs_relay::cli`, clap: an unknown flag is refused, naming the accepted
//! ones, exit 2), builds the settings over the framework's own (the way `--config FILE` is the
//! base of the binary) and runs the standalone relay (no hot path, so no `relay.skip_recent`)
//! with the optional `--listen` surface (`ojs_relay::http`), or an operator command.
//!
//! Two ways to run `run`: [`RelayCommand::run_until_signal`] waits for the core's stop signals
//! (Django, Rails: armed first thing by [`crate::arm_stop_signals`]); [`RelayCommand::start`]
//! and [`RelayCommand::stop`] leave the signals to the host (Node, whose own SIGINT/SIGTERM
//! handling and the core's re-deliver to each other).

use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;

use ojs_outbox::admin::Report;
use ojs_outbox::{Error, ErrorCode, Result};

/// How a binding describes its relay command (JSON, unknown keys refused).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrameworkInput {
    /// The command as its users type it (`manage.py ojs_relay`).
    program: String,
    /// Every command (`migrate`, `run`, `status`, `dead ...`: the Node bin), or `run`'s
    /// options only (a framework's relay command; the default).
    #[serde(default)]
    subcommands: bool,
    /// The framework's settings (spec §5.2 JSON, an object or its text); absent or null: the
    /// core's defaults, as for the `ojs-relay` binary.
    #[serde(default)]
    config: Option<Value>,
    /// The framework runs in development mode (a missing backend URL takes the development
    /// default, with a notice).
    #[serde(default)]
    development: bool,
    /// How the framework's users set the backend URL besides `--ojs-url` and `OJS_URL`.
    #[serde(default)]
    url_setting: Option<String>,
    /// How the framework's users create a missing outbox table.
    #[serde(default)]
    create_table_with: Option<String>,
    /// Text after the option list of `--help`: the framework's own options.
    #[serde(default)]
    after_help: Option<String>,
}

fn framework(json: &str) -> Result<ojs_relay::Framework> {
    let input: FrameworkInput = serde_json::from_str(json).map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "framework",
            format!("not a relay command description: {e}"),
        )
    })?;
    let config = match input.config {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(serde_json::from_str(&text).map_err(|e| {
            Error::field(
                ErrorCode::InvalidConfig,
                "config",
                format!("not valid JSON: {e}"),
            )
        })?),
        Some(value) => Some(value),
    };
    let binary = ojs_relay::Framework::binary();
    Ok(ojs_relay::Framework {
        program: input.program,
        subcommands: input.subcommands,
        base: ojs_relay::Base {
            config,
            development: input.development,
            url_setting: input.url_setting,
        },
        create_table_with: input.create_table_with.unwrap_or(binary.create_table_with),
        after_help: input.after_help,
    })
}

/// One parsed relay command line. Without [`exit`](Self::exit), it is `run`
/// ([`is_run`](Self::is_run)) or an operator command ([`execute`](Self::execute)).
pub struct RelayCommand {
    framework: ojs_relay::Framework,
    parsed: ojs_relay::Parsed,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    running: Mutex<Option<ojs_relay::Running>>,
}

/// Parses `args` (the argv after the program name) as the relay command line of `framework_json`
/// (see [`FrameworkInput`]: `program`, `subcommands`, `config`, `development`, `url_setting`,
/// `create_table_with`, `after_help`). No I/O; a usage error is no `Err` but an
/// [`exit`](RelayCommand::exit) report (clap's words, exit 2).
pub fn relay_command(args: Vec<String>, framework_json: &str) -> Result<RelayCommand> {
    let framework = framework(framework_json)?;
    let parsed = ojs_relay::parse(&framework, args);
    Ok(RelayCommand {
        framework,
        parsed,
        runtime: Mutex::new(None),
        running: Mutex::new(None),
    })
}

/// What [`RelayCommand::start`] started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The outbox table it relays.
    pub table: String,
    /// The address of the HTTP surface (`--listen`; the port chosen when it gave 0).
    pub listening_on: Option<String>,
}

/// The exit code of a failed relay command: 2 for usage and configuration errors, 1 otherwise
/// (what `ojs-relay` exits with).
pub fn relay_exit_code(code: ErrorCode) -> i32 {
    ojs_relay::exit_code(code)
}

impl RelayCommand {
    /// What to print and the code to exit with when the command line asks for nothing to run
    /// (`--help`, `--version`) or is wrong (an unknown flag: exit 2); `None` otherwise.
    pub fn exit(&self) -> Option<Report> {
        match &self.parsed {
            ojs_relay::Parsed::Exit(report) => Some(report.clone()),
            ojs_relay::Parsed::Run(_) => None,
        }
    }

    /// Whether this is `run` (the relay), rather than an operator command.
    pub fn is_run(&self) -> bool {
        matches!(&self.parsed, ojs_relay::Parsed::Run(cli) if cli.run_args().is_some())
    }

    fn cli(&self) -> Result<&ojs_relay::Cli> {
        match &self.parsed {
            ojs_relay::Parsed::Run(cli) => Ok(cli),
            ojs_relay::Parsed::Exit(_) => Err(Error::new(
                ErrorCode::InvalidConfig,
                "the command line asked for nothing to run (see exit())",
            )),
        }
    }

    /// Builds the settings of the command line (the framework's, the `--config` file, the
    /// environment, the flags), checks `--listen`'s token rule, and returns the outbox table
    /// they name: a configuration error surfaces here, before anything connects.
    pub fn table(&self) -> Result<String> {
        let cli = self.cli()?;
        let settings = cli.settings(&self.framework.base)?;
        if let Some(args) = cli.run_args() {
            ojs_relay::commands::check_access(args)?;
        }
        Ok(settings.table().to_owned())
    }

    fn block_on<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T> {
        let mut guard = self
            .runtime
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            *guard = Some(
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        Error::new(
                            ErrorCode::RelayShutDown,
                            format!("cannot start the tokio runtime: {e}"),
                        )
                    })?,
            );
        }
        let handle = guard.as_ref().expect("just made").handle().clone();
        drop(guard);
        Ok(handle.block_on(work))
    }

    /// The report of [`exit`](Self::exit), or runs the operator command (`migrate`, `status`,
    /// `dead ...`) and returns what to print and its exit code. Not for `run`.
    pub fn execute(&self) -> Result<Report> {
        if let Some(report) = self.exit() {
            return Ok(report);
        }
        let cli = self.cli()?;
        let settings = cli.settings(&self.framework.base)?;
        self.block_on(ojs_relay::execute(&self.framework, cli, &settings))?
            .map_err(|e| match e.code {
                // No file, so no outbox table: said as `Bridge::admin` says it, naming how this
                // framework's users create both (the `ojs-relay` binary keeps the database's
                // words).
                ErrorCode::Database if e.message.contains(ojs_outbox::store::NO_SQLITE_FILE) => {
                    Error::new(
                        ErrorCode::OutboxTableMissing,
                        format!(
                            "the outbox table {:?} does not exist ({}); create it with {}",
                            settings.table(),
                            e.message,
                            self.framework.create_table_with
                        ),
                    )
                }
                _ => e,
            })
    }

    /// Runs the command: `run` until SIGINT or SIGTERM (the core's stop signals, armed here if
    /// the binding has not armed them earlier), then the graceful stop; anything else as
    /// [`execute`](Self::execute). Blocks the calling thread (release the host's lock first).
    pub fn run_until_signal(&self) -> Result<Report> {
        let cli = match &self.parsed {
            ojs_relay::Parsed::Run(cli) if cli.run_args().is_some() => cli,
            _ => return self.execute(),
        };
        crate::arm_stop_signals()?;
        let args = cli.run_args().expect("run");
        let settings = cli.settings(&self.framework.base)?;
        self.block_on(ojs_relay::commands::run_until(
            &settings,
            args,
            &self.framework.create_table_with,
            ojs_outbox::stop_signal::wait(),
        ))??;
        Ok(Report {
            exit_code: 0,
            stdout: String::new(),
            stderr: String::new(),
        })
    }

    /// `run` for a host that keeps its signals (Node): starts the standalone relay and, with
    /// `--listen`, the HTTP surface, and returns the relay's table and the address the surface
    /// listens on. [`stop`](Self::stop) stops both.
    pub fn start(&self) -> Result<Started> {
        let cli = self.cli()?;
        let Some(args) = cli.run_args() else {
            return Err(Error::new(
                ErrorCode::InvalidConfig,
                "start() runs `run`; this command is executed with execute()",
            ));
        };
        let settings = cli.settings(&self.framework.base)?;
        let running = self.block_on(ojs_relay::commands::start(
            &settings,
            args,
            ojs_relay::Log::Feed,
            &self.framework.create_table_with,
        ))??;
        let started = Started {
            table: settings.table().to_owned(),
            listening_on: running.listening_on().map(|addr| addr.to_string()),
        };
        *self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(running);
        Ok(started)
    }

    /// The graceful stop of what [`start`](Self::start) started (the round in progress ends,
    /// what it holds is released within `relay.shutdown_timeout`), then the runtime ends.
    /// Idempotent.
    pub fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(running) = running {
            let _ = self.block_on(running.stop());
        }
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(runtime) = runtime {
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        }
    }
}

//! The relay command line, as a library: what the `ojs-relay` binary runs, and what every
//! framework's relay command runs through `ojs_bridge::relay_command` (the Node bin
//! `ojs-relay`, `manage.py ojs_relay`, `rake ojs:relay`). The options are defined once
//! ([`cli`], clap), the settings built once ([`settings`], over the framework's own settings
//! where it has some), the relay started once ([`commands::start`]: the standalone relay, no
//! hot path) with the one operator HTTP surface ([`http`]).

pub mod cli;
pub mod commands;
pub mod http;
pub mod settings;

use clap::CommandFactory;
use clap::error::ErrorKind;
use ojs_outbox::Result;
use ojs_outbox::admin::Report;

pub use cli::{Cli, Command, DeadCommand, RunArgs};
pub use commands::{Log, Running};
pub use settings::{Base, Settings};

/// Who runs the relay command line and how: the program's name in help and errors, whether it
/// has every command or only `run`'s options, and the settings it starts from.
#[derive(Debug, Clone)]
pub struct Framework {
    /// The command as its users type it (`ojs-relay`, `manage.py ojs_relay`).
    pub program: String,
    /// Every command (`migrate`, `run`, `status`, `dead ...`); `false`: the options of `run`
    /// only, at the top (a framework's relay command, whose only job is running the relay).
    pub subcommands: bool,
    /// The settings before the `--config` file, the environment and the flags.
    pub base: Base,
    /// How this framework's users create a missing outbox table (named by the errors).
    pub create_table_with: String,
    /// Text after the option list of `--help` (the framework's own options).
    pub after_help: Option<String>,
}

impl Framework {
    /// The `ojs-relay` binary: every command, the library's defaults under the flags.
    pub fn binary() -> Framework {
        Framework {
            program: "ojs-relay".to_owned(),
            subcommands: true,
            base: Base::default(),
            create_table_with: commands::CREATE_TABLE_WITH.to_owned(),
            after_help: None,
        }
    }
}

/// The clap command of `framework`: the binary's, named as the framework's users type it, or
/// (without subcommands) the binary's `run` with its global options, named so.
pub fn command(framework: &Framework) -> clap::Command {
    let mut root = Cli::command();
    let mut command = if framework.subcommands {
        root.bin_name(framework.program.clone())
    } else {
        // `run` as the binary has it, its global options included, as a command of its own.
        root.build();
        let run = root.find_subcommand("run").expect("ojs-relay has run");
        let mut only = clap::Command::new("ojs-relay")
            .bin_name(framework.program.clone())
            .version(env!("CARGO_PKG_VERSION"))
            .args(
                run.get_arguments()
                    .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
                    .cloned(),
            )
            // As `ojs-relay run --help` prints it: the short form.
            .disable_help_flag(true)
            .arg(
                clap::Arg::new("help")
                    .short('h')
                    .long("help")
                    .help("Print help")
                    .action(clap::ArgAction::HelpShort),
            );
        if let Some(about) = run.get_about() {
            only = only.about(about.clone());
        }
        only
    };
    if let Some(text) = &framework.after_help {
        command = command
            .after_help(text.clone())
            .after_long_help(text.clone());
    }
    command
}

/// One parsed command line of a framework's relay command.
// Made once per command line and matched in place: boxing `Cli` would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Parsed {
    /// Nothing to run: print the report and exit with its code (`--help`, `--version`: 0 on
    /// stdout; a usage error, such as an unknown flag: 2 on stderr, naming the accepted options).
    Exit(Report),
    /// A command to run.
    Run(Cli),
}

/// Parses `args` (without the program name) as `framework`'s command line, by the options of
/// `ojs-relay` ([`cli`]).
pub fn parse(framework: &Framework, args: Vec<String>) -> Parsed {
    let command = command(framework);
    let argv = std::iter::once(framework.program.clone()).chain(args.iter().cloned());
    let parsed = command
        .clone()
        .try_get_matches_from(argv)
        .and_then(|matches| {
            if framework.subcommands {
                cli::from_matches(&matches)
            } else {
                cli::from_run_matches(&matches)
            }
        });
    match parsed {
        Ok(cli) => Parsed::Run(cli),
        Err(error) => Parsed::Exit(usage(&command, &args, &error)),
    }
}

/// What clap says for `error` (help, version or a usage error), plain text; an unknown
/// argument is answered with the options the command accepts, too.
fn usage(command: &clap::Command, args: &[String], error: &clap::Error) -> Report {
    let mut text = error.render().to_string();
    if matches!(
        error.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
    ) {
        let mut at = command.clone();
        at.build();
        let mut at = &at;
        for arg in args {
            if let Some(sub) = at.find_subcommand(arg) {
                at = sub;
            }
        }
        let options = long_options(at);
        let subcommands: Vec<&str> = at.get_subcommands().map(|c| c.get_name()).collect();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("\naccepted options: {}\n", options.join(", ")));
        if !subcommands.is_empty() {
            text.push_str(&format!("commands: {}\n", subcommands.join(", ")));
        }
    }
    let code = error.exit_code();
    if error.use_stderr() {
        Report {
            exit_code: code,
            stdout: String::new(),
            stderr: text,
        }
    } else {
        Report {
            exit_code: code,
            stdout: text,
            stderr: String::new(),
        }
    }
}

/// The `--long` names a built command accepts (its own and the global ones), `--help` and
/// `--version` included.
fn long_options(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

/// Runs an operator command (`migrate`, `status`, `dead ...`) and returns what to print and the
/// exit code. `run` is [`commands::start`] / [`commands::run_until`].
pub async fn execute(framework: &Framework, cli: &Cli, settings: &Settings) -> Result<Report> {
    let how = framework.create_table_with.as_str();
    match &cli.command {
        Command::Migrate => commands::migrate(settings, how).await,
        Command::Status { json } => commands::status(settings, *json, how).await,
        Command::Dead { command } => commands::dead(settings, command, how).await,
        Command::Run(_) => Err(ojs_outbox::Error::new(
            ojs_outbox::ErrorCode::InvalidConfig,
            "run is started with commands::start or commands::run_until, not executed",
        )),
    }
}

impl Cli {
    /// The options of `run`, when this is `run`.
    pub fn run_args(&self) -> Option<&RunArgs> {
        match &self.command {
            Command::Run(args) => Some(args),
            _ => None,
        }
    }

    /// The settings of this invocation over `base` ([`settings::build_over`]).
    pub fn settings(&self, base: &Base) -> Result<Settings> {
        settings::build_over(base, self, self.run_args())
    }
}

/// The exit code of a failed command: 2 for usage and configuration errors, 1 otherwise.
pub fn exit_code(code: ojs_outbox::ErrorCode) -> i32 {
    match code {
        ojs_outbox::ErrorCode::InvalidConfig | ojs_outbox::ErrorCode::InvalidDatabaseUrl => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framework() -> Framework {
        Framework {
            program: "manage.py ojs_relay".to_owned(),
            subcommands: false,
            base: Base {
                config: Some(serde_json::json!({"adapter": {
                    "url": "http://backend:8080",
                    "database_url": "sqlite:///app.db",
                    "outbox": {"table_name": "app_outbox", "batch_size": 7}
                }})),
                development: false,
                url_setting: Some("OJS_CONFIG[\"ojs_url\"]".to_owned()),
            },
            create_table_with: "manage.py migrate".to_owned(),
            after_help: Some("Django options".to_owned()),
        }
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_framework_command_has_the_options_of_run() {
        let mut binary = Cli::command();
        binary.build();
        let run = binary.find_subcommand("run").unwrap();
        let mut ours = command(&framework());
        ours.build();
        assert_eq!(long_options(&ours), long_options(run));
    }

    #[test]
    fn an_unknown_flag_exits_2_naming_the_accepted_options() {
        let Parsed::Exit(report) = parse(&framework(), args(&["--bogus-flag"])) else {
            panic!("parsed")
        };
        assert_eq!(report.exit_code, 2);
        assert!(
            report.stderr.contains("'--bogus-flag'"),
            "{}",
            report.stderr
        );
        assert!(report.stderr.contains("accepted options: --ojs-url"));
        let Parsed::Exit(help) = parse(&framework(), args(&["--help"])) else {
            panic!("parsed")
        };
        assert_eq!(help.exit_code, 0);
        assert!(help.stdout.contains("Usage: manage.py ojs_relay [OPTIONS]"));
        assert!(help.stdout.trim_end().ends_with("Django options"));
    }

    #[test]
    fn flags_override_the_frameworks_settings() {
        let Parsed::Run(cli) = parse(
            &framework(),
            args(&["--table", "other", "--poll-interval", "PT30S"]),
        ) else {
            panic!("exit")
        };
        let settings = cli.settings(&framework().base).unwrap();
        assert_eq!(settings.table(), "other");
        assert_eq!(settings.config.outbox.batch_size, 7);
        assert_eq!(settings.config.ojs_url, "http://backend:8080");
        assert_eq!(settings.database_url, "sqlite:///app.db");
        assert_eq!(
            settings.config.outbox.poll_interval,
            std::time::Duration::from_secs(30)
        );
    }
}

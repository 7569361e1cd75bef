//! The command line, as clap derives it.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// The separate OJS outbox relay: takes committed outbox rows to the OJS backend.
///
/// Settings come from the JSON config file (`--config`, the spec §5.2 `{"adapter": {...}}`
/// shape), then environment variables, then flags; whatever none of them sets keeps the
/// library's default, except the backend URL, which `run` requires (--ojs-url, OJS_URL or
/// adapter.ojs_url in the config file).
#[derive(Debug, Clone, Parser)]
#[command(name = "ojs-relay", version, propagate_version = true)]
pub struct Cli {
    /// Outbox database: sqlite://PATH, postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB (mariadb:// too).
    #[arg(
        long,
        env = "OJS_DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    pub database_url: Option<String>,

    /// Outbox table name (optionally schema-qualified).
    #[arg(long, global = true, value_name = "NAME")]
    pub table: Option<String>,

    /// JSON config file in the spec §5.2 shape, e.g. {"adapter": {"relay": {"lease": "PT30S"}}}.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Create the outbox table and its indexes if they do not exist (idempotent).
    Migrate,
    /// Relay outbox rows to the OJS backend until SIGINT/SIGTERM, then flush and exit 0.
    Run(RunArgs),
    /// Row counts by status, rows in flight, oldest pending age, recent lag.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Dead-letter administration: list, replay or purge dead rows.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
    },
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Base URL of the OJS backend (http:// or https://). Required: this, OJS_URL or
    /// adapter.ojs_url in the --config file.
    #[arg(long, env = "OJS_URL", hide_env_values = true, value_name = "URL")]
    pub ojs_url: Option<String>,

    /// Whether `ojs_url` came from the environment (`OJS_URL`) rather than the flag, so an
    /// error names the one the user set ([`parse`] fills it in).
    #[arg(skip)]
    pub ojs_url_from_env: bool,

    /// Whether `token` came from `OJS_RELAY_TOKEN`: an environment token without `--listen`
    /// is unused, not an error (it may be set for every process of a deploy).
    #[arg(skip)]
    pub token_from_env: bool,

    /// Rows claimed and sent per round (1..=1000).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub batch_size: Option<i64>,

    /// How often to look for due rows, as an ISO-8601 duration (e.g. PT1S, PT0.2S).
    #[arg(long, value_name = "ISO8601")]
    pub poll_interval: Option<String>,

    /// Serve the operator's HTTP surface on this address (e.g. 127.0.0.1:9464): the event
    /// stream (GET /v1/events/stream), GET /metrics, GET /healthz and GET /readyz.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// Require `Authorization: Bearer TOKEN` on the HTTP surface (all but /healthz). Prefer
    /// the environment variable: a flag's value shows in the process list.
    #[arg(
        long,
        env = "OJS_RELAY_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,

    /// A token that reads only TENANT's events (repeatable), e.g. acme=s3cret.
    #[arg(long, value_name = "TENANT=TOKEN")]
    pub tenant_token: Vec<String>,

    /// A read-only token (repeatable): reads what the operator reads (the dashboard, the
    /// events, /metrics, /readyz) and writes nothing: no dead-letter replay or purge, no Codec
    /// Server.
    #[arg(long, value_name = "TOKEN")]
    pub viewer_token: Vec<String>,

    /// Serve the HTTP surface without authentication (only on a private address). Without a
    /// token, a tenant token, a viewer token or this flag, --listen is refused.
    #[arg(long)]
    pub no_auth: bool,

    /// The id of the key that encrypts new jobs' args (adapter.encryption.key_id), among the
    /// keys of OJS_ENCRYPTION_KEYS (ID=BASE64,...; environment only) or of the --config file.
    /// With --listen, the relay serves the Codec Server (POST /codec/decode, /codec/encode).
    #[arg(long, env = "OJS_ENCRYPTION_KEY_ID", value_name = "ID")]
    pub encryption_key_id: Option<String>,

    /// Whether `encryption_key_id` came from `OJS_ENCRYPTION_KEY_ID` ([`parse`] fills it in).
    #[arg(skip)]
    pub encryption_key_id_from_env: bool,
}

impl RunArgs {
    /// How the user set the backend URL, for its errors: `OJS_URL` or `--ojs-url`.
    pub fn ojs_url_source(&self) -> &'static str {
        if self.ojs_url_from_env {
            "OJS_URL"
        } else {
            "--ojs-url"
        }
    }

    /// How the user set the encryption key id, for its errors.
    pub fn encryption_key_id_source(&self) -> &'static str {
        if self.encryption_key_id_from_env {
            "OJS_ENCRYPTION_KEY_ID"
        } else {
            "--encryption-key-id"
        }
    }
}

/// Parses the command line as [`Cli::parse`] does (exiting on a usage error), and notes which
/// values came from the environment. What the `ojs-relay` binary calls; a framework's command
/// calls [`crate::parse`].
pub fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    from_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The [`Cli`] of the root command's matches, with the environment's values noted.
pub(crate) fn from_matches(matches: &ArgMatches) -> Result<Cli, clap::Error> {
    let mut cli = Cli::from_arg_matches(matches)?;
    if let (Command::Run(run), Some(("run", run_matches))) =
        (&mut cli.command, matches.subcommand())
    {
        note_sources(run, run_matches);
    }
    Ok(cli)
}

/// The [`Cli`] of the matches of `run`'s options alone (a framework's relay command, whose
/// only command is `run`): the global options are `run`'s there.
pub(crate) fn from_run_matches(matches: &ArgMatches) -> Result<Cli, clap::Error> {
    let mut run = RunArgs::from_arg_matches(matches)?;
    note_sources(&mut run, matches);
    Ok(Cli {
        database_url: matches.get_one::<String>("database_url").cloned(),
        table: matches.get_one::<String>("table").cloned(),
        config: matches.get_one::<PathBuf>("config").cloned(),
        command: Command::Run(run),
    })
}

fn note_sources(run: &mut RunArgs, matches: &ArgMatches) {
    run.ojs_url_from_env = matches.value_source("ojs_url") == Some(ValueSource::EnvVariable);
    run.token_from_env = matches.value_source("token") == Some(ValueSource::EnvVariable);
    run.encryption_key_id_from_env =
        matches.value_source("encryption_key_id") == Some(ValueSource::EnvVariable);
}

#[derive(Debug, Clone, Subcommand)]
pub enum DeadCommand {
    /// List dead rows, oldest first.
    List {
        /// Only this tenant's rows (meta.tenant_id); every tenant when absent.
        #[arg(long, value_name = "T")]
        tenant: Option<String>,
        /// At most this many rows, at least 1 (default: the core's, 100).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        limit: Option<i64>,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Put dead rows back to pending with fresh attempts; a running relay sends them.
    Replay {
        /// Only this tenant's rows; every tenant when absent.
        #[arg(long, value_name = "T")]
        tenant: Option<String>,
    },
    /// Delete dead rows for good (refuses without --yes and says how many it would delete).
    Purge {
        /// Only this tenant's rows; every tenant when absent.
        #[arg(long, value_name = "T")]
        tenant: Option<String>,
        /// Really delete.
        #[arg(long)]
        yes: bool,
    },
}

//! The commands. Each returns the process exit code on success paths that still end non-zero
//! (a purge refused for want of `--yes`), or an `ojs_outbox::Error` that `main` prints.

use std::time::Duration;

use ojs_outbox::admin::{self, one_line, redact};
use ojs_outbox::backend::Backend;
use ojs_outbox::duration;
use ojs_outbox::{Error, ErrorCode, Metrics, Relay, Result, Store};
use tokio::signal::unix::{SignalKind, signal};

use std::net::SocketAddr;
use std::sync::Arc;

use ojs_outbox::log_feed::Level;

use crate::cli::{DeadCommand, RunArgs};
use crate::settings::Settings;

/// How often `run` logs the metrics line.
const METRICS_EVERY: Duration = Duration::from_secs(10);

async fn connect(settings: &Settings) -> Result<Store> {
    connect_with(settings, false).await
}

/// For the commands that only read: the database is opened read-only (docs: relay.md).
async fn connect_read_only(settings: &Settings) -> Result<Store> {
    connect_with(settings, true).await
}

async fn connect_with(settings: &Settings, read_only: bool) -> Result<Store> {
    let url = &settings.database_url;
    let cannot_connect = |why: &str| {
        Error::new(
            ErrorCode::Database,
            format!("cannot connect to {}: {why}", redact(url)),
        )
    };
    let store = if read_only {
        Store::connect_read_only(url, settings.table()).await
    } else {
        Store::connect(url, settings.table()).await
    };
    store.map_err(|e| match e.code {
        ErrorCode::Database => cannot_connect(&e.message),
        _ => e,
    })
}

/// How a user of the `ojs-relay` binary creates a missing table.
pub const CREATE_TABLE_WITH: &str = "`ojs-relay migrate` (same --database-url and --table)";

fn target<'a>(
    settings: &'a Settings,
    store: &'a Store,
    create_table_with: &'a str,
) -> admin::Target<'a> {
    admin::Target {
        store,
        table: settings.table(),
        database_url: &settings.database_url,
        create_table_with,
        events: None,
    }
}

pub async fn migrate(settings: &Settings, create_table_with: &str) -> Result<admin::Report> {
    let store = connect(settings).await?;
    let report = admin::migrate(&target(settings, &store, create_table_with)).await;
    store.close().await;
    report
}

pub async fn status(
    settings: &Settings,
    as_json: bool,
    create_table_with: &str,
) -> Result<admin::Report> {
    let store = connect_read_only(settings).await?;
    let report = admin::status(&target(settings, &store, create_table_with), as_json).await;
    store.close().await;
    report
}

pub async fn dead(
    settings: &Settings,
    command: &DeadCommand,
    create_table_with: &str,
) -> Result<admin::Report> {
    let action = match command {
        DeadCommand::List {
            tenant,
            limit,
            json,
        } => {
            // Flags are checked before the database is touched.
            ojs_outbox::store::dead_list_limit(*limit, "--limit")?;
            admin::DeadAction::List {
                tenant: tenant.clone(),
                limit: *limit,
                json: *json,
            }
        }
        DeadCommand::Replay { tenant } => admin::DeadAction::Replay {
            tenant: tenant.clone(),
        },
        DeadCommand::Purge { tenant, yes } => admin::DeadAction::Purge {
            tenant: tenant.clone(),
            confirmed: *yes,
        },
    };
    // A listing and a purge without --yes only read: they write nothing (issue 25, item 7).
    let store = if action.writes() {
        connect(settings).await?
    } else {
        connect_read_only(settings).await?
    };
    // Replays and purges are announced in the table's event log, when there is one.
    let log = settings
        .config
        .relay
        .event_retention
        .filter(|_| action.writes())
        .map(|retention| {
            ojs_outbox::events::EventBus::new(
                settings.table(),
                1,
                Some(ojs_outbox::events::EventLog {
                    store: store.clone(),
                    retention,
                }),
            )
        });
    let target = admin::Target {
        events: log.as_ref(),
        ..target(settings, &store, create_table_with)
    };
    let report = admin::dead(&target, &action).await;
    store.close().await;
    report
}

/// Where `run` says what it does: `tracing` (the `ojs-relay` binary, `OJS_LOG`), or the relay's
/// log feed (a framework's command: the framework's logger, as the relay's own records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    Tracing,
    Feed,
}

impl Log {
    fn say(self, level: Level, table: &str, message: String) {
        match self {
            Log::Tracing => match level {
                Level::Info => tracing::info!("{message}"),
                Level::Warning => tracing::warn!("{message}"),
                Level::Error => tracing::error!("{message}"),
            },
            Log::Feed => ojs_outbox::log_feed::emit(level, table, None, message),
        }
    }
}

/// A relay started by `run` (hot path off: no `relay.skip_recent`, as befits a process that no
/// commit wakes), with the HTTP surface when `--listen` asked for it. [`Running::stop`] stops it.
pub struct Running {
    relay: Arc<Relay>,
    store: Store,
    config: ojs_outbox::Config,
    table: String,
    server: Option<(tokio::task::JoinHandle<()>, SocketAddr)>,
    log: Log,
}

/// Starts what `run` runs: checks the outbox table, says whether the backend answers (and
/// keeps going when it does not), starts the standalone relay and, with `--listen`, serves the
/// HTTP surface ([`crate::http`]). The flags of the surface are checked before anything
/// connects. Needs a tokio runtime with I/O and time enabled.
pub async fn start(
    settings: &Settings,
    args: &RunArgs,
    log: Log,
    create_table_with: &str,
) -> Result<Running> {
    let access = access(args)?;
    let config = &settings.config;
    let table = settings.table().to_owned();
    if let Some(notice) = &settings.notice {
        log.say(Level::Warning, &table, notice.clone());
    }
    let store = connect(settings).await?;
    if let Err(e) = target(settings, &store, create_table_with).check().await {
        store.close().await;
        return Err(e);
    }
    let backend = Backend::new(config)?;
    match backend.health().await {
        Ok(()) => log.say(
            Level::Info,
            &table,
            format!("OJS backend at {} is healthy", config.ojs_url),
        ),
        Err(e) => {
            let why = e
                .message
                .strip_prefix(&format!("{}: ", backend.base_url()))
                .unwrap_or(&e.message);
            log.say(
                Level::Warning,
                &table,
                format!(
                    "OJS backend at {} is unreachable ({}); the relay keeps running and retries, rows stay pending until it answers",
                    config.ojs_url,
                    one_line(why, 300)
                ),
            )
        }
    }
    let listener = match args.listen {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::field(
                ErrorCode::InvalidConfig,
                "--listen",
                format!("cannot listen on {addr}: {e}"),
            )
        })?),
        None => None,
    };
    let relay = Arc::new(Relay::start(store.clone(), backend.clone(), config, false));
    let mut server = None;
    if let (Some(listener), Some(addr)) = (listener, args.listen) {
        let surface = Arc::new(crate::http::Surface {
            relay: relay.clone(),
            store: store.clone(),
            backend,
            table: table.clone(),
            access,
            codec: config.encryption.clone(),
        });
        let app = crate::http::router(surface);
        let local = listener.local_addr().unwrap_or(addr);
        log.say(
            Level::Info,
            &table,
            format!("serving the event stream, /metrics, /healthz and /readyz on http://{local}"),
        );
        if let Some(codec) = &config.encryption {
            log.say(
                Level::Info,
                &table,
                format!(
                    "serving the Codec Server (POST /codec/decode, POST /codec/encode) for the operator; keys {}, new jobs under {:?}",
                    codec.key_ids().collect::<Vec<_>>().join(", "),
                    codec.key_id()
                ),
            );
        }
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        server = Some((task, local));
    }
    // `relay.lease` is a lease on SQLite; on PostgreSQL row locks hold a claim and the same
    // setting only bounds one round.
    let lease_word = match store.dialect() {
        ojs_outbox::sql::Dialect::Sqlite => "lease",
        ojs_outbox::sql::Dialect::Postgres | ojs_outbox::sql::Dialect::Mysql => "round limit",
    };
    log.say(
        Level::Info,
        &table,
        format!(
            "relay started: database {}, table {:?}, backend {}, batch size {}, poll interval {}, {lease_word} {}",
            redact(&settings.database_url),
            table,
            config.ojs_url,
            config.outbox.batch_size,
            duration::format(config.outbox.poll_interval),
            duration::format(config.relay.lease),
        ),
    );
    Ok(Running {
        relay,
        store,
        config: config.clone(),
        table,
        server,
        log,
    })
}

impl Running {
    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    /// The address the HTTP surface listens on (the port chosen when `--listen` gave 0).
    pub fn listening_on(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|(_, addr)| *addr)
    }

    /// The graceful stop: the round in progress ends, what it claimed and did not send is
    /// released (within `relay.shutdown_timeout`), the HTTP surface closes, the pool closes.
    pub async fn stop(self) {
        self.relay.shutdown().await;
        if let Some((task, _)) = &self.server {
            task.abort();
        }
        if self.log == Log::Tracing {
            log_metrics(&self.relay.metrics());
        }
        self.store.close().await;
        self.log
            .say(Level::Info, &self.table, "relay stopped".to_owned());
    }

    /// The error of a second signal during [`stop`](Self::stop): what happens to the rows the
    /// relay still held.
    pub fn forced(&self) -> Error {
        forced(&self.config, self.store.dialect())
    }
}

/// `ojs-relay run`: [`start`], then the metrics line every ten seconds until SIGINT/SIGTERM,
/// then [`Running::stop`]; a second signal during the stop ends the process at once.
pub async fn run(settings: &Settings, args: &RunArgs) -> Result<i32> {
    let signal_error = |e: std::io::Error| {
        Error::new(
            ErrorCode::RelayShutDown,
            format!("cannot install signal handlers: {e}"),
        )
    };
    // Before anything else, so an early SIGTERM is a graceful stop too.
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let running = start(settings, args, Log::Tracing, CREATE_TABLE_WITH).await?;

    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + METRICS_EVERY, METRICS_EVERY);
    let received = loop {
        tokio::select! {
            _ = sigterm.recv() => break "SIGTERM",
            _ = sigint.recv() => break "SIGINT",
            _ = ticker.tick() => log_metrics(&running.relay.metrics()),
        }
    };
    tracing::info!(
        "{received} received: stopping (finishing the round in progress, releasing what it claimed and did not send; a second signal stops at once)"
    );
    let forced = running.forced();
    tokio::select! {
        _ = running.stop() => {}
        _ = sigterm.recv() => return Err(forced),
        _ = sigint.recv() => return Err(forced),
    }
    Ok(0)
}

/// A framework's relay command (`manage.py ojs_relay`, `rake ojs:relay`): [`start`], then
/// wait for `stop` (the core's stop signals, armed by the command first thing), then
/// [`Running::stop`]. A stop before the relay runs ends the start-up at once.
pub async fn run_until<F>(
    settings: &Settings,
    args: &RunArgs,
    create_table_with: &str,
    stop: F,
) -> Result<()>
where
    F: std::future::Future<Output = Result<()>>,
{
    let stop = std::pin::pin!(stop);
    let mut stop = stop;
    let running = tokio::select! {
        running = start(settings, args, Log::Feed, create_table_with) => running?,
        stopped = &mut stop => return stopped,
    };
    let stopped = stop.await;
    running.stop().await;
    stopped
}

/// Checks the flags of the HTTP surface (`--listen` and its token rule) without starting
/// anything: what [`start`] refuses first.
pub fn check_access(args: &RunArgs) -> Result<()> {
    access(args).map(|_| ())
}

/// The HTTP surface's tokens from the flags. `--listen` alone is refused: the surface serves
/// every job's events and the metrics, so it is closed unless a token (the operator's, a
/// tenant's or a viewer's) or `--no-auth` is given.
fn access(args: &RunArgs) -> Result<crate::http::Access> {
    let mut tenant_tokens = Vec::new();
    for pair in &args.tenant_token {
        match pair.split_once('=') {
            Some((tenant, token)) if !tenant.is_empty() && !token.is_empty() => {
                tenant_tokens.push((token.to_owned(), tenant.to_owned()));
            }
            // The value holds a secret: the message does not repeat it.
            _ => {
                return Err(Error::field(
                    ErrorCode::InvalidConfig,
                    "--tenant-token",
                    "a value is not TENANT=TOKEN (both parts non-empty)",
                ));
            }
        }
    }
    let token = args.token.clone().filter(|t| !t.is_empty());
    // The values hold secrets: no message repeats one.
    let viewer_tokens = args.viewer_token.clone();
    if viewer_tokens.iter().any(String::is_empty) {
        return Err(Error::field(
            ErrorCode::InvalidConfig,
            "--viewer-token",
            "a value is empty",
        ));
    }
    // A token of two roles would be read as the stronger one: a read-only token that is also
    // the operator's or a tenant's is refused rather than silently allowed to write.
    if viewer_tokens.iter().any(|viewer| {
        token.as_ref() == Some(viewer) || tenant_tokens.iter().any(|(t, _)| t == viewer)
    }) {
        return Err(Error::field(
            ErrorCode::InvalidConfig,
            "--viewer-token",
            "a value is also the operator's token or a tenant token; a read-only token must be a token of its own",
        ));
    }
    let flag_token = token.is_some() && !args.token_from_env;
    if args.listen.is_none()
        && (flag_token || !tenant_tokens.is_empty() || !viewer_tokens.is_empty() || args.no_auth)
    {
        let field = if args.no_auth {
            "--no-auth"
        } else if flag_token {
            "--token"
        } else if !tenant_tokens.is_empty() {
            "--tenant-token"
        } else {
            "--viewer-token"
        };
        return Err(Error::field(
            ErrorCode::InvalidConfig,
            field,
            "this protects the HTTP surface, which only --listen ADDR serves",
        ));
    }
    let secured = token.is_some() || !tenant_tokens.is_empty() || !viewer_tokens.is_empty();
    if args.listen.is_some() && secured == args.no_auth {
        let why = if args.no_auth {
            "--no-auth opens the surface to anyone, yet a token was given too; keep one"
        } else {
            "the HTTP surface serves every job's events and the metrics, so it needs --token (or OJS_RELAY_TOKEN), --tenant-token TENANT=TOKEN or --viewer-token TOKEN; to serve it without authentication on a private address, say so with --no-auth"
        };
        return Err(Error::field(ErrorCode::InvalidConfig, "--listen", why));
    }
    Ok(crate::http::Access {
        token,
        tenant_tokens,
        viewer_tokens,
        open: args.no_auth,
    })
}

fn forced(config: &ojs_outbox::Config, dialect: ojs_outbox::sql::Dialect) -> Error {
    let held = match dialect {
        ojs_outbox::sql::Dialect::Sqlite => format!(
            "rows it held are sent again after their lease ({}) expires",
            duration::format(config.relay.lease)
        ),
        ojs_outbox::sql::Dialect::Postgres | ojs_outbox::sql::Dialect::Mysql => {
            "rows it held are due again at once (their row locks end with its connection)"
                .to_owned()
        }
    };
    Error::new(
        ErrorCode::RelayShutDown,
        format!("stopped by a second signal before the flush ended; {held}"),
    )
}

fn log_metrics(m: &Metrics) {
    tracing::info!(
        "metrics: pending={} in_flight={} sent={} retried={} dead={} deduplicated={} unique_rejected={} oldest_pending_age_ms={} backend_healthy={} last_error={}",
        m.pending,
        m.in_flight,
        m.sent,
        m.retried,
        m.dead,
        m.deduplicated,
        m.unique_rejected,
        m.oldest_pending_age_ms,
        m.backend_healthy
            .map_or("unknown".to_owned(), |h| h.to_string()),
        m.last_error
            .as_deref()
            .map(|e| one_line(e, 200))
            .unwrap_or_else(|| "-".into()),
    );
}

//! The commands. Each returns the process exit code on success paths that still end non-zero
//! (a purge refused for want of `--yes`), or an `ojs_outbox::Error` that `main` prints.

use std::time::Duration;

use ojs_outbox::admin::{self, one_line, redact};
use ojs_outbox::backend::Backend;
use ojs_outbox::duration;
use ojs_outbox::{Error, ErrorCode, Metrics, Relay, Result, Store};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::DeadCommand;
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

/// How a user of this command line creates a missing table.
const CREATE_TABLE_WITH: &str = "`ojs-relay migrate` (same --database-url and --table)";

/// The library's report, printed; its exit code returned.
fn print(report: admin::Report) -> i32 {
    print!("{}", report.stdout);
    eprint!("{}", report.stderr);
    report.exit_code
}

fn target<'a>(settings: &'a Settings, store: &'a Store) -> admin::Target<'a> {
    admin::Target {
        store,
        table: settings.table(),
        database_url: &settings.database_url,
        create_table_with: CREATE_TABLE_WITH,
        events: None,
    }
}

pub async fn migrate(settings: &Settings) -> Result<i32> {
    let store = connect(settings).await?;
    let report = admin::migrate(&target(settings, &store)).await;
    store.close().await;
    Ok(print(report?))
}

pub async fn status(settings: &Settings, as_json: bool) -> Result<i32> {
    let store = connect_read_only(settings).await?;
    let report = admin::status(&target(settings, &store), as_json).await;
    store.close().await;
    Ok(print(report?))
}

pub async fn dead(settings: &Settings, command: &DeadCommand) -> Result<i32> {
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
    let report = admin::dead(&target(settings, &store), &action).await;
    store.close().await;
    Ok(print(report?))
}

pub async fn run(settings: &Settings, args: &crate::cli::RunArgs) -> Result<i32> {
    let access = access(args)?;
    let signal_error = |e: std::io::Error| {
        Error::new(
            ErrorCode::RelayShutDown,
            format!("cannot install signal handlers: {e}"),
        )
    };
    // Before anything else, so an early SIGTERM is a graceful stop too.
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error)?;

    let config = &settings.config;
    let store = connect(settings).await?;
    target(settings, &store).check().await?;
    let backend = Backend::new(config)?;
    match backend.health().await {
        Ok(()) => tracing::info!("OJS backend at {} is healthy", config.ojs_url),
        Err(e) => {
            let why = e
                .message
                .strip_prefix(&format!("{}: ", backend.base_url()))
                .unwrap_or(&e.message);
            tracing::warn!(
                "OJS backend at {} is unreachable ({}); the relay keeps running and retries, rows stay pending until it answers",
                config.ojs_url,
                one_line(why, 300)
            )
        }
    }
    let relay = std::sync::Arc::new(Relay::start(store.clone(), backend.clone(), config, false));
    if let Some(addr) = args.listen {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::field(
                ErrorCode::InvalidConfig,
                "--listen",
                format!("cannot listen on {addr}: {e}"),
            )
        })?;
        let surface = std::sync::Arc::new(crate::http::Surface {
            relay: relay.clone(),
            store: store.clone(),
            backend,
            table: settings.table().to_owned(),
            access,
        });
        let app = crate::http::router(surface);
        tracing::info!(
            "serving the event stream, /metrics, /healthz and /readyz on http://{}",
            listener.local_addr().map_or(addr, |a| a)
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
    }
    // `relay.lease` is a lease on SQLite; on PostgreSQL row locks hold a claim and the same
    // setting only bounds one round.
    let lease_word = match store.dialect() {
        ojs_outbox::sql::Dialect::Sqlite => "lease",
        ojs_outbox::sql::Dialect::Postgres => "round limit",
    };
    tracing::info!(
        "relay started: database {}, table {:?}, backend {}, batch size {}, poll interval {}, {lease_word} {}",
        redact(&settings.database_url),
        settings.table(),
        config.ojs_url,
        config.outbox.batch_size,
        duration::format(config.outbox.poll_interval),
        duration::format(config.relay.lease),
    );

    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + METRICS_EVERY, METRICS_EVERY);
    let received = loop {
        tokio::select! {
            _ = sigterm.recv() => break "SIGTERM",
            _ = sigint.recv() => break "SIGINT",
            _ = ticker.tick() => log_metrics(&relay.metrics()),
        }
    };
    tracing::info!(
        "{received} received: stopping (finishing the round in progress, releasing what it claimed and did not send; a second signal stops at once)"
    );
    let dialect = store.dialect();
    tokio::select! {
        _ = relay.shutdown() => {}
        _ = sigterm.recv() => return Err(forced(config, dialect)),
        _ = sigint.recv() => return Err(forced(config, dialect)),
    }
    log_metrics(&relay.metrics());
    store.close().await;
    tracing::info!("relay stopped");
    Ok(0)
}

/// The HTTP surface's tokens from the flags. `--listen` alone is refused: the surface serves
/// every job's events and the metrics, so it is closed unless a token or `--no-auth` is given.
fn access(args: &crate::cli::RunArgs) -> Result<crate::http::Access> {
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
    let flag_token = token.is_some() && !args.token_from_env;
    if args.listen.is_none() && (flag_token || !tenant_tokens.is_empty() || args.no_auth) {
        let field = if args.no_auth {
            "--no-auth"
        } else if flag_token {
            "--token"
        } else {
            "--tenant-token"
        };
        return Err(Error::field(
            ErrorCode::InvalidConfig,
            field,
            "this protects the HTTP surface, which only --listen ADDR serves",
        ));
    }
    let secured = token.is_some() || !tenant_tokens.is_empty();
    if args.listen.is_some() && secured == args.no_auth {
        let why = if args.no_auth {
            "--no-auth opens the surface to anyone, yet a token was given too; keep one"
        } else {
            "the HTTP surface serves every job's events and the metrics, so it needs --token (or OJS_RELAY_TOKEN) or --tenant-token TENANT=TOKEN; to serve it without authentication on a private address, say so with --no-auth"
        };
        return Err(Error::field(ErrorCode::InvalidConfig, "--listen", why));
    }
    Ok(crate::http::Access {
        token,
        tenant_tokens,
        open: args.no_auth,
    })
}

fn forced(config: &ojs_outbox::Config, dialect: ojs_outbox::sql::Dialect) -> Error {
    let held = match dialect {
        ojs_outbox::sql::Dialect::Sqlite => format!(
            "rows it held are sent again after their lease ({}) expires",
            duration::format(config.relay.lease)
        ),
        ojs_outbox::sql::Dialect::Postgres => {
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

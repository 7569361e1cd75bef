//! The commands. Each returns the process exit code on success paths that still end non-zero
//! (a purge refused for want of `--yes`), or an `ojs_outbox::Error` that `main` prints.

use std::time::Duration;

use ojs_outbox::backend::Backend;
use ojs_outbox::duration;
use ojs_outbox::store::DeadRow;
use ojs_outbox::{Error, ErrorCode, Metrics, OutboxStatus, Relay, Result, Store};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::DeadCommand;
use crate::settings::{Settings, redact};

/// How often `run` logs the metrics line.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// Exit code of a purge refused for want of `--yes`: a usage error.
pub const EXIT_USAGE: i32 = 2;

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

/// Rewrites the library's missing-table error into one that names the table and the fix.
fn explain_missing_table(settings: &Settings) -> impl Fn(Error) -> Error + '_ {
    move |e| {
        if e.code != ErrorCode::OutboxTableMissing {
            return e;
        }
        Error::new(
            ErrorCode::OutboxTableMissing,
            format!(
                "the outbox table {:?} does not exist in {}; create it with `ojs-relay migrate` (same --database-url and --table)",
                settings.table(),
                redact(&settings.database_url)
            ),
        )
    }
}

fn tenant_scope(tenant: Option<&str>) -> String {
    match tenant {
        Some(t) => format!("tenant {t:?}"),
        None => "every tenant (no --tenant given)".to_owned(),
    }
}

pub async fn migrate(settings: &Settings) -> Result<i32> {
    let store = connect(settings).await?;
    let existed = store.check_table().await.is_ok();
    store.migrate().await?;
    let where_ = redact(&settings.database_url);
    if existed {
        println!(
            "outbox table {:?} already exists in {where_}; indexes checked, nothing changed",
            settings.table()
        );
    } else {
        println!(
            "created outbox table {:?} and its indexes in {where_}",
            settings.table()
        );
    }
    store.close().await;
    Ok(0)
}

pub async fn status(settings: &Settings, as_json: bool) -> Result<i32> {
    let store = connect_read_only(settings).await?;
    let status = store
        .status()
        .await
        .map_err(explain_missing_table(settings))?;
    store.close().await;
    if as_json {
        let mut value = serde_json::to_value(&status).expect("status serializes");
        if let Value::Object(map) = &mut value {
            map.insert("table".into(), json!(settings.table()));
        }
        println!("{value}");
    } else {
        print_status(settings, &status);
    }
    Ok(0)
}

fn print_status(settings: &Settings, s: &OutboxStatus) {
    println!(
        "outbox table {:?} in {}",
        settings.table(),
        redact(&settings.database_url)
    );
    let rows = [
        ("pending", s.pending.to_string()),
        ("failed (retrying)", s.failed.to_string()),
        ("sent", s.sent.to_string()),
        ("dead", s.dead.to_string()),
        ("in flight (leased)", s.in_flight.to_string()),
        ("oldest pending age", human_ms(s.oldest_pending_age_ms)),
        ("recent lag (1 min)", human_ms(s.recent_lag_ms)),
    ];
    for (name, value) in rows {
        println!("  {name:<20} {value:>12}");
    }
}

fn human_ms(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

pub async fn dead(settings: &Settings, command: &DeadCommand) -> Result<i32> {
    // Flags are checked before the database is touched.
    let list_limit = match command {
        DeadCommand::List { limit, .. } => ojs_outbox::store::dead_list_limit(*limit, "--limit")?,
        _ => 0,
    };
    let store = match command {
        DeadCommand::List { .. } => connect_read_only(settings).await?,
        _ => connect(settings).await?,
    };
    let missing = explain_missing_table(settings);
    let code = match command {
        DeadCommand::List { tenant, json, .. } => {
            let limit = list_limit;
            let rows = store
                .dead_list(tenant.as_deref(), limit)
                .await
                .map_err(missing)?;
            if *json {
                println!("{}", serde_json::to_string(&rows).expect("rows serialize"));
            } else {
                print_dead(&rows, tenant.as_deref(), limit);
            }
            0
        }
        DeadCommand::Replay { tenant } => {
            let n = store
                .dead_replay(tenant.as_deref())
                .await
                .map_err(missing)?;
            println!(
                "replayed {n} dead row(s) of {} back to pending with fresh attempts; a running relay sends them at its next poll",
                tenant_scope(tenant.as_deref())
            );
            0
        }
        DeadCommand::Purge { tenant, yes: true } => {
            let n = store.dead_purge(tenant.as_deref()).await.map_err(missing)?;
            println!(
                "purged {n} dead row(s) of {}",
                tenant_scope(tenant.as_deref())
            );
            0
        }
        DeadCommand::Purge { tenant, yes: false } => {
            let n = store.dead_count(tenant.as_deref()).await.map_err(missing)?;
            eprintln!(
                "refusing to purge without --yes: this would delete {n} dead row(s) of {}; nothing was deleted",
                tenant_scope(tenant.as_deref())
            );
            EXIT_USAGE
        }
    };
    store.close().await;
    Ok(code)
}

fn print_dead(rows: &[DeadRow], tenant: Option<&str>, limit: usize) {
    let more = if rows.len() == limit {
        format!(" (limit {limit} reached; --limit shows more)")
    } else {
        String::new()
    };
    println!(
        "{} dead row(s) of {}{more}",
        rows.len(),
        tenant_scope(tenant)
    );
    if rows.is_empty() {
        return;
    }
    println!(
        "{:<36}  {:<24}  {:<12}  {:>8}  {:<24}  ERROR",
        "JOB ID", "TYPE", "TENANT", "ATTEMPTS", "CREATED (UTC)"
    );
    for row in rows {
        println!(
            "{:<36}  {:<24}  {:<12}  {:>8}  {:<24}  {}",
            row.job_id,
            row.job_type,
            row.tenant_id.as_deref().unwrap_or("-"),
            row.attempts,
            utc(row.created_at_ms),
            one_line(row.error.as_deref().unwrap_or("-"), 100),
        );
    }
}

fn utc(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// Newlines folded, long text cut: every message of this tool is one line.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let folded: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max_chars {
        return folded;
    }
    let mut cut: String = folded.chars().take(max_chars).collect();
    cut.push('…');
    cut
}

pub async fn run(settings: &Settings) -> Result<i32> {
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
    store
        .check_table()
        .await
        .map_err(explain_missing_table(settings))?;
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
    let relay = Relay::start(store.clone(), backend, config, false);
    tracing::info!(
        "relay started: database {}, table {:?}, backend {}, batch size {}, poll interval {}, lease {}",
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
        "{received} received: stopping (finishing the round in progress, releasing leases; a second signal stops at once)"
    );
    tokio::select! {
        _ = relay.shutdown() => {}
        _ = sigterm.recv() => return Err(forced(config)),
        _ = sigint.recv() => return Err(forced(config)),
    }
    log_metrics(&relay.metrics());
    store.close().await;
    tracing::info!("relay stopped");
    Ok(0)
}

fn forced(config: &ojs_outbox::Config) -> Error {
    Error::new(
        ErrorCode::RelayShutDown,
        format!(
            "stopped by a second signal before the flush ended; rows it held are sent again after their lease ({}) expires",
            duration::format(config.relay.lease)
        ),
    )
}

fn log_metrics(m: &Metrics) {
    tracing::info!(
        "metrics: pending={} in_flight={} sent={} retried={} dead={} deduplicated={} oldest_pending_age_ms={} backend_healthy={} last_error={}",
        m.pending,
        m.in_flight,
        m.sent,
        m.retried,
        m.dead,
        m.deduplicated,
        m.oldest_pending_age_ms,
        m.backend_healthy
            .map_or("unknown".to_owned(), |h| h.to_string()),
        m.last_error
            .as_deref()
            .map(|e| one_line(e, 200))
            .unwrap_or_else(|| "-".into()),
    );
}

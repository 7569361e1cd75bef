//! `drain-mysql`: backlog drain on MySQL or MariaDB against its SQL floor, in the same run.
//! The relay (in this process) drains a staged backlog through the dev backend (a child
//! process); the floor marks the same kind of backlog sent with one
//! `UPDATE ... WHERE id IN (...)` per batch through the relay's own pool: no claim, no HTTP.
//! Prints both and their ratio; appends JSON lines to `--out`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use ojs_outbox::{Outbox, Store};
use serde_json::json;
use sqlx::AssertSqlSafe;

use crate::common::{BoxResult, DevServer, config_for, err, sibling_binary, stage};

#[derive(Debug, Args)]
pub struct DrainMysqlArgs {
    /// `mysql://` or `mariadb://` URL (the bench creates and drops `ojs_bench_my_*` tables).
    #[arg(long, env = "OJS_BENCH_MYSQL_URL")]
    pub database_url: String,
    #[arg(long, default_value_t = 50_000)]
    pub rows: usize,
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// The `ojs-devserver` binary (default: next to this one).
    #[arg(long)]
    pub devserver_bin: Option<PathBuf>,
    #[arg(long, default_value = "target/bench/results.jsonl")]
    pub out: PathBuf,
}

async fn fresh(args: &DrainMysqlArgs, devserver: &DevServer, table: &str) -> BoxResult<Outbox> {
    let mut config = config_for(&args.database_url, &devserver.url, table);
    config.outbox.batch_size = args.batch_size;
    // A backlog, no hot path: the poller takes the rows staged a moment ago at once.
    config.relay.skip_recent = Duration::ZERO;
    let outbox = Outbox::connect(config).await?;
    let pool = outbox
        .store()
        .mysql_pool()
        .ok_or_else(|| err("not a MySQL URL"))?;
    sqlx::raw_sql(AssertSqlSafe(outbox.store().sql().drop_table()))
        .execute(pool)
        .await?;
    outbox.store().migrate().await?;
    let staged = stage(&outbox, "bench.mysql", args.rows).await?;
    println!(
        "  {} rows staged in {:.1}s",
        args.rows,
        staged.as_secs_f64()
    );
    Ok(outbox)
}

pub async fn run(args: DrainMysqlArgs) -> BoxResult<()> {
    let bin = sibling_binary(args.devserver_bin.as_deref(), "ojs-devserver")?;
    let devserver = DevServer::spawn(&bin)?;
    let rows = args.rows;

    println!("drain-mysql: relay, batch {}", args.batch_size);
    let outbox = fresh(&args, &devserver, "ojs_bench_my_relay").await?;
    let started = Instant::now();
    outbox.start_relay();
    devserver
        .wait_for_jobs(
            rows as u64,
            Duration::from_millis(20),
            Duration::from_secs(900),
        )
        .await?;
    let relay_s = started.elapsed().as_secs_f64();
    let phases = outbox.histograms().map(|h| {
        let mean = |s: &ojs_outbox::relay_metrics::HistogramSnapshot| {
            let n: u64 = s.counts.iter().sum();
            (n, s.sum_micros / n.max(1))
        };
        json!({"claim": mean(&h.claim_duration), "send": mean(&h.send_duration), "settle": mean(&h.settle_duration)})
    });
    println!(
        "  relay phases (count, mean µs): {}",
        phases.clone().unwrap_or_default()
    );
    outbox.stop_relay().await;

    println!("drain-mysql: SQL floor, batch {}", args.batch_size);
    let table = "ojs_bench_my_floor";
    let floor_outbox = fresh(&args, &devserver, table).await?;
    let store = Store::connect(&args.database_url, table).await?;
    let pool = store.mysql_pool().ok_or_else(|| err("not a MySQL URL"))?;
    let ids: Vec<i64> =
        sqlx::query_scalar(AssertSqlSafe(format!("SELECT id FROM {table} ORDER BY id")))
            .fetch_all(pool)
            .await?;
    let started = Instant::now();
    for chunk in ids.chunks(args.batch_size) {
        sqlx::query(AssertSqlSafe(store.sql().settle_sent_mysql(chunk)))
            .execute(pool)
            .await?;
    }
    let floor_s = started.elapsed().as_secs_f64();
    let status = store.status().await?;
    if status.sent != rows as i64 {
        return Err(err(format!(
            "floor: {} rows sent, want {rows}",
            status.sent
        )));
    }
    drop(floor_outbox);

    let (relay_rate, floor_rate) = (rows as f64 / relay_s, rows as f64 / floor_s);
    let ratio = relay_rate / floor_rate;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(pool)
        .await?;
    println!(
        "drain-mysql ({version}), {rows} rows, batch {}: relay {relay_rate:.0} jobs/s, SQL floor {floor_rate:.0} jobs/s, ratio {ratio:.2}",
        args.batch_size
    );
    let record = json!({
        "bench": "drain_mysql", "server": version, "rows": rows, "batch_size": args.batch_size,
        "relay_jobs_per_s": relay_rate.round(), "floor_jobs_per_s": floor_rate.round(),
        "ratio": (ratio * 100.0).round() / 100.0,
    });
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    use std::io::Write;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)?;
    writeln!(out, "{record}")?;
    Ok(())
}

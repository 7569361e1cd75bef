//! `faults`: what one batch costs the backend under faults (issue 31, item 6). Each scenario is
//! one claim of `--rows` rows (the batch size is `--rows`), the devserver a child process:
//!
//! - `lost answer`: the backend stores the first batch whole and closes the connection
//!   without answering (`drop_after_accept`); the relay sends the rows again, and the backend
//!   holds every one of them (`409 duplicate`).
//! - `mix`: every 4th row is already held by the backend (an earlier attempt stored it and
//!   its answer was lost), every 50th from the 7th is refused by the backend's unique policy
//!   (`on_conflict: reject`: it holds another job with the same key), every 100th from the
//!   33rd is poison (a type the backend refuses with 400).
//!
//! The devserver counts what the relay cost it (`/_dev/stats`, `/_dev/received`): batch and
//! single enqueue requests, `GET /ojs/v1/jobs/{id}` requests, job bodies it read (deliveries;
//! the first batch's included) and the most times one row was sent. The verdicts are checked
//! too: every row settled, each job stored once, poison dead, conflicts unique-rejected.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use ojs_outbox::{NewJob, Outbox};
use serde_json::{Value, json};

use crate::common::*;

#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Rows of the one claim, and the batch size (1..1000).
    #[arg(long, default_value_t = 1000)]
    pub rows: usize,
    /// postgres://... (tables `ojs_bench_faults_*` are dropped first); default: a SQLite file
    /// per scenario in a temporary directory.
    #[arg(long, env = "OJS_BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
    /// ojs-devserver binary (default: beside this one).
    #[arg(long)]
    pub devserver_bin: Option<PathBuf>,
    /// JSON lines are appended here.
    #[arg(long, default_value = "target/bench/results.jsonl")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    LostAnswer,
    Mix,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::LostAnswer => "lost answer",
            Scenario::Mix => "mix",
        }
    }

    fn table(self) -> &'static str {
        match self {
            Scenario::LostAnswer => "ojs_bench_faults_lost",
            Scenario::Mix => "ojs_bench_faults_mix",
        }
    }
}

fn held(i: usize) -> bool {
    i.is_multiple_of(4)
}

fn conflicting(i: usize) -> bool {
    i % 50 == 7
}

fn poison(i: usize) -> bool {
    i % 100 == 33
}

pub async fn run(args: FaultsArgs) -> BoxResult<()> {
    if !(1..=1000).contains(&args.rows) {
        return Err(err("--rows must be within 1..1000 (it is the batch size)"));
    }
    let devserver = DevServer::spawn(&sibling_binary(
        args.devserver_bin.as_deref(),
        "ojs-devserver",
    )?)?;
    let dir = std::env::temp_dir().join(format!("ojs-bench-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "faults: one claim of {} rows, batch size {}, devserver {} (child process), {}",
        args.rows,
        args.rows,
        devserver.url,
        match &args.database_url {
            Some(url) => redact(url),
            None => format!("SQLite files in {}", dir.display()),
        }
    );
    let mut rows = Vec::new();
    for scenario in [Scenario::LostAnswer, Scenario::Mix] {
        let url = match &args.database_url {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}",
                dir.join(format!("{}.db", scenario.table())).display()
            ),
        };
        let record = measure(&devserver, &url, scenario, args.rows).await?;
        rows.push(vec![
            scenario.name().to_owned(),
            record["rows"].to_string(),
            record["refused_rows"].to_string(),
            record["batch_requests"].to_string(),
            record["single_requests"].to_string(),
            record["get_requests"].to_string(),
            record["job_bodies"].to_string(),
            record["bodies_per_row"].to_string(),
            record["most_sends_of_a_row"].to_string(),
            record["seconds"].to_string(),
        ]);
        emit(&args.out, record)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_table(
        "fault cost of one batch (counted by the devserver; job bodies include the first batch)",
        &[
            "scenario",
            "rows",
            "held or refused",
            "batches",
            "singles",
            "GETs",
            "job bodies",
            "bodies/row",
            "most sends",
            "seconds",
        ],
        &rows,
    );
    Ok(())
}

async fn measure(
    devserver: &DevServer,
    url: &str,
    scenario: Scenario,
    n: usize,
) -> BoxResult<Value> {
    devserver.reset().await?;
    let table = scenario.table();
    if is_postgres(url) {
        let admin = sqlx::PgPool::connect(url).await?;
        drop_table(&admin, table).await?;
        drop_table(&admin, &format!("{table}_events")).await?;
        admin.close().await;
    } else if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    let mut config = config_for(url, &devserver.url, table);
    config.outbox.batch_size = n;
    config.outbox.poll_interval = Duration::from_millis(50);
    config.relay.initial_backoff = Duration::from_millis(50);
    config.relay.max_backoff = Duration::from_millis(200);
    // The rows are committed before the relay starts: nothing is left to a hot path.
    config.relay.skip_recent = Duration::ZERO;
    let outbox = Outbox::connect(config).await?;
    outbox.store().migrate().await?;

    let unique = json!({"unique": {"keys": ["type", "args"], "on_conflict": "reject"}});
    let mix = scenario == Scenario::Mix;
    let jobs = (0..n)
        .map(|i| {
            let job = NewJob::new("bench.fault", json!([i]));
            if mix && conflicting(i) {
                job.with_options(unique.clone())
            } else {
                job
            }
        })
        .collect();
    let mut tx = outbox.begin().await?;
    let ids = tx.enqueue_bulk(jobs).await?;
    let poisoned: Vec<String> = (0..n)
        .filter(|&i| mix && poison(i))
        .map(|i| format!("'{}'", ids[i]))
        .collect();
    if !poisoned.is_empty() {
        // A type the backend refuses (upper case), past the core's own validation.
        tx.execute(&format!(
            "UPDATE {table} SET job_type = 'Bench.Poison' WHERE job_id IN ({})",
            poisoned.join(",")
        ))
        .await?;
    }
    tx.commit().await?;
    let n_poison = poisoned.len();
    let (n_held, n_conflicting) = match scenario {
        Scenario::LostAnswer => {
            devserver
                .push_fault(json!({"drop_after_accept": true, "count": 1}))
                .await?;
            (n, 0)
        }
        Scenario::Mix => {
            let mut earlier: Vec<Value> = (0..n)
                .filter(|&i| held(i))
                .map(|i| json!({"id": ids[i], "type": "bench.fault", "args": [i]}))
                .collect();
            let n_held = earlier.len();
            let holders: Vec<Value> = (0..n)
                .filter(|&i| conflicting(i))
                .map(|i| json!({"type": "bench.fault", "args": [i], "options": unique}))
                .collect();
            let n_conflicting = holders.len();
            earlier.extend(holders);
            devserver.post_batch(&earlier).await?;
            (n_held, n_conflicting)
        }
    };
    let before = devserver.stats().await?;
    let sent_before = deliveries(&devserver.received().await?);

    let started = Instant::now();
    outbox.start_relay();
    let deadline = started + Duration::from_secs(300);
    let status = loop {
        let status = outbox.store().status().await?;
        if status.pending + status.failed == 0 {
            break status;
        }
        if Instant::now() >= deadline {
            return Err(err(format!(
                "{}: not settled after 300 s: {status:?}",
                scenario.name()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    outbox.stop_relay().await;
    let after = devserver.stats().await?;
    let received = devserver.received().await?;
    let sent_after = deliveries(&received);

    let stored = received["jobs"].as_array().map_or(0, Vec::len);
    // The held rows and the unique keys' holders were stored before, the rest by the relay.
    let want_stored = n - n_poison;
    if stored != want_stored
        || status.dead as usize != n_poison
        || status.unique_rejected as usize != n_conflicting
    {
        return Err(err(format!(
            "{}: wrong verdicts: {stored} jobs stored (want {want_stored}), {status:?}",
            scenario.name()
        )));
    }
    let count = |path: &str| after[path].as_u64().unwrap_or(0) - before[path].as_u64().unwrap_or(0);
    let requests = |kind: &str| {
        after["requests"][kind].as_u64().unwrap_or(0)
            - before["requests"][kind].as_u64().unwrap_or(0)
    };
    // The first batch (the one whose answer a fault dropped) was sent after `before`.
    let bodies = count("deliveries");
    let most = ids
        .iter()
        .map(|id| {
            sent_after.get(id).copied().unwrap_or(0) - sent_before.get(id).copied().unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    Ok(json!({
        "bench": "faults",
        "scenario": scenario.name(),
        "database": if is_postgres(url) { "postgres" } else { "sqlite" },
        "rows": n,
        "held_rows": n_held,
        "unique_conflicts": n_conflicting,
        "poison_rows": n_poison,
        "refused_rows": n_held + n_conflicting + n_poison,
        "batch_requests": requests("batch"),
        "single_requests": requests("single"),
        "get_requests": requests("get"),
        "job_bodies": bodies,
        "bodies_per_row": round3(bodies as f64 / n as f64),
        "most_sends_of_a_row": most,
        "seconds": round3(seconds),
    }))
}

/// Per job id, the enqueue requests (or batch elements) that carried it.
fn deliveries(received: &Value) -> std::collections::HashMap<String, u64> {
    received["deliveries"]
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(id, n)| (id.clone(), n.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

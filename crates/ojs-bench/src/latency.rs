//! `latency`: commit-to-delivery latency of the hot path at a steady commit rate. Each commit is
//! one transaction with one `enqueue_after_commit` on the application's own pool (a second
//! `Outbox` that runs no relay, as a framework's connection is not the relay's); after the
//! commit the relay (`start_relay`, its own pool) is woken with the id, as a binding's hook
//! does. Latency = devserver `received_at_us` - wall clock when `commit()` returned.
//! Then, unless `--baseline-seconds 0`, the same commits in `--turns` pairs of turns, with no
//! relay at all then with the in-process relay running, alternating so that a drift of the
//! machine weighs on both: the application's begin..commit p99 with the relay over its p99
//! without, pooled over the turns, is issue 31's target 4 (≤ 1.5x).
//! On PostgreSQL a probe measures, during the measured run (and during the no-relay run, where
//! the relay's own work does not load the machine), the floor of a relay that locks a row
//! before sending it: one round trip to the same PostgreSQL (`SELECT 1`, cheaper than a
//! claim) followed by one HTTP request to the same devserver (`GET /ojs/v1/health`, cheaper
//! than a job), from this process, at `--probe-rate`. It excludes the wake-up after the commit.
//! Then, unless `--separate-seconds 0`, the same commits from an application in `external`
//! relay mode, delivered by `ojs-relay run` in another process with the default config (woken
//! by the commits: NOTIFY on PostgreSQL, the WAL watch on SQLite): issue 26's target is its
//! p50 at most 2x, and its p99 at most 3x, the in-process relay's of the same run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ojs_outbox::Outbox;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use tokio::time::MissedTickBehavior;

use crate::common::*;

#[derive(Debug, Args)]
pub struct LatencyArgs {
    /// postgres://... or sqlite://PATH (the SQLite file is deleted first).
    #[arg(long, env = "OJS_BENCH_DATABASE_URL")]
    pub database_url: String,
    /// Commits per second offered (a fixed tick schedule, not sleep-after-work).
    #[arg(long, default_value_t = 500.0)]
    pub rate: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Seconds at the same rate before measuring (connections, manifest, caches); not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_seconds: f64,
    /// Seconds of the same commits with no relay running, in `--turns` turns each followed by
    /// a turn as long with the relay running (0: skipped).
    #[arg(long, default_value_t = 10.0)]
    pub baseline_seconds: f64,
    /// The relays' `outbox.batch_size` (default: the library's default).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Pairs of turns (no relay, relay) that `--baseline-seconds` is divided into.
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Floor probes per second during the measured run (PostgreSQL; 0: none).
    #[arg(long, default_value_t = 100.0)]
    pub probe_rate: f64,
    /// The separate relay's `--poll-interval` (ISO 8601), e.g. PT0.05S: on MySQL/MariaDB no
    /// commit wakes it, so its poll is its latency (default: the relay's own default).
    #[arg(long)]
    pub separate_poll_interval: Option<String>,
    /// Measured seconds with a separate relay process instead (0: skipped).
    #[arg(long, default_value_t = 20.0)]
    pub separate_seconds: f64,
    /// Issue 31, target 3: also measure graphile-worker's add -> handler start, its worker in
    /// another process woken by LISTEN/NOTIFY, at the same rate for `--separate-seconds`
    /// (PostgreSQL; `graphile` or empty). Needs node and peers/install.sh (scripts/bench.sh).
    #[arg(long, default_value = "")]
    pub peer_latency: String,
    /// Where install.sh put the pinned peer packages.
    #[arg(
        long,
        env = "OJS_BENCH_PEERS_DIR",
        default_value = "target/bench-peers"
    )]
    pub peers_dir: PathBuf,
    /// The peer scripts (graphile_latency.js).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/peers"))]
    pub peer_scripts: PathBuf,
    /// ojs-devserver binary (default: beside this one).
    #[arg(long)]
    pub devserver_bin: Option<PathBuf>,
    /// ojs-relay binary, for the separate relay (default: beside this one).
    #[arg(long)]
    pub relay_bin: Option<PathBuf>,
    /// JSON lines are appended here.
    #[arg(long, default_value = "target/bench/results.jsonl")]
    pub out: PathBuf,
}

/// One commit: job id, scheduled time, commit start and commit end (µs since the epoch).
struct Commit {
    job_id: String,
    scheduled_us: i64,
    started_us: i64,
    committed_us: i64,
}

const TABLE: &str = "ojs_bench_latency";

pub async fn run(args: LatencyArgs) -> BoxResult<()> {
    let devserver = DevServer::spawn(&sibling_binary(
        args.devserver_bin.as_deref(),
        "ojs-devserver",
    )?)?;
    let (database, version, postmaster) = prepare_database(&args.database_url).await?;
    let mut config = config_for(&args.database_url, &devserver.url, TABLE);
    if let Some(batch_size) = args.batch_size {
        config.outbox.batch_size = batch_size;
    }
    println!(
        "latency: {database} {version} at {}, {} commits/s for {}s (+{}s warm-up), devserver {} (child process), \
         in-process relay with the default config (batch {}, poll {:?})",
        redact(&args.database_url),
        args.rate,
        args.seconds,
        args.warmup_seconds,
        devserver.url,
        config.outbox.batch_size,
        config.outbox.poll_interval
    );
    let app = Arc::new(Outbox::connect(config.clone()).await?);
    app.store().migrate().await?;
    let probe = Probe {
        database_url: is_postgres(&args.database_url).then(|| args.database_url.clone()),
        devserver_url: devserver.url.clone(),
        rate: args.probe_rate,
    };
    let outbox = Arc::new(Outbox::connect(config.clone()).await?);
    outbox.start_relay();

    let warmup = (args.rate * args.warmup_seconds).round() as usize;
    if warmup > 0 {
        warm_up(&app, Some(&outbox), args.rate, warmup, &devserver).await?;
    }

    let total = (args.rate * args.seconds).round() as usize;
    let cpu_before = CpuSample::take("self", devserver.pid(), postmaster);
    let ((commits, failures), floor_ms) = probe
        .during(commit_at_rate(&app, Some(&outbox), args.rate, total))
        .await?;
    devserver
        .wait_for_jobs(
            commits.len() as u64,
            Duration::from_millis(20),
            Duration::from_secs(120),
        )
        .await?;
    let cpu_after = CpuSample::take("self", devserver.pid(), postmaster);
    let received = devserver.received_times().await?;
    let metrics = outbox.metrics();
    let phases = outbox.histograms().as_ref().map(phases_json);
    outbox.stop_relay().await;

    let Measured {
        latency_ms,
        commit_ms,
        start_lag_ms,
        missing,
    } = measured(&commits, &received);
    let turns = if args.baseline_seconds > 0.0 {
        empty_table(&app).await?;
        devserver.reset().await?;
        Some(alternate_turns(&args, &app, &config, &devserver, &probe).await?)
    } else {
        None
    };
    let floor_without_relay_ms = turns
        .as_ref()
        .map_or_else(Vec::new, |t| t.floor_without_relay_ms.clone());
    let separate = if args.separate_seconds > 0.0 {
        empty_table(&app).await?;
        devserver.reset().await?;
        Some(separate_relay(&args, &devserver, config).await?)
    } else {
        None
    };
    let peer = match args.peer_latency.as_str() {
        "" => None,
        "graphile" | "graphile-worker" if is_postgres(&args.database_url) => Some(
            crate::peer_latency::graphile_add_to_start(
                &args.database_url,
                &args.peers_dir,
                &args.peer_scripts,
                args.rate,
                args.separate_seconds.max(1.0),
                args.warmup_seconds,
            )
            .await?,
        ),
        other => {
            return Err(err(format!(
                "--peer-latency {other:?}: only graphile, on PostgreSQL"
            )));
        }
    };
    let first = commits.iter().map(|c| c.scheduled_us).min().unwrap_or(0);
    let last = commits.iter().map(|c| c.committed_us).max().unwrap_or(0);
    let achieved = commits.len() as f64 / ((last - first) as f64 / 1e6);
    let summary = |v: &[f64]| {
        json!({
            "p50": round3(percentile(v, 50.0)), "p90": round3(percentile(v, 90.0)),
            "p99": round3(percentile(v, 99.0)), "max": round3(v.last().copied().unwrap_or(f64::NAN)),
        })
    };
    // Commit -> delivered's p50 over the floor's (None without probes).
    let over_floor =
        (!floor_ms.is_empty()).then(|| percentile(&latency_ms, 50.0) / percentile(&floor_ms, 50.0));
    let record = json!({
        "bench": "latency",
        "database": database,
        "database_version": version,
        "offered_rate": args.rate,
        "achieved_commit_rate": round1(achieved),
        "seconds": args.seconds,
        "commits": commits.len(),
        "commit_failures": failures,
        "missing_at_devserver": missing,
        "latency_ms": summary(&latency_ms),
        "commit_ms": summary(&commit_ms),
        "schedule_lag_ms": summary(&start_lag_ms),
        "floor_probes": floor_ms.len(),
        "floor_ms": (!floor_ms.is_empty()).then(|| summary(&floor_ms)),
        "floor_without_relay_ms": (!floor_without_relay_ms.is_empty()).then(|| summary(&floor_without_relay_ms)),
        "latency_p50_over_floor_p50": over_floor.map(round3),
        "hot_dropped": metrics.as_ref().map(|m| m.hot_dropped),
        "separate_relay_latency_ms": separate.as_ref().map(|s| summary(&s.latency_ms)),
        "separate_relay_missing": separate.as_ref().map(|s| s.missing),
        "separate_over_in_process_p50": separate.as_ref().map(|s| round3(percentile(&s.latency_ms, 50.0) / percentile(&latency_ms, 50.0))),
        "separate_over_in_process_p99": separate.as_ref().map(|s| round3(percentile(&s.latency_ms, 99.0) / percentile(&latency_ms, 99.0))),
        "peer_latency": peer.as_ref().map(|p| p.label.clone()),
        "peer_latency_ms": peer.as_ref().map(|p| p.latency_ms.clone()),
        "peer_achieved_rate": peer.as_ref().map(|p| p.record["achieved_add_rate"].clone()),
        "peer_record": peer.as_ref().map(|p| p.record.clone()),
        "phases": phases,
        "transaction_p99_ms_without_relay": turns.as_ref().map(|t| round3(percentile(&t.without_relay_ms, 99.0))),
        "transaction_p99_ms_with_relay": turns.as_ref().map(|t| round3(percentile(&t.with_relay_ms, 99.0))),
        "transaction_p99_ratio_with_relay": turns.as_ref().map(|t| round3(t.ratio())),
        "turns": turns.as_ref().map(|t| json!({
            "pairs": args.turns,
            "seconds_each": round3(args.baseline_seconds / args.turns as f64),
            "p99_ms_without_relay": t.p99_without_by_turn,
            "p99_ms_with_relay": t.p99_with_by_turn,
        })),
        "devserver": "child process",
        "relay": "in-process (Outbox::start_relay), default config",
        "cpu": cpu_before.delta(&cpu_after),
    });
    emit(&args.out, record.clone())?;
    let row = |name: &str, v: &[f64]| {
        vec![
            name.to_owned(),
            format!("{:.2}", percentile(v, 50.0)),
            format!("{:.2}", percentile(v, 90.0)),
            format!("{:.2}", percentile(v, 99.0)),
            format!("{:.2}", v.last().copied().unwrap_or(f64::NAN)),
        ]
    };
    let mut rows = vec![row("commit -> delivered", &latency_ms)];
    if let Some(separate) = &separate {
        rows.push(row("  by a separate relay process", &separate.latency_ms));
    }
    rows.extend([
        row("transaction (begin..commit)", &commit_ms),
        row("tick -> transaction start", &start_lag_ms),
    ]);
    if !floor_ms.is_empty() {
        rows.push(row("floor: SELECT 1 + GET health", &floor_ms));
    }
    if !floor_without_relay_ms.is_empty() {
        rows.push(row("floor, no relay (its turns)", &floor_without_relay_ms));
    }
    print_table(
        &format!(
            "latency on {database}: {} commits, achieved {achieved:.1} commits/s (offered {}), {failures} failed, {missing} missing",
            commits.len(),
            args.rate
        ),
        &["ms", "p50", "p90", "p99", "max"],
        &rows,
    );
    if let Some(ratio) = over_floor {
        println!(
            "floor ({} probes at {}/s during the measured run: one PostgreSQL round trip, then one devserver request; \
             'no relay': the same probes during the no-relay run before): commit -> delivered p50 is {ratio:.2}x the floor's p50",
            floor_ms.len(),
            args.probe_rate,
        );
    }
    if let Some(separate) = &separate {
        let p50 = percentile(&separate.latency_ms, 50.0) / percentile(&latency_ms, 50.0);
        let p99 = percentile(&separate.latency_ms, 99.0) / percentile(&latency_ms, 99.0);
        println!(
            "separate relay (ojs-relay run, another process, {}s at the same rate) over the in-process relay: \
             p50 {p50:.2}x (issue 26 target <= 2: {}), p99 {p99:.2}x (target <= 3: {})",
            args.separate_seconds,
            if p50 <= 2.0 { "met" } else { "NOT met" },
            if p99 <= 3.0 { "met" } else { "NOT met" },
        );
    }
    if let (Some(separate), Some(peer)) = (&separate, &peer) {
        let ours = percentile(&separate.latency_ms, 50.0);
        let theirs = peer.latency_ms["p50"].as_f64().unwrap_or(f64::NAN);
        println!(
            "separate relay commit -> delivered p50 {ours:.2} ms vs {} p50 {theirs:.2} ms (p99 {}; it achieved {} adds/s of {} offered): \
             ratio {:.2} (issue 31 target <= 1: {})",
            peer.label,
            peer.latency_ms["p99"],
            peer.record["achieved_add_rate"],
            args.rate,
            ours / theirs,
            if ours <= theirs { "met" } else { "NOT met" },
        );
    }
    if let Some(turns) = &turns {
        let ratio = turns.ratio();
        println!(
            "application transaction p99: {:.2} ms with the relay running, {:.2} ms with no relay ({} turns of {:.1}s each, alternating, same rate; per turn without {:?}, with {:?}): ratio {ratio:.2} (issue 31 target <= {APP_P99_RATIO}: {})",
            percentile(&turns.with_relay_ms, 99.0),
            percentile(&turns.without_relay_ms, 99.0),
            args.turns,
            args.baseline_seconds / args.turns as f64,
            turns.p99_without_by_turn,
            turns.p99_with_by_turn,
            if ratio <= APP_P99_RATIO {
                "met"
            } else {
                "NOT met"
            },
        );
    }
    if let Some(p) = &record["phases"].as_object() {
        println!(
            "relay rounds (its own histograms, warm-up included): {} claims of {} ms, {} requests of {} ms, {} settles of {} ms on average",
            p["claims"],
            p["claim_ms_mean"],
            p["requests"],
            p["send_ms_mean"],
            p["settles"],
            p["settle_ms_mean"]
        );
    }
    let cpu = &record["cpu"];
    println!(
        "CPU during the measured run (s): bench process (app + relay) {}, devserver {}, PostgreSQL {}, other processes {}",
        cpu["relay_cpu_s"], cpu["devserver_cpu_s"], cpu["postgres_cpu_s"], cpu["other_cpu_s"]
    );
    let missing = missing + separate.as_ref().map_or(0, |s| s.missing);
    if missing > 0 || failures > 0 {
        return Err(err(format!(
            "{missing} committed jobs never reached the devserver, {failures} commits failed"
        )));
    }
    Ok(())
}

/// Issue 31, target 4: the application's transaction p99 with the relay running at most this
/// many times its p99 without.
pub const APP_P99_RATIO: f64 = 1.5;

/// The application's begin..commit durations (ms, sorted) in the turns with no relay and in
/// those with the relay running, and each turn's p99.
struct Turns {
    without_relay_ms: Vec<f64>,
    with_relay_ms: Vec<f64>,
    p99_without_by_turn: Vec<f64>,
    p99_with_by_turn: Vec<f64>,
    floor_without_relay_ms: Vec<f64>,
}

impl Turns {
    fn ratio(&self) -> f64 {
        percentile(&self.with_relay_ms, 99.0) / percentile(&self.without_relay_ms, 99.0)
    }
}

/// `--turns` pairs of turns at the same rate: commits with no relay at all (their rows deleted
/// after), then commits delivered by an in-process relay started for the turn (after a short
/// warm-up of its own, stopped and its rows deleted after). Every commit of a relay turn must
/// reach the devserver.
async fn alternate_turns(
    args: &LatencyArgs,
    app: &Arc<Outbox>,
    config: &ojs_outbox::Config,
    devserver: &DevServer,
    probe: &Probe,
) -> BoxResult<Turns> {
    let per_turn = (args.rate * args.baseline_seconds / args.turns.max(1) as f64).round() as usize;
    let warmup = (args.rate * args.warmup_seconds.min(1.0)).round() as usize;
    let mut turns = Turns {
        without_relay_ms: Vec::new(),
        with_relay_ms: Vec::new(),
        p99_without_by_turn: Vec::new(),
        p99_with_by_turn: Vec::new(),
        floor_without_relay_ms: Vec::new(),
    };
    for _ in 0..args.turns.max(1) {
        let ((commits, _), floor) = probe
            .during(commit_at_rate(app, None, args.rate, per_turn))
            .await?;
        let ms = commit_ms(&commits);
        turns
            .p99_without_by_turn
            .push(round3(percentile(&ms, 99.0)));
        turns.without_relay_ms.extend(ms);
        turns.floor_without_relay_ms.extend(floor);
        empty_table(app).await?;

        let relay = Arc::new(Outbox::connect(config.clone()).await?);
        relay.start_relay();
        warm_up(app, Some(&relay), args.rate, warmup, devserver).await?;
        let (commits, _) = commit_at_rate(app, Some(&relay), args.rate, per_turn).await?;
        devserver
            .wait_for_jobs(
                commits.len() as u64,
                Duration::from_millis(20),
                Duration::from_secs(120),
            )
            .await?;
        relay.stop_relay().await;
        relay.store().close().await;
        devserver.reset().await?;
        let ms = commit_ms(&commits);
        turns.p99_with_by_turn.push(round3(percentile(&ms, 99.0)));
        turns.with_relay_ms.extend(ms);
        empty_table(app).await?;
    }
    for values in [
        &mut turns.without_relay_ms,
        &mut turns.with_relay_ms,
        &mut turns.floor_without_relay_ms,
    ] {
        values.sort_by(f64::total_cmp);
    }
    Ok(turns)
}

/// Commit -> delivered, commit and schedule-lag durations (ms, sorted), and the commits the
/// devserver never received.
struct Measured {
    latency_ms: Vec<f64>,
    commit_ms: Vec<f64>,
    start_lag_ms: Vec<f64>,
    missing: usize,
}

/// Each commit's begin..commit duration in ms, sorted.
fn commit_ms(commits: &[Commit]) -> Vec<f64> {
    let mut ms: Vec<f64> = commits
        .iter()
        .map(|c| (c.committed_us - c.started_us) as f64 / 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

fn measured(commits: &[Commit], received: &std::collections::HashMap<String, i64>) -> Measured {
    let mut m = Measured {
        latency_ms: Vec::with_capacity(commits.len()),
        commit_ms: commit_ms(commits),
        start_lag_ms: Vec::with_capacity(commits.len()),
        missing: 0,
    };
    for commit in commits {
        m.start_lag_ms
            .push((commit.started_us - commit.scheduled_us) as f64 / 1000.0);
        match received.get(&commit.job_id) {
            Some(at) => m
                .latency_ms
                .push((at - commit.committed_us) as f64 / 1000.0),
            None => m.missing += 1,
        }
    }
    for values in [&mut m.latency_ms, &mut m.start_lag_ms] {
        values.sort_by(f64::total_cmp);
    }
    m
}

/// The same commits from an application with no relay of its own (`relay.mode` external),
/// delivered by `ojs-relay run` in a process of its own with the default settings.
async fn separate_relay(
    args: &LatencyArgs,
    devserver: &DevServer,
    mut config: ojs_outbox::Config,
) -> BoxResult<Measured> {
    config.relay.mode = ojs_outbox::RelayMode::External;
    let app = Arc::new(Outbox::connect(config).await?);
    let log = std::env::temp_dir().join(format!("ojs-bench-relay-{}.log", std::process::id()));
    let mut relay =
        std::process::Command::new(sibling_binary(args.relay_bin.as_deref(), "ojs-relay")?)
            .args(["--database-url", &args.database_url, "--table", TABLE])
            .args(["run", "--ojs-url", &devserver.url])
            .args(
                args.batch_size
                    .map(|n| n.to_string())
                    .iter()
                    .flat_map(|n| ["--batch-size".to_owned(), n.clone()]),
            )
            .args(
                args.separate_poll_interval
                    .iter()
                    .flat_map(|p| ["--poll-interval", p.as_str()]),
            )
            .env("OJS_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
    // Measured once its wake-up is in place (it says so); on MySQL, where it has none, once
    // it has started.
    let ready_line = if is_mysql(&args.database_url) {
        "relay started"
    } else {
        "woken by commits in other processes"
    };
    let ready = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(ready_line)
    {
        if ready.elapsed() > Duration::from_secs(30) || relay.try_wait()?.is_some() {
            let _ = relay.kill();
            return Err(err(format!(
                "the separate relay never said {ready_line:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let warmup = (args.rate * args.warmup_seconds).round() as usize;
    if warmup > 0 {
        warm_up(&app, None, args.rate, warmup, devserver).await?;
    }
    let total = (args.rate * args.separate_seconds).round() as usize;
    let (commits, _) = commit_at_rate(&app, None, args.rate, total).await?;
    devserver
        .wait_for_jobs(
            commits.len() as u64,
            Duration::from_millis(20),
            Duration::from_secs(120),
        )
        .await?;
    let received = devserver.received_times().await?;
    std::process::Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()?;
    relay.wait()?;
    let _ = std::fs::remove_file(&log);
    Ok(measured(&commits, &received))
}

/// Empties the benchmark table (drops it on PostgreSQL, deletes the file on SQLite).
async fn prepare_database(url: &str) -> BoxResult<(&'static str, String, Option<u32>)> {
    if is_postgres(url) {
        let admin = PgPoolOptions::new().max_connections(1).connect(url).await?;
        drop_table(&admin, TABLE).await?;
        let version = server_version(&admin).await;
        let postmaster = postmaster_pid(&admin).await;
        admin.close().await;
        return Ok(("PostgreSQL", version, postmaster));
    }
    if is_mysql(url) {
        let store = ojs_outbox::Store::connect(url, TABLE).await?;
        let pool = store.mysql_pool().expect("a MySQL store");
        sqlx::raw_sql(sqlx::AssertSqlSafe(store.sql().drop_table()))
            .execute(pool)
            .await?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(pool)
            .await?;
        store.close().await;
        return Ok(("MySQL", version, None));
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| err("expected postgres://... or sqlite://PATH"))?;
    let path = path.split('?').next().unwrap_or(path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    if let Some(dir) = std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)?;
    }
    let version = {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await?;
        sqlx::query_scalar::<_, String>("SELECT sqlite_version()")
            .fetch_one(&mut conn)
            .await?
    };
    Ok(("SQLite", version, None))
}

/// Deletes every row (between the no-relay baseline and the measured run).
async fn empty_table(app: &Outbox) -> BoxResult<()> {
    let sql = sqlx::AssertSqlSafe(format!("DELETE FROM {TABLE}"));
    match (app.store().postgres_pool(), app.store().sqlite_pool()) {
        (Some(pool), _) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ())?,
        (_, Some(pool)) => sqlx::raw_sql(sql).execute(pool).await.map(|_| ())?,
        _ => {
            if let Some(pool) = app.store().mysql_pool() {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
        }
    }
    Ok(())
}

/// `count` commits at `rate` that are not measured, each waited for at the devserver, which
/// then forgets them.
async fn warm_up(
    app: &Arc<Outbox>,
    relay: Option<&Arc<Outbox>>,
    rate: f64,
    count: usize,
    devserver: &DevServer,
) -> BoxResult<()> {
    commit_at_rate(app, relay, rate, count).await?;
    devserver
        .wait_for_jobs(
            count as u64,
            Duration::from_millis(20),
            Duration::from_secs(60),
        )
        .await?;
    devserver.reset().await?;
    Ok(())
}

/// `count` commits on the application's pool on a fixed schedule (`rate` per second), each
/// waking `relay` afterwards; each runs as its own task, so a slow commit does not delay the
/// next one's start.
async fn commit_at_rate(
    app: &Arc<Outbox>,
    relay: Option<&Arc<Outbox>>,
    rate: f64,
    count: usize,
) -> BoxResult<(Vec<Commit>, usize)> {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let period_us = 1e6 / rate;
    let mut tasks = Vec::with_capacity(count);
    let origin_us = now_us();
    for i in 0..count {
        ticks.tick().await;
        let (app, relay) = (app.clone(), relay.cloned());
        let scheduled_us = origin_us + (i as f64 * period_us) as i64;
        tasks.push(tokio::spawn(async move {
            let started_us = now_us();
            let mut tx = app.begin().await?;
            let job_id = tx
                .enqueue_after_commit(bench_job("bench.latency", i))
                .await?;
            tx.commit().await?;
            let committed_us = now_us();
            if let Some(relay) = relay {
                relay.notify_committed(vec![job_id.clone()]);
            }
            Ok::<_, ojs_outbox::Error>(Commit {
                job_id,
                scheduled_us,
                started_us,
                committed_us,
            })
        }));
    }
    let mut commits = Vec::with_capacity(count);
    let mut failures = 0;
    for task in tasks {
        match task.await? {
            Ok(commit) => commits.push(commit),
            Err(e) => {
                failures += 1;
                if failures <= 3 {
                    eprintln!("latency: commit failed: {e}");
                }
            }
        }
    }
    Ok((commits, failures))
}

/// The floor probe (PostgreSQL only): while a future runs, at `rate` per second, one `SELECT 1`
/// on a connection of its own then one `GET /ojs/v1/health` on a kept-alive client of its own;
/// each probe timed from its own start (a late tick is not counted).
struct Probe {
    database_url: Option<String>,
    devserver_url: String,
    rate: f64,
}

impl Probe {
    /// The future's output and the probes' durations in ms, sorted (none without PostgreSQL
    /// or with rate 0).
    async fn during<T>(
        &self,
        work: impl std::future::Future<Output = BoxResult<T>>,
    ) -> BoxResult<(T, Vec<f64>)> {
        let Some(database_url) = self.database_url.clone().filter(|_| self.rate > 0.0) else {
            return Ok((work.await?, Vec::new()));
        };
        let stop = Arc::new(tokio::sync::Notify::new());
        let probes = tokio::spawn(probe_floor(
            database_url,
            self.devserver_url.clone(),
            self.rate,
            stop.clone(),
        ));
        let output = work.await;
        stop.notify_one();
        let mut durations = probes.await??;
        durations.sort_by(f64::total_cmp);
        Ok((output?, durations))
    }
}

async fn probe_floor(
    database_url: String,
    devserver_url: String,
    rate: f64,
    stop: Arc<tokio::sync::Notify>,
) -> BoxResult<Vec<f64>> {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(&database_url).await?;
    let http = reqwest::Client::new();
    let health = format!("{devserver_url}/ojs/v1/health");
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut durations = Vec::new();
    loop {
        tokio::select! {
            _ = stop.notified() => break,
            _ = ticks.tick() => {}
        }
        let started = std::time::Instant::now();
        sqlx::raw_sql("SELECT 1").execute(&mut connection).await?;
        let response = http.get(&health).send().await?;
        let status = response.status();
        response.bytes().await?;
        if !status.is_success() {
            return Err(err(format!("GET /ojs/v1/health answered {status}")));
        }
        durations.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    connection.close().await?;
    Ok(durations)
}

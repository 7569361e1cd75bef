//! The storm (issue 30): three `ojs-relay run` processes drain one table while they are
//! SIGKILLed again and again, one at a time and all at once, each time the moment a batch has
//! just reached the backend (between the backend's answer and the settle, the window a crash
//! after delivery hits); each killed relay is started again and the application commits more
//! rows after every kill. When the storm is over, every committed job must be at the backend
//! exactly once: none lost, none invented, none stored twice. Re-sends of the batches a kill
//! caught are expected (at least once) and recognised by their id; their number is bounded by
//! what the kills can have caught.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ojs_devserver::{DevServer, Fault};
use ojs_outbox::NewJob;
use serde_json::json;

const RELAYS: usize = 3;
/// Rows committed before the first relay starts.
const BACKLOG: usize = 4_000;
/// Rows the application commits after each kill, while the storm goes on.
const CHUNK: usize = 500;
/// Kill rounds. Every fourth round kills every relay at once, the others one, in turn.
const ROUNDS: usize = 8;
const BATCH: usize = 50;
/// A kill waits until the backend stored this many more jobs since the round began.
const STEP: u64 = 4 * BATCH as u64;
/// A lease short enough that a killed SQLite relay's rows are due again soon; a request timeout
/// far above the backend's latency, so that only the kills cause re-sends.
const CONFIG: &str = r#"{"adapter": {"relay": {"lease": "PT4S", "request_timeout": "PT3S"}}}"#;

fn job(i: usize) -> NewJob {
    NewJob::new("storm.job", json!([i]))
}

/// Which relays round `round` kills.
fn victims(round: usize) -> Vec<usize> {
    if round % 4 == 3 {
        (0..RELAYS).collect()
    } else {
        vec![round % RELAYS]
    }
}

async fn storm(kind: Kind) {
    let Some(db) = Db::new(kind, "storm").await else {
        return;
    };
    let name = format!("storm/{kind:?}");
    let server = Arc::new(DevServer::start(0).await.unwrap());
    let url = server.url();
    db.migrate().await;
    let config = db.config_file(CONFIG);
    let batch = BATCH.to_string();
    let run_args = [
        "--batch-size",
        batch.as_str(),
        "--poll-interval",
        "PT0.05S",
        "--config",
        config.as_str(),
    ];

    let mut staged = db.stage((0..BACKLOG).map(job).collect()).await;
    assert_eq!(staged.len(), BACKLOG);
    // ~20 ms per enqueue request, so that the backlog outlasts the storm.
    server.push_fault(Fault::latency(20));

    let t0 = Instant::now();
    let mut relays: Vec<RelayProcess> =
        (0..RELAYS).map(|_| db.spawn_run(&url, &run_args)).collect();
    let mut killed_logs = Vec::new();
    let mut relay_kills = 0;
    for round in 0..ROUNDS {
        // Kill the moment a batch has just been stored, once the round made some progress.
        let watcher = {
            let server = server.clone();
            tokio::task::spawn_blocking(move || {
                let deadline = Instant::now() + Duration::from_secs(120);
                let start = server.stats().jobs;
                let mut last = start;
                loop {
                    let jobs = server.stats().jobs;
                    if jobs != last && jobs >= start + STEP {
                        return Some(jobs);
                    }
                    last = jobs;
                    if Instant::now() > deadline {
                        return None;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
        };
        let at_kill = watcher.await.unwrap();
        let who = victims(round);
        for &i in &who {
            relays[i].sigkill();
        }
        let Some(at_kill) = at_kill else {
            let logs: Vec<String> = relays.iter().map(RelayProcess::log).collect();
            panic!(
                "{name}: round {round}: the backend stored no {STEP} more jobs in two minutes; relay logs:\n{}",
                logs.join("\n----\n")
            );
        };
        for &i in &who {
            let exit = relays[i].wait(Duration::from_secs(30)).await;
            assert!(
                exit.code().is_none(),
                "relay {i} was killed by a signal, it did not exit: {exit:?}\nlog:\n{}",
                relays[i].log()
            );
            relay_kills += 1;
        }
        eprintln!(
            "{name}: round {round}: killed relay(s) {who:?} at {at_kill} stored ({:?} in)",
            t0.elapsed()
        );
        // The application goes on committing while relays are down.
        let first = staged.len();
        staged.extend(db.stage((first..first + CHUNK).map(job).collect()).await);
        for &i in &who {
            let restarted = db.spawn_run(&url, &run_args);
            killed_logs.push(std::mem::replace(&mut relays[i], restarted).log());
        }
    }
    let total = staged.len();
    assert_eq!(total, BACKLOG + ROUNDS * CHUNK);

    // The storm is over: the relays running now finish the drain.
    let status = db
        .wait_status(
            Duration::from_secs(300),
            "every row sent",
            Some(&relays[0]),
            |s| s["sent"] == json!(total as i64),
        )
        .await;
    let drained_in = t0.elapsed();
    assert_eq!(
        (
            count(&status, "pending"),
            count(&status, "failed"),
            count(&status, "dead")
        ),
        (0, 0, 0),
        "{status}"
    );
    for (i, relay) in relays.iter_mut().enumerate() {
        assert_eq!(
            relay.terminate(Duration::from_secs(30)).await.code(),
            Some(0),
            "relay {i} stops gracefully; log:\n{}",
            relay.log()
        );
    }

    // The oracle: the backend's received jobs, by id.
    let after = received(&url).await;
    let ids = received_ids(&after);
    let stored = as_set(&ids);
    let staged_set = as_set(&staged);
    assert_eq!(staged_set.len(), total, "staging gave every job its own id");
    assert_eq!(stored.len(), ids.len(), "no id stored twice");
    let lost: Vec<&String> = staged_set.difference(&stored).take(5).collect();
    let invented: Vec<&String> = stored.difference(&staged_set).take(5).collect();
    assert!(
        lost.is_empty(),
        "staged jobs never stored (lost): {lost:?}..."
    );
    assert!(
        invented.is_empty(),
        "stored jobs never staged (invented): {invented:?}..."
    );
    assert_eq!(ids.len(), total, "the backend stored exactly {total} jobs");

    let deliveries: HashMap<String, u64> =
        serde_json::from_value(after["deliveries"].clone()).unwrap();
    assert!(
        staged
            .iter()
            .all(|id| deliveries.get(id).copied().unwrap_or(0) >= 1),
        "every staged id was delivered"
    );
    // A killed relay can have left at most two claims delivered and not settled (on PostgreSQL
    // and MariaDB a round's settlement runs while the next round sends; on SQLite one lease).
    let resent = deliveries.values().filter(|&&n| n >= 2).count();
    let most = deliveries.values().copied().max().unwrap_or(0);
    let bound = 2 * BATCH * relay_kills;
    eprintln!(
        "{name}: {total} jobs, {relay_kills} relay kills in {ROUNDS} rounds; drained in {drained_in:?}; \
         {resent} id(s) re-sent (at most {most} deliveries of one id), each stored once"
    );
    assert!(
        resent <= bound,
        "{resent} ids re-sent, more than the {relay_kills} kills can explain ({bound}); logs of the killed relays:\n{}",
        killed_logs.join("\n----\n")
    );
    db.drop_table().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relays_sigkilled_again_and_again_lose_nothing_and_store_each_job_once_sqlite() {
    storm(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relays_sigkilled_again_and_again_lose_nothing_and_store_each_job_once_postgres() {
    storm(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relays_sigkilled_again_and_again_lose_nothing_and_store_each_job_once_mariadb() {
    storm(Kind::Mysql).await;
}

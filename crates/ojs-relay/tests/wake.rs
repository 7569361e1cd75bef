//! A commit in any process wakes a separate relay (`wake.rs` of the core): two `ojs-relay run`
//! processes that poll once an hour deliver, within seconds, every job that four application
//! processes (external relay mode: no relay of their own; this test binary started again, each
//! running `an_application_process`) stage, each job once.
//! Their first poll round runs at start; staging happens in rounds, each after the last was
//! delivered, so every round after the first can only have been found by a wake-up.

mod common;

use std::time::{Duration, Instant};

use common::{Db, Kind, RelayProcess};
use ojs_devserver::DevServer;
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

const APPS: usize = 4;
const ROUNDS: usize = 3;
const PER_ROUND: usize = 10;
/// Far beyond any wake-up; a relay that only polled (once an hour) would miss it.
const DELIVERED_WITHIN: Duration = Duration::from_secs(60);

async fn wait_for(what: &str, relays: &[RelayProcess], done: impl Fn() -> bool) {
    let deadline = Instant::now() + DELIVERED_WITHIN;
    while !done() {
        if Instant::now() > deadline {
            let logs: Vec<String> = relays.iter().map(RelayProcess::log).collect();
            panic!(
                "timed out waiting for {what}; relay logs:\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn separate_relays_are_woken_by_commits(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    db.migrate().await;
    let backend = DevServer::start(0).await.unwrap();
    let url = backend.url();
    let relays = vec![
        db.spawn_run(&url, &["--poll-interval", "PT1H"]),
        db.spawn_run(&url, &["--poll-interval", "PT1H"]),
    ];
    wait_for("both relays to listen for commits", &relays, || {
        relays
            .iter()
            .all(|relay| relay.log().contains("woken by commits in other processes"))
    })
    .await;

    let mut staged = Vec::new();
    for round in 0..ROUNDS {
        let apps: Vec<_> = (0..APPS)
            .map(|app| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "an_application_process",
                        "--exact",
                        "--ignored",
                        "--nocapture",
                    ])
                    .env("OJS_WAKE_APP", format!("{round}-{app}"))
                    .env("OJS_WAKE_OJS_URL", &url)
                    .env("OJS_WAKE_DATABASE_URL", &db.url)
                    .env("OJS_WAKE_TABLE", &db.table)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .expect("start an application process")
            })
            .collect();
        for app in apps {
            let out = app.wait_with_output().unwrap();
            assert!(out.status.success(), "an application process failed");
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| line.strip_prefix("STAGED "))
                .map(str::to_owned)
                .collect();
            assert_eq!(ids.len(), PER_ROUND, "{:?}", out);
            staged.extend(ids);
        }
        let expected = staged.len() as u64;
        wait_for(&format!("round {round}'s jobs"), &relays, || {
            backend.stats().jobs >= expected
        })
        .await;
    }

    let received = backend.snapshot();
    let mut delivered: Vec<&str> = received.jobs.iter().map(|job| job.id.as_str()).collect();
    delivered.sort_unstable();
    let mut expected: Vec<&str> = staged.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(delivered, expected, "every staged job, and nothing else");
    let resent: Vec<_> = received
        .deliveries
        .iter()
        .filter(|(_, n)| **n != 1)
        .collect();
    assert!(resent.is_empty(), "sent more than once: {resent:?}");
    for mut relay in relays {
        relay.terminate(Duration::from_secs(30)).await;
    }
}

/// One application process of the test above: stages `PER_ROUND` jobs in transactions of two,
/// in `external` relay mode, and prints each job id. Run only by that test.
#[tokio::test]
#[ignore = "an application process that separate_relays_are_woken_by_commits starts itself"]
async fn an_application_process() {
    let var =
        |name: &str| std::env::var(name).expect("started by separate_relays_are_woken_by_commits");
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": var("OJS_WAKE_OJS_URL"), "database_url": var("OJS_WAKE_DATABASE_URL"),
        "outbox": {"table_name": var("OJS_WAKE_TABLE")}, "relay": {"mode": "external"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    let app = var("OJS_WAKE_APP");
    for i in 0..PER_ROUND / 2 {
        let mut tx = outbox.begin().await.unwrap();
        let mut ids = Vec::new();
        for j in 0..2 {
            let job = NewJob::new("wake.job", json!([app, i, j]));
            ids.push(tx.enqueue_after_commit(job).await.unwrap());
        }
        tx.commit().await.unwrap();
        for id in ids {
            println!("STAGED {id}");
        }
    }
    outbox.store().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_separate_relays_are_woken_by_commits() {
    separate_relays_are_woken_by_commits(Kind::Sqlite, "wake_sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_separate_relays_are_woken_by_commits() {
    separate_relays_are_woken_by_commits(Kind::Postgres, "wake_pg").await;
}

/// MySQL has no signal a commit could send to another session: a separate relay says so at
/// start, naming the setting that bounds its latency, and delivers what it polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_relay_says_that_only_its_poll_finds_other_processes_rows() {
    let Some(db) = Db::new(Kind::Mysql, "wake_mariadb").await else {
        return;
    };
    db.migrate().await;
    let backend = DevServer::start(0).await.unwrap();
    let mut relay = db.spawn_run(&backend.url(), &["--poll-interval", "PT0.01S"]);
    // Times out (and prints the log) unless the relay says it.
    wait_for(
        "the relay's word on wake-ups",
        std::slice::from_ref(&relay),
        || {
            relay
                .log()
                .contains("no commit in another process can wake a relay on MySQL/MariaDB")
        },
    )
    .await;
    assert!(
        relay.log().contains("outbox.poll_interval"),
        "{}",
        relay.log()
    );
    db.stage(vec![NewJob::new("wake.polled", json!([1]))]).await;
    wait_for("the polled job", std::slice::from_ref(&relay), || {
        backend.stats().jobs == 1
    })
    .await;
    relay.terminate(Duration::from_secs(15)).await;
    backend.shutdown().await;
}

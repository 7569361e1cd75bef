//! On PostgreSQL a relay holds its claim by row locks, not by leases (issue 25): what it says
//! must not send an operator looking for a lease. The start line names `relay.lease` as the
//! round limit it is there, a database failure says claimed rows are due again at once, and
//! `status --json` gives `in_flight: null` (a read cannot see another session's row locks)
//! where SQLite gives the count of live leases.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ojs_devserver::DevServer;

async fn wait_log(relay: &RelayProcess, what: &str, found: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = relay.log();
        if found(&log) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {what} in the log:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_words_name_row_locks_not_leases() {
    let Some(db) = Db::new(Kind::Postgres, "pg_words").await else {
        return;
    };
    let backend = DevServer::start(0).await.unwrap();
    db.migrate().await;
    let status = db.status().await;
    assert_eq!(status["in_flight"], serde_json::Value::Null, "{status}");
    let out = db.cli(&["status"]).await;
    assert_success(&out, "status");
    assert!(
        text(&out.stdout).contains("see metrics"),
        "{}",
        text(&out.stdout)
    );

    let config = db.config_file(r#"{"adapter": {"outbox": {"poll_interval": "PT0.05S"}}}"#);
    let mut relay = db.spawn_run(&backend.url(), &["--config", &config]);
    let started = wait_log(&relay, "the start line", |log| {
        log.contains("relay started")
    })
    .await;
    let line = started
        .lines()
        .find(|l| l.contains("relay started"))
        .unwrap();
    assert!(line.contains("round limit PT30S"), "{line}");
    assert!(!line.contains("lease"), "{line}");

    // The table vanishes under the running relay: its next claim fails.
    db.drop_table().await;
    let log = wait_log(&relay, "the database warning", |log| {
        log.contains("a database operation failed")
    })
    .await;
    let warning = log
        .lines()
        .find(|l| l.contains("a database operation failed"))
        .unwrap();
    assert!(warning.contains("due again at once"), "{warning}");
    assert!(!warning.contains("lease"), "{warning}");

    relay.terminate(Duration::from_secs(30)).await;
    let log = relay.log();
    let stopping = log
        .lines()
        .find(|l| l.contains("received: stopping"))
        .unwrap();
    assert!(!stopping.contains("lease"), "{stopping}");
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_counts_live_leases_in_status() {
    let db = Db::new(Kind::Sqlite, "sqlite_words").await.unwrap();
    db.migrate().await;
    let status = db.status().await;
    assert_eq!(status["in_flight"], 0, "{status}");
    assert_eq!(status["unique_rejected"], 0, "{status}");
}

//! One stream per table: two `ojs-relay run --listen` processes share a table; the event
//! stream of each serves the events of every job, whichever relay delivered it, each once, and
//! after a relay restarts its stream replays from `Last-Event-ID` what the table's event log
//! kept (the default retention, PT1H). On SQLite and PostgreSQL. An operator's `ojs-relay dead
//! replay`, a process of its own, shows on a relay's stream too.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Db, Kind, RelayProcess, served_at};
use ojs_devserver::DevServer;
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

const JOBS: usize = 40;

async fn stream(base: &str, last_event_id: Option<&str>) -> reqwest::Response {
    typed_stream(base, "job.enqueued", last_event_id).await
}

async fn typed_stream(base: &str, types: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{base}/v1/events/stream?types={types}"));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.send().await.expect("request");
    assert_eq!(response.status(), 200);
    response
}

/// The first `n` events of a stream: (event id, subject) each.
async fn frames(response: reqwest::Response, n: usize) -> Vec<(String, String)> {
    common::frames(response, n)
        .await
        .into_iter()
        .map(|(id, _, envelope)| {
            (
                id,
                envelope["subject"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn spawn(db: &Db, url: &str) -> RelayProcess {
    db.spawn_run(
        url,
        &[
            "--poll-interval",
            "PT0.05S",
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
        ],
    )
}

async fn every_stream_sees_every_job_once(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    db.migrate().await;
    let backend = DevServer::start(0).await.unwrap();
    let url = backend.url();
    let mut first = spawn(&db, &url);
    let second = spawn(&db, &url);
    let (a, b) = (served_at(&first).await, served_at(&second).await);
    let (from_a, from_b) = (stream(&a, None).await, stream(&b, None).await);
    // Each stream is open (200) before anything is staged.
    let readers = (
        tokio::spawn(frames(from_a, JOBS)),
        tokio::spawn(frames(from_b, JOBS)),
    );

    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": url, "database_url": db.url,
        "outbox": {"table_name": db.table}, "relay": {"mode": "external"}}}))
    .unwrap();
    let app = Outbox::connect(config).await.unwrap();
    let mut staged = Vec::new();
    for i in 0..JOBS {
        let mut tx = app.begin().await.unwrap();
        staged.push(
            tx.enqueue_after_commit(NewJob::new("table.job", json!([i])))
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    let expected: HashSet<&str> = staged.iter().map(String::as_str).collect();
    let seen_a = readers.0.await.unwrap();
    let seen_b = readers.1.await.unwrap();
    for seen in [&seen_a, &seen_b] {
        let jobs: Vec<&str> = seen.iter().map(|(_, job)| job.as_str()).collect();
        let unique: HashSet<&str> = jobs.iter().copied().collect();
        assert_eq!(unique.len(), JOBS, "each job once: {jobs:?}");
        assert_eq!(unique, expected);
    }
    // Both streams read the same log: the same events, in the same order.
    assert_eq!(seen_a, seen_b);

    // A restarted relay's stream replays what the log kept after an event id.
    first.terminate(Duration::from_secs(30)).await;
    let restarted = spawn(&db, &url);
    let at = served_at(&restarted).await;
    let resumed = frames(stream(&at, Some(&seen_a[9].0)).await, JOBS - 10).await;
    assert_eq!(resumed, seen_a[10..].to_vec());
    drop(second);
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_stream_sees_every_job_once() {
    every_stream_sees_every_job_once(Kind::Sqlite, "table_events_sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_stream_sees_every_job_once() {
    every_stream_sees_every_job_once(Kind::Postgres, "table_events_pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_every_stream_sees_every_job_once() {
    every_stream_sees_every_job_once(Kind::Mysql, "table_events_mariadb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_replay_in_a_process_of_its_own_is_on_the_stream() {
    let db = Db::new(Kind::Sqlite, "table_events_operator")
        .await
        .unwrap();
    db.migrate().await;
    let backend = DevServer::start(0).await.unwrap();
    let relay = spawn(&db, &backend.url());
    let base = served_at(&relay).await;
    let operator = tokio::spawn(frames(typed_stream(&base, "ojs.outbox.*", None).await, 1));
    let out = db.cli(&["dead", "replay"]).await;
    assert!(out.status.success(), "{out:?}");
    let seen = operator.await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].1, db.table,
        "an operator event's subject is the table"
    );
}

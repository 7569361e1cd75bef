//! A busy machine (issue 31, item 5): the ids an overflowing hot queue drops are rows the
//! poller must send, and it takes them at once, fresh as they are, rather than after
//! `relay.skip_recent` and a poll interval. Real SQLite file, real devserver; the relay is held
//! on one slow send (a latency fault) while ten commits come, so a queue of 2 drops most ids.
//! `skip_recent` and `poll_interval` are a minute here: before the change, the dropped jobs
//! waited that long.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

async fn stage_one(outbox: &Outbox, i: usize) {
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_after_commit(NewJob::new("hot.job", json!([i])))
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_the_hot_queue_drops_are_sent_at_once_not_after_skip_recent() {
    let backend = DevServer::start(0).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-hot-overflow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(),
        "database_url": format!("sqlite://{}", dir.join("hot.db").display()),
        "outbox": {"table_name": "ojs_hot_overflow", "poll_interval": "PT60S"},
        "relay": {"hot_queue_capacity": 2, "skip_recent": "PT60S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.start_relay();

    let mut staged = 0;
    let started = Instant::now();
    // The relay busy on one slow send while ten commits come; on a machine too slow to commit
    // ten within the slow send, again.
    let mut dropped = 0;
    for _ in 0..5 {
        backend.push_fault(Fault::latency(2000).times(1));
        let before = outbox.metrics().unwrap().hot_dropped;
        stage_one(&outbox, staged).await;
        staged += 1;
        eventually(
            "the slow job in flight",
            Duration::from_secs(30),
            async || outbox.metrics().unwrap().in_flight == 1,
        )
        .await;
        let stored_before = backend.stats().jobs;
        for _ in 0..10 {
            stage_one(&outbox, staged).await;
            staged += 1;
        }
        dropped = outbox.metrics().unwrap().hot_dropped - before;
        if backend.stats().jobs == stored_before && dropped > 0 {
            break;
        }
        eprintln!("the slow send ended before the ten commits; trying again");
    }
    assert!(dropped > 0, "the hot queue never overflowed");

    eventually(
        "every job delivered, the dropped ones by the poller",
        Duration::from_secs(40),
        async || backend.stats().jobs == staged as u64,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the dropped jobs waited for skip_recent"
    );
    let status = outbox.store().status().await.unwrap();
    assert_eq!(status.sent as usize, staged, "{status:?}");
    outbox.stop_relay().await;
    let _ = std::fs::remove_dir_all(&dir);
}

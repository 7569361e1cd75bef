//! The relay's in-memory metrics, observed on a real SQLite file and the dev backend.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

async fn outbox_for(
    backend: &DevServer,
    dir: &std::path::Path,
    relay: serde_json::Value,
) -> Outbox {
    let url = format!("sqlite://{}", dir.join("metrics.db").display());
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": url,
        "outbox": {"poll_interval": "PT0.05S"}, "relay": relay}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox
}

async fn stage(outbox: &Outbox, count: usize) -> Vec<String> {
    let mut tx = outbox.begin().await.unwrap();
    let jobs = (0..count)
        .map(|i| NewJob::new("metrics.job", json!([i])))
        .collect();
    let ids = tx.enqueue_bulk(jobs).await.unwrap();
    tx.commit().await.unwrap();
    ids
}

/// Waits for `check`; the deadline only ends a test that would hang (the relay refreshes its
/// `pending` and age counters every 5 s, so a busy machine may need several refreshes).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn counts_sent_and_overflowing_hot_queue_degrades_to_the_poller() {
    let backend = DevServer::start(0).await.unwrap();
    let dir = tempdir("overflow");
    let outbox = outbox_for(
        &backend,
        &dir,
        json!({"hot_queue_capacity": 2, "skip_recent": "PT0S"}),
    )
    .await;
    outbox.start_relay();
    // A commit keeps the relay on a slow send (held 2 s) while the next ten commits' ids meet
    // a queue of 2: 8 or 9 are dropped when the ten come while that send is still held,
    // which the backend tells (it has not stored the slow job yet), and the poller sends them.
    // The verdict rests on what the backend saw, not on the machine being fast enough to
    // commit within the 2 s: a round where it was not is tried again.
    let mut staged = 0;
    let mut overflowed = false;
    for _ in 0..5 {
        backend.push_fault(Fault::latency(2000).times(1));
        let stored_before = backend.snapshot().jobs.len();
        let dropped_before = outbox.metrics().unwrap().hot_dropped;
        stage(&outbox, 1).await;
        eventually("the slow job in flight", || {
            outbox.metrics().unwrap().in_flight == 1
        })
        .await;
        stage(&outbox, 10).await;
        let held = backend.snapshot().jobs.len() == stored_before;
        let dropped = outbox.metrics().unwrap().hot_dropped - dropped_before;
        staged += 11;
        eventually("every job delivered", || {
            backend.snapshot().jobs.len() == staged
        })
        .await;
        if held {
            // 8, or 9 when the poller claimed the slow job and its own id still holds a slot.
            assert!(
                (8..=9).contains(&dropped),
                "10 ids met a queue of 2 while the relay was busy: {dropped} dropped"
            );
            overflowed = true;
            break;
        }
        eprintln!("the slow send ended before the ten commits; trying again");
    }
    assert!(
        overflowed,
        "the relay was never seen busy while ten ids came"
    );
    eventually("sent counted", || {
        outbox.metrics().unwrap().sent == staged as u64
    })
    .await;
    let metrics = outbox.metrics().unwrap();
    assert_eq!(
        (metrics.retried, metrics.dead, metrics.in_flight),
        (0, 0, 0),
        "{metrics:?}"
    );
    assert_eq!(metrics.backend_healthy, Some(true));
    outbox.stop_relay().await;
    backend.shutdown().await;
}

#[tokio::test]
async fn reports_pending_rows_and_an_unavailable_backend() {
    let backend = DevServer::start(0).await.unwrap();
    let dir = tempdir("pending");
    let outbox = outbox_for(
        &backend,
        &dir,
        json!({"initial_backoff": "PT0.05S", "max_backoff": "PT0.2S"}),
    )
    .await;
    stage(&outbox, 3).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    backend.push_fault(Fault::status_code(503));
    outbox.start_relay();
    eventually("pending seen", || outbox.metrics().unwrap().pending == 3).await;
    eventually("backend marked unhealthy", || {
        outbox.metrics().unwrap().backend_healthy == Some(false)
    })
    .await;
    let metrics = outbox.metrics().unwrap();
    assert!(metrics.oldest_pending_age_ms >= 10, "{metrics:?}");
    assert!(
        metrics.last_error.as_deref().unwrap_or("").contains("503"),
        "{metrics:?}"
    );
    assert_eq!(metrics.sent, 0);
    backend.clear_faults();
    eventually("delivered after the outage", || {
        outbox.metrics().unwrap().sent == 3
    })
    .await;
    let status = outbox.store().status().await.unwrap();
    assert_eq!(
        (status.sent, status.pending, status.failed, status.dead),
        (3, 0, 0, 0),
        "an outage consumes no attempt: {status:?}"
    );
    outbox.stop_relay().await;
    backend.shutdown().await;
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ojs-metrics-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_backlog_does_not_hold_back_a_fresh_commit() {
    let backend = DevServer::start(0).await.unwrap();
    let dir = tempdir("backlog-hot");
    let url = format!("sqlite://{}", dir.join("metrics.db").display());
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": url,
        "outbox": {"poll_interval": "PT0.05S", "batch_size": 10},
        "relay": {"skip_recent": "PT0S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    // 2,000 rows in rounds of 10, each request held 20 ms: a backlog of 4 s or more.
    stage(&outbox, 2000).await;
    backend.push_fault(Fault::latency(20).times(10_000));
    outbox.start_relay();
    eventually("the backlog draining", || {
        !backend.snapshot().jobs.is_empty()
    })
    .await;
    let fresh = stage(&outbox, 1).await.remove(0);
    let stored_at_commit = backend.snapshot().jobs.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let position = loop {
        let snapshot = backend.snapshot();
        if let Some(job) = snapshot.jobs.iter().find(|j| j.id == fresh) {
            break job.seq;
        }
        assert!(Instant::now() < deadline, "the fresh job never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Claimed by the poller in id order it would come last (seq 2000); served by the hot path
    // between two poller rounds it comes within the first rounds after its commit. Counted
    // from what the backend held when the commit returned, not from how fast that was.
    assert!(
        position < (stored_at_commit + 100).min(2000),
        "the fresh job waited behind the backlog: accepted at position {position} of 2001, \
         {stored_at_commit} were stored when it was committed"
    );
    while backend.snapshot().jobs.len() < 2001 {
        assert!(Instant::now() < deadline, "the backlog never drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(outbox.metrics().unwrap().hot_dropped, 0);
}

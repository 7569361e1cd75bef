//! A busy machine (issue 31, item 5; seed 001 §14.4, §16.1). When the hot queue overflows,
//! the relay logs one warning per burst of drops (not one per id) and a line when it is over,
//! counts the ids it queued and dropped, and shows the queue's depth; and the ids it drops are
//! rows the poller takes at once, fresh as they are, rather than after `relay.skip_recent` and a
//! poll interval. Real SQLite files, real devserver; the relay is held busy by a slow send (a
//! latency fault) while commits come, so a queue of 2 overflows.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::log_feed::{self, Level, Record};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

const TABLE: &str = "ojs_hot_queue_test";

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

/// An outbox on a fresh SQLite file in a directory of its own (returned, for the test to
/// remove), with these `outbox` and `relay` settings, its relay started.
async fn relay_on_sqlite(
    backend: &DevServer,
    name: &str,
    outbox: serde_json::Value,
    relay: serde_json::Value,
) -> (Outbox, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(),
        "database_url": format!("sqlite://{}", dir.join("hot.db").display()),
        "outbox": outbox,
        "relay": relay}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.start_relay();
    (outbox, dir)
}

/// The hot queue's log records of this test's relay, drained so far.
fn hot_queue_records(seen: &mut Vec<Record>) -> Vec<Record> {
    seen.extend(
        log_feed::drain()
            .into_iter()
            .filter(|r| r.table == TABLE && r.message.contains("hot queue")),
    );
    seen.clone()
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with('{'))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Holds the relay on one slow send and commits ten jobs one by one meanwhile: with a queue of
/// 2, two ids wait and eight are dropped. Returns false when the machine was too slow to
/// commit the ten within the slow send (the caller tries again).
async fn burst(backend: &DevServer, outbox: &Outbox, staged: &mut usize) -> bool {
    backend.push_fault(Fault::latency(2000).times(1));
    let stored_before = backend.stats().jobs;
    let before = outbox.metrics().unwrap();
    stage_one(outbox, *staged).await;
    *staged += 1;
    eventually(
        "the slow job in flight",
        Duration::from_secs(30),
        async || outbox.metrics().unwrap().in_flight == 1,
    )
    .await;
    for _ in 0..10 {
        stage_one(outbox, *staged).await;
        *staged += 1;
    }
    let metrics = outbox.metrics().unwrap();
    let text = outbox.prometheus_text().await.unwrap();
    let held = backend.stats().jobs == stored_before;
    if !held {
        return false;
    }
    let queued = metrics.hot_enqueued - before.hot_enqueued;
    let dropped = metrics.hot_dropped - before.hot_dropped;
    // Every id was queued or dropped; the queue holds 2 while the relay is busy (the slow job's
    // own id may still hold a slot when the poller claimed it first).
    assert_eq!(queued + dropped, 11, "{metrics:?}");
    assert!((8..=9).contains(&dropped), "{metrics:?}");
    assert_eq!(metrics.hot_queue_depth, 2, "{metrics:?}");
    assert_eq!(
        value(&text, "ojs_relay_wakeups_waiting"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "ojs_relay_wakeups_queued_total"),
        Some(metrics.hot_enqueued as f64),
        "{text}"
    );
    assert_eq!(
        value(&text, "ojs_relay_wakeups_dropped_total"),
        Some(metrics.hot_dropped as f64),
        "{text}"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_hot_queue_warns_once_per_burst_and_counts_what_it_queued() {
    log_feed::enable();
    let backend = DevServer::start(0).await.unwrap();
    let (outbox, dir) = relay_on_sqlite(
        &backend,
        "ojs-hot-queue",
        json!({"table_name": TABLE, "poll_interval": "PT0.1S"}),
        json!({"hot_queue_capacity": 2, "skip_recent": "PT0S"}),
    )
    .await;
    let mut seen = Vec::new();
    let mut staged = 0;

    let mut overflowed = false;
    for _ in 0..5 {
        if burst(&backend, &outbox, &mut staged).await {
            overflowed = true;
            break;
        }
        eprintln!("the slow send ended before the ten commits; trying again");
    }
    assert!(
        overflowed,
        "the relay was never seen busy while ten ids came"
    );
    eventually("every job delivered", Duration::from_secs(30), async || {
        backend.stats().jobs as usize == staged
    })
    .await;
    // One warning for the burst, with the count so far (the first drop: one id).
    let records = hot_queue_records(&mut seen);
    let warnings: Vec<&Record> = records
        .iter()
        .filter(|r| r.level == Level::Warning)
        .collect();
    assert_eq!(warnings.len(), 1, "{records:#?}");
    assert!(
        warnings[0].message.contains(
            "the hot queue is full (relay.hot_queue_capacity = 2): 1 committed job id(s) dropped"
        ),
        "{}",
        warnings[0].message
    );
    // The queue is empty again; once no id was dropped for 10 s, a line says the burst ended.
    eventually("the queue emptied", Duration::from_secs(30), async || {
        outbox.metrics().unwrap().hot_queue_depth == 0
    })
    .await;
    eventually(
        "the end of the burst",
        Duration::from_secs(30),
        async || {
            hot_queue_records(&mut seen)
                .iter()
                .any(|r| r.level == Level::Info)
        },
    )
    .await;
    let records = hot_queue_records(&mut seen);
    assert_eq!(records.len(), 2, "{records:#?}");
    let ended = &records[1].message;
    assert!(
        ended.starts_with("outbox relay: the hot queue takes committed job ids again"),
        "{ended}"
    );
    let dropped = outbox.metrics().unwrap().hot_dropped;
    assert!(
        ended.contains(&format!(": {dropped} dropped over")),
        "{ended}"
    );

    // A second burst is a new warning.
    let mut again = false;
    for _ in 0..5 {
        if burst(&backend, &outbox, &mut staged).await {
            again = true;
            break;
        }
    }
    assert!(again, "the relay was never seen busy while ten ids came");
    let records = hot_queue_records(&mut seen);
    assert_eq!(
        records.iter().filter(|r| r.level == Level::Warning).count(),
        2,
        "{records:#?}"
    );
    let metrics = outbox.metrics().unwrap();
    assert_eq!(
        metrics.hot_enqueued + metrics.hot_dropped,
        staged as u64,
        "every committed id was queued or dropped: {metrics:?}"
    );
    outbox.stop_relay().await;
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `skip_recent` and `poll_interval` are a minute here: before the poller took dropped ids at
/// once, they waited that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_the_hot_queue_drops_are_sent_at_once_not_after_skip_recent() {
    let backend = DevServer::start(0).await.unwrap();
    let (outbox, dir) = relay_on_sqlite(
        &backend,
        "ojs-hot-overflow",
        json!({"table_name": "ojs_hot_overflow", "poll_interval": "PT60S"}),
        json!({"hot_queue_capacity": 2, "skip_recent": "PT60S"}),
    )
    .await;

    let mut staged = 0;
    let mut started = Instant::now();
    // The relay busy on one slow send while ten commits come; on a machine too slow to commit
    // ten within the slow send, again (the time counts from the last try).
    let mut dropped = 0;
    for _ in 0..5 {
        started = Instant::now();
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

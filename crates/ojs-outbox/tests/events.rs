//! The relay's events with a real relay and devserver: per job in causal order (seed 003:
//! failed -> retrying per retry -> failed -> dead_lettered), a delivered job's `job.enqueued`,
//! the pause and resume of an outage, replay from an id (the event log, the default), and,
//! live only (`event_retention: null`), a subscriber that falls behind cut off with a final
//! event while the relay goes on.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::events::{Filter, ReplayFrom, Subscription};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

async fn outbox(
    name: &str,
    backend: &DevServer,
    relay: serde_json::Value,
) -> (Outbox, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ojs-events-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("events.db").display());
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": url,
        "outbox": {"poll_interval": "PT0.05S"}, "relay": relay}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.start_relay();
    (outbox, dir)
}

async fn enqueue(outbox: &Outbox, job_type: &str, meta: serde_json::Value) -> String {
    let mut tx = outbox.begin().await.unwrap();
    let id = tx
        .enqueue_after_commit(
            NewJob::new(job_type, json!([1]))
                .with_options(json!({"queue": "email"}))
                .with_meta(meta),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id
}

/// One event as a subscriber's frame carries it.
#[derive(Debug)]
struct Seen {
    id: String,
    kind: String,
    subject: String,
    data: serde_json::Value,
}

fn subscribe(outbox: &Outbox, from: Option<&ReplayFrom>) -> Subscription {
    Subscription::new(outbox.events().unwrap(), Filter::default(), from)
}

/// Events received until `done` says so (or a deadline).
async fn collect(subscription: &mut Subscription, done: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = match tokio::time::timeout(left, subscription.next_frame()).await {
            Ok(Some(frame)) => frame,
            other => panic!("events so far {:?}: {other:?}", kinds(&seen)),
        };
        let data = frame
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let envelope: serde_json::Value = serde_json::from_str(data).unwrap();
        seen.push(Seen {
            id: envelope["id"].as_str().unwrap().to_owned(),
            kind: envelope["type"].as_str().unwrap().to_owned(),
            subject: envelope["subject"].as_str().unwrap().to_owned(),
            data: envelope["data"].clone(),
        });
    }
    seen
}

fn kinds(events: &[Seen]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

#[tokio::test]
async fn a_retried_job_that_dies_and_a_delivered_one_in_causal_order() {
    let backend = DevServer::start(0).await.unwrap();
    backend.push_fault(Fault::status_code(500).matching_type("flaky.job"));
    let relay = json!({"max_attempts": 3, "initial_backoff": "PT0.01S", "max_backoff": "PT0.02S"});
    let (outbox, dir) = outbox("order", &backend, relay).await;
    let mut rx = subscribe(&outbox, None);
    let flaky = enqueue(&outbox, "flaky.job", json!({"tenant_id": "acme"})).await;
    let good = enqueue(&outbox, "good.job", json!({})).await;
    let seen = collect(&mut rx, |seen| {
        seen.iter().any(|e| e.kind == "job.dead_lettered")
            && seen.iter().any(|e| e.kind == "job.enqueued")
    })
    .await;
    let of = |job: &str| -> Vec<&str> {
        seen.iter()
            .filter(|e| e.subject == job)
            .map(|e| e.kind.as_str())
            .collect()
    };
    assert_eq!(
        of(&flaky),
        [
            "job.failed",
            "job.retrying",
            "job.failed",
            "job.retrying",
            "job.failed",
            "job.dead_lettered"
        ]
    );
    assert_eq!(of(&good), ["job.enqueued"]);
    let dead = seen.iter().find(|e| e.kind == "job.dead_lettered").unwrap();
    let data = &dead.data;
    assert_eq!(data["job_id"], flaky.as_str());
    assert_eq!(data["type"], "flaky.job");
    assert_eq!(data["queue"], "email");
    assert_eq!(data["tenant_id"], "acme");
    assert_eq!(data["attempt"], 3);
    assert!(data["reason"].as_str().unwrap().contains("500"), "{data}");
    let retrying = seen.iter().find(|e| e.kind == "job.retrying").unwrap();
    assert!(
        retrying.data["next_attempt_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    // Ids of one relay sort in emission order.
    let ids: Vec<&str> = seen.iter().map(|e| e.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    outbox.stop_relay().await;
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_outage_pauses_and_resumes_and_replay_starts_after_an_id() {
    let backend = DevServer::start(0).await.unwrap();
    let relay = json!({"initial_backoff": "PT0.01S", "max_backoff": "PT0.05S"});
    let (outbox, dir) = outbox("outage", &backend, relay).await;
    let mut rx = subscribe(&outbox, None);
    backend.push_fault(Fault::status_code(503).times(3));
    let job = enqueue(&outbox, "report.build", json!({})).await;
    let seen = collect(&mut rx, |seen| {
        seen.iter().any(|e| e.kind == "job.enqueued")
    })
    .await;
    assert_eq!(
        kinds(&seen),
        ["ojs.relay.paused", "ojs.relay.resumed", "job.enqueued"]
    );
    assert_eq!(seen[0].subject, "ojs_outbox");
    assert_eq!(seen[2].subject, job);
    // Tier 2: what a reconnecting subscriber gets after the first event's id.
    let mut again = subscribe(&outbox, Some(&ReplayFrom::AfterId(seen[0].id.clone())));
    let replayed = collect(&mut again, |seen| seen.len() == 2).await;
    assert_eq!(kinds(&replayed), ["ojs.relay.resumed", "job.enqueued"]);
    outbox.stop_relay().await;
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_cut_off_and_the_relay_goes_on() {
    let backend = DevServer::start(0).await.unwrap();
    let relay = json!({"event_buffer": 4, "event_retention": null});
    let (outbox, dir) = outbox("slow", &backend, relay).await;
    let bus = outbox.events().unwrap();
    let mut slow = bus.subscribe(); // never read until the end
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_bulk(
        (0..50)
            .map(|i| NewJob::new("bulk.job", json!([i])))
            .collect(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while outbox.store().status().await.unwrap().sent < 50 {
        assert!(Instant::now() < deadline, "the relay was held up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match slow.recv().await {
        Err(RecvError::Lagged(missed)) => assert!(missed >= 46, "missed {missed}"),
        other => panic!("expected the subscriber to have lagged: {other:?}"),
    }
    let overflow = bus.overflow_event(46);
    assert_eq!(overflow.kind, "ojs.stream.overflow");
    outbox.stop_relay().await;
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_live_only_stream_ends_when_its_relay_is_gone() {
    let backend = DevServer::start(0).await.unwrap();
    let (outbox, dir) = outbox("end", &backend, json!({"event_retention": null})).await;
    let bus = outbox.events().unwrap();
    let mut subscription =
        ojs_outbox::events::Subscription::new(bus, ojs_outbox::events::Filter::default(), None);
    let reader = tokio::spawn(async move {
        let mut frames = 0;
        while subscription.next_frame().await.is_some() {
            frames += 1;
        }
        frames
    });
    enqueue(&outbox, "one.job", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while outbox.store().status().await.unwrap().sent < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    outbox.stop_relay().await;
    let frames = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the stream ended with its relay")
        .unwrap();
    assert_eq!(frames, 1);
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

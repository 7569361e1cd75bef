//! A job the backend's unique policy refuses (`on_conflict: reject`) through the outbox
//! (issue 25): the relay's work ends (`sent`: sending again would be refused again), but the
//! job was not created, and every place an operator or the app looks says so: the row names
//! the job the backend holds instead, the event is `job.unique_rejected` (not `job.enqueued`),
//! the log has a warning, the metrics and `status` count it, and nothing counts it as sent.
//! Real SQLite file, real devserver over HTTP.

use std::time::{Duration, Instant};

use ojs_devserver::DevServer;
use ojs_outbox::log_feed::{self, Level};
use ojs_outbox::{Config, NewJob, Outbox, RowStatus};
use serde_json::json;

async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stage(outbox: &Outbox, args: serde_json::Value) -> String {
    let mut tx = outbox.begin().await.unwrap();
    let id = tx
        .enqueue_after_commit(NewJob::new("report.daily", args).with_options(json!({
                "unique": {"keys": ["type", "args"], "on_conflict": "reject"}})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id
}

async fn row_of(outbox: &Outbox, id: &str) -> ojs_outbox::store::RowState {
    let mut tx = outbox.begin().await.unwrap();
    let mut rows = tx.rows_by_job_id(&[id.to_owned()]).await.unwrap();
    tx.rollback().await.unwrap();
    rows.remove(id).expect("the row exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_unique_job_is_said_to_be_rejected_everywhere() {
    log_feed::enable();
    let backend = DevServer::start(0).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-unique-reject-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(),
        "database_url": format!("sqlite://{}", dir.join("u.db").display()),
        "outbox": {"poll_interval": "PT0.05S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.start_relay();
    let mut events = ojs_outbox::events::Subscription::new(
        outbox.events().unwrap(),
        ojs_outbox::events::Filter::default(),
        None,
    );

    let first = stage(&outbox, json!([1])).await;
    eventually("the first job sent", async || {
        (row_of(&outbox, &first).await.status == RowStatus::Sent).then_some(())
    })
    .await;
    let second = stage(&outbox, json!([1])).await;
    let row = eventually("the second row settled", async || {
        let row = row_of(&outbox, &second).await;
        (row.status == RowStatus::Sent).then_some(row)
    })
    .await;

    // The row names the job the backend holds instead.
    let error = row.error.expect("the row says what happened");
    assert!(
        error.starts_with("unique conflict: not created;"),
        "{error}"
    );
    assert!(error.contains(&format!("holds job {first}")), "{error}");
    let at_backend = reqwest::get(format!("{}/ojs/v1/jobs/{second}", backend.url()))
        .await
        .unwrap();
    assert_eq!(at_backend.status(), 404, "the second id was never created");

    // Its event is its own, with the existing job's id; no job.enqueued for it.
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|(kind, subject, _): &(String, String, serde_json::Value)| {
            subject == &second && kind == "job.unique_rejected"
        })
    {
        let frame = tokio::time::timeout(Duration::from_secs(30), events.next_frame())
            .await
            .unwrap_or_else(|_| panic!("no job.unique_rejected; saw {seen:?}"))
            .unwrap();
        let data = frame
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let event: serde_json::Value = serde_json::from_str(data).unwrap();
        seen.push((
            event["type"].as_str().unwrap().to_owned(),
            event["subject"].as_str().unwrap().to_owned(),
            event["data"].clone(),
        ));
    }
    let (_, _, data) = seen.iter().find(|(_, s, _)| s == &second).unwrap();
    assert_eq!(data["existing_job_id"], json!(first), "{data}");
    assert!(
        !seen
            .iter()
            .any(|(k, s, _)| s == &second && k == "job.enqueued"),
        "{seen:?}"
    );

    // A warning in the log, naming both jobs.
    let records = eventually("the warning", async || {
        let records: Vec<_> = log_feed::drain()
            .into_iter()
            .filter(|r| r.job_id.as_deref() == Some(second.as_str()))
            .collect();
        (!records.is_empty()).then_some(records)
    })
    .await;
    assert_eq!(records[0].level, Level::Warning);
    assert!(
        records[0].message.contains(&first),
        "{}",
        records[0].message
    );

    // Counted as rejected, not as sent, in the metrics and their text; and in `status`. The
    // relay counts a settlement once it has committed: its counters trail the row briefly.
    let metrics = eventually("the settlement counted", async || {
        let metrics = outbox.metrics().unwrap();
        (metrics.sent + metrics.unique_rejected >= 2).then_some(metrics)
    })
    .await;
    assert_eq!(
        (metrics.sent, metrics.unique_rejected),
        (1, 1),
        "{metrics:?}"
    );
    let text = outbox.prometheus_text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ojs_relay_jobs_unique_rejected_total{") && l.ends_with(" 1")),
        "{text}"
    );
    let status = outbox.store().status().await.unwrap();
    assert_eq!((status.sent, status.unique_rejected), (2, 1), "{status:?}");
    outbox.stop_relay().await;
    backend.shutdown().await;
}

//! Poison rows among good ones: the relay splits a refused batch around the job the backend
//! names (`details.index`, which the devserver gives for a `match_type` fault), in about 3k
//! requests rather than one request per row, and every good row is still sent. (Halving, when
//! no job is named, and every mix of refused rows, are counted by `split.rs`'s unit tests.)

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

const ROWS: usize = 1000;

async fn requests_to_isolate(poison_every: usize, name: &str) -> (u64, usize) {
    let backend = DevServer::start(0).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-poison-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("poison.db").display());
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": url,
        "outbox": {"poll_interval": "PT0.05S", "batch_size": ROWS}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    backend.push_fault(Fault::status_code(400).matching_type("poison.job"));

    // Staged before the relay starts, so one claim takes all of them.
    let jobs: Vec<NewJob> = (0..ROWS)
        .map(|i| {
            let kind = if i % poison_every == poison_every / 2 {
                "poison.job"
            } else {
                "good.job"
            };
            NewJob::new(kind, json!([i]))
        })
        .collect();
    let poison = jobs.iter().filter(|j| j.job_type == "poison.job").count();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_bulk(jobs).await.unwrap();
    tx.commit().await.unwrap();
    outbox.start_relay();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = outbox.store().status().await.unwrap();
        if status.sent as usize == ROWS - poison && status.dead as usize == poison {
            break;
        }
        assert!(Instant::now() < deadline, "not settled: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    outbox.stop_relay().await;
    let stats = backend.stats();
    assert_eq!(
        stats.jobs as usize,
        ROWS - poison,
        "every good row stored once"
    );
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    (stats.requests.single + stats.requests.batch, poison)
}

/// 3k + 1: per poison row, the refused batch, the row alone and the rows before it.
fn bound(poison: usize) -> u64 {
    (3 * poison + 1) as u64
}

#[tokio::test]
async fn one_poison_row_among_1000_costs_a_few_requests() {
    let (requests, poison) = requests_to_isolate(ROWS, "one").await;
    assert_eq!(poison, 1);
    assert!(
        requests <= bound(1),
        "{requests} requests for 1 poison row among {ROWS}"
    );
}

#[tokio::test]
async fn ten_poison_rows_among_1000_cost_about_three_requests_each() {
    let (requests, poison) = requests_to_isolate(ROWS / 10, "ten").await;
    assert_eq!(poison, 10);
    assert!(
        requests <= bound(10),
        "{requests} requests for 10 poison rows among {ROWS}"
    );
}

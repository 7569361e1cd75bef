//! The relay's log feed (`log_feed`, drained through `bridge::drain_log_feed` as the bindings
//! do): a dead-lettered row gives one error record with its job id; a backend outage gives one
//! pause warning however many probes it takes, and one resume info once the backend is back.
//! Real relay, real SQLite file, real ojs-devserver over HTTP.
//!
//! The feed is one queue per process and these tests run in parallel threads, so every drain
//! goes into one shared list and each test reads the records of its own outbox table.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ojs_bridge::{self as bridge, LogRecord};
use ojs_devserver::{DevServer, Fault};
use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(60);

static SEEN: Mutex<Vec<LogRecord>> = Mutex::new(Vec::new());

/// Every record of `table` drained so far (by any test), oldest first.
fn records_of(table: &str) -> Vec<LogRecord> {
    let mut seen = SEEN.lock().unwrap();
    seen.extend(bridge::drain_log_feed());
    seen.iter().filter(|r| r.table == table).cloned().collect()
}

/// Waits until `check` holds for the records of `table`; returns them.
async fn wait_records(
    table: &str,
    what: &str,
    check: impl Fn(&[LogRecord]) -> bool,
) -> Vec<LogRecord> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let records = records_of(table);
        if check(&records) {
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}; records: {records:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn outbox(backend_url: &str, table: &str) -> Outbox {
    let dir = std::env::temp_dir().join(format!("ojs-log-feed-{table}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend_url,
        "database_url": format!("sqlite://{}", dir.join("outbox.db").display()),
        "outbox": {"table_name": table, "poll_interval": "PT0.05S"},
        "relay": {"initial_backoff": "PT0.05S", "max_backoff": "PT0.2S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox
}

async fn stage(outbox: &Outbox, jobs: Vec<NewJob>) -> Vec<String> {
    let mut tx = outbox.begin().await.unwrap();
    let ids = tx.enqueue_bulk(jobs).await.unwrap();
    tx.commit().await.unwrap();
    ids
}

/// The levels of `records`, in order; the records themselves are printed (`--nocapture`).
fn levels(records: &[LogRecord]) -> Vec<&str> {
    for record in records {
        eprintln!("{} [{}] {}", record.table, record.level, record.message);
    }
    records.iter().map(|r| r.level.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_one_error_record_with_its_job_id() {
    bridge::enable_log_feed();
    let table = "feed_dead";
    let backend = DevServer::start(0).await.unwrap();
    backend.push_fault(
        Fault::status_code(400)
            .with_code("invalid_request")
            .matching_type("poison.job"),
    );
    let outbox = outbox(&backend.url(), table).await;
    let ids = stage(
        &outbox,
        vec![
            NewJob::new("good.job", json!([1])),
            NewJob::new("poison.job", json!([2])),
            NewJob::new("good.job", json!([3])),
        ],
    )
    .await;
    let poison = ids[1].clone();
    outbox.start_relay();

    let records = wait_records(table, "the dead letter's record", |records| {
        records.iter().any(|r| r.level == "error")
    })
    .await;
    let dead: Vec<&LogRecord> = records.iter().filter(|r| r.level == "error").collect();
    assert_eq!(dead.len(), 1, "one record per dead row: {records:#?}");
    assert_eq!(dead[0].job_id.as_deref(), Some(poison.as_str()));
    assert!(
        dead[0].message.contains(&poison)
            && dead[0].message.contains("poison.job")
            && dead[0].message.contains("invalid_request"),
        "the message names the job, its type and the reason: {}",
        dead[0].message
    );
    let rows = outbox.store().rows_by_job_id(&ids).await.unwrap();
    assert_eq!(rows[&poison].status, ojs_outbox::RowStatus::Dead);
    outbox.stop_relay().await;
    let records = records_of(table);
    assert_eq!(
        levels(&records),
        ["error"],
        "nothing else was logged for a dead letter among good rows: {records:#?}"
    );
    backend.shutdown().await;
}

/// A 503 outage: the devserver counts the relay's probes, so the single warning is seen to
/// cover several of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_one_pause_warning_and_one_resume_info() {
    bridge::enable_log_feed();
    let table = "feed_outage_503";
    let backend = DevServer::start(0).await.unwrap();
    backend.push_fault(Fault::status_code(503));
    let outbox = outbox(&backend.url(), table).await;
    let ids = stage(&outbox, vec![NewJob::new("outage.job", json!([1]))]).await;
    outbox.start_relay();

    let records = wait_records(table, "the pause warning", |records| !records.is_empty()).await;
    assert_eq!(levels(&records), ["warning"], "{records:#?}");
    assert!(
        records[0].message.contains("pausing") && records[0].message.contains("503"),
        "{}",
        records[0].message
    );
    assert_eq!(records[0].job_id, None);
    // Several probes of the outage, each answered 503, and still one record.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let requests = backend.stats().requests;
        if requests.single + requests.batch >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "the relay stopped probing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(levels(&records_of(table)), ["warning"]);

    backend.clear_faults();
    let records = wait_records(table, "the resume info", |records| records.len() >= 2).await;
    assert_eq!(levels(&records), ["warning", "info"], "{records:#?}");
    assert!(
        records[1].message.contains("resuming"),
        "{}",
        records[1].message
    );
    let deadline = Instant::now() + PATIENCE;
    while backend.stats().jobs == 0 {
        assert!(
            Instant::now() < deadline,
            "the row was not sent after the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    outbox.stop_relay().await;
    assert_eq!(levels(&records_of(table)), ["warning", "info"]);
    let rows = outbox.store().rows_by_job_id(&ids).await.unwrap();
    assert_eq!(rows[&ids[0]].status, ojs_outbox::RowStatus::Sent);
    backend.shutdown().await;
}

/// The backend's port closed (the devserver stopped), then the devserver back on that port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_one_pause_warning_then_one_resume_info() {
    bridge::enable_log_feed();
    let table = "feed_outage_closed";
    let backend = DevServer::start(0).await.unwrap();
    let port = backend.addr().port();
    let outbox = outbox(&backend.url(), table).await;
    backend.shutdown().await;
    stage(&outbox, vec![NewJob::new("outage.job", json!([1]))]).await;
    outbox.start_relay();

    let records = wait_records(table, "the pause warning", |records| !records.is_empty()).await;
    assert_eq!(levels(&records), ["warning"], "{records:#?}");
    assert!(
        records[0].message.contains("pausing"),
        "{}",
        records[0].message
    );

    let backend = DevServer::start(port).await.expect("the same port again");
    let records = wait_records(table, "the resume info", |records| records.len() >= 2).await;
    assert_eq!(levels(&records), ["warning", "info"], "{records:#?}");
    let deadline = Instant::now() + PATIENCE;
    while backend.stats().jobs == 0 {
        assert!(
            Instant::now() < deadline,
            "the row was not sent after the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    outbox.stop_relay().await;
    assert_eq!(levels(&records_of(table)), ["warning", "info"]);
    backend.shutdown().await;
}

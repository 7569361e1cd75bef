//! Encrypted args end to end (issue 27), on a real SQLite file and a real PostgreSQL, the real
//! devserver over HTTP: a job staged through the outbox with a key ring reaches the backend
//! as ciphertext with the codec meta, and its plaintext is nowhere an operator or a log can
//! read it: not in the outbox row, not in the backend, not in the relay's log records or its
//! events, not in a dead letter's error. A worker fetch through the core decodes it.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::backend::Backend;
use ojs_outbox::events::{Filter, Subscription};
use ojs_outbox::log_feed;
use ojs_outbox::worker::WorkerCommand;
use ojs_outbox::{Config, NewJob, Outbox, RowStatus};
use serde_json::{Value, json};

/// What must never be readable outside the application and its workers.
const SECRET: &str = "4111-1111-1111-1111";

fn databases() -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("ojs-encrypted-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut urls = vec![format!("sqlite://{}", dir.join("outbox.db").display())];
    match std::env::var("OJS_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => urls.push(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_DATABASE_URL is unset under CI"
            );
            eprintln!("SKIP postgres: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)");
        }
    }
    urls
}

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

/// Every text of the table's rows (all columns), as the database returns them.
async fn table_text(outbox: &Outbox) -> String {
    let table = &outbox.config().outbox.table_name;
    let rows: Vec<(String,)> = if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(t.* AS text) FROM {table} t"
        )))
        .fetch_all(pool)
        .await
        .unwrap()
    } else {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT job_args || job_options || job_meta || COALESCE(error, '') FROM {table}"
        )))
        .fetch_all(outbox.store().sqlite_pool().unwrap())
        .await
        .unwrap()
    };
    rows.into_iter().map(|(text,)| text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_job_is_ciphertext_everywhere_but_in_the_worker() {
    log_feed::enable();
    let backend = DevServer::start(0).await.unwrap();
    for url in databases() {
        backend.reset();
        let table = "encrypted_e2e";
        let key = ojs_outbox::codec::base64_encode(&[9u8; 32]);
        let config = Config::from_value(&json!({"adapter": {
            "database_url": url,
            "ojs_url": backend.url(),
            "outbox": {"table_name": table, "poll_interval": "PT0.05S"},
            "relay": {"max_attempts": 2, "initial_backoff": "PT0.02S", "skip_recent": "PT0S"},
            "encryption": {"key_id": "k1", "keys": {"k1": key}}}}))
        .unwrap();
        let outbox = Outbox::connect(config.clone()).await.unwrap();
        if let Some(pool) = outbox.store().postgres_pool() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {table}; DROP TABLE IF EXISTS {table}_events"
            )))
            .execute(pool)
            .await
            .unwrap();
        }
        outbox.store().migrate().await.unwrap();
        outbox.start_relay();
        let mut events = Subscription::new(outbox.events().unwrap(), Filter::default(), None);
        // One job delivered, one refused for good (its error text is kept on the dead row).
        backend.push_fault(
            serde_json::from_value::<Fault>(json!({"status": 422, "code": "validation_error",
                "match_type": "card.refused"}))
            .unwrap(),
        );
        let args = json!([{"card": SECRET, "amount": 9999}]);
        let mut tx = outbox.begin().await.unwrap();
        let sent = tx
            .enqueue_after_commit(NewJob::new("card.capture", args.clone()))
            .await
            .unwrap();
        let dead = tx
            .enqueue_after_commit(NewJob::new("card.refused", args.clone()))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        eventually("one sent, one dead", async || {
            let rows = outbox
                .store()
                .rows_by_job_id(&[sent.clone(), dead.clone()])
                .await
                .ok()?;
            (rows.get(&sent)?.status == RowStatus::Sent
                && rows.get(&dead)?.status == RowStatus::Dead)
                .then_some(())
        })
        .await;

        let stored = backend.snapshot();
        let job = stored
            .jobs
            .iter()
            .find(|job| job.id == sent)
            .expect("stored");
        let envelope = &job.args[0];
        assert_eq!(envelope["ojs_encoded"], json!(true), "{url}: {}", job.args);
        assert_eq!(envelope["encoding"], json!("binary/encrypted"));
        let meta = job.meta.clone().unwrap_or(Value::Null);
        assert_eq!(meta["ojs.codec.encodings"], json!(["binary/encrypted"]));
        assert_eq!(meta["ojs.codec.key_id"], json!("k1"));
        let backend_text = serde_json::to_string(&stored).unwrap();
        assert!(
            !backend_text.contains(SECRET),
            "{url}: the backend saw plaintext"
        );
        let rows = table_text(&outbox).await;
        assert!(rows.contains("ojs_encoded"), "{url}: {rows}");
        assert!(
            !rows.contains(SECRET),
            "{url}: the outbox row holds plaintext"
        );
        let dead_rows = outbox.store().dead_list(None, 10).await.unwrap();
        assert_eq!(dead_rows.len(), 1);
        assert!(!format!("{dead_rows:?}").contains(SECRET));
        // Read until both jobs' events are in (the log is polled: no fixed window), or 30 s.
        let mut frames = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(frames.contains(&sent) && frames.contains(&dead)) && Instant::now() < deadline {
            if let Ok(Some(frame)) =
                tokio::time::timeout(Duration::from_millis(200), events.next_frame()).await
            {
                frames.push_str(&frame);
            }
        }
        assert!(
            frames.contains(&sent),
            "{url}: the events name the job: {frames}"
        );
        assert!(
            !frames.contains(SECRET),
            "{url}: an event carried plaintext"
        );
        let logs = format!("{:?}", log_feed::drain());
        assert!(
            !logs.contains(SECRET),
            "{url}: a log record carried plaintext"
        );
        outbox.stop_relay().await;

        // A worker of this application (same key ring) gets the plaintext.
        let worker = Backend::new(&config).unwrap();
        let fetched = worker
            .worker_with_codec(
                &WorkerCommand::from_json(
                    r#"{"op": "fetch", "queues": ["default"], "count": 10, "worker_id": "w1"}"#,
                )
                .unwrap(),
                config.encryption.as_deref(),
            )
            .await
            .unwrap();
        let jobs = fetched["jobs"].as_array().cloned().unwrap_or_default();
        let job = jobs
            .iter()
            .find(|job| job["id"] == json!(sent))
            .unwrap_or_else(|| panic!("{url}: fetched {fetched}"));
        assert_eq!(job["args"], args, "{url}: decoded before the handler");
    }
}

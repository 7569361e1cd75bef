//! Several relays on one database never send the same row concurrently (leases, SKIP LOCKED
//! on PostgreSQL, one writer at a time on SQLite): every id reaches the backend exactly once.

use std::time::{Duration, Instant};

use ojs_devserver::DevServer;
use ojs_outbox::backend::Backend;
use ojs_outbox::{Config, NewJob, Outbox, Relay, Store};
use serde_json::json;

const ROWS: usize = 6000;

async fn three_relays_share_the_backlog(database_url: String, table: &str) {
    let backend = DevServer::start(0).await.unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": database_url,
        "outbox": {"table_name": table, "batch_size": 50, "poll_interval": "PT0.02S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config.clone()).await.unwrap();
    if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
            .execute(pool)
            .await
            .unwrap();
    }
    if let Some(pool) = outbox.store().mysql_pool() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(outbox.store().sql().drop_table()))
            .execute(pool)
            .await
            .unwrap();
    }
    outbox.store().migrate().await.unwrap();
    let mut staged = Vec::new();
    for chunk in 0..(ROWS / 2000) {
        let mut tx = outbox.begin().await.unwrap();
        let jobs = (0..2000)
            .map(|i| NewJob::new("concurrent.job", json!([chunk * 2000 + i])))
            .collect();
        staged.extend(tx.enqueue_bulk(jobs).await.unwrap());
        tx.commit().await.unwrap();
    }

    // Three relays, each with its own pool, as three processes would have.
    let mut relays = Vec::new();
    for _ in 0..3 {
        let store = Store::connect(config.database_url.as_deref().unwrap(), table)
            .await
            .unwrap();
        relays.push(Relay::start(
            store,
            Backend::new(&config).unwrap(),
            &config,
            false,
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while backend.stats().jobs < ROWS as u64 {
        assert!(
            Instant::now() < deadline,
            "drain timed out at {} jobs",
            backend.stats().jobs
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for relay in &relays {
        relay.shutdown().await;
    }
    let received = backend.snapshot();
    assert_eq!(received.jobs.len(), ROWS);
    let resent: Vec<_> = received
        .deliveries
        .iter()
        .filter(|(_, n)| **n != 1)
        .collect();
    assert!(
        resent.is_empty(),
        "{} ids were sent more than once: {:?}",
        resent.len(),
        &resent[..resent.len().min(5)]
    );
    let mut stored: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    stored.sort_unstable();
    let mut expected: Vec<&str> = staged.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(
        stored, expected,
        "the backend holds exactly the staged jobs"
    );
    let sent_by: Vec<u64> = relays.iter().map(|r| r.metrics().sent).collect();
    assert_eq!(sent_by.iter().sum::<u64>(), ROWS as u64, "{sent_by:?}");
    println!("rows sent per relay: {sent_by:?}");
    let status = outbox.store().status().await.unwrap();
    // Nothing leased on SQLite; on PostgreSQL and MariaDB row locks are invisible to a read
    // (None).
    let leased = outbox.store().sqlite_pool().is_some().then_some(0);
    assert_eq!(
        (status.sent, status.in_flight),
        (ROWS as i64, leased),
        "{status:?}"
    );
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_relays_send_each_row_once_on_postgres() {
    let Ok(url) = std::env::var("OJS_TEST_DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "OJS_TEST_DATABASE_URL is unset under CI"
        );
        eprintln!(
            "SKIP: OJS_TEST_DATABASE_URL is unset (scripts/test.sh starts PostgreSQL and sets it)"
        );
        return;
    };
    three_relays_share_the_backlog(url, "concurrent_relays").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_relays_send_each_row_once_on_mariadb() {
    let Ok(url) = std::env::var("OJS_TEST_MYSQL_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "OJS_TEST_MYSQL_URL is unset under CI"
        );
        eprintln!("SKIP: OJS_TEST_MYSQL_URL is unset (scripts/test.sh starts MariaDB and sets it)");
        return;
    };
    three_relays_share_the_backlog(url, "concurrent_relays").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_relays_send_each_row_once_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("ojs-concurrent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    three_relays_share_the_backlog(
        format!("sqlite://{}", dir.join("c.db").display()),
        "concurrent_relays",
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

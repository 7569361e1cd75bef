//! The traps of MySQL and MariaDB (docs/mysql.md), each on a real MariaDB server
//! (`OJS_TEST_MYSQL_URL`): DDL that commits as it goes, gap locks under REPEATABLE READ,
//! JSON as text past TEXT's 64 KiB, utf8mb4 and byte-exact keys, a bulk larger than one
//! statement should carry, and an application session with a strict `sql_mode`.

use std::time::{Duration, Instant};

use ojs_devserver::DevServer;
use ojs_outbox::{Config, NewJob, Outbox, Store};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection};

fn mysql_url() -> Option<String> {
    match std::env::var("OJS_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_MYSQL_URL is unset under CI"
            );
            eprintln!(
                "SKIP: OJS_TEST_MYSQL_URL is unset (scripts/test.sh starts MariaDB and sets it)"
            );
            None
        }
    }
}

/// An outbox on a fresh table, its relay running against a dev backend.
async fn outbox(url: &str, table: &str, backend: &DevServer) -> Outbox {
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": backend.url(), "database_url": url,
        "outbox": {"table_name": table, "poll_interval": "PT0.05S"}}}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(outbox.store().sql().drop_table()))
        .execute(outbox.store().mysql_pool().unwrap())
        .await
        .unwrap();
    outbox.store().migrate().await.unwrap();
    outbox
}

async fn wait_for_jobs(backend: &DevServer, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while backend.stats().jobs < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} jobs delivered after 60 s",
            backend.stats().jobs
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_stopped_half_way_completes_when_it_runs_again() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_ddl", &backend).await;
    // Each DDL statement commits on its own: a migration that died after the first leaves the
    // table without its event log and locks table. Running it again finishes the job.
    let pool = outbox.store().mysql_pool().unwrap();
    sqlx::raw_sql("DROP TABLE traps_ddl_events, traps_ddl_locks")
        .execute(pool)
        .await
        .unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox.start_relay();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_after_commit(
        NewJob::new("ddl.job", json!([1]).clone()).with_options(json!({"ordering_key": "k"})),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    wait_for_jobs(&backend, 1).await;
    outbox.stop_relay().await;
    backend.shutdown().await;
}

/// InnoDB's REPEATABLE READ (an application's default) locks gaps; the relay's sessions run
/// READ COMMITTED and its claims lock rows by primary key, so an application's staging INSERT
/// never waits for a claim in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_under_repeatable_read_does_not_wait_for_a_relays_claim() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_gap", &backend).await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_bulk(
        (0..20)
            .map(|i| NewJob::new("gap.job", json!([i])))
            .collect(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let relay = Store::connect(&url, "traps_gap").await.unwrap();
    let claim = relay
        .claim_due("t", Duration::from_secs(30), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(claim.rows.len(), 10, "the relay holds a claim");

    let mut app = MySqlConnection::connect(&url).await.unwrap();
    // A lock wait fails the INSERT after 5 s instead of passing late.
    sqlx::raw_sql(
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET SESSION innodb_lock_wait_timeout = 5",
    )
    .execute(&mut app)
    .await
    .unwrap();
    let statements = outbox.store().sql().insert(
        ojs_outbox::sql::Placeholder::Question,
        &[prepared("gap.late")],
    );
    sqlx::raw_sql("BEGIN").execute(&mut app).await.unwrap();
    // A read first: the snapshot of REPEATABLE READ is in place.
    sqlx::raw_sql("SELECT COUNT(*) FROM traps_gap")
        .execute(&mut app)
        .await
        .unwrap();
    for statement in statements {
        let mut query = sqlx::query(AssertSqlSafe(statement.sql));
        for param in statement.params {
            query = query.bind(param);
        }
        query
            .execute(&mut app)
            .await
            .expect("staging does not wait for the relay's claim");
    }
    sqlx::raw_sql("COMMIT").execute(&mut app).await.unwrap();
    drop(claim);
    backend.shutdown().await;
}

fn prepared(job_type: &str) -> ojs_outbox::job::PreparedJob {
    ojs_outbox::job::prepare(NewJob::new(job_type, json!([])), None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_args_utf8mb4_and_byte_exact_keys_arrive_unchanged() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_text", &backend).await;
    outbox.start_relay();
    let big = "x".repeat(200 * 1024); // past TEXT's 64 KiB
    let emoji = "héllo 🎉 世界";
    let mut tx = outbox.begin().await.unwrap();
    let big_id = tx
        .enqueue_after_commit(NewJob::new("text.big", json!([big])))
        .await
        .unwrap();
    let emoji_id = tx
        .enqueue_after_commit(NewJob::new("text.emoji", json!([emoji])))
        .await
        .unwrap();
    // Keys differing only in case are two keys (utf8mb4_bin), as on PostgreSQL and SQLite.
    for key in ["Key", "key"] {
        tx.enqueue_after_commit(
            NewJob::new("text.keyed", json!([key]))
                .with_options(json!({"unique": {"keys": ["args"]}, "ordering_key": key})),
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    wait_for_jobs(&backend, 4).await;
    let received = backend.snapshot();
    let args = |id: &str| {
        received
            .jobs
            .iter()
            .find(|job| job.id == id)
            .map(|job| job.args.clone())
            .expect("delivered")
    };
    assert_eq!(args(&big_id), json!([big]));
    assert_eq!(args(&emoji_id), json!([emoji]));
    outbox.stop_relay().await;
    backend.shutdown().await;
}

/// A bulk of about 3 MiB goes in several INSERTs, each under `max_allowed_packet` (16 MiB on
/// MariaDB, 4 MiB on MySQL 5.7), all in the application's transaction; job ids keep their
/// UUIDv7 order as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_bulk_is_split_under_max_allowed_packet_and_keeps_its_order() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_bulk", &backend).await;
    let jobs: Vec<ojs_outbox::job::PreparedJob> = (0..300)
        .map(|i| {
            ojs_outbox::job::prepare(
                NewJob::new("bulk.job", json!([i, "y".repeat(10 * 1024)])),
                None,
            )
            .unwrap()
        })
        .collect();
    let statements = outbox
        .store()
        .sql()
        .insert(ojs_outbox::sql::Placeholder::Question, &jobs);
    assert!(statements.len() >= 3, "{} statements", statements.len());
    let mut tx = outbox.begin().await.unwrap();
    let ids = tx
        .enqueue_bulk(
            (0..300)
                .map(|i| NewJob::new("bulk.job", json!([i, "y".repeat(10 * 1024)])))
                .collect(),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "job ids sort as text in staging order");
    outbox.start_relay();
    wait_for_jobs(&backend, 300).await;
    let delivered: Vec<String> = backend
        .snapshot()
        .jobs
        .iter()
        .map(|j| j.id.clone())
        .collect();
    assert_eq!(delivered, ids, "delivered in staging order");
    outbox.stop_relay().await;
    backend.shutdown().await;
}

/// An application whose session has a strict, ANSI-leaning `sql_mode` stages as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_session_with_a_strict_sql_mode_stages() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_mode", &backend).await;
    let mut app = MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "SET SESSION sql_mode = 'ANSI_QUOTES,ONLY_FULL_GROUP_BY,STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO'",
    )
    .execute(&mut app)
    .await
    .unwrap();
    let job = ojs_outbox::job::prepare(NewJob::new("mode.job", json!(["a\\b 'q'"])), None).unwrap();
    for statement in outbox
        .store()
        .sql()
        .insert(ojs_outbox::sql::Placeholder::Question, &[job])
    {
        let mut query = sqlx::query(AssertSqlSafe(statement.sql));
        for param in statement.params {
            query = query.bind(param);
        }
        query.execute(&mut app).await.unwrap();
    }
    outbox.start_relay();
    wait_for_jobs(&backend, 1).await;
    assert_eq!(backend.snapshot().jobs[0].args, json!(["a\\b 'q'"]));
    outbox.stop_relay().await;
    backend.shutdown().await;
}

/// MySQL's identifiers stop at 64 characters: a table name whose index names would not fit is
/// refused up front, naming the field, instead of leaving a migration half made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_name_too_long_for_mysql_is_refused_before_any_ddl() {
    let Some(url) = mysql_url() else { return };
    let name = "t".repeat(53);
    let error = Store::connect(&url, &name).await.expect_err("refused");
    assert_eq!(error.code, ojs_outbox::ErrorCode::InvalidConfig);
    assert_eq!(error.field.as_deref(), Some("table_name"));
    assert!(error.message.contains("at most 52"), "{}", error.message);
    Store::connect(&url, &"t".repeat(52))
        .await
        .expect("52 characters fit");
}

/// A relay settles one claim while its next claim holds other rows. On a small table the
/// optimizer would scan rather than use the primary key, and the settlement would wait for
/// the next claim, which waits for it (InnoDB sees no deadlock: 50 s of lock wait). Both
/// settlement statements (delivered as is; with a retry and a note) read only their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_does_not_wait_for_the_next_claim_on_a_small_table() {
    let Some(url) = mysql_url() else { return };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "traps_small", &backend).await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_bulk(
        (0..8)
            .map(|i| NewJob::new("small.job", json!([i])))
            .collect(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let relay = Store::connect(&url, "traps_small").await.unwrap();
    // The optimizer knows how small the table is.
    sqlx::raw_sql("ANALYZE TABLE traps_small")
        .execute(relay.mysql_pool().unwrap())
        .await
        .unwrap();
    // Each row of `rows` delivered as is, or failed with a retry due at once.
    let settlements = |rows: &[ojs_outbox::store::ClaimedRow], as_is: bool| {
        rows.iter()
            .map(|row| ojs_outbox::store::Settlement {
                id: row.id,
                status: Some(if as_is {
                    ojs_outbox::RowStatus::Sent
                } else {
                    ojs_outbox::RowStatus::Failed
                }),
                consumed_attempt: !as_is,
                retry_in: (!as_is).then_some(Duration::ZERO),
                error: (!as_is).then(|| "try again".to_owned()),
                rejected: None,
            })
            .collect::<Vec<_>>()
    };
    for settle_as_is in [true, false] {
        let first = relay
            .claim_due("t", Duration::from_secs(30), 2, Duration::ZERO)
            .await
            .unwrap();
        let next = relay
            .claim_due("t", Duration::from_secs(30), 2, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!((first.rows.len(), next.rows.len()), (2, 2));
        let first_settlements = settlements(&first.rows, settle_as_is);
        let settled = tokio::time::timeout(
            Duration::from_secs(30),
            relay.settle("t", first, &first_settlements, None),
        )
        .await
        .expect("the settlement waited for the next claim's locks")
        .unwrap();
        assert_eq!(settled, 2);
        // Settled rather than dropped: a dropped claim's connection closes in the background,
        // and its locks could still hide its rows from the next round's claims.
        let delivered = settlements(&next.rows, true);
        assert_eq!(relay.settle("t", next, &delivered, None).await.unwrap(), 2);
    }
    backend.shutdown().await;
}

//! The store on real databases: schema-qualified tables, missing-table errors, claim and settle.

use std::time::Duration;

use ojs_outbox::store::Settlement;
use ojs_outbox::{Config, ErrorCode, NewJob, Outbox, RowStatus, Store};
use serde_json::json;

fn sqlite_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ojs-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("store.db").display())
}

fn postgres_url() -> Option<String> {
    match std::env::var("OJS_TEST_DATABASE_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_DATABASE_URL is unset under CI"
            );
            eprintln!("SKIP postgres: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)");
            None
        }
    }
}

/// Drops an outbox table and its event log (`IF EXISTS`: a test starts from neither).
async fn drop_with_log(pool: &sqlx::PgPool, table: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table}, {table}_events"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// Settlements that decide nothing: the rows are let go (what a paused relay does).
fn releases(rows: &[ojs_outbox::store::ClaimedRow]) -> Vec<Settlement> {
    rows.iter()
        .map(|r| Settlement {
            id: r.id,
            status: None,
            consumed_attempt: false,
            retry_in: None,
            error: None,
            rejected: None,
        })
        .collect()
}

/// Waits until the database's clock is past the `sent_at` of every sent row, so a prune with
/// zero retention takes them whatever the clock's resolution and the machine's speed.
async fn wait_until_the_clock_passes_every_sent_at(store: &Store, table: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let not_yet: i64 = match store.dialect() {
            ojs_outbox::sql::Dialect::Sqlite => {
                // The store's clock (sql.rs, SQLITE_NOW_MS).
                let sql = format!(
                    "SELECT COUNT(*) FROM {table} WHERE status = 'sent' \
                     AND sent_at >= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
                );
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(store.sqlite_pool().unwrap())
                    .await
                    .unwrap()
            }
            ojs_outbox::sql::Dialect::Mysql => {
                let sql = format!(
                    "SELECT COUNT(*) FROM {table} WHERE status = 'sent' \
                     AND sent_at >= TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
                );
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(store.mysql_pool().unwrap())
                    .await
                    .unwrap()
            }
            ojs_outbox::sql::Dialect::Postgres => {
                let sql = format!(
                    "SELECT COUNT(*) FROM {table} WHERE status = 'sent' AND sent_at >= now()"
                );
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(store.postgres_pool().unwrap())
                    .await
                    .unwrap()
            }
        };
        if not_yet == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the database's clock did not pass the rows' sent_at within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn stage_claim_settle(url: &str, table: &str) {
    let config = Config::from_value(
        &json!({"adapter": {"ojs_url": "http://127.0.0.1:9", "database_url": url, "outbox": {"table_name": table}}}),
    )
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    outbox
        .store()
        .migrate()
        .await
        .expect("migrate is idempotent");
    let mut tx = outbox.begin().await.unwrap();
    let ids = tx
        .enqueue_bulk(
            (0..5)
                .map(|i| NewJob::new("store.job", json!([i])))
                .collect(),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let store = outbox.store();
    let claimed = store
        .claim_due("token-1", Duration::from_secs(30), 3, Duration::ZERO)
        .await
        .unwrap();
    let first: Vec<i64> = claimed.rows.iter().map(|r| r.id).collect();
    assert_eq!(
        claimed
            .rows
            .iter()
            .map(|r| r.job_id.clone())
            .collect::<Vec<_>>(),
        ids[..3],
        "first three, in id order"
    );
    let again = store
        .claim_due("token-2", Duration::from_secs(30), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(again.rows.len(), 2, "claimed rows are not claimed twice");
    let other = again.rows[0].id;
    let settle = |id, status| Settlement {
        id,
        status,
        consumed_attempt: status.is_some(),
        retry_in: Some(Duration::from_secs(60)),
        error: (status != Some(RowStatus::Sent)).then(|| "boom".to_owned()),
        rejected: None,
    };
    let done = store
        .settle(
            "token-1",
            claimed,
            &[
                settle(first[0], Some(RowStatus::Sent)),
                settle(first[1], Some(RowStatus::Failed)),
                settle(first[2], None),
            ],
            None,
        )
        .await
        .unwrap();
    assert_eq!(done, 3);
    if store.dialect() == ojs_outbox::sql::Dialect::Sqlite {
        // A lease: a settlement under another claim's token touches nothing.
        let none = store
            .claim_due("token-x", Duration::from_secs(30), 10, Duration::ZERO)
            .await
            .unwrap();
        assert!(none.rows.is_empty(), "still leased: {:?}", none.rows);
        assert_eq!(
            store
                .settle(
                    "token-1",
                    none,
                    &[settle(other, Some(RowStatus::Sent))],
                    None
                )
                .await
                .unwrap(),
            0,
            "a foreign lease is not settled"
        );
    }
    // The second claim lets its rows go: due again at once, nothing written on PostgreSQL.
    let released = releases(&again.rows);
    store
        .settle("token-2", again, &released, None)
        .await
        .unwrap();
    if store.dialect() == ojs_outbox::sql::Dialect::Postgres {
        let back = store
            .claim_due("token-4", Duration::from_secs(30), 10, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(
            back.rows.len(),
            2,
            "a released lock makes the rows due at once"
        );
        let released = releases(&back.rows);
        store
            .settle("token-4", back, &released, None)
            .await
            .unwrap();
    }
    // The hot path names rows by job id (on PostgreSQL written into the claim's text): a
    // text that is no job id names no row, and the row named is settled as sent.
    let hot = store
        .claim_ids(
            "token-5",
            Duration::from_secs(30),
            &[
                "x'); DROP TABLE jobs_outbox; --".to_owned(),
                ids[3].clone(),
                uuid::Uuid::now_v7().to_string(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        hot.rows
            .iter()
            .map(|r| r.job_id.clone())
            .collect::<Vec<_>>(),
        [ids[3].clone()]
    );
    let sent = [Settlement {
        id: hot.rows[0].id,
        status: Some(RowStatus::Sent),
        consumed_attempt: false,
        retry_in: None,
        error: None,
        rejected: None,
    }];
    assert_eq!(store.settle("token-5", hot, &sent, None).await.unwrap(), 1);
    let states = store.rows_by_job_id(&ids).await.unwrap();
    assert_eq!(states[&ids[0]].status, RowStatus::Sent);
    assert_eq!(
        states[&ids[3]].status,
        RowStatus::Sent,
        "settled by the hot path"
    );
    assert_eq!(
        states[&ids[0]].error, None,
        "a plain delivery leaves no error text"
    );
    assert_eq!(
        (states[&ids[1]].status, states[&ids[1]].attempts),
        (RowStatus::Failed, 1)
    );
    assert_eq!(
        (states[&ids[2]].status, states[&ids[2]].attempts),
        (RowStatus::Pending, 0),
        "released: nothing decided"
    );
    let due = store
        .claim_due("token-3", Duration::from_secs(30), 10, Duration::ZERO)
        .await
        .unwrap();
    let due_ids: Vec<i64> = due.rows.iter().map(|r| r.id).collect();
    assert!(
        !due_ids.contains(&first[1]) && !due_ids.contains(&first[2]),
        "the failed and deferred rows wait for their retry time: {due_ids:?}"
    );
    drop(due); // an abandoned claim: its transaction rolls back
    // Prune takes rows sent strictly before now - retention: one sent in the same
    // millisecond as the prune (SQLite's clock) is not older than zero yet.
    wait_until_the_clock_passes_every_sent_at(store, table).await;
    assert_eq!(
        store.prune(Duration::ZERO, 100).await.unwrap(),
        2,
        "prune takes the sent rows only"
    );
    outbox.store().close().await;
}

#[tokio::test]
async fn claim_lease_settle_and_prune_on_sqlite_with_a_schema_qualified_table() {
    stage_claim_settle(&sqlite_url("qualified"), "main.jobs_outbox").await;
}

#[tokio::test]
async fn claim_lease_settle_and_prune_on_postgres_with_a_schema_qualified_table() {
    if let Some(url) = postgres_url() {
        let store = Store::connect(&url, "public.jobs_outbox_q").await.unwrap();
        sqlx::raw_sql("DROP TABLE IF EXISTS public.jobs_outbox_q")
            .execute(store.postgres_pool().unwrap())
            .await
            .unwrap();
        stage_claim_settle(&url, "public.jobs_outbox_q").await;
    }
}

/// PostgreSQL cuts identifiers at 63 characters: the index `<table>_events_time` of a longer
/// table name would be cut to a name that may already exist, and `CREATE INDEX IF NOT EXISTS`
/// would then create nothing. The migration refuses such a name before any DDL, naming the
/// field (a relay still connects to a table an earlier version made); the longest that fits
/// migrates with every index under its own name.
#[tokio::test]
async fn a_table_name_too_long_for_postgres_is_refused_and_the_longest_that_fits_gets_every_index()
{
    let Some(url) = postgres_url() else { return };
    let long = "t".repeat(52);
    let store = Store::connect(&url, &long).await.expect("a relay connects");
    let error = store.migrate().await.expect_err("refused");
    let made: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&long)
        .fetch_one(store.postgres_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(made, None, "no DDL ran");
    assert_eq!(error.code, ErrorCode::InvalidConfig);
    assert_eq!(error.field.as_deref(), Some("table_name"));
    assert!(error.message.contains("at most 51"), "{}", error.message);
    let table = "t".repeat(51);
    let store = Store::connect(&url, &table)
        .await
        .expect("51 characters fit");
    let pool = store.postgres_pool().unwrap();
    drop_with_log(pool, &table).await;
    store.migrate().await.unwrap();
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename IN ($1, $1 || '_events') ORDER BY 1",
    )
    .bind(&table)
    .fetch_all(pool)
    .await
    .unwrap();
    for suffix in ["_due", "_sent", "_dead", "_events_time"] {
        assert!(
            indexes.contains(&format!("{table}{suffix}")),
            "{suffix} missing from {indexes:?}"
        );
    }
    drop_with_log(pool, &table).await;
}

#[tokio::test]
async fn a_missing_table_says_to_migrate_and_an_app_error_does_not() {
    let mut urls = vec![sqlite_url("missing")];
    urls.extend(postgres_url());
    for url in urls {
        let store = Store::connect(&url, "no_such_outbox").await.unwrap();
        let error = store.check_table().await.unwrap_err();
        assert_eq!(error.code, ErrorCode::OutboxTableMissing, "{url}: {error}");
        assert!(error.message.contains("ojs-relay migrate"));
        let config = Config::from_value(
            &json!({"adapter": {"ojs_url": "http://127.0.0.1:9", "database_url": url, "outbox": {"table_name": "no_such_outbox"}}}),
        )
        .unwrap();
        let outbox = Outbox::connect(config).await.unwrap();
        let mut tx = outbox.begin().await.unwrap();
        let app_error = tx
            .execute("INSERT INTO no_such_users (id) VALUES (1)")
            .await
            .unwrap_err();
        assert_eq!(
            app_error.code,
            ErrorCode::Database,
            "the application's own table: {app_error}"
        );
        let staging = tx.enqueue_after_commit(NewJob::new("a", json!([]))).await;
        assert!(staging.is_err());
    }
}

#[tokio::test]
async fn bad_database_urls_are_refused_clearly() {
    for url in ["mssql://localhost/db", "not a url", ""] {
        let Err(error) = Store::connect(url, "ojs_outbox").await else {
            panic!("{url} must be refused")
        };
        assert_eq!(error.code, ErrorCode::InvalidDatabaseUrl, "{url}");
    }
    let error = Store::connect("postgres://nobody:secret@127.0.0.1:1/db", "ojs_outbox")
        .await
        .err()
        .unwrap();
    assert_eq!(error.code, ErrorCode::Database);
    assert!(
        !error.message.contains("secret"),
        "the password is not echoed: {}",
        error.message
    );
}

/// What every binding and `Outbox::connect` see too, not only `ojs-relay` (issue 25, item 9):
/// a table without the outbox's columns, a file that is no database and a directory are named.
#[tokio::test]
async fn a_wrong_table_a_file_that_is_no_database_and_a_directory_are_named() {
    let url = sqlite_url("named");
    let store = Store::connect(&url, "users").await.unwrap();
    sqlx::raw_sql("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        .execute(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    let error = store.check_table().await.unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidConfig, "{error}");
    assert!(
        error
            .message
            .contains("the table \"users\" is not an outbox table")
            && error.message.contains("job_id"),
        "{error}"
    );
    store.close().await;
    if let Some(url) = postgres_url() {
        let store = Store::connect(&url, "pg_catalog.pg_class").await.unwrap();
        let error = store.check_table().await.unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidConfig, "{error}");
        assert!(
            error
                .message
                .contains("\"pg_catalog.pg_class\" is not an outbox table"),
            "{error}"
        );
    }

    let dir = std::path::PathBuf::from(url.trim_start_matches("sqlite://"))
        .parent()
        .unwrap()
        .to_owned();
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "not a database, just text\n".repeat(20)).unwrap();
    for read_only in [false, true] {
        let url = format!("sqlite://{}", notes.display());
        let opened = if read_only {
            Store::connect_read_only(&url, "ojs_outbox").await
        } else {
            Store::connect(&url, "ojs_outbox").await
        };
        let error = opened.expect_err("a text file is no database");
        assert_eq!(error.code, ErrorCode::Database);
        assert!(
            error
                .message
                .contains(&format!("{} is not a SQLite database", notes.display())),
            "{error}"
        );
        let url = format!("sqlite://{}", dir.display());
        let opened = if read_only {
            Store::connect_read_only(&url, "ojs_outbox").await
        } else {
            Store::connect(&url, "ojs_outbox").await
        };
        let error = opened.expect_err("a directory is no database");
        assert_eq!(error.code, ErrorCode::InvalidDatabaseUrl);
        assert!(
            error
                .message
                .contains(&format!("{} is a directory", dir.display())),
            "{error}"
        );
    }
}

/// The core's PostgreSQL sessions TOAST with lz4 where the server offers it: a round's row of
/// the event log, the largest value a relay writes, is compressed with lz4, not pglz (half
/// the server's time for the same size, in the settlement that paces a drain).
#[tokio::test]
async fn the_event_log_is_compressed_with_lz4_where_the_server_offers_it() {
    let Some(url) = postgres_url() else { return };
    let table = "store_lz4_log";
    let store = Store::connect(&url, table).await.unwrap();
    let pool = store.postgres_pool().unwrap();
    drop_with_log(pool, table).await;
    store.migrate().await.unwrap();
    // 500 events of a round, as the log keeps them: well over the 2 KB that TOAST compresses.
    let events: Vec<serde_json::Value> = (0..500)
        .map(|i| {
            json!([
                "job.enqueued",
                format!("01a22611-c7a2-7326-86c7-{i:012}"),
                "default",
                "email.welcome",
                null,
                1
            ])
        })
        .collect();
    let row = ojs_outbox::store::LoggedEvents {
        time_ms: 1,
        json: serde_json::to_string(&events).unwrap(),
    };
    store.append_events(&row).await.unwrap();
    let method: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT pg_column_compression(events) FROM {table}_events"
    )))
    .fetch_one(pool)
    .await
    .unwrap();
    drop_with_log(pool, table).await;
    // Debian's PostgreSQL 15, which the tests run, is built with lz4.
    assert_eq!(
        method.as_deref(),
        Some("lz4"),
        "pglz here means the server offers no lz4, or the core did not choose it"
    );
}

/// The core's SQLite connections wait for a lock with the core's handler (`sqlite_busy.rs`,
/// retries from 50 µs): SQLite's own, which `busy_timeout` installs and which first sleeps a
/// whole millisecond, is replaced (the pragma then reads 0), and a write that meets another
/// connection's lock still waits for it instead of failing with `SQLITE_BUSY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cores_sqlite_connections_wait_for_a_lock_with_the_cores_handler() {
    use sqlx::ConnectOptions;
    use std::str::FromStr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let url = sqlite_url("busy");
    let store = Store::connect(&url, "ojs_outbox").await.unwrap();
    let pool = store.sqlite_pool().unwrap().clone();
    let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timeout, 0, "SQLite's own busy handler is still in place");
    sqlx::raw_sql("CREATE TABLE t (x INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    // Another connection, which holds the write lock.
    let mut holder = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
        .execute(&mut holder)
        .await
        .unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let write = tokio::spawn({
        let (pool, started) = (pool.clone(), started.clone());
        async move {
            started.store(true, Ordering::SeqCst);
            sqlx::query("INSERT INTO t VALUES (2)").execute(&pool).await
        }
    });
    while !started.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    // Without a handler the write fails at once; with one it stays waiting on the lock. (A
    // write that has not reached SQLite yet also stays unfinished: the pragma above is what
    // pins the handler; this pins that the one in place waits.)
    for _ in 0..50 {
        assert!(!write.is_finished(), "{:?}", write.await);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    write.await.unwrap().expect("the write waited for the lock");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 2);
}

/// On SQLite another connection sees the outbox table with every index or not at all while
/// `migrate` runs (one write transaction). A connection that read the schema between the
/// table's CREATE and its unique index's kept that schema for the statements it prepared, and
/// a unique job's staging upsert failed there ("ON CONFLICT clause does not match any PRIMARY
/// KEY or UNIQUE constraint"; keys.rs failed that way about once in twenty runs). Here a
/// reader polls the schema while a migration runs, and must never see the table half made;
/// then its first statement is that upsert's kind, which must prepare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sqlite_connection_never_sees_a_table_half_migrated() {
    use sqlx::ConnectOptions;
    use std::collections::BTreeSet;
    use std::str::FromStr;

    for round in 0..20 {
        let url = sqlite_url(&format!("atomic-{round}"));
        let store = Store::connect(&url, "ojs_outbox").await.unwrap();
        let mut reader = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let migrating = tokio::spawn({
            let store = store.clone();
            async move { store.migrate().await }
        });
        // (table, its indexes) as the reader sees them, until the table is there and the
        // migration has ended.
        let mut seen = BTreeSet::new();
        loop {
            let state: (i64, i64) = sqlx::query_as(
                "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ojs_outbox'), \
                 (SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'ojs_outbox')",
            )
            .fetch_one(&mut reader)
            .await
            .unwrap();
            seen.insert(state);
            if state.0 == 1 && migrating.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
        migrating.await.unwrap().unwrap();
        let (table_seen, indexes) = *seen.last().unwrap();
        assert_eq!(table_seen, 1);
        let allowed = BTreeSet::from([(0, 0), (1, indexes)]);
        assert!(
            seen.is_subset(&allowed),
            "round {round}: a half-made table was visible: {seen:?}"
        );
        // The unique index's conflict target, prepared first thing on the reader.
        sqlx::raw_sql(
            "INSERT INTO ojs_outbox (job_id, job_type, job_args, unique_key) VALUES ('a', 't', '[]', 'k') \
             ON CONFLICT (unique_key) WHERE status IN ('pending', 'failed') DO NOTHING",
        )
        .execute(&mut reader)
        .await
        .unwrap();
        store.close().await;
    }
}

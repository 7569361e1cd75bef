//! The Rust-native transaction (`OutboxTransaction`) on real databases: its savepoints, its
//! after-commit wake-up, and a bulk larger than one INSERT staged whole or not at all. The
//! conformance runner drives the bridge, as the bindings do; this is the Rust-native adapter's
//! own coverage of what that runner used to check through it.

use std::time::{Duration, Instant};

use ojs_devserver::DevServer;
use ojs_outbox::sql::MAX_ROWS_PER_INSERT;
use ojs_outbox::{Config, ErrorCode, NewJob, Outbox, RequestContext, RowStatus};
use serde_json::{Value, json};

fn sqlite_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ojs-transaction-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("outbox.db").display())
}

fn postgres_url() -> Option<String> {
    match std::env::var("OJS_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_DATABASE_URL is unset under CI"
            );
            eprintln!("SKIP postgres: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)");
            None
        }
    }
}

/// The databases to run on: SQLite always, PostgreSQL when the test server is given.
fn databases(name: &str) -> Vec<String> {
    let mut urls = vec![sqlite_url(name)];
    urls.extend(postgres_url());
    urls
}

/// An outbox on a fresh table `table` (dropped first on PostgreSQL), with no relay running.
async fn outbox(database_url: &str, table: &str, adapter: Value) -> Outbox {
    let mut adapter = adapter;
    adapter["database_url"] = json!(database_url);
    adapter["outbox"]["table_name"] = json!(table);
    if adapter.get("ojs_url").is_none() {
        adapter["ojs_url"] = json!("http://127.0.0.1:9");
    }
    let config = Config::from_value(&json!({ "adapter": adapter })).unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
            .execute(pool)
            .await
            .unwrap();
    }
    outbox.store().migrate().await.unwrap();
    outbox
}

fn job(n: usize) -> NewJob {
    NewJob::new("transaction.job", json!([n]))
}

async fn committed_status(outbox: &Outbox, ids: &[String]) -> Vec<Option<RowStatus>> {
    let rows = outbox.store().rows_by_job_id(ids).await.unwrap();
    ids.iter()
        .map(|id| rows.get(id).map(|r| r.status))
        .collect()
}

/// Spec §12.4: a rolled-back savepoint discards its rows and its wake-ups, a released one
/// hands them to the enclosing level, and only the outermost commit returns (wakes) them all;
/// an outer rollback discards released savepoints too. Misuse is `NO_TRANSACTION`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_keep_or_drop_their_jobs_until_the_outermost_commit() {
    for url in databases("savepoints") {
        let outbox = outbox(&url, "tx_savepoints", json!({})).await;
        let mut tx = outbox.begin().await.unwrap();
        let a = tx.enqueue_after_commit(job(1)).await.unwrap();
        tx.savepoint().await.unwrap();
        let b = tx.enqueue_after_commit(job(2)).await.unwrap();
        tx.savepoint().await.unwrap();
        let c = tx.enqueue_after_commit(job(3)).await.unwrap();
        let ids = [a.clone(), b.clone(), c.clone()];
        assert_eq!(tx.rows_by_job_id(&ids).await.unwrap().len(), 3, "{url}");
        tx.rollback_savepoint().await.unwrap();
        let seen = tx.rows_by_job_id(&ids).await.unwrap();
        assert!(!seen.contains_key(&c), "{url}: the rolled-back row is gone");
        assert_eq!(seen[&b].status, RowStatus::Pending);
        tx.release_savepoint().await.unwrap();
        for misuse in [tx.release_savepoint().await, tx.rollback_savepoint().await] {
            assert_eq!(misuse.unwrap_err().code, ErrorCode::NoTransaction, "{url}");
        }
        tx.savepoint().await.unwrap();
        let d = tx.enqueue_bulk(vec![job(4)]).await.unwrap().remove(0);
        tx.release_savepoint().await.unwrap();
        assert_eq!(tx.count_rows().await.unwrap(), 3, "{url}");
        assert_eq!(
            committed_status(&outbox, std::slice::from_ref(&a)).await,
            [None],
            "{url}: nothing is visible outside before the commit"
        );
        let woken = tx.commit().await.unwrap();
        assert_eq!(woken, [a.clone(), b.clone(), d.clone()], "{url}");
        assert_eq!(
            committed_status(&outbox, &[a, b, c, d]).await,
            [
                Some(RowStatus::Pending),
                Some(RowStatus::Pending),
                None,
                Some(RowStatus::Pending)
            ],
            "{url}"
        );

        let mut tx = outbox.begin().await.unwrap();
        let kept = tx.enqueue_after_commit(job(5)).await.unwrap();
        tx.savepoint().await.unwrap();
        let released = tx.enqueue_after_commit(job(6)).await.unwrap();
        tx.release_savepoint().await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(
            committed_status(&outbox, &[kept, released]).await,
            [None, None],
            "{url}: an outer rollback discards released savepoints too"
        );
        assert_eq!(outbox.store().count_rows().await.unwrap(), 3, "{url}");
        outbox.store().close().await;
    }
}

/// The commit wakes the relay for exactly its jobs (with the transaction's request context in
/// their meta); `commit_without_hook`, a process dying right after COMMIT, commits the row
/// but wakes nothing. `skip_recent` keeps the poller off both rows, so only a wake-up can
/// send them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_wakes_the_relay_and_commit_without_hook_does_not() {
    let backend = DevServer::start(0).await.unwrap();
    let url = sqlite_url("wake");
    let outbox = outbox(
        &url,
        "tx_wake",
        json!({"ojs_url": backend.url(), "outbox": {"poll_interval": "PT0.1S"},
               "relay": {"skip_recent": "PT60S"}}),
    )
    .await;
    outbox.start_relay();
    let context = RequestContext::from_json(r#"{"request_id": "req-7"}"#, false).unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.set_context(Some(context.clone()));
    let unhooked = tx.enqueue_after_commit(job(1)).await.unwrap();
    assert_eq!(
        tx.commit_without_hook().await.unwrap(),
        std::slice::from_ref(&unhooked)
    );

    let mut tx = outbox.begin().await.unwrap();
    tx.set_context(Some(context));
    let hooked = tx.enqueue_after_commit(job(2)).await.unwrap();
    tx.commit().await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while !backend.snapshot().jobs.iter().any(|j| j.id == hooked) {
        assert!(
            Instant::now() < deadline,
            "the commit did not wake the relay"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let received = backend.snapshot();
    let delivered = received.jobs.iter().find(|j| j.id == hooked).unwrap();
    assert_eq!(
        delivered.meta.as_ref().unwrap()["ojs.context.request_id"],
        "req-7"
    );
    assert!(
        !received.jobs.iter().any(|j| j.id == unhooked),
        "no wake-up for a commit without hook"
    );
    assert_eq!(
        committed_status(&outbox, &[unhooked]).await,
        [Some(RowStatus::Pending)],
        "the unhooked row is committed and waits for the poller"
    );
    outbox.kill_relay();
    outbox.store().close().await;
    backend.shutdown().await;
}

/// A bulk of `MAX_ROWS_PER_INSERT + 1` jobs takes two INSERTs and is still all or nothing: it
/// is staged whole, and when its second INSERT fails (a trigger refuses one job type) the
/// first one's rows are rolled back with it, none of its ids is woken, and the transaction
/// stays usable (on PostgreSQL too, where a failed statement would abort it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_over_one_insert_is_staged_whole_or_not_at_all() {
    let bulk = |last_type: &str| -> Vec<NewJob> {
        (0..MAX_ROWS_PER_INSERT)
            .map(job)
            .chain([NewJob::new(last_type, json!([MAX_ROWS_PER_INSERT]))])
            .collect()
    };
    for url in databases("bulk") {
        let table = "tx_bulk";
        let outbox = outbox(&url, table, json!({})).await;
        let mut tx = outbox.begin().await.unwrap();
        let ids = tx.enqueue_bulk(bulk("transaction.job")).await.unwrap();
        assert_eq!(ids.len(), MAX_ROWS_PER_INSERT + 1);
        assert_eq!(tx.commit().await.unwrap(), ids, "{url}");
        let whole = MAX_ROWS_PER_INSERT as i64 + 1;
        assert_eq!(outbox.store().count_rows().await.unwrap(), whole, "{url}");

        let refuse = if url.starts_with("sqlite:") {
            vec![format!(
                "CREATE TRIGGER {table}_refuse BEFORE INSERT ON {table} \
                 WHEN NEW.job_type = 'refused.job' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )]
        } else {
            vec![
                format!(
                    "CREATE OR REPLACE FUNCTION {table}_refuse() RETURNS trigger AS $$ BEGIN \
                     IF NEW.job_type = 'refused.job' THEN RAISE EXCEPTION 'refused'; END IF; \
                     RETURN NEW; END $$ LANGUAGE plpgsql"
                ),
                format!(
                    "CREATE TRIGGER {table}_refuse BEFORE INSERT ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION {table}_refuse()"
                ),
            ]
        };
        let mut tx = outbox.begin().await.unwrap();
        for statement in &refuse {
            tx.execute(statement).await.unwrap();
        }
        tx.commit().await.unwrap();

        let mut tx = outbox.begin().await.unwrap();
        let before = tx.enqueue_after_commit(job(0)).await.unwrap();
        let error = tx.enqueue_bulk(bulk("refused.job")).await.unwrap_err();
        assert_eq!(error.code, ErrorCode::Database, "{url}: {error}");
        assert_eq!(
            tx.count_rows().await.unwrap(),
            whole + 1,
            "{url}: the first INSERT's rows went with the second"
        );
        let after = tx.enqueue_after_commit(job(1)).await.unwrap();
        assert_eq!(tx.commit().await.unwrap(), [before, after], "{url}");
        assert_eq!(
            outbox.store().count_rows().await.unwrap(),
            whole + 2,
            "{url}"
        );
        outbox.store().close().await;
    }
}

/// The application's commit is durable (its jobs may be relayed once it returns); the relay's
/// own writes skip the fsync (`Store::for_relay`), and on SQLite its connections checkpoint the
/// WAL early so that an application's COMMIT does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_commits_durably_and_the_relay_does_not_wait_for_fsync() {
    for url in databases("durability") {
        let outbox = outbox(&url, "ojs_outbox_durability", json!({})).await;
        let relay = outbox.store().for_relay();
        if let Some(pool) = outbox.store().sqlite_pool() {
            let pragma = |pool: sqlx::SqlitePool, name: &'static str| async move {
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("PRAGMA {name}")))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            };
            let relay_pool = relay.sqlite_pool().unwrap().clone();
            assert_eq!(pragma(pool.clone(), "synchronous").await, 2, "app: FULL");
            assert_eq!(
                pragma(relay_pool.clone(), "synchronous").await,
                1,
                "relay: NORMAL"
            );
            assert_eq!(pragma(relay_pool, "wal_autocheckpoint").await, 200);
            assert_eq!(pragma(pool.clone(), "wal_autocheckpoint").await, 1000);
        } else {
            let setting = |pool: sqlx::PgPool| async move {
                sqlx::query_scalar::<_, String>("SHOW synchronous_commit")
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            };
            let relay_pool = relay.postgres_pool().unwrap().clone();
            assert_eq!(setting(relay_pool).await, "off", "the relay's sessions");
            let mut tx = outbox.begin().await.unwrap();
            tx.execute(
                "DO $$ BEGIN IF current_setting('synchronous_commit') <> 'on' THEN \
                 RAISE EXCEPTION 'the application transaction is not durable'; END IF; END $$",
            )
            .await
            .unwrap();
            tx.rollback().await.unwrap();
        }
        relay.close().await;
        outbox.store().close().await;
    }
}

//! `ordering_key` and `unique`, decided in the staging transaction (issue 27), on a real SQLite
//! file, a real PostgreSQL and a real MariaDB, with the real devserver over HTTP:
//! - each `on_conflict` policy among the jobs the outbox holds, the transaction left usable;
//! - two transactions racing for one unique key: exactly one wins;
//! - the jobs of one ordering key reach the backend in the order their transactions committed,
//!   one at a time, through retries, a dead head and killed relays.

use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::{Config, ErrorCode, NewJob, Outbox, RequestContext, RowStatus};
use serde_json::{Value, json};

fn sqlite_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ojs-keys-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("outbox.db").display())
}

fn databases(name: &str) -> Vec<String> {
    let mut urls = vec![sqlite_url(name)];
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
    match std::env::var("OJS_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => urls.push(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_MYSQL_URL is unset under CI"
            );
            eprintln!("SKIP mariadb: OJS_TEST_MYSQL_URL is unset (scripts/test.sh sets it)");
        }
    }
    urls
}

fn config(database_url: &str, table: &str, ojs_url: &str) -> Config {
    Config::from_value(&json!({"adapter": {
        "database_url": database_url,
        "ojs_url": ojs_url,
        "outbox": {"table_name": table, "poll_interval": "PT0.05S", "batch_size": 50},
        "relay": {"max_attempts": 3, "initial_backoff": "PT0.02S", "max_backoff": "PT0.1S",
                  "skip_recent": "PT0S", "lease": "PT2S", "request_timeout": "PT1S"}}}))
    .unwrap()
}

/// An outbox on a fresh table, no relay running.
async fn outbox(database_url: &str, table: &str, ojs_url: &str) -> Outbox {
    let outbox = Outbox::connect(config(database_url, table, ojs_url))
        .await
        .unwrap();
    if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}; DROP TABLE IF EXISTS {table}_events"
        )))
        .execute(pool)
        .await
        .unwrap();
    }
    if let Some(pool) = outbox.store().mysql_pool() {
        // The outbox, its event log, relay registry and ordering keys' locks.
        sqlx::raw_sql(sqlx::AssertSqlSafe(outbox.store().sql().drop_table()))
            .execute(pool)
            .await
            .unwrap();
    }
    outbox.store().migrate().await.unwrap();
    outbox
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

fn unique_job(args: Value, on_conflict: &str) -> NewJob {
    NewJob::new("invoice.send", args).with_options(json!({"unique": {
        "keys": ["type", "args"], "args_keys": ["order"], "on_conflict": on_conflict}}))
}

async fn args_of(outbox: &Outbox, id: &str) -> Option<Value> {
    let table = &outbox.config().outbox.table_name;
    let text: Option<(String,)> = if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT job_args::text FROM {table} WHERE job_id = CAST($1 AS uuid)"
        )))
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
    } else if let Some(pool) = outbox.store().mysql_pool() {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT job_args FROM {table} WHERE job_id = ?"
        )))
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
    } else {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT job_args FROM {table} WHERE job_id = ?1"
        )))
        .bind(id)
        .fetch_optional(outbox.store().sqlite_pool().unwrap())
        .await
        .unwrap()
    };
    text.map(|(text,)| serde_json::from_str(&text).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_unique_policy_is_decided_inside_the_transaction() {
    for url in databases("policies") {
        let outbox = outbox(&url, "keys_policies", "http://127.0.0.1:9").await;

        // reject: a typed error naming the held job; the transaction goes on.
        let mut tx = outbox.begin().await.unwrap();
        let a = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1, "v": "a"}]), "reject"))
            .await
            .unwrap();
        let error = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1, "v": "b"}]), "reject"))
            .await
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Duplicate, "{url}: {error}");
        assert_eq!(error.existing_job_id.as_deref(), Some(a.as_str()));
        assert_eq!(error.field.as_deref(), Some("options.unique"));
        let other = tx
            .enqueue_after_commit(unique_job(json!([{"order": 2}]), "reject"))
            .await
            .expect("the transaction is still usable after DUPLICATE");
        tx.commit().await.unwrap();
        assert_eq!(tx_count(&outbox).await, 2, "{url}: a and the other order");

        // A later transaction meets the committed, not yet sent job.
        let mut tx = outbox.begin().await.unwrap();
        let error = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1}]), "reject"))
            .await
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Duplicate);
        // ignore: the held job's id.
        let ignored = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1, "v": "c"}]), "ignore"))
            .await
            .unwrap();
        assert_eq!(ignored, a, "{url}: ignore returns the held job's id");
        tx.commit().await.unwrap();
        assert_eq!(
            args_of(&outbox, &a).await,
            Some(json!([{"order": 1, "v": "a"}]))
        );

        // replace: the new job takes the held row; the held job is never sent.
        let mut tx = outbox.begin().await.unwrap();
        let replaced = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1, "v": "d"}]), "replace"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_ne!(replaced, a);
        assert_eq!(
            args_of(&outbox, &a).await,
            None,
            "{url}: the held job is gone"
        );
        assert_eq!(
            args_of(&outbox, &replaced).await,
            Some(json!([{"order": 1, "v": "d"}]))
        );

        // replace_except_schedule: the held job keeps its id and takes the new args.
        let mut tx = outbox.begin().await.unwrap();
        let kept = tx
            .enqueue_after_commit(unique_job(
                json!([{"order": 1, "v": "e"}]),
                "replace_except_schedule",
            ))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(kept, replaced);
        assert_eq!(
            args_of(&outbox, &replaced).await,
            Some(json!([{"order": 1, "v": "e"}]))
        );

        // Another tenant's job with the same key is its own.
        let mut tx = outbox.begin().await.unwrap();
        tx.set_context(Some(
            RequestContext::from_json(r#"{"tenant_id": "globex"}"#, true).unwrap(),
        ));
        let globex = tx
            .enqueue_after_commit(unique_job(json!([{"order": 1}]), "reject"))
            .await
            .expect("tenants never meet in the outbox");
        tx.commit().await.unwrap();
        assert_ne!(globex, replaced);

        // A bulk holding a rejected job stages none of its jobs.
        let mut tx = outbox.begin().await.unwrap();
        let error = tx
            .enqueue_bulk(vec![
                unique_job(json!([{"order": 3}]), "reject"),
                unique_job(json!([{"order": 1}]), "reject"),
            ])
            .await
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Duplicate);
        tx.commit().await.unwrap();
        assert_eq!(
            tx_count(&outbox).await,
            3,
            "{url}: order 1, order 2, globex's"
        );
        let _ = other;
    }
}

async fn tx_count(outbox: &Outbox) -> i64 {
    let mut tx = outbox.begin().await.unwrap();
    let count = tx.count_rows().await.unwrap();
    tx.rollback().await.unwrap();
    count
}

/// Two transactions stage the same unique key at once: the second waits for the first (its
/// row lock on PostgreSQL, its unique index entry on MariaDB, the write lock on SQLite) and then sees its row: one job, one
/// `DUPLICATE`. When the first rolls back, the second wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transactions_racing_for_one_key_exactly_one_wins() {
    for url in databases("race") {
        let outbox = outbox(&url, "keys_race", "http://127.0.0.1:9").await;
        for first_commits in [true, false] {
            let order = if first_commits { 10 } else { 11 };
            let mut first = outbox.begin().await.unwrap();
            let winner = first
                .enqueue_after_commit(unique_job(json!([{"order": order}]), "reject"))
                .await
                .unwrap();
            let second = async {
                let mut tx = outbox.begin().await.unwrap();
                let staged = tx
                    .enqueue_after_commit(unique_job(json!([{"order": order}]), "reject"))
                    .await;
                tx.commit().await.unwrap();
                staged
            };
            let finish_first = async {
                // The second is running (waiting on the first) or about to: either way the
                // first's outcome decides, since the second cannot pass it.
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                if first_commits {
                    first.commit().await.map(drop)
                } else {
                    first.rollback().await
                }
            };
            let (second, finished) = tokio::join!(second, finish_first);
            finished.unwrap();
            if first_commits {
                let error = second.unwrap_err();
                assert_eq!(error.code, ErrorCode::Duplicate, "{url}");
                assert_eq!(error.existing_job_id.as_deref(), Some(winner.as_str()));
            } else {
                let id = second.expect("the first rolled back: the second wins");
                assert_ne!(id, winner);
            }
        }
        assert_eq!(tx_count(&outbox).await, 2, "{url}: one job per race");
    }
}

/// Three keys, eight jobs each, every job in a transaction of its own; the first head fails
/// twice (HTTP 500), another head goes dead (422) and holds its key until it is replayed, and
/// two relays are killed and restarted while they drain. Every key's jobs arrive in staging (= commit) order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keys_jobs_arrive_in_commit_order_through_retries_dead_heads_and_kills() {
    let backend = DevServer::start(0).await.unwrap();
    for url in databases("order") {
        backend.reset();
        let table = "keys_order";
        let first = outbox(&url, table, &backend.url()).await;
        let second = Outbox::connect(config(&url, table, &backend.url()))
            .await
            .unwrap();
        // The head of key k0 fails twice; k2's head is refused for good (dead).
        backend.push_fault(fault(
            json!({"status": 500, "code": "backend_error", "count": 2, "match_type": "step.k0"}),
        ));
        backend.push_fault(fault(
            json!({"status": 422, "code": "validation_error", "match_type": "step.k2"}),
        ));
        let mut staged: Vec<(usize, String)> = Vec::new();
        for n in 0..8 {
            for key in 0..3 {
                let mut tx = first.begin().await.unwrap();
                let id = tx
                    .enqueue_after_commit(
                        NewJob::new(format!("step.k{key}"), json!([n]))
                            .with_options(json!({"ordering_key": format!("account-{key}")})),
                    )
                    .await
                    .unwrap();
                tx.commit_without_hook().await.unwrap();
                staged.push((key, id));
            }
        }
        first.start_relay();
        second.start_relay();
        // Kill both relays while they drain, twice, and start them again.
        for _ in 0..2 {
            eventually("some jobs delivered", async || {
                (backend.snapshot().jobs.len() >= 3).then_some(())
            })
            .await;
            first.kill_relay();
            second.kill_relay();
            first.start_relay();
            second.start_relay();
        }
        let dead_head = staged.iter().find(|(key, _)| *key == 2).unwrap().1.clone();
        eventually("k2's head dead, k0 and k1 delivered", async || {
            let rows = first
                .store()
                .rows_by_job_id(std::slice::from_ref(&dead_head))
                .await
                .ok()?;
            let got = backend.snapshot().jobs.len();
            (rows.get(&dead_head).map(|r| r.status) == Some(RowStatus::Dead) && got == 16)
                .then_some(())
        })
        .await;
        let k2_arrived = backend
            .snapshot()
            .jobs
            .iter()
            .filter(|job| job.job_type == "step.k2")
            .count();
        assert_eq!(k2_arrived, 0, "{url}: a dead head holds its key");
        let status = first.store().status().await.unwrap();
        assert_eq!(
            status.held_by_dead, 7,
            "{url}: k2's seven wait behind it: {status:?}"
        );
        backend.clear_faults();
        assert_eq!(first.dead_replay(None).await.unwrap(), 1);
        eventually("every job delivered", async || {
            (backend.snapshot().jobs.len() == 24).then_some(())
        })
        .await;
        first.stop_relay().await;
        second.stop_relay().await;
        let received = backend.snapshot();
        for key in 0..3 {
            let expected: Vec<&String> = staged
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, id)| id)
                .collect();
            let arrived: Vec<&String> = received
                .jobs
                .iter()
                .filter(|job| job.job_type == format!("step.k{key}"))
                .map(|job| &job.id)
                .collect();
            assert_eq!(arrived, expected, "{url}: key {key} in commit order");
        }
        for (_, id) in &staged {
            let stored = received.jobs.iter().filter(|job| &job.id == id).count();
            assert_eq!(stored, 1, "{url}: {id} stored once");
        }
        for job in &received.jobs {
            let options = job.options.clone().unwrap_or(Value::Null);
            assert!(
                options.get("ordering_key").is_none(),
                "the outbox keeps its own option: {options}"
            );
        }
    }
}

fn fault(value: Value) -> Fault {
    serde_json::from_value(value).unwrap()
}

/// docs/relay.md#ordering, without a key, on PostgreSQL: ids are taken at INSERT, so a
/// transaction that commits later can hold the smaller id; its row is sent when it becomes
/// visible, after the younger one. (SQLite cannot show this: its writers are serialized from
/// their first write to COMMIT, so its ids follow commit order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_a_row_goes_out_when_its_transaction_commits() {
    let Some(url) = databases("visible")
        .into_iter()
        .find(|url| url.starts_with("postgres"))
    else {
        eprintln!(
            "SKIP: PostgreSQL only (SQLite ids follow commit order); OJS_TEST_DATABASE_URL is unset"
        );
        return;
    };
    let backend = DevServer::start(0).await.unwrap();
    let outbox = outbox(&url, "keys_visible", &backend.url()).await;
    outbox.start_relay();
    let mut older = outbox.begin().await.unwrap();
    let a = older
        .enqueue_after_commit(NewJob::new("visible.first", json!([1])))
        .await
        .unwrap();
    let mut younger = outbox.begin().await.unwrap();
    let b = younger
        .enqueue_after_commit(NewJob::new("visible.second", json!([2])))
        .await
        .unwrap();
    younger.commit().await.unwrap();
    eventually("b delivered", async || {
        backend
            .snapshot()
            .jobs
            .iter()
            .any(|job| job.id == b)
            .then_some(())
    })
    .await;
    older.commit().await.unwrap();
    eventually("a delivered", async || {
        backend
            .snapshot()
            .jobs
            .iter()
            .any(|job| job.id == a)
            .then_some(())
    })
    .await;
    outbox.stop_relay().await;
    let ids: Vec<String> = backend
        .snapshot()
        .jobs
        .iter()
        .map(|job| job.id.clone())
        .collect();
    assert_eq!(
        ids,
        vec![b.clone(), a.clone()],
        "b first: it committed first"
    );
    assert!(a < b, "a's UUIDv7 (and row id) is the older one");
}

/// How many sessions wait for an ordering key's lock that a staging statement of `table` asked
/// for: PostgreSQL's advisory lock (`pg_stat_activity`), or MariaDB's row of
/// `<table>_locks` (`PROCESSLIST`).
async fn waiting_for_a_key(url: &str, table: &str) -> i64 {
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND wait_event = 'advisory' \
             AND query LIKE '%pg_advisory_xact_lock%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        waiting
    } else {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        // The lock statement still running: the first's ended long ago, so this is the
        // second's, waiting (INNODB_TRX did not always list that wait).
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND INFO LIKE ?",
        )
        .bind(format!("INSERT INTO {table}_locks %"))
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        waiting
    }
}

/// Two transactions stage jobs of one ordering key at once (PostgreSQL, MariaDB): the second
/// waits at its staging statement for the first's lock on the key until the first commits,
/// then takes the next id, so the key's jobs go out in the order the transactions committed.
/// Without that wait the second's row would be visible, and sent, while the first's was not.
/// (SQLite serializes writers from their first write to COMMIT anyway.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_transaction_of_one_key_waits_for_the_first_and_goes_out_after_it() {
    let table = "keys_samekey";
    for url in databases("samekey") {
        if url.starts_with("sqlite") {
            continue;
        }
        let backend = DevServer::start(0).await.unwrap();
        let outbox = outbox(&url, table, &backend.url()).await;
        outbox.start_relay();
        let keyed = |n: i64| {
            NewJob::new("samekey.step", json!([n]))
                .with_options(json!({"ordering_key": "account-7"}))
        };
        let mut first = outbox.begin().await.unwrap();
        let a = first.enqueue_after_commit(keyed(1)).await.unwrap();
        let second = async {
            let mut tx = outbox.begin().await.unwrap();
            let b = tx.enqueue_after_commit(keyed(2)).await.unwrap();
            tx.commit().await.unwrap();
            b
        };
        let finish_first = async {
            // The second's staging statement waits for the key: seen, then the first commits.
            eventually(
                "the second transaction waiting for the key's lock",
                async || (waiting_for_a_key(&url, table).await == 1).then_some(()),
            )
            .await;
            first.commit().await.unwrap();
        };
        let (b, ()) = tokio::join!(second, finish_first);
        eventually("both jobs delivered", async || {
            (backend.snapshot().jobs.len() == 2).then_some(())
        })
        .await;
        outbox.stop_relay().await;
        let ids: Vec<String> = backend
            .snapshot()
            .jobs
            .iter()
            .map(|job| job.id.clone())
            .collect();
        assert_eq!(ids, vec![a.clone(), b.clone()], "{url}: commit order");
        assert!(a < b, "{url}: the second took the later id");
        backend.shutdown().await;
    }
}

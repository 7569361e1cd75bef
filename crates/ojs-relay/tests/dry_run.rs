//! A command that only reads writes nothing (issue 25, item 7): `dead purge` without `--yes`,
//! `status` and `dead list` leave an application's SQLite file byte for byte as it was, in
//! its own journal mode, with a dead row in its outbox table.

mod common;

use std::path::Path;

use common::*;
use ojs_outbox::NewJob;
use serde_json::json;
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

/// The journal mode the file records, read through a read-only connection (which writes nothing).
async fn journal_mode(path: &Path) -> String {
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await
        .unwrap();
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    mode
}

fn side_files(path: &Path) -> Vec<String> {
    ["-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| format!("{}{suffix}", path.display()))
        .filter(|side| Path::new(side).exists())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_without_yes_status_and_dead_list_leave_a_delete_journal_sqlite_file_as_it_was() {
    let db = Db::new(Kind::Sqlite, "dry_run").await.unwrap();
    db.migrate().await;
    let ids = db
        .stage(vec![
            NewJob::new("dry.job", json!([1])).with_meta(json!({"tenant_id": "t1"})),
        ])
        .await;
    // The application's file as many are: the rollback journal (DELETE), not WAL; the row
    // dead, as a refused job leaves it.
    let path = db.dir.file("outbox.db");
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .journal_mode(SqliteJournalMode::Delete)
        .connect()
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE {} SET status = 'dead', attempts = 1, error = '400 invalid_request'",
        db.table
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    assert_eq!(journal_mode(&path).await, "delete");
    assert_eq!(side_files(&path), Vec::<String>::new());
    let before = std::fs::read(&path).unwrap();

    let commands: [&[&str]; 6] = [
        &["dead", "purge"],
        &["dead", "purge", "--tenant", "t1"],
        &["status"],
        &["status", "--json"],
        &["dead", "list"],
        &["dead", "list", "--json"],
    ];
    for args in commands {
        let out = db.cli(args).await;
        let what = args.join(" ");
        if args.starts_with(&["dead", "purge"]) {
            assert_eq!(out.status.code(), Some(2), "{what}: {}", text(&out.stderr));
            assert!(
                text(&out.stderr).contains("would delete 1 dead row(s)")
                    && text(&out.stderr).contains("nothing was deleted"),
                "{what}: {}",
                text(&out.stderr)
            );
        } else {
            assert_success(&out, &what);
        }
        assert!(
            std::fs::read(&path).unwrap() == before,
            "`{what}` changed the file"
        );
        assert_eq!(
            side_files(&path),
            Vec::<String>::new(),
            "`{what}` left files beside the database"
        );
        assert_eq!(
            journal_mode(&path).await,
            "delete",
            "`{what}` changed the journal mode"
        );
    }
    let listed: serde_json::Value =
        serde_json::from_slice(&db.cli(&["dead", "list", "--json"]).await.stdout).unwrap();
    assert_eq!(
        listed[0]["job_id"],
        json!(ids[0]),
        "the dead row is still there"
    );

    // With --yes the purge writes, as it must.
    let out = db.cli(&["dead", "purge", "--yes"]).await;
    assert_success(&out, "dead purge --yes");
    assert!(
        text(&out.stdout).contains("purged 1 dead row(s)"),
        "{}",
        text(&out.stdout)
    );
}

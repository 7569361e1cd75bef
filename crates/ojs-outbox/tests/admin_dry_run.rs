//! The operator commands that do not write (issue 25, item 7), through `admin::execute`, the
//! path every framework's command line shares: each one that `Command::writes` calls
//! read-only runs on a store opened with `Store::connect_read_only` and leaves a SQLite file in
//! the rollback-journal mode byte for byte as it was; the ones that write are said to.

use std::path::{Path, PathBuf};

use ojs_outbox::admin::{self, Command, Target};
use ojs_outbox::{Config, NewJob, Outbox, Store};
use serde_json::json;
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

const TABLE: &str = "ojs_outbox";

fn database_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ojs-admin-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("app.db")
}

/// An outbox with one dead row, in a file that journals with DELETE, as an application's
/// SQLite file often does.
async fn file_with_a_dead_row(path: &Path) -> String {
    let url = format!("sqlite://{}", path.display());
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": "http://127.0.0.1:9", "database_url": url, "outbox": {"table_name": TABLE}
    }}))
    .unwrap();
    let outbox = Outbox::connect(config).await.unwrap();
    outbox.store().migrate().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_after_commit(NewJob::new("dry.job", json!([1])))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    outbox.store().close().await;
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Delete)
        .connect()
        .await
        .unwrap();
    sqlx::query("UPDATE ojs_outbox SET status = 'dead', error = 'refused'")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    url
}

fn command(json: serde_json::Value) -> Command {
    let mut json = json;
    json["create_table_with"] = json!("the migration");
    Command::from_json(&json.to_string()).unwrap()
}

#[tokio::test]
async fn commands_that_do_not_write_run_read_only_and_leave_the_file_as_it_was() {
    let path = database_file("dry-run");
    let url = file_with_a_dead_row(&path).await;
    let before = std::fs::read(&path).unwrap();
    let store = Store::connect_read_only(&url, TABLE).await.unwrap();
    let target = Target {
        store: &store,
        table: TABLE,
        database_url: &url,
        create_table_with: "the migration",
        events: None,
    };
    let reading = [
        json!({"command": "status"}),
        json!({"command": "status", "json": true}),
        json!({"command": "dead", "action": "list"}),
        json!({"command": "dead", "action": "list", "json": true}),
        json!({"command": "dead", "action": "purge"}),
        json!({"command": "dead", "action": "purge", "tenant": "t1"}),
    ];
    for json in reading {
        let command = command(json.clone());
        assert!(!command.writes(), "{json} only reads");
        let report = admin::execute(&target, &command)
            .await
            .unwrap_or_else(|e| panic!("{json} on a read-only store: {e}"));
        if command.action.as_deref() == Some("purge") {
            assert_eq!(report.exit_code, admin::EXIT_USAGE, "{json}");
            assert!(
                report.stderr.contains("nothing was deleted"),
                "{json}: {report:?}"
            );
        } else {
            assert_eq!(report.exit_code, 0, "{json}: {report:?}");
        }
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{json} changed the file"
        );
        for side in ["-wal", "-shm", "-journal"] {
            let side = format!("{}{side}", path.display());
            assert!(!Path::new(&side).exists(), "{json} left {side}");
        }
    }
    store.close().await;

    for json in [
        json!({"command": "migrate"}),
        json!({"command": "dead", "action": "replay"}),
        json!({"command": "dead", "action": "purge", "yes": true}),
    ] {
        assert!(command(json.clone()).writes(), "{json} writes");
    }
}

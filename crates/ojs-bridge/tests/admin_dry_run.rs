//! A framework's operator command that only reads writes nothing (issue 25, item 7): through
//! `Bridge::admin`, as `manage.py ojs_outbox`, the Node admin call and the Rails tasks run it,
//! `dead purge` without `yes`, `status` and `dead list` leave an application's SQLite file in
//! DELETE journal mode byte for byte as it was. Before, the bridge opened the relay's pool,
//! which switched the file to WAL.

use ojs_bridge::Bridge;
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{ConnectOptions, Executor};

#[test]
fn read_only_commands_leave_a_delete_journal_file_as_it_was() {
    let dir = std::env::temp_dir().join(format!("ojs-bridge-dry-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("app.db");
    let bridge = Bridge::new(
        &json!({"adapter": {
            "ojs_url": "http://127.0.0.1:9",
            "database_url": format!("sqlite://{}", path.display()),
            "outbox": {"table_name": "dry_outbox"},
        }})
        .to_string(),
    )
    .unwrap();

    // The application's database, in the journal mode the application chose, with a dead row.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut app = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Delete)
            .connect()
            .await
            .unwrap();
        for sql in bridge.create_table_sql("sqlite").unwrap() {
            app.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
        }
        app.execute(
            "INSERT INTO dry_outbox (job_id, job_type, job_args, tenant_id, status, error) \
             VALUES ('019abf0e-0000-7000-8000-000000000001', 'email.welcome', '[1]', 'acme', 'dead', 'refused')",
        )
        .await
        .unwrap();
    });
    let before = std::fs::read(&path).unwrap();

    let dry_runs = [
        (
            json!({"command": "dead", "action": "purge"}),
            "would delete 1 dead row(s)",
        ),
        (
            json!({"command": "dead", "action": "purge", "tenant": "acme"}),
            "would delete 1 dead row(s)",
        ),
        (json!({"command": "status"}), "dead"),
        (json!({"command": "status", "json": true}), "\"dead\":1"),
        (
            json!({"command": "dead", "action": "list"}),
            "019abf0e-0000-7000-8000-000000000001",
        ),
    ];
    for (mut command, says) in dry_runs {
        command["create_table_with"] = json!("manage.py migrate");
        let report = bridge
            .admin(&command.to_string())
            .unwrap_or_else(|e| panic!("{command}: {e:?}"));
        let said = format!("{}{}", report.stdout, report.stderr);
        assert!(said.contains(says), "{command}: {said}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "`{command}` changed the file"
        );
        for side in ["-wal", "-shm", "-journal"] {
            let side = format!("{}{side}", path.display());
            assert!(
                !std::path::Path::new(&side).exists(),
                "`{command}` left {side}"
            );
        }
    }
    bridge.close();
    let _ = std::fs::remove_dir_all(&dir);
}

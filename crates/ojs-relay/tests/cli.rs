//! The command line against real databases and a real (in-process) OJS devserver:
//! migrate/status, the error contract (one line, stable code, exit code), and `run`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::NewJob;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// 1. migrate is idempotent, status starts at zero; the error contract.

async fn migrate_twice_then_status_is_zero(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    let first = db.cli(&["migrate"]).await;
    assert_success(&first, "migrate");
    assert!(
        text(&first.stdout).contains("created outbox table"),
        "first migrate: {}",
        text(&first.stdout)
    );
    let second = db.cli(&["migrate"]).await;
    assert_success(&second, "migrate (again)");
    assert!(
        text(&second.stdout).contains("already exists"),
        "second migrate: {}",
        text(&second.stdout)
    );

    let status = db.status().await;
    for key in [
        "pending",
        "failed",
        "sent",
        "dead",
        "unique_rejected",
        "oldest_pending_age_ms",
        "recent_lag_ms",
        "held_by_dead",
    ] {
        assert_eq!(count(&status, key), 0, "{key} on a fresh table: {status}");
    }
    // Live leases on SQLite; on PostgreSQL a read cannot see row locks: null, not a false 0.
    let in_flight = match db.kind {
        Kind::Sqlite => json!(0),
        Kind::Postgres | Kind::Mysql => json!(null),
    };
    assert_eq!(status["in_flight"], in_flight, "{status}");
    assert_eq!(status["table"], json!(db.table));

    let human = db.cli(&["status"]).await;
    assert_success(&human, "status");
    let out = text(&human.stdout);
    assert!(
        out.contains(&db.table) && out.contains("pending") && out.contains("dead"),
        "human status: {out}"
    );
    if db.kind == Kind::Mysql {
        // The same server under the other scheme the relay accepts.
        let url = db.url.replacen("mysql://", "mariadb://", 1);
        assert!(url.starts_with("mariadb://"), "{}", db.url);
        let out = cli(&[
            "--database-url",
            &url,
            "--table",
            &db.table,
            "status",
            "--json",
        ])
        .await;
        assert_success(&out, "status --json with a mariadb:// URL");
        let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(again["table"], json!(db.table), "{again}");
        assert_eq!(count(&again, "pending"), 0, "{again}");
    }
    db.drop_table().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_fresh_status_is_zero_sqlite() {
    migrate_twice_then_status_is_zero(Kind::Sqlite, "migrate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_fresh_status_is_zero_postgres() {
    migrate_twice_then_status_is_zero(Kind::Postgres, "migrate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_fresh_status_is_zero_mariadb() {
    migrate_twice_then_status_is_zero(Kind::Mysql, "migrate").await;
}

async fn missing_table_is_outbox_table_missing(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    // A database that exists (a read-only command refuses a SQLite file that does not).
    assert_success(&db.cli(&["migrate"]).await, "migrate");
    db.drop_table().await;
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["dead", "list"],
        &["dead", "replay"],
    ] {
        let out = db.cli(args).await;
        let line = assert_error(&out, "OUTBOX_TABLE_MISSING", 1);
        assert!(
            line.contains("ojs-relay migrate") && line.contains(&db.table),
            "{args:?}: {line}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?} printed to stdout: {}",
            text(&out.stdout)
        );
    }
    // `run` refuses to start, with the same message, instead of logging errors forever.
    let server = DevServer::start(0).await.unwrap();
    let mut relay = db.spawn_run(&server.url(), &[]);
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(
        status.code(),
        Some(1),
        "run on a missing table: {}",
        relay.log()
    );
    assert!(
        relay.log().contains("error [OUTBOX_TABLE_MISSING]: ")
            && relay.log().contains("ojs-relay migrate"),
        "{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_table_fails_with_outbox_table_missing_sqlite() {
    missing_table_is_outbox_table_missing(Kind::Sqlite, "missing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_table_fails_with_outbox_table_missing_postgres() {
    missing_table_is_outbox_table_missing(Kind::Postgres, "missing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_table_fails_with_outbox_table_missing_mariadb() {
    missing_table_is_outbox_table_missing(Kind::Mysql, "missing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_url_scheme_is_invalid_database_url_exit_2() {
    // `run` needs a backend URL before it gets to the database.
    let run = ["run", "--ojs-url", "http://127.0.0.1:9"];
    for command in [&["status"][..], &["migrate"], &run, &["dead", "list"]] {
        let mut args = vec!["--database-url", "mssql://root@127.0.0.1:1433/app"];
        args.extend_from_slice(command);
        let out = cli(&args).await;
        let line = assert_error(&out, "INVALID_DATABASE_URL", 2);
        assert!(
            line.contains("mssql://")
                && line.contains("sqlite://")
                && line.contains("postgres://")
                && line.contains("mysql://"),
            "{line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_leave_a_sqlite_file_as_it_was() {
    use sqlx::ConnectOptions;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    let dir = TempDir::new("read-only");
    // An application's database in the rollback-journal mode, without an outbox table.
    let path = dir.file("app.db");
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Delete)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY)")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();
    let url = format!("sqlite://{}", path.display());
    for command in [&["status"][..], &["status", "--json"], &["dead", "list"]] {
        let mut args = vec!["--database-url", &url];
        args.extend_from_slice(command);
        assert_error(&cli(&args).await, "OUTBOX_TABLE_MISSING", 1);
        assert!(
            std::fs::read(&path).unwrap() == before,
            "`{}` changed the file",
            command.join(" ")
        );
        assert!(!dir.file("app.db-wal").exists(), "no WAL file appears");
    }

    // A mistyped path is an error that names it, and no file appears there.
    let typo = dir.file("ap.db");
    let url = format!("sqlite://{}", typo.display());
    for command in [&["status"][..], &["dead", "list"]] {
        let mut args = vec!["--database-url", &url];
        args.extend_from_slice(command);
        let line = assert_error(&cli(&args).await, "DATABASE", 1);
        assert!(
            line.contains("no SQLite database at") && line.contains("ap.db"),
            "{line}"
        );
        assert!(
            !typo.exists(),
            "`{}` created {}",
            command.join(" "),
            typo.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_one_clear_line_exit_1() {
    // Nothing listens on port 1: refused at once, and the message says so (not "pool timed
    // out"). The words are the verdict, not how long it took: a busy machine takes longer.
    let out = cli(&[
        "--database-url",
        "postgres://postgres@127.0.0.1:1/postgres",
        "status",
    ])
    .await;
    let line = assert_error(&out, "DATABASE", 1);
    assert!(
        line.contains("cannot connect to postgres://postgres@127.0.0.1:1/postgres"),
        "{line}"
    );
    assert!(line.to_lowercase().contains("refused"), "{line}");
    assert!(!line.contains("timed out"), "{line}");

    // The password never reaches the terminal.
    let out = cli(&[
        "--database-url",
        "postgres://postgres:s3cret@127.0.0.1:1/postgres",
        "migrate",
    ])
    .await;
    let line = assert_error(&out, "DATABASE", 1);
    assert!(
        !line.contains("s3cret") && line.contains("postgres:***@"),
        "{line}"
    );

    // SQLite in a directory that does not exist.
    let out = cli(&[
        "--database-url",
        "sqlite:///nonexistent-ojs-relay-dir/sub/outbox.db",
        "status",
    ])
    .await;
    let line = assert_error(&out, "DATABASE", 1);
    assert!(
        line.contains("cannot connect to sqlite:///nonexistent-ojs-relay-dir/sub/outbox.db"),
        "{line}"
    );
    assert!(line.contains("no SQLite database at"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_errors_exit_2_and_name_the_setting() {
    let dir = TempDir::new("config-errors");
    let db = format!("sqlite://{}", dir.file("x.db").display());
    // No database at all.
    let line = assert_error(&cli(&["status"]).await, "INVALID_CONFIG", 2);
    assert!(
        line.contains("--database-url") && line.contains("OJS_DATABASE_URL"),
        "{line}"
    );
    // Flags are checked by the library's rules, and the message names the flag.
    let cases: [(&[&str], &str); 8] = [
        (&["run", "--batch-size", "0"], "--batch-size"),
        (&["run", "--batch-size", "-5"], "--batch-size"),
        (&["run", "--poll-interval", "5s"], "--poll-interval"),
        (&["run", "--ojs-url", "ftp://backend"], "--ojs-url"),
        (&["--table", "outbox; drop table x", "status"], "--table"),
        (&["--table", "select", "status"], "reserved SQL word"),
        (&["dead", "list", "--limit", "-1"], "--limit"),
        (&["dead", "list", "--limit", "0"], "--limit"),
    ];
    for (args, flag) in cases {
        let mut full = vec!["--database-url", db.as_str()];
        full.extend_from_slice(args);
        let line = assert_error(&cli(&full).await, "INVALID_CONFIG", 2);
        assert!(line.contains(flag), "{args:?}: {line}");
        assert!(!line.contains(" at line "), "an internal position: {line}");
    }
    // A database's own error, without the server's source position.
    if let Ok(url) = std::env::var("OJS_TEST_DATABASE_URL") {
        let missing = format!("{}_no_such_db", url.trim_end_matches('/'));
        let line = assert_error(
            &cli(&["--database-url", &missing, "status"]).await,
            "DATABASE",
            1,
        );
        assert!(
            line.contains("does not exist") && !line.contains(" at line "),
            "{line}"
        );
    }
    // A config file with a typo, or unreadable.
    let config = dir.file("bad.json");
    std::fs::write(&config, r#"{"adapter": {"relay": {"leese": "PT2S"}}}"#).unwrap();
    let config = config.display().to_string();
    let line = assert_error(
        &cli(&["--database-url", &db, "--config", &config, "status"]).await,
        "INVALID_CONFIG",
        2,
    );
    assert!(
        line.contains("adapter.relay.leese") && line.contains("bad.json"),
        "{line}"
    );
    let line = assert_error(
        &cli(&[
            "--database-url",
            &db,
            "--config",
            "/nonexistent/ojs.json",
            "status",
        ])
        .await,
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("/nonexistent/ojs.json"), "{line}");
    // A usage error from clap is exit 2 too.
    assert_eq!(cli(&["frobnicate"]).await.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_a_backend_url_fails_naming_the_setting() {
    let dir = TempDir::new("no-ojs-url");
    let db = format!("sqlite://{}", dir.file("x.db").display());
    // No --ojs-url, no OJS_URL (the harness removes it), no config file: no silent default.
    let line = assert_error(
        &cli(&["--database-url", &db, "run"]).await,
        "INVALID_CONFIG",
        2,
    );
    assert!(
        line.contains("adapter.ojs_url")
            && line.contains("--ojs-url")
            && line.contains("OJS_URL")
            && line.contains("no OJS backend URL is set"),
        "{line}"
    );
    // A config file without the key is no different.
    let config = dir.file("ojs.json");
    std::fs::write(
        &config,
        json!({"adapter": {"database_url": db}}).to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    let line = assert_error(
        &cli(&["--config", &config, "run"]).await,
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("--ojs-url"), "{line}");
    // The commands that never talk to the backend need no URL.
    assert_success(&cli(&["--config", &config, "migrate"]).await, "migrate");
    assert_success(&cli(&["--config", &config, "status"]).await, "status");
    assert_success(
        &cli(&["--config", &config, "dead", "list"]).await,
        "dead list",
    );
}

/// `run` takes the backend URL from the config file's `adapter.ojs_url` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_the_backend_url_from_the_config_file() {
    let Some(db) = Db::new(Kind::Sqlite, "url_from_file").await else {
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    db.migrate().await;
    let ids = db.stage(vec![NewJob::new("from.file", json!([1]))]).await;
    let config = db.config_file(&json!({"adapter": {"ojs_url": server.url()}}).to_string());
    let mut relay = db.spawn(&["--config", &config, "run", "--poll-interval", "PT0.1S"]);
    db.wait_status(Duration::from_secs(20), "the job sent", Some(&relay), |s| {
        count(s, "sent") == 1
    })
    .await;
    let received = received(&server.url()).await;
    assert_eq!(received_ids(&received), ids, "{received}");
    assert!(relay.terminate(Duration::from_secs(20)).await.success());
    server.shutdown().await;
    db.drop_table().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_url_comes_from_the_environment_or_the_config_file() {
    let dir = TempDir::new("env-config");
    let url = format!("sqlite://{}", dir.file("env.db").display());
    // OJS_DATABASE_URL
    let url_for_env = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .args(["--table", "from_env", "migrate"])
            .env("OJS_DATABASE_URL", url_for_env)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_success(&out, "migrate with OJS_DATABASE_URL");
    assert!(
        text(&out.stdout).contains("\"from_env\""),
        "{}",
        text(&out.stdout)
    );
    // adapter.database_url and adapter.outbox.table_name in the config file.
    let config = dir.file("ojs.json");
    std::fs::write(
        &config,
        json!({"adapter": {"database_url": url, "outbox": {"table_name": "from_env"}}}).to_string(),
    )
    .unwrap();
    let out = cli(&[
        "--config",
        &config.display().to_string(),
        "status",
        "--json",
    ])
    .await;
    assert_success(&out, "status with --config");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["table"], json!("from_env"));
}

// ---------------------------------------------------------------------------------------------
// 2. run delivers, status shows it, SIGTERM exits 0.

async fn run_delivers_then_stops_on_sigterm(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    db.migrate().await;
    let staged = db
        .stage(
            (0..250)
                .map(|i| NewJob::new("test.job", json!([i])))
                .collect(),
        )
        .await;
    let status = db.status().await;
    assert_eq!(
        (count(&status, "pending"), count(&status, "sent")),
        (250, 0),
        "{status}"
    );

    let started = Instant::now();
    let mut relay = db.spawn_run(
        &server.url(),
        &["--batch-size", "100", "--poll-interval", "PT0.1S"],
    );
    let status = db
        .wait_status(Duration::from_secs(20), "250 sent", Some(&relay), |s| {
            s["sent"] == json!(250)
        })
        .await;
    let drained = started.elapsed();
    assert_eq!(
        (
            count(&status, "pending"),
            count(&status, "failed"),
            count(&status, "dead")
        ),
        (0, 0, 0),
        "{status}"
    );
    assert!(
        relay.is_running(),
        "the relay keeps running after the drain"
    );

    let received = received(&server.url()).await;
    let ids = received_ids(&received);
    assert_eq!(ids.len(), 250, "stored jobs");
    assert_eq!(
        as_set(&ids),
        as_set(&staged),
        "the backend holds exactly the staged jobs"
    );
    assert_eq!(ids, staged, "one relay sends in staging order (FIFO)");
    assert!(
        received["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["type"] == "test.job")
    );

    // Rows staged while it runs are picked up by the poller too.
    let late = db.stage(vec![NewJob::new("test.late", json!([]))]).await;
    db.wait_status(
        Duration::from_secs(30),
        "the late row sent",
        Some(&relay),
        |s| s["sent"] == json!(251),
    )
    .await;
    assert!(received_ids(&received_common(&server).await).contains(&late[0]));

    let exit = relay.terminate(Duration::from_secs(15)).await;
    assert_eq!(
        exit.code(),
        Some(0),
        "SIGTERM is a graceful stop; log:\n{}",
        relay.log()
    );
    let log = relay.log();
    assert!(
        log.contains("is healthy")
            && log.contains("SIGTERM received")
            && log.contains("relay stopped"),
        "{log}"
    );
    assert!(
        log.contains("metrics: pending="),
        "final metrics line: {log}"
    );
    eprintln!("{name}: 250 rows drained in {drained:?}");
    db.drop_table().await;
}

async fn received_common(server: &DevServer) -> serde_json::Value {
    received(&server.url()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_delivers_staged_rows_and_exits_0_on_sigterm_sqlite() {
    run_delivers_then_stops_on_sigterm(Kind::Sqlite, "run").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_delivers_staged_rows_and_exits_0_on_sigterm_postgres() {
    run_delivers_then_stops_on_sigterm(Kind::Postgres, "run").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_delivers_staged_rows_and_exits_0_on_sigterm_mariadb() {
    run_delivers_then_stops_on_sigterm(Kind::Mysql, "run").await;
}

/// The backend is down when the relay starts: it says so, keeps running, keeps the rows
/// pending, and delivers them once the backend is back (on the same port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_unreachable_backend_warns_keeps_rows_and_delivers_later() {
    let db = Db::new(Kind::Sqlite, "backend_down").await.unwrap();
    db.migrate().await;
    let staged = db
        .stage(
            (0..10)
                .map(|i| NewJob::new("test.job", json!([i])))
                .collect(),
        )
        .await;
    let server = DevServer::start(0).await.unwrap();
    let addr = server.addr();
    let url = server.url();
    server.shutdown().await;

    // A short backoff cap so the relay retries soon after the backend returns.
    let config = db.config_file(
        r#"{"adapter": {"relay": {"initial_backoff": "PT0.2S", "max_backoff": "PT0.5S"}}}"#,
    );
    let mut relay = db.spawn_run(&url, &["--poll-interval", "PT0.1S", "--config", &config]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !relay.log().contains("is unreachable") {
        assert!(
            Instant::now() < deadline,
            "no unreachable warning; log:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let warning = relay
        .log()
        .lines()
        .find(|l| l.contains("is unreachable"))
        .unwrap()
        .to_owned();
    assert!(
        warning.contains("WARN") && warning.contains(&url) && warning.contains("keeps running"),
        "{warning}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        relay.is_running(),
        "the relay must keep running while the backend is down"
    );
    let status = db.status().await;
    assert_eq!(
        (
            count(&status, "pending"),
            count(&status, "sent"),
            count(&status, "dead")
        ),
        (10, 0, 0),
        "{status}"
    );
    assert_eq!(
        count(&status, "failed"),
        0,
        "an outage burns no attempt: {status}"
    );

    let server = DevServer::start_on(addr)
        .await
        .expect("rebind the devserver's port");
    db.wait_status(
        Duration::from_secs(15),
        "10 sent after the backend returns",
        Some(&relay),
        |s| s["sent"] == json!(10),
    )
    .await;
    assert_eq!(
        as_set(&received_ids(&received(&server.url()).await)),
        as_set(&staged)
    );
    assert_eq!(
        relay.terminate(Duration::from_secs(15)).await.code(),
        Some(0)
    );
}

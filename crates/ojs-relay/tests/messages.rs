//! Messages that name their cause (issue 25, item 9), through the binary as an operator runs
//! it: the setting a bad value came from, a table that is no outbox table, a file that is no
//! SQLite database, a directory given as the database, and no sqlx lines at info.

mod common;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::NewJob;
use serde_json::json;

/// `ojs-relay ARGS...` with these environment variables (and nothing from the developer's).
async fn cli_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .env_remove("OJS_DATABASE_URL")
            .env_remove("OJS_URL")
            .env_remove("OJS_RELAY_TOKEN")
            .env_remove("OJS_LOG")
            .envs(env)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_backend_url_names_the_setting_it_came_from() {
    let dir = TempDir::new("url-source");
    let db = format!("sqlite://{}", dir.file("x.db").display());
    let from_env = cli_with_env(&["--database-url", &db, "run"], &[("OJS_URL", "nonsense")]).await;
    let line = assert_error(&from_env, "INVALID_CONFIG", 2);
    assert!(
        line.contains("OJS_URL") && line.contains("\"nonsense\"") && !line.contains("--ojs-url"),
        "the user set OJS_URL, not --ojs-url: {line}"
    );
    let from_flag = cli_with_env(
        &["--database-url", &db, "run", "--ojs-url", "nonsense"],
        &[],
    )
    .await;
    let line = assert_error(&from_flag, "INVALID_CONFIG", 2);
    assert!(line.contains("--ojs-url: \"nonsense\""), "{line}");
    // The flag wins over the variable, and a bad flag is blamed even with a good variable.
    let both = cli_with_env(
        &["--database-url", &db, "run", "--ojs-url", "nonsense"],
        &[("OJS_URL", "http://127.0.0.1:9")],
    )
    .await;
    let line = assert_error(&both, "INVALID_CONFIG", 2);
    assert!(line.contains("--ojs-url: \"nonsense\""), "{line}");
}

/// Every command on a table that exists without the outbox's columns says so, naming the
/// table, instead of the database's `column "status" does not exist`.
async fn refused_as_no_outbox_table(db_url: &str, table: &str, server_url: &str) {
    let commands: [&[&str]; 7] = [
        &["dead", "purge", "--yes"],
        &["dead", "purge"],
        &["dead", "replay"],
        &["dead", "list"],
        &["status", "--json"],
        &["migrate"],
        &["run", "--ojs-url", server_url],
    ];
    for command in commands {
        let mut args = vec!["--database-url", db_url, "--table", table];
        args.extend_from_slice(command);
        let out = cli(&args).await;
        let line = assert_error(&out, "INVALID_CONFIG", 2);
        assert!(
            line.contains(&format!("the table \"{table}\""))
                && line.contains("is not an outbox table")
                && line.contains("ojs-relay migrate"),
            "{command:?}: {line}"
        );
        assert!(out.stdout.is_empty(), "{command:?}: {}", text(&out.stdout));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_is_no_outbox_table_is_named_sqlite() {
    use sqlx::ConnectOptions;
    let dir = TempDir::new("not-outbox");
    let path = dir.file("app.db");
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    let server = DevServer::start(0).await.unwrap();
    let url = format!("sqlite://{}", path.display());
    refused_as_no_outbox_table(&url, "users", &server.url()).await;
    // `migrate` left the application's table alone: no outbox index on it.
    let (indexes,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'users'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(indexes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_is_no_outbox_table_is_named_postgres() {
    let Ok(url) = std::env::var("OJS_TEST_DATABASE_URL") else {
        eprintln!("SKIPPED: OJS_TEST_DATABASE_URL is not set");
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    refused_as_no_outbox_table(&url, "pg_catalog.pg_class", &server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_no_sqlite_database_is_named() {
    let dir = TempDir::new("not-sqlite");
    let path = dir.file("notes.txt");
    let content = "these are notes, not a database\n".repeat(10);
    std::fs::write(&path, &content).unwrap();
    let url = format!("sqlite://{}", path.display());
    for command in [
        &["status"][..],
        &["dead", "list"],
        &["dead", "purge"],
        &["migrate"],
    ] {
        let mut args = vec!["--database-url", url.as_str()];
        args.extend_from_slice(command);
        let line = assert_error(&cli(&args).await, "DATABASE", 1);
        assert!(
            line.contains(&format!("{} is not a SQLite database", path.display())),
            "{command:?}: {line}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            content,
            "{command:?} wrote to the file"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_as_the_sqlite_path_is_named() {
    let dir = TempDir::new("dir-as-db");
    let path = dir.file("data");
    std::fs::create_dir(&path).unwrap();
    let url = format!("sqlite://{}", path.display());
    for command in [
        &["status"][..],
        &["dead", "list"],
        &["migrate"],
        &["run", "--ojs-url", "http://127.0.0.1:9"],
    ] {
        let mut args = vec!["--database-url", url.as_str()];
        args.extend_from_slice(command);
        let line = assert_error(&cli(&args).await, "INVALID_DATABASE_URL", 2);
        assert!(
            line.contains(&format!("{} is a directory", path.display())),
            "{command:?}: {line}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&path).unwrap().count(),
        0,
        "nothing created in it"
    );
}

/// Lines of a `tracing` fmt log (`<time> <LEVEL> <target>: <message>`) that come from sqlx at
/// info or below, or say where in PostgreSQL's source an error arose.
fn sqlx_chatter(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| {
            let mut words = line.split_whitespace().skip(1);
            let (level, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let quiet_level = matches!(level, "INFO" | "DEBUG" | "TRACE");
            quiet_level && (target.starts_with("sqlx") || line.contains(" at line "))
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_says_nothing_at_info_postgres() {
    let Some(db) = Db::new(Kind::Postgres, "sqlx_quiet").await else {
        return;
    };
    // A second migrate: PostgreSQL answers each `IF NOT EXISTS` with a notice, which sqlx
    // logged at info ("relation ... already exists, skipping").
    db.migrate().await;
    for filter in [None, Some("info"), Some("debug")] {
        let env: Vec<(&str, &str)> = filter.map(|f| ("OJS_LOG", f)).into_iter().collect();
        let out = cli_with_env(
            &["--database-url", &db.url, "--table", &db.table, "migrate"],
            &env,
        )
        .await;
        assert_success(&out, "migrate");
        assert_eq!(
            sqlx_chatter(&text(&out.stderr)),
            Vec::<String>::new(),
            "OJS_LOG={filter:?}"
        );
    }
    // Asked for, sqlx's lines are there.
    let out = cli_with_env(
        &["--database-url", &db.url, "--table", &db.table, "migrate"],
        &[("OJS_LOG", "info,sqlx=info")],
    )
    .await;
    assert!(
        text(&out.stderr).contains("already exists, skipping"),
        "{}",
        text(&out.stderr)
    );

    // The server ends the relay's connections (as a restart does): sqlx finds each pooled one
    // dead when it next takes it, and logged that at info with PostgreSQL's source position
    // ("terminating connection due to administrator command at line 3211").
    let server = DevServer::start(0).await.unwrap();
    let app = format!("ojs_relay_quiet_{}", std::process::id());
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let relay_url = format!("{}{separator}application_name={app}", db.url);
    let log_path = db.dir.file("relay.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut relay = RelayProcess {
        child: std::process::Command::new(BIN)
            .env_remove("OJS_DATABASE_URL")
            .env_remove("OJS_URL")
            .env_remove("OJS_RELAY_TOKEN")
            .env_remove("OJS_LOG")
            .args(["--database-url", &relay_url, "--table", &db.table])
            .args([
                "run",
                "--ojs-url",
                &server.url(),
                "--poll-interval",
                "PT0.1S",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
        log_path,
    };
    let admin = sqlx::PgPool::connect(&db.url).await.unwrap();
    let sessions = "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (n,): (i64,) = sqlx::query_as(sessions)
            .bind(&app)
            .fetch_one(&admin)
            .await
            .unwrap();
        if n > 0 && relay.log().contains("relay started") {
            break;
        }
        assert!(
            Instant::now() < deadline && relay.is_running(),
            "the relay did not connect; log:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let terminated: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&app)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!terminated.is_empty());
    admin.close().await;
    // A row staged after that is delivered only through a connection taken after it: the
    // relay got past its dead ones.
    db.stage(vec![NewJob::new("quiet.job", json!([1]))]).await;
    db.wait_status(Duration::from_secs(30), "the row sent", Some(&relay), |s| {
        s["sent"] == json!(1)
    })
    .await;
    assert_eq!(
        relay.terminate(Duration::from_secs(20)).await.code(),
        Some(0)
    );
    let log = relay.log();
    assert_eq!(
        sqlx_chatter(&log),
        Vec::<String>::new(),
        "relay log:\n{log}"
    );
    assert!(
        log.contains("relay started") && log.contains("relay stopped"),
        "{log}"
    );
    server.shutdown().await;
    db.drop_table().await;
}

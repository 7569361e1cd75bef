//! Shared helpers: temporary databases (SQLite always, PostgreSQL when `OJS_TEST_DATABASE_URL`
//! is set), the `ojs-relay` binary as a real process, the devserver's HTTP control API.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ojs_outbox::{Config, NewJob, Outbox};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ojs-relay");

/// A directory removed on drop (kept when the test panicked, for the logs in it).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "ojs-relay-test-{name}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            eprintln!("test files kept in {}", self.0.display());
        }
    }
}

/// Which database a test variant runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    /// MariaDB (`OJS_TEST_MYSQL_URL`).
    Mysql,
}

/// One outbox table in one database, owned by one test.
pub struct Db {
    pub kind: Kind,
    pub url: String,
    pub table: String,
    pub dir: TempDir,
}

impl Db {
    /// A fresh database for the test `name`, or `None` (with the reason printed) when the
    /// PostgreSQL variant cannot run here. The table does not exist yet.
    pub async fn new(kind: Kind, name: &str) -> Option<Db> {
        let dir = TempDir::new(name);
        let table = format!("relay_test_{name}");
        let url = match kind {
            Kind::Sqlite => format!("sqlite://{}", dir.file("outbox.db").display()),
            Kind::Postgres => match std::env::var("OJS_TEST_DATABASE_URL") {
                Ok(url) if !url.is_empty() => url,
                _ => {
                    eprintln!(
                        "SKIPPED the PostgreSQL variant of {name}: OJS_TEST_DATABASE_URL is not set"
                    );
                    return None;
                }
            },
            Kind::Mysql => match std::env::var("OJS_TEST_MYSQL_URL") {
                Ok(url) if !url.is_empty() => url,
                _ => {
                    assert!(
                        std::env::var_os("CI").is_none(),
                        "OJS_TEST_MYSQL_URL is unset under CI"
                    );
                    eprintln!(
                        "SKIPPED the MariaDB variant of {name}: OJS_TEST_MYSQL_URL is not set"
                    );
                    return None;
                }
            },
        };
        let db = Db {
            kind,
            url,
            table,
            dir,
        };
        db.drop_table().await;
        Some(db)
    }

    pub async fn drop_table(&self) {
        use sqlx::Executor;
        let sql = sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {}", self.table));
        if self.kind == Kind::Postgres {
            let pool = sqlx::PgPool::connect(&self.url)
                .await
                .expect("connect to OJS_TEST_DATABASE_URL");
            pool.execute(sql).await.unwrap();
            pool.close().await;
        } else if self.kind == Kind::Mysql {
            let t = &self.table;
            let sql = format!("DROP TABLE IF EXISTS {t}, {t}_events, {t}_relays, {t}_locks");
            let pool = sqlx::MySqlPool::connect(&self.url)
                .await
                .expect("connect to OJS_TEST_MYSQL_URL");
            pool.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
            pool.close().await;
        } else if let Ok(pool) = sqlx::SqlitePool::connect(&self.url).await {
            pool.execute(sql).await.unwrap();
            pool.close().await;
        }
    }

    /// `ojs-relay --database-url URL --table T ARGS...`, run to completion.
    pub async fn cli(&self, args: &[&str]) -> Output {
        let mut full = vec![
            "--database-url",
            self.url.as_str(),
            "--table",
            self.table.as_str(),
        ];
        full.extend_from_slice(args);
        cli(&full).await
    }

    /// `status --json`, parsed; panics when the command fails.
    pub async fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]).await;
        assert_success(&out, "status --json");
        serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
    }

    pub async fn migrate(&self) {
        let out = self.cli(&["migrate"]).await;
        assert_success(&out, "migrate");
    }

    fn config(&self) -> Config {
        let mut config = Config {
            database_url: Some(self.url.clone()),
            ..Config::default()
        };
        config.outbox.table_name = self.table.clone();
        config
    }

    /// Stages and commits these jobs through the core (no relay runs in this process);
    /// returns their job ids in staging order.
    pub async fn stage(&self, jobs: Vec<NewJob>) -> Vec<String> {
        let outbox = Outbox::connect(self.config())
            .await
            .expect("connect the outbox");
        let mut tx = outbox.begin().await.expect("begin");
        let ids = tx.enqueue_bulk(jobs).await.expect("enqueue_bulk");
        tx.commit().await.expect("commit");
        outbox.store().close().await;
        ids
    }

    /// Waits until `status --json` satisfies `done`, polling; panics after `timeout` with the
    /// last status and the relay log.
    pub async fn wait_status(
        &self,
        timeout: Duration,
        what: &str,
        relay: Option<&RelayProcess>,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status().await;
            if done(&status) {
                return status;
            }
            if Instant::now() > deadline {
                let log = relay.map(RelayProcess::log).unwrap_or_default();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last status {status}\nrelay log:\n{log}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts `ojs-relay run` against `ojs_url` with extra arguments; output goes to a log file.
    pub fn spawn_run(&self, ojs_url: &str, extra: &[&str]) -> RelayProcess {
        let mut args = vec!["run", "--ojs-url", ojs_url];
        args.extend_from_slice(extra);
        self.spawn(&args)
    }

    /// Starts `ojs-relay --database-url URL --table T ARGS...` (a long-running command);
    /// output goes to a log file.
    pub fn spawn(&self, args: &[&str]) -> RelayProcess {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let log_path = self.dir.file(&format!(
            "relay-{}.log",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = base_command();
        command
            .args(["--database-url", &self.url, "--table", &self.table])
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = command.spawn().expect("spawn ojs-relay");
        RelayProcess { child, log_path }
    }

    /// Writes a JSON config file into the test directory and returns its path.
    pub fn config_file(&self, json: &str) -> String {
        let path = self.dir.file("config.json");
        std::fs::write(&path, json).unwrap();
        path.display().to_string()
    }
}

fn base_command() -> Command {
    let mut command = Command::new(BIN);
    // Hermetic: nothing from the developer's environment leaks into the settings.
    command
        .env_remove("OJS_DATABASE_URL")
        .env_remove("OJS_URL")
        .env_remove("OJS_RELAY_TOKEN")
        .env("OJS_LOG", "info")
        .stdin(Stdio::null());
    command
}

/// Runs `ojs-relay ARGS...` to completion off the async runtime (the devserver shares it).
pub async fn cli(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || base_command().args(&args).output().expect("run ojs-relay"))
        .await
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "`ojs-relay {what}` failed with {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Asserts the command failed with `exit_code` and exactly one stderr line, `error [CODE]: ...`;
/// returns that line.
pub fn assert_error(out: &Output, code: &str, exit_code: i32) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(exit_code),
        "exit code; stderr: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line of error, got: {stderr}");
    let prefix = format!("error [{code}]: ");
    assert!(
        lines[0].starts_with(&prefix),
        "expected {prefix:?}..., got {:?}",
        lines[0]
    );
    lines[0].to_owned()
}

/// A running `ojs-relay run`; killed (SIGKILL) on drop if still running.
pub struct RelayProcess {
    pub child: Child,
    pub log_path: PathBuf,
}

impl RelayProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGTERM, then waits (up to `timeout`) for the exit status.
    pub async fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        self.wait(timeout).await
    }

    /// SIGKILL: the crash. Std's `Child::kill` sends SIGKILL on Unix.
    pub fn sigkill(&mut self) {
        self.child.kill().expect("SIGKILL the relay");
    }

    pub async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "the relay did not exit within {timeout:?}; log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The devserver's control API, over HTTP.

pub async fn http_get(url: &str) -> Value {
    let response = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

pub async fn http_send(method: reqwest::Method, url: &str, body: Option<Value>) -> Value {
    let mut request = reqwest::Client::new().request(method.clone(), url);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{method} {url}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

pub async fn add_fault(base: &str, fault: Value) {
    http_send(
        reqwest::Method::POST,
        &format!("{base}/_dev/faults"),
        Some(fault),
    )
    .await;
}

pub async fn clear_faults(base: &str) {
    http_send(
        reqwest::Method::DELETE,
        &format!("{base}/_dev/faults"),
        None,
    )
    .await;
}

/// `GET /_dev/received`.
pub async fn received(base: &str) -> Value {
    http_get(&format!("{base}/_dev/received")).await
}

/// The ids of the stored jobs, in arrival order.
pub fn received_ids(received: &Value) -> Vec<String> {
    received["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

pub fn as_set(ids: &[String]) -> HashSet<String> {
    ids.iter().cloned().collect()
}

pub fn count(status: &Value, key: &str) -> i64 {
    status[key]
        .as_i64()
        .unwrap_or_else(|| panic!("status has no {key}: {status}"))
}

/// The address the relay logged it serves on.
pub async fn served_at(relay: &RelayProcess) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = relay.log();
        if let Some(at) = log.lines().find_map(|line| line.split("on http://").nth(1)) {
            return format!("http://{}", at.trim());
        }
        assert!(Instant::now() < deadline, "no listen line; log:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads SSE frames until `n` events arrived; returns (id, event type, data) per event.
pub async fn frames(
    response: reqwest::Response,
    n: usize,
) -> Vec<(String, String, serde_json::Value)> {
    let mut response = response;
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while events.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} events: {events:?}", events.len()))
            .expect("stream")
            .expect("stream ended early");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                    .unwrap_or("")
                    .to_owned()
            };
            if field("data").is_empty() {
                continue; // a keep-alive comment
            }
            let data: serde_json::Value = serde_json::from_str(&field("data")).unwrap();
            events.push((field("id"), field("event"), data));
        }
    }
    events
}

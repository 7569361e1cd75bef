//! The reference runner of the conformance cases in `conformance-tests/cases/`. It drives
//! `ojs_bridge::Bridge` exactly as a language binding does (issue 14, item 3), against
//! a real database and the dev backend, which it observes only through its HTTP control API,
//! as every other language's runner does. The Rust-native `Outbox` / `OutboxTransaction` keep
//! their own tests in `crates/ojs-outbox/tests`.
//!
//! # The runner plays the host framework
//!
//! What Django, knex or ActiveRecord do around a binding, the runner does itself:
//!
//! - It owns the **host connection**: one sqlx connection of its own to the case's database
//!   (a SQLite file, or PostgreSQL), not the relay's. It creates the outbox table on it with
//!   the core's DDL (`Bridge::drop_table_sql`, `create_table_sql`), as a migration would, and
//!   runs `BEGIN`, `SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK TO SAVEPOINT`, `COMMIT` and
//!   `ROLLBACK` on it as its own SQL.
//! - Staging: `Bridge::stage_job` for `enqueue_after_commit` (the bindings' per-job hot path)
//!   and `Bridge::stage` for `enqueue_bulk`, in the dialect and placeholder style the host
//!   declares (`sqlite` + `question`, `postgresql` + `dollar`). The runner executes the returned
//!   statements on the host connection with text parameters; when `Staged::needs_savepoint`
//!   says so, inside `SAVEPOINT ojs_stage`, rolled back to on failure (in autocommit, inside a
//!   transaction of their own), so a bulk is all or nothing. A host driver's failure gets its
//!   code from `bridge::database_error_code`.
//! - Savepoint bookkeeping: a `bridge::Ledger` per host transaction (`staged` after the
//!   statements ran, `savepoint`, `release`, `rollback_savepoint`); after the outermost
//!   `COMMIT`, `Bridge::committed(&mut ledger)` wakes the relay; after `ROLLBACK`,
//!   `ledger.rollback()`. `commit` with `crash_before_hook` commits and never calls
//!   `committed`, which is what a process that dies right after COMMIT does. In autocommit
//!   (no transaction open) the rows are committed by their own statement and
//!   `Bridge::notify_committed` is the after-commit hook, as in the bindings.
//! - The request context is the JSON text the bridge takes (`RequestContext::from_json`: the
//!   case's keys as they are; a middleware may also pass `{"headers": {...}}`), held by the
//!   runner as a middleware holds it and passed to every stage or send.
//! - Everything else is an `Bridge` call: `start_relay` / `stop_relay` / `kill_relay` /
//!   `close`, `enqueue_now`, `prune`, `dead_replay`, `dead_purge`, and the committed view of
//!   the outbox (`rows_json`, `status_json`). While a transaction is open, `expect_outbox` and
//!   `wait_outbox` read through the host connection instead (test-only SELECTs), so the case
//!   sees its own uncommitted rows, as the README asks.
//!
//! # Threads and runtimes
//!
//! The runner is synchronous, like a binding's host language: `run_case` blocks. `Bridge`
//! owns its own tokio runtime and blocks in its calls; the host connection (async sqlx) and the
//! dev backend's control API (async reqwest) are driven by a current-thread runtime of the
//! runner's own, entered with `block_on` once per host action. No `Bridge` method is ever
//! called inside that `block_on`, so the two runtimes never nest. The dev backend runs on a
//! runtime of the test's own (`tests/conformance.rs`), as the separate process it stands for.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod events;
mod worker;

use ojs_bridge::{self as bridge, Bridge, Ledger, Staged};
use ojs_outbox::Error;
use ojs_outbox::sql::Returns;
use serde_json::{Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{
    AssertSqlSafe, ConnectOptions, Connection, MySqlConnection, PgConnection, SqliteConnection,
};

/// One case file.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Case {
    pub id: String,
    pub spec: Vec<String>,
    pub title: String,
    #[serde(default)]
    pub config: Option<Value>,
    #[serde(default)]
    pub relay: Option<String>,
    pub steps: Vec<Value>,
}

pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cases")
}

pub fn load_cases() -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("conformance-tests/cases exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("readable case");
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// The suite defaults: the `default` annotation of every config key in the case schema, the
/// one source every language's runner reads (conformance-tests/README.md).
pub fn suite_defaults() -> Value {
    let path = cases_dir().join("../schema/case.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("case schema readable"))
            .expect("schema is JSON");
    let mut defaults = json!({});
    for section in ["outbox", "relay"] {
        let keys = &schema["$defs"]["config"]["properties"][section]["properties"];
        for (key, spec) in keys.as_object().into_iter().flatten() {
            if let Some(default) = spec.get("default") {
                defaults[section][key] = default.clone();
            }
        }
    }
    defaults
}

/// A database a case runs on: a fresh SQLite file per case, or a fresh table per case on a
/// shared PostgreSQL server.
#[derive(Debug, Clone)]
pub enum Database {
    Sqlite { dir: PathBuf },
    Postgres { url: String },
    Mysql { url: String },
}

impl Database {
    pub fn name(&self) -> &'static str {
        match self {
            Database::Sqlite { .. } => "sqlite",
            Database::Postgres { .. } => "postgres",
            Database::Mysql { .. } => "mysql",
        }
    }

    fn url_and_table(&self, case: &Case) -> (String, String) {
        let slug: String = case
            .id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let table = format!("ojs_case_{}", &slug[..slug.len().min(40)]);
        match self {
            Database::Sqlite { dir } => {
                let path = dir.join(format!("{slug}.db"));
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
                (format!("sqlite://{}", path.display()), table)
            }
            Database::Postgres { url } | Database::Mysql { url } => (url.clone(), table),
        }
    }
}

/// Merges `patch` into `base` (objects recursively, anything else replaced).
/// The encryption extension's envelope: args `[{"ojs_encoded": true, "encoding":
/// "binary/encrypted", "data": "..."}]`, meta naming the encoding and a key.
fn is_encrypted(job: &Value) -> bool {
    let args = job["args"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let envelope = match args {
        [envelope] => envelope,
        _ => return false,
    };
    envelope["ojs_encoded"] == json!(true)
        && envelope["encoding"] == json!("binary/encrypted")
        && envelope["data"].is_string()
        && job["meta"]["ojs.codec.encodings"] == json!(["binary/encrypted"])
        && job["meta"]["ojs.codec.key_id"].is_string()
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

/// The dev backend, seen only through its HTTP control API.
struct Backend {
    url: String,
    http: reqwest::Client,
}

impl Backend {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("dev backend {path}: {e}"))?;
        let text = response.text().await.map_err(|e| e.to_string())?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn received(&self) -> Result<Value, String> {
        self.call(reqwest::Method::GET, "/_dev/received", None)
            .await
    }
}

/// The ids of stored jobs in arrival order, with their record.
fn stored_jobs(received: &Value) -> Vec<&Value> {
    received["jobs"]
        .as_array()
        .map(|jobs| jobs.iter().collect())
        .unwrap_or_default()
}

fn is_subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(expected), Value::Object(actual)) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|a| is_subset(value, a))),
        _ => expected == actual,
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

/// The jobs of an `enqueue_bulk` step as the bridge takes them (`{"type", "args",
/// "options"?}`), with their refs.
fn bulk_jobs(step: &Value) -> (Vec<Option<String>>, Vec<Value>) {
    if let Some(generate) = step.get("generate") {
        let count = generate["count"].as_u64().unwrap_or(0);
        let job_type = generate["type"].as_str().unwrap_or_default();
        let prefix = generate["ref_prefix"].as_str().unwrap_or("g");
        return (0..count)
            .map(|i| {
                (
                    Some(format!("{prefix}{i}")),
                    json!({"type": job_type, "args": [i]}),
                )
            })
            .unzip();
    }
    step["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|job| (job["ref"].as_str().map(str::to_owned), job_input(job)))
        .unzip()
}

/// One job of a step as a binding hands it over: type, args (passed unchanged, arrays or not)
/// and options when given.
fn job_input(step: &Value) -> Value {
    let mut job = json!({"type": step["type"], "args": step["args"]});
    if let Some(options) = step.get("options") {
        job["options"] = options.clone();
    }
    job
}

/// The host framework's connection to the case's database.
enum HostConnection {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
    Mysql(MySqlConnection),
}

/// Runs the same sqlx expression on whichever connection the host holds.
macro_rules! on_connection {
    ($connection:expr, |$c:ident| $body:expr) => {
        match $connection {
            HostConnection::Sqlite($c) => $body,
            HostConnection::Postgres($c) => $body,
            HostConnection::Mysql($c) => $body,
        }
    };
}

/// The host side: its connection, the dialect and placeholder style it declares to the
/// bridge, and the current-thread runtime that drives its async driver (see the module doc).
struct Host {
    runtime: tokio::runtime::Runtime,
    connection: HostConnection,
    dialect: &'static str,
    placeholder: &'static str,
}

impl Host {
    fn connect(database: &Database, url: &str) -> Result<Host, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("host runtime: {e}"))?;
        let (connection, dialect, placeholder) = match database {
            Database::Sqlite { .. } => {
                // As the relay's own pool opens it: WAL, and a writer waits for the other one.
                let options = SqliteConnectOptions::from_str(url)
                    .map_err(|e| format!("{url}: {e}"))?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(10));
                let connection = runtime
                    .block_on(options.connect())
                    .map_err(|e| format!("host connection: {e}"))?;
                (HostConnection::Sqlite(connection), "sqlite", "question")
            }
            Database::Postgres { .. } => {
                let connection = runtime
                    .block_on(PgConnection::connect(url))
                    .map_err(|e| format!("host connection: {e}"))?;
                (HostConnection::Postgres(connection), "postgresql", "dollar")
            }
            Database::Mysql { .. } => {
                let connection = runtime
                    .block_on(MySqlConnection::connect(url))
                    .map_err(|e| format!("host connection: {e}"))?;
                (HostConnection::Mysql(connection), "mysql", "question")
            }
        };
        Ok(Host {
            runtime,
            connection,
            dialect,
            placeholder,
        })
    }

    /// Runs host-side async work (the backend's control API) to completion. Never an
    /// `Bridge` call: that would nest the adapter's runtime inside this one.
    fn block_on<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// Runs one statement of the bridge's with its text parameters.
    fn execute(&mut self, sql: &str, params: &[Option<String>]) -> Result<(), Error> {
        let Host {
            runtime,
            connection,
            ..
        } = self;
        runtime
            .block_on(async {
                on_connection!(connection, |c| {
                    let mut query = sqlx::query(AssertSqlSafe(sql.to_owned()));
                    for param in params {
                        query = query.bind(param.as_deref());
                    }
                    query.execute(&mut *c).await.map(drop)
                })
            })
            .map_err(host_error)
    }

    /// Runs one statement of the bridge's that returns a row (a unique job's): its first
    /// column, or `None` when it returned no row.
    fn fetch_first(
        &mut self,
        sql: &str,
        params: &[Option<String>],
    ) -> Result<Option<String>, Error> {
        let Host {
            runtime,
            connection,
            ..
        } = self;
        runtime
            .block_on(async {
                on_connection!(connection, |c| {
                    let mut query = sqlx::query_as::<_, (String,)>(AssertSqlSafe(sql.to_owned()));
                    for param in params {
                        query = query.bind(param.as_deref());
                    }
                    query.fetch_optional(&mut *c).await
                })
            })
            .map(|row| row.map(|(id,)| id))
            .map_err(host_error)
    }

    /// Runs the host's own SQL (transaction control, DDL).
    fn run(&mut self, sql: &str) -> Result<(), Error> {
        let Host {
            runtime,
            connection,
            ..
        } = self;
        runtime
            .block_on(async {
                on_connection!(connection, |c| {
                    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
                        .execute(&mut *c)
                        .await
                        .map(drop)
                })
            })
            .map_err(host_error)
    }

    /// `{job_id: status}` of every row of `table`, as the host connection sees it (inside an
    /// open transaction: its own uncommitted rows included). Test-only SQL, as in the other
    /// runners: the core offers no read statement for host connections.
    fn rows(&mut self, table: &str) -> Result<HashMap<String, String>, Error> {
        let text = match self.connection {
            HostConnection::Mysql(_) => "CHAR",
            _ => "TEXT",
        };
        let sql = format!("SELECT CAST(job_id AS {text}), status FROM {table}");
        let Host {
            runtime,
            connection,
            ..
        } = self;
        let rows: Vec<(String, String)> = runtime
            .block_on(async {
                on_connection!(connection, |c| {
                    sqlx::query_as(AssertSqlSafe(sql)).fetch_all(&mut *c).await
                })
            })
            .map_err(host_error)?;
        Ok(rows.into_iter().collect())
    }

    /// Rows in `table` as the host connection sees them.
    fn count(&mut self, table: &str) -> Result<i64, Error> {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        let Host {
            runtime,
            connection,
            ..
        } = self;
        let (count,): (i64,) = runtime
            .block_on(async {
                on_connection!(connection, |c| {
                    sqlx::query_as(AssertSqlSafe(sql)).fetch_one(&mut *c).await
                })
            })
            .map_err(host_error)?;
        Ok(count)
    }

    fn close(self) {
        let Host {
            runtime,
            connection,
            ..
        } = self;
        let _ = runtime.block_on(async { on_connection!(connection, |c| c.close().await) });
    }
}

/// `race_enqueue`'s second transaction, on its own host connection: BEGIN, one
/// `enqueue_after_commit` as a binding runs it (a keyed job's statements, `held_outcome`),
/// COMMIT whatever the enqueue's outcome (a failed enqueue leaves the transaction usable),
/// then the after-commit wake-up. The job's id, or the enqueue's error.
fn stage_alone(
    host: &mut Host,
    adapter: &Bridge,
    step: &Value,
    context: Option<&str>,
) -> Result<String, Error> {
    host.run("BEGIN")?;
    let options = step.get("options").map(Value::to_string);
    let staged = adapter
        .stage_job(
            host.dialect,
            host.placeholder,
            step["type"].as_str().unwrap_or_default(),
            &step["args"].to_string(),
            options.as_deref(),
            None,
            context,
        )
        .and_then(|job| match &job.keyed {
            None => host
                .execute(&job.sql, &job.params)
                .map(|()| job.job_id.clone()),
            Some(staged) => {
                let mut ids = staged.job_ids.clone();
                for statement in &staged.statements {
                    match &statement.returns {
                        None => host.execute(&statement.sql, &statement.params)?,
                        Some(returns) => {
                            let returned = host.fetch_first(&statement.sql, &statement.params)?;
                            ids[returns.job] =
                                adapter.held_outcome(&returns.token, returned.as_deref())?;
                        }
                    }
                }
                Ok(ids.remove(0))
            }
        });
    host.run("COMMIT")?;
    if let Ok(id) = &staged {
        adapter.notify_committed(vec![id.clone()]);
    }
    staged
}

/// A host driver's failure as a binding reports it: the code from the bridge's rule.
fn host_error(error: sqlx::Error) -> Error {
    let (sqlstate, message) = match &error {
        sqlx::Error::Database(db) => (db.code().map(|c| c.into_owned()), db.message().to_owned()),
        other => (None, other.to_string()),
    };
    Error::new(
        bridge::database_error_code(sqlstate.as_deref(), &message),
        message,
    )
}

/// The name of the runner's savepoint at `depth` (1 for the first one), as a framework names
/// its nested transactions.
fn savepoint_name(depth: usize) -> String {
    format!("runner_savepoint_{depth}")
}

/// Statement text and parameters, borrowed from whichever staging answer they came in.
/// A `race_enqueue` running in the background: its step's ref and, once it ends, the
/// enqueue's outcome.
type Race = (
    Option<String>,
    std::sync::mpsc::Receiver<Result<String, Error>>,
);

/// A staging statement: text, parameters, and what its returned row means (a unique job).
type HostStatement<'s> = (&'s str, &'s [Option<String>], Option<&'s Returns>);

struct Run {
    adapter: Arc<Bridge>,
    host: Host,
    /// The case's database and URL, for the second connection of a race.
    database: (Database, String),
    /// A second transaction staging in the background (`race_enqueue`), with its step's ref.
    race: Option<Race>,
    backend: Backend,
    /// The open host transaction's bookkeeping; `None` when none is open (autocommit).
    ledger: Option<Ledger>,
    refs: HashMap<String, String>,
    /// The request context as the JSON text the bridge takes.
    context: Option<String>,
    last_commit_us: u64,
    /// The outbox table (the events' `source` names it).
    table: String,
    subscriptions: HashMap<String, events::Subscription>,
    /// The binding's worker (`worker_start` .. `worker_stop`).
    worker: Option<worker::SuiteWorker>,
}

impl Run {
    fn id_of(&self, reference: &str) -> Result<&String, String> {
        self.refs
            .get(reference)
            .ok_or_else(|| format!("ref {reference:?} was never enqueued"))
    }

    fn ids_of(&self, value: &Value) -> Result<Vec<(String, String)>, String> {
        value
            .as_array()
            .map(|refs| {
                refs.iter()
                    .filter_map(Value::as_str)
                    .map(|r| self.id_of(r).map(|id| (r.to_owned(), id.clone())))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    }

    fn check_error<T>(step: &Value, result: &Result<T, Error>) -> Result<bool, String> {
        match (step.get("expect_error").and_then(Value::as_str), result) {
            (Some(code), Err(error)) if error.code.as_str() == code => Ok(true),
            (Some(code), Err(error)) => Err(format!("expected error {code}, got {error}")),
            (Some(code), Ok(_)) => Err(format!("expected error {code}, the call succeeded")),
            (None, Err(error)) => Err(format!("unexpected error: {error}")),
            (None, Ok(_)) => Ok(false),
        }
    }

    fn remember(&mut self, reference: Option<&str>, job_id: String) {
        if let Some(reference) = reference {
            self.refs.insert(reference.to_owned(), job_id);
        }
    }

    /// The dev backend's record of what it received.
    fn received(&self) -> Result<Value, String> {
        self.host.block_on(self.backend.received())
    }

    /// A call to the dev backend's control API.
    fn control(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(), String> {
        self.host
            .block_on(self.backend.call(method, path, body))
            .map(drop)
    }

    /// One step's jobs through the bridge and onto the host connection: inside the open
    /// transaction, or in autocommit when none is open.
    fn stage(&mut self, step: &Value, bulk: bool) -> Result<(), String> {
        let (refs, staged) = if bulk {
            let (refs, jobs) = bulk_jobs(step);
            (refs, self.stage_bulk(&Value::Array(jobs)))
        } else {
            let reference = step["ref"].as_str().map(str::to_owned);
            (vec![reference], self.stage_one(step))
        };
        if Self::check_error(step, &staged)? {
            return Ok(());
        }
        let ids = staged.unwrap_or_default();
        if let (Some(same_as), Some(id)) = (step["same_as"].as_str(), ids.first()) {
            let expected = self.id_of(same_as)?;
            if expected != id {
                return Err(format!(
                    "expected the id of {same_as:?} ({expected}), got {id}"
                ));
            }
        }
        for (reference, id) in refs.iter().zip(ids) {
            self.remember(reference.as_deref(), id);
        }
        Ok(())
    }

    /// `enqueue_after_commit`: `Bridge::stage_job` (texts in, one INSERT out).
    fn stage_one(&mut self, step: &Value) -> Result<Vec<String>, Error> {
        let options = step.get("options").map(Value::to_string);
        let job = self.adapter.stage_job(
            self.host.dialect,
            self.host.placeholder,
            step["type"].as_str().unwrap_or_default(),
            &step["args"].to_string(),
            options.as_deref(),
            None,
            self.context.as_deref(),
        )?;
        if let Some(staged) = &job.keyed {
            return self.write_staged(staged);
        }
        self.write(&[(&*job.sql, &job.params, None)], false, vec![job.job_id])
    }

    /// Statements of `Bridge::stage` (or a keyed job's), as a binding runs them.
    fn write_staged(&mut self, staged: &Staged) -> Result<Vec<String>, Error> {
        let statements: Vec<HostStatement> = staged
            .statements
            .iter()
            .map(|s| (s.sql.as_str(), s.params.as_slice(), s.returns.as_ref()))
            .collect();
        self.write(&statements, staged.needs_savepoint, staged.job_ids.clone())
    }

    /// `enqueue_bulk`: `Bridge::stage` (a JSON array in, statements out).
    fn stage_bulk(&mut self, jobs: &Value) -> Result<Vec<String>, Error> {
        let staged = self.adapter.stage(
            self.host.dialect,
            self.host.placeholder,
            &jobs.to_string(),
            self.context.as_deref(),
        )?;
        self.write_staged(&staged)
    }

    /// Runs staged statements on the host connection. `all_or_nothing` (the bridge's
    /// `needs_savepoint`): inside a savepoint of their own, rolled back to on failure, so the
    /// transaction stays usable; in autocommit, inside a transaction of their own. Then the
    /// ids go to the ledger, or, in autocommit, straight to the after-commit hook.
    fn write(
        &mut self,
        statements: &[HostStatement],
        all_or_nothing: bool,
        job_ids: Vec<String>,
    ) -> Result<Vec<String>, Error> {
        let autocommit = self.ledger.is_none();
        let (open, undo, close) = match (all_or_nothing, autocommit) {
            (false, _) => (None, None, None),
            (true, false) => (
                Some("SAVEPOINT ojs_stage"),
                Some("ROLLBACK TO SAVEPOINT ojs_stage; RELEASE SAVEPOINT ojs_stage"),
                Some("RELEASE SAVEPOINT ojs_stage"),
            ),
            (true, true) => (Some("BEGIN"), Some("ROLLBACK"), Some("COMMIT")),
        };
        if let Some(open) = open {
            self.host.run(open)?;
        }
        let mut job_ids = job_ids;
        for (sql, params, returns) in statements {
            let done = match returns {
                None => self.host.execute(sql, params),
                Some(returns) => self.host.fetch_first(sql, params).and_then(|returned| {
                    job_ids[returns.job] = self
                        .adapter
                        .held_outcome(&returns.token, returned.as_deref())?;
                    Ok(())
                }),
            };
            if let Err(error) = done {
                if let Some(undo) = undo {
                    self.host.run(undo)?;
                }
                return Err(error);
            }
        }
        if let Some(close) = close {
            self.host.run(close)?;
        }
        match self.ledger.as_mut() {
            Some(ledger) => ledger.staged(job_ids.iter().cloned())?,
            None => {
                self.adapter.notify_committed(job_ids.clone());
                self.last_commit_us = now_us();
            }
        }
        Ok(job_ids)
    }

    fn ledger(&mut self) -> Result<&mut Ledger, String> {
        self.ledger
            .as_mut()
            .ok_or_else(|| "no transaction is open".to_owned())
    }

    fn step(&mut self, step: &Value) -> Result<(), String> {
        let op = step["op"].as_str().ok_or("step without op")?;
        let timeout = Duration::from_millis(step["timeout_ms"].as_u64().unwrap_or(10_000));
        let text = |e: Error| e.to_string();
        match op {
            "begin" => {
                if self.ledger.is_some() {
                    return Err("begin: a transaction is already open".into());
                }
                self.host.run("BEGIN").map_err(text)?;
                self.ledger = Some(Ledger::new());
            }
            "savepoint" => {
                let depth = self.ledger()?.depth();
                self.host
                    .run(&format!("SAVEPOINT {}", savepoint_name(depth)))
                    .map_err(text)?;
                self.ledger()?.savepoint().map_err(text)?;
            }
            "release_savepoint" => {
                let ledger = self.ledger()?;
                ledger.require_savepoint().map_err(text)?;
                let name = savepoint_name(ledger.depth() - 1);
                self.host
                    .run(&format!("RELEASE SAVEPOINT {name}"))
                    .map_err(text)?;
                self.ledger()?.release().map_err(text)?;
            }
            "rollback_savepoint" => {
                let ledger = self.ledger()?;
                ledger.require_savepoint().map_err(text)?;
                let name = savepoint_name(ledger.depth() - 1);
                self.host
                    .run(&format!(
                        "ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}"
                    ))
                    .map_err(text)?;
                self.ledger()?.rollback_savepoint().map_err(text)?;
            }
            "commit" => {
                let mut ledger = self.ledger.take().ok_or("no transaction is open")?;
                self.host.run("COMMIT").map_err(text)?;
                // A process that dies right after COMMIT never runs its after-commit hook.
                if step["crash_before_hook"].as_bool() != Some(true) {
                    self.adapter.committed(&mut ledger);
                }
                self.last_commit_us = now_us();
            }
            "rollback" => {
                let mut ledger = self.ledger.take().ok_or("no transaction is open")?;
                self.host.run("ROLLBACK").map_err(text)?;
                ledger.rollback();
            }
            "enqueue_after_commit" => self.stage(step, false)?,
            "enqueue_bulk" => self.stage(step, true)?,
            "enqueue" => {
                let result = self
                    .adapter
                    .enqueue_now(&job_input(step).to_string(), self.context.as_deref());
                if !Self::check_error(step, &result)? {
                    self.remember(step["ref"].as_str(), result.expect("succeeded"));
                }
            }
            "set_context" => self.context = Some(step["context"].to_string()),
            "clear_context" => self.context = None,
            "backend_fault" => {
                let mut fault = step.clone();
                fault.as_object_mut().expect("object").remove("op");
                self.control(reqwest::Method::POST, "/_dev/faults", Some(fault))?;
            }
            "backend_clear_faults" => {
                self.control(reqwest::Method::DELETE, "/_dev/faults", None)?;
            }
            "backend_manifest" => {
                let body = json!({"batch_enqueue": step["batch_enqueue"]});
                self.control(reqwest::Method::POST, "/_dev/manifest", Some(body))?;
            }
            "relay_start" => self.adapter.start_relay().map_err(text)?,
            "relay_stop" => self.adapter.stop_relay(),
            "relay_kill" => self.adapter.kill_relay(),
            "sleep" => std::thread::sleep(Duration::from_millis(step["ms"].as_u64().unwrap_or(0))),
            "race_enqueue" => {
                if self.ledger.is_none() || self.race.is_some() {
                    return Err(
                        "race_enqueue: needs an open transaction and no race running".into(),
                    );
                }
                let (database, url) = self.database.clone();
                let adapter = self.adapter.clone();
                let context = self.context.clone();
                let job = step.clone();
                let reference = step["ref"].as_str().map(str::to_owned);
                let (done, outcome) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let staged = Host::connect(&database, &url)
                        .map_err(|e| Error::new(ojs_outbox::ErrorCode::Database, e))
                        .and_then(|mut host| {
                            let staged = stage_alone(&mut host, &adapter, &job, context.as_deref());
                            host.close();
                            staged
                        });
                    let _ = done.send(staged);
                });
                self.race = Some((reference, outcome));
            }
            "race_join" => {
                let (reference, outcome) = self.race.take().ok_or("race_join: no race running")?;
                let staged = outcome
                    .recv_timeout(timeout)
                    .map_err(|_| "race_join: the racing transaction did not end in time")?;
                if !Self::check_error(step, &staged)? {
                    self.remember(reference.as_deref(), staged.unwrap_or_default());
                }
            }
            "prune" => {
                self.adapter
                    .prune(step["older_than"].as_str().unwrap_or("PT0S"))
                    .map_err(text)?;
            }
            "dead_replay" => {
                self.adapter
                    .dead_replay(step["tenant_id"].as_str())
                    .map_err(text)?;
            }
            "dead_purge" => {
                self.adapter
                    .dead_purge(step["tenant_id"].as_str())
                    .map_err(text)?;
            }
            "wait_delivered" => self.wait_delivered(step, timeout)?,
            "worker_start" => {
                let started = worker::SuiteWorker::start(&self.adapter, step)?;
                self.worker = Some(started);
            }
            "worker_stop" => {
                let running = self.worker.take().ok_or("no worker runs")?;
                running.stop(step["deadline_ms"].as_u64().unwrap_or(0));
            }
            "wait_jobs" => self.wait_jobs(step, timeout)?,
            "wait_outbox" => {
                let deadline = Instant::now() + timeout;
                loop {
                    match self.check_outbox_rows(&step["rows"]) {
                        Ok(()) => break,
                        Err(why) if Instant::now() >= deadline => {
                            return Err(format!("wait_outbox timed out: {why}"));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
            "expect_backend" => self.expect_backend(step)?,
            "expect_requests" => {
                let received = self.received()?;
                for kind in ["batch", "single"] {
                    if let Some(expected) = step.get(kind).and_then(Value::as_u64) {
                        let actual = received["requests"][kind].as_u64().unwrap_or(0);
                        if actual != expected {
                            return Err(format!(
                                "expected {expected} {kind} requests, the backend got {actual}"
                            ));
                        }
                    }
                }
            }
            "expect_outbox" => {
                self.check_outbox_rows(step.get("rows").unwrap_or(&Value::Null))?;
                let absent = self.ids_of(&step["absent"])?;
                let ids: Vec<String> = absent.iter().map(|(_, id)| id.clone()).collect();
                let rows = self.outbox_rows(&ids)?;
                if let Some((reference, _)) = absent.iter().find(|(_, id)| rows.contains_key(id)) {
                    return Err(format!("outbox still has a row for {reference:?}"));
                }
                if let Some(total) = step.get("total").and_then(Value::as_i64) {
                    let actual = self.count_rows()?;
                    if actual != total {
                        return Err(format!("expected {total} outbox rows, found {actual}"));
                    }
                }
            }
            "events_subscribe" => self.events_subscribe(step)?,
            "wait_events" => {
                let name = step["subscription"].as_str().unwrap_or_default();
                let expected = step["events"].as_array().cloned().unwrap_or_default();
                let subscription = self
                    .subscriptions
                    .get_mut(name)
                    .ok_or("no such subscription")?;
                subscription.wait(&expected, &self.refs, timeout)?;
            }
            "expect_events" => {
                let name = step["subscription"].as_str().unwrap_or_default();
                let subscription = self
                    .subscriptions
                    .get_mut(name)
                    .ok_or("no such subscription")?;
                subscription.expect(step, &self.refs)?;
            }
            other => return Err(format!("unknown op {other:?}")),
        }
        Ok(())
    }

    /// A subscriber of the relay's events through `Bridge::relay_events`, as a mount opens it:
    /// the step's filters as the query string's text, `Last-Event-ID` from an earlier event.
    fn events_subscribe(&mut self, step: &Value) -> Result<(), String> {
        let mut request = serde_json::Map::new();
        for key in ["types", "queues", "job_types", "tenant"] {
            if let Some(value) = step.get(key) {
                request.insert(key.to_owned(), value.clone());
            }
        }
        if let Some(after) = step.get("last_event_id") {
            let from = after["subscription"].as_str().unwrap_or_default();
            let job_id = self
                .id_of(after["ref"].as_str().unwrap_or_default())?
                .clone();
            let kind = after["type"].as_str().unwrap_or_default();
            let id = self
                .subscription(from)?
                .id_of(&job_id, kind)
                .ok_or_else(|| format!("{from:?} has received no {kind} about that job"))?;
            request.insert("last_event_id".to_owned(), Value::String(id));
        }
        let frames = self
            .adapter
            .relay_events(&Value::Object(request).to_string())
            .map_err(|e| e.to_string())?;
        let name = step["subscription"].as_str().unwrap_or_default().to_owned();
        let subscription = events::Subscription::new(frames, &self.table);
        self.subscriptions.insert(name, subscription);
        Ok(())
    }

    fn subscription(&mut self, name: &str) -> Result<&mut events::Subscription, String> {
        self.subscriptions
            .get_mut(name)
            .ok_or_else(|| format!("no subscription {name:?}"))
    }

    /// Until the backend's view of every listed job matches (README: `wait_jobs`).
    fn wait_jobs(&self, step: &Value, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let expected = step["jobs"].as_object().cloned().unwrap_or_default();
        loop {
            let mut why = None;
            for (reference, wanted) in &expected {
                let path = format!("/ojs/v1/jobs/{}", self.id_of(reference)?);
                let answer =
                    self.host
                        .block_on(self.backend.call(reqwest::Method::GET, &path, None))?;
                if let Some(mismatch) = worker::mismatch(wanted, &answer["job"]) {
                    why = Some(format!("{reference}: {mismatch}"));
                    break;
                }
            }
            match why {
                None => return Ok(()),
                Some(why) if Instant::now() >= deadline => {
                    return Err(format!("wait_jobs timed out: {why}"));
                }
                Some(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn wait_delivered(&self, step: &Value, timeout: Duration) -> Result<(), String> {
        let wanted = self.ids_of(&step["refs"])?;
        let deadline = Instant::now() + timeout;
        loop {
            let received = self.received()?;
            let stored: HashMap<&str, u64> = stored_jobs(&received)
                .iter()
                .filter_map(|job| {
                    Some((
                        job["id"].as_str()?,
                        job["received_at_us"].as_u64().unwrap_or(0),
                    ))
                })
                .collect();
            let missing: Vec<&String> = wanted
                .iter()
                .filter(|(_, id)| !stored.contains_key(id.as_str()))
                .map(|(r, _)| r)
                .collect();
            if missing.is_empty() {
                if let Some(min_elapsed) = step.get("min_elapsed_ms").and_then(Value::as_u64) {
                    let last = wanted
                        .iter()
                        .map(|(_, id)| stored[id.as_str()])
                        .max()
                        .unwrap_or(0);
                    let elapsed_ms = last.saturating_sub(self.last_commit_us) / 1000;
                    if elapsed_ms < min_elapsed {
                        return Err(format!(
                            "delivered {elapsed_ms} ms after commit, expected at least {min_elapsed} ms"
                        ));
                    }
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                let outbox = self.adapter.status_json().unwrap_or_default();
                return Err(format!(
                    "not delivered within {timeout:?}: {missing:?}; outbox {outbox}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `{job_id: status}` as the application sees the rows: through the host connection while
    /// its transaction is open (its own uncommitted rows too), else as committed, through the
    /// bridge (`rows_json`).
    fn outbox_rows(&mut self, ids: &[String]) -> Result<HashMap<String, String>, String> {
        if self.ledger.is_some() {
            let table = self.adapter.table_name().to_owned();
            return self.host.rows(&table).map_err(|e| e.to_string());
        }
        let rows = self
            .adapter
            .rows_json(ids.to_vec())
            .map_err(|e| e.to_string())?;
        let rows: HashMap<String, Value> =
            serde_json::from_str(&rows).map_err(|e| format!("rows_json: {e}"))?;
        Ok(rows
            .into_iter()
            .map(|(id, row)| (id, row["status"].as_str().unwrap_or("?").to_owned()))
            .collect())
    }

    /// Rows in the outbox table, seen as `outbox_rows` sees them (committed: the sum of the
    /// bridge's `status_json` counts).
    fn count_rows(&mut self) -> Result<i64, String> {
        if self.ledger.is_some() {
            let table = self.adapter.table_name().to_owned();
            return self.host.count(&table).map_err(|e| e.to_string());
        }
        let status: Value =
            serde_json::from_str(&self.adapter.status_json().map_err(|e| e.to_string())?)
                .map_err(|e| format!("status_json: {e}"))?;
        Ok(["pending", "failed", "sent", "dead"]
            .iter()
            .map(|key| status[key].as_i64().unwrap_or(0))
            .sum())
    }

    fn check_outbox_rows(&mut self, rows: &Value) -> Result<(), String> {
        let Some(rows) = rows.as_object() else {
            return Ok(());
        };
        let mut ids = Vec::new();
        for reference in rows.keys() {
            ids.push(self.id_of(reference)?.clone());
        }
        let states = self.outbox_rows(&ids)?;
        for (reference, expected) in rows {
            let id = self.id_of(reference)?;
            let actual = states.get(id).map(String::as_str).unwrap_or("absent");
            let allowed: Vec<&str> = match expected {
                Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                other => other.as_str().into_iter().collect(),
            };
            if !allowed.contains(&actual) {
                return Err(format!(
                    "row {reference:?} is {actual}, expected {expected}"
                ));
            }
        }
        Ok(())
    }

    fn expect_backend(&self, step: &Value) -> Result<(), String> {
        let received = self.received()?;
        let jobs = stored_jobs(&received);
        let position: HashMap<&str, usize> = jobs
            .iter()
            .enumerate()
            .filter_map(|(i, job)| Some((job["id"].as_str()?, i)))
            .collect();
        let expected = self.ids_of(&step["received"])?;
        for (reference, id) in &expected {
            if !position.contains_key(id.as_str()) {
                return Err(format!("the backend did not receive {reference:?}"));
            }
        }
        if step["order"].as_str() == Some("exact") {
            let positions: Vec<usize> = expected
                .iter()
                .map(|(_, id)| position[id.as_str()])
                .collect();
            if let Some(pair) = positions.windows(2).position(|w| w[0] > w[1]) {
                return Err(format!(
                    "{:?} arrived before {:?}",
                    expected[pair + 1].0,
                    expected[pair].0
                ));
            }
        }
        for (reference, id) in self.ids_of(&step["absent"])? {
            if position.contains_key(id.as_str()) {
                return Err(format!(
                    "the backend received {reference:?}, which must not be sent"
                ));
            }
        }
        if let Some(total) = step.get("total").and_then(Value::as_u64)
            && jobs.len() as u64 != total
        {
            return Err(format!(
                "the backend stored {} jobs, expected {total}",
                jobs.len()
            ));
        }
        let deliveries = |id: &str| received["deliveries"][id].as_u64().unwrap_or(0);
        if let Some(map) = step["deliveries_at_least"].as_object() {
            for (reference, minimum) in map {
                let n = deliveries(self.id_of(reference)?);
                if n < minimum.as_u64().unwrap_or(0) {
                    return Err(format!(
                        "{reference:?} was delivered {n} times, expected at least {minimum}"
                    ));
                }
            }
        }
        if let Some(map) = step["deliveries_exactly"].as_object() {
            for (reference, exactly) in map {
                let n = deliveries(self.id_of(reference)?);
                if Some(n) != exactly.as_u64() {
                    return Err(format!(
                        "{reference:?} was delivered {n} times, expected {exactly}"
                    ));
                }
            }
        }
        if let Some(map) = step["jobs"].as_object() {
            for (reference, expected) in map {
                let id = self.id_of(reference)?;
                let job = jobs
                    .iter()
                    .find(|job| job["id"].as_str() == Some(id.as_str()))
                    .ok_or(format!("{reference:?} not stored"))?;
                let mut fields = expected.clone();
                let meta_absent = fields
                    .as_object_mut()
                    .and_then(|f| f.remove("meta_absent"))
                    .unwrap_or(Value::Null);
                if !is_subset(&fields, job) {
                    return Err(format!("{reference:?}: expected {fields}, stored {job}"));
                }
                for key in meta_absent
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if job["meta"].get(key).is_some() {
                        return Err(format!(
                            "{reference:?}: meta must not have {key:?}, stored {}",
                            job["meta"]
                        ));
                    }
                }
            }
        }
        for (reference, id) in self.ids_of(&step["encrypted"])? {
            let job = jobs
                .iter()
                .find(|job| job["id"].as_str() == Some(id.as_str()))
                .ok_or(format!("{reference:?} not stored"))?;
            if !is_encrypted(job) {
                return Err(format!("{reference:?} is not stored encrypted: {job}"));
            }
        }
        Ok(())
    }

    /// Before the first step: the outbox table created afresh on the host connection with the
    /// core's DDL, as a framework migration does it, and the relay started unless the case
    /// says `"stopped"`.
    fn prepare(&mut self, case: &Case) -> Result<(), String> {
        let dialect = self.host.dialect;
        let text = |e: Error| e.to_string();
        let drop = self.adapter.drop_table_sql(dialect).map_err(text)?;
        self.host.run(&drop).map_err(text)?;
        for ddl in self.adapter.create_table_sql(dialect).map_err(text)? {
            self.host.run(&ddl).map_err(text)?;
        }
        if case.relay.as_deref() != Some("stopped") {
            self.adapter.start_relay().map_err(text)?;
        }
        Ok(())
    }

    /// After the last step, whatever the outcome: roll back a transaction left open, stop the
    /// relay abruptly and close the adapter and the host connection.
    fn finish(mut self) {
        if let Some(running) = self.worker.take() {
            running.stop(0);
        }
        if let Some(mut ledger) = self.ledger.take() {
            let _ = self.host.run("ROLLBACK");
            ledger.rollback();
        }
        self.adapter.kill_relay();
        self.adapter.close();
        self.host.close();
    }
}

/// Runs one case against one database and the dev backend at `backend_url` (reset first).
/// Blocks; call it outside any async runtime (see the module doc).
pub fn run_case(case: &Case, database: &Database, backend_url: &str) -> Result<(), String> {
    let (database_url, table) = database.url_and_table(case);
    let host = Host::connect(database, &database_url)?;
    let backend = Backend {
        url: backend_url.to_owned(),
        http: reqwest::Client::new(),
    };
    host.block_on(backend.call(reqwest::Method::POST, "/_dev/reset", None))?;
    let mut config = suite_defaults();
    merge(
        &mut config,
        &json!({"ojs_url": backend_url, "database_url": database_url, "outbox": {"table_name": table}}),
    );
    if let Some(patch) = &case.config {
        merge(&mut config, patch);
    }
    let adapter = Bridge::new(&config.to_string()).map_err(|e| format!("case config: {e}"))?;
    let mut run = Run {
        adapter: Arc::new(adapter),
        host,
        database: (database.clone(), database_url.clone()),
        race: None,
        backend,
        ledger: None,
        refs: HashMap::new(),
        context: None,
        last_commit_us: 0,
        table,
        subscriptions: HashMap::new(),
        worker: None,
    };
    let mut result = run.prepare(case);
    if result.is_ok() {
        for (index, step) in case.steps.iter().enumerate() {
            if let Err(why) = run.step(step) {
                result = Err(format!(
                    "step {index} ({}): {why}",
                    step["op"].as_str().unwrap_or("?")
                ));
                break;
            }
        }
    }
    run.finish();
    result
}

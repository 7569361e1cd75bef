//! The reference runner of the conformance cases in `conformance-tests/cases/`: it drives the
//! Rust-native adapter (`ojs_outbox::Outbox`) against a real database and the dev backend,
//! which it observes only through its HTTP control API, as every other language's runner does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ojs_outbox::{Config, NewJob, Outbox, OutboxTransaction, RequestContext};
use serde_json::{Value, json};

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
}

impl Database {
    pub fn name(&self) -> &'static str {
        match self {
            Database::Sqlite { .. } => "sqlite",
            Database::Postgres { .. } => "postgres",
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
            Database::Postgres { url } => (url.clone(), table),
        }
    }
}

/// Merges `patch` into `base` (objects recursively, anything else replaced).
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

fn job_of(step: &Value) -> NewJob {
    let mut job = NewJob::new(
        step["type"].as_str().unwrap_or_default(),
        step.get("args").cloned().unwrap_or(Value::Null),
    );
    if let Some(options) = step.get("options") {
        job = job.with_options(options.clone());
    }
    if let Some(meta) = step.get("meta") {
        job = job.with_meta(meta.clone());
    }
    job
}

/// The jobs of an `enqueue_bulk` step, with their refs.
fn bulk_jobs(step: &Value) -> Vec<(Option<String>, NewJob)> {
    if let Some(generate) = step.get("generate") {
        let count = generate["count"].as_u64().unwrap_or(0);
        let job_type = generate["type"].as_str().unwrap_or_default();
        let prefix = generate["ref_prefix"].as_str().unwrap_or("g");
        return (0..count)
            .map(|i| {
                (
                    Some(format!("{prefix}{i}")),
                    NewJob::new(job_type, json!([i])),
                )
            })
            .collect();
    }
    step["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .map(|job| (job["ref"].as_str().map(str::to_owned), job_of(job)))
                .collect()
        })
        .unwrap_or_default()
}

struct Run<'a> {
    outbox: &'a Outbox,
    backend: Backend,
    refs: HashMap<String, String>,
    context: Option<RequestContext>,
    last_commit_us: u64,
}

impl<'a> Run<'a> {
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

    fn check_error(step: &Value, result: &Result<(), ojs_outbox::Error>) -> Result<bool, String> {
        match (step.get("expect_error").and_then(Value::as_str), result) {
            (Some(code), Err(error)) if error.code.as_str() == code => Ok(true),
            (Some(code), Err(error)) => Err(format!("expected error {code}, got {error}")),
            (Some(code), Ok(())) => Err(format!("expected error {code}, the call succeeded")),
            (None, Err(error)) => Err(format!("unexpected error: {error}")),
            (None, Ok(())) => Ok(false),
        }
    }

    fn remember(&mut self, reference: Option<&str>, job_id: String) {
        if let Some(reference) = reference {
            self.refs.insert(reference.to_owned(), job_id);
        }
    }

    /// Stages one step's jobs: inside the open transaction, or in one of their own (autocommit).
    async fn stage(
        &mut self,
        tx: &mut Option<OutboxTransaction<'a>>,
        step: &Value,
        bulk: bool,
    ) -> Result<(), String> {
        let jobs = if bulk {
            bulk_jobs(step)
        } else {
            vec![(step["ref"].as_str().map(str::to_owned), job_of(step))]
        };
        let (refs, jobs): (Vec<Option<String>>, Vec<NewJob>) = jobs.into_iter().unzip();
        let autocommit = tx.is_none();
        if autocommit {
            let mut own = self.outbox.begin().await.map_err(|e| e.to_string())?;
            own.set_context(self.context.clone());
            *tx = Some(own);
        }
        let open = tx.as_mut().expect("a transaction is open");
        open.set_context(self.context.clone());
        let staged = open.enqueue_bulk(jobs).await;
        let staged_ids = staged.as_ref().ok().cloned();
        if Self::check_error(step, &staged.map(|_| ()))? {
            if autocommit {
                tx.take()
                    .expect("own")
                    .rollback()
                    .await
                    .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        for (reference, id) in refs.iter().zip(staged_ids.unwrap_or_default()) {
            self.remember(reference.as_deref(), id);
        }
        if autocommit {
            tx.take()
                .expect("own")
                .commit()
                .await
                .map_err(|e| e.to_string())?;
            self.last_commit_us = now_us();
        }
        Ok(())
    }

    async fn step(
        &mut self,
        tx: &mut Option<OutboxTransaction<'a>>,
        step: &Value,
    ) -> Result<(), String> {
        let op = step["op"].as_str().ok_or("step without op")?;
        let timeout = Duration::from_millis(step["timeout_ms"].as_u64().unwrap_or(10_000));
        let no_tx = || "no transaction is open".to_owned();
        match op {
            "begin" => {
                if tx.is_some() {
                    return Err("begin: a transaction is already open".into());
                }
                *tx = Some(self.outbox.begin().await.map_err(|e| e.to_string())?);
            }
            "savepoint" => tx
                .as_mut()
                .ok_or_else(no_tx)?
                .savepoint()
                .await
                .map_err(|e| e.to_string())?,
            "release_savepoint" => tx
                .as_mut()
                .ok_or_else(no_tx)?
                .release_savepoint()
                .await
                .map_err(|e| e.to_string())?,
            "rollback_savepoint" => tx
                .as_mut()
                .ok_or_else(no_tx)?
                .rollback_savepoint()
                .await
                .map_err(|e| e.to_string())?,
            "commit" => {
                let open = tx.take().ok_or_else(no_tx)?;
                if step["crash_before_hook"].as_bool() == Some(true) {
                    open.commit_without_hook()
                        .await
                        .map_err(|e| e.to_string())?;
                } else {
                    open.commit().await.map_err(|e| e.to_string())?;
                }
                self.last_commit_us = now_us();
            }
            "rollback" => tx
                .take()
                .ok_or_else(no_tx)?
                .rollback()
                .await
                .map_err(|e| e.to_string())?,
            "enqueue_after_commit" => self.stage(tx, step, false).await?,
            "enqueue_bulk" => self.stage(tx, step, true).await?,
            "enqueue" => {
                let result = self
                    .outbox
                    .enqueue_now(job_of(step), self.context.as_ref())
                    .await;
                let id = result.as_ref().ok().cloned();
                if !Self::check_error(step, &result.map(|_| ()))? {
                    self.remember(step["ref"].as_str(), id.expect("succeeded"));
                }
            }
            "set_context" => {
                let context: RequestContext =
                    serde_json::from_value(step["context"].clone()).map_err(|e| e.to_string())?;
                self.context = Some(context);
            }
            "clear_context" => self.context = None,
            "backend_fault" => {
                let mut fault = step.clone();
                fault.as_object_mut().expect("object").remove("op");
                self.backend
                    .call(reqwest::Method::POST, "/_dev/faults", Some(fault))
                    .await?;
            }
            "backend_clear_faults" => {
                self.backend
                    .call(reqwest::Method::DELETE, "/_dev/faults", None)
                    .await?;
            }
            "backend_manifest" => {
                let body = json!({"batch_enqueue": step["batch_enqueue"]});
                self.backend
                    .call(reqwest::Method::POST, "/_dev/manifest", Some(body))
                    .await?;
            }
            "relay_start" => self.outbox.start_relay(),
            "relay_stop" => self.outbox.stop_relay().await,
            "relay_kill" => self.outbox.kill_relay(),
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(step["ms"].as_u64().unwrap_or(0))).await
            }
            "prune" => {
                let retention =
                    ojs_outbox::duration::parse(step["older_than"].as_str().unwrap_or("PT0S"))?;
                self.outbox
                    .store()
                    .prune(retention, usize::MAX >> 1)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            "dead_replay" => {
                self.outbox
                    .store()
                    .dead_replay(step["tenant_id"].as_str())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            "dead_purge" => {
                self.outbox
                    .store()
                    .dead_purge(step["tenant_id"].as_str())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            "wait_delivered" => self.wait_delivered(step, timeout).await?,
            "wait_outbox" => {
                let deadline = Instant::now() + timeout;
                loop {
                    match self.check_outbox_rows(tx, &step["rows"]).await {
                        Ok(()) => break,
                        Err(why) if Instant::now() >= deadline => {
                            return Err(format!("wait_outbox timed out: {why}"));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }
            "expect_backend" => self.expect_backend(step).await?,
            "expect_requests" => {
                let received = self.backend.received().await?;
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
                self.check_outbox_rows(tx, step.get("rows").unwrap_or(&Value::Null))
                    .await?;
                let absent = self.ids_of(&step["absent"])?;
                let ids: Vec<String> = absent.iter().map(|(_, id)| id.clone()).collect();
                let rows = self.outbox_rows(tx, &ids).await?;
                if let Some((reference, _)) = absent.iter().find(|(_, id)| rows.contains_key(id)) {
                    return Err(format!("outbox still has a row for {reference:?}"));
                }
                if let Some(total) = step.get("total").and_then(Value::as_i64) {
                    let actual = match tx {
                        Some(open) => open.count_rows().await,
                        None => self.outbox.store().count_rows().await,
                    }
                    .map_err(|e| e.to_string())?;
                    if actual != total {
                        return Err(format!("expected {total} outbox rows, found {actual}"));
                    }
                }
            }
            other => return Err(format!("unknown op {other:?}")),
        }
        Ok(())
    }

    async fn wait_delivered(&self, step: &Value, timeout: Duration) -> Result<(), String> {
        let wanted = self.ids_of(&step["refs"])?;
        let deadline = Instant::now() + timeout;
        loop {
            let received = self.backend.received().await?;
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
                let outbox = self
                    .outbox
                    .store()
                    .status()
                    .await
                    .map(|s| format!("{s:?}"))
                    .unwrap_or_default();
                return Err(format!(
                    "not delivered within {timeout:?}: {missing:?}; outbox {outbox}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Outbox rows as the application sees them: through its open transaction when there is
    /// one (its own uncommitted rows included), else as committed.
    async fn outbox_rows(
        &self,
        tx: &mut Option<OutboxTransaction<'a>>,
        ids: &[String],
    ) -> Result<HashMap<String, ojs_outbox::store::RowState>, String> {
        match tx {
            Some(open) => open.rows_by_job_id(ids).await,
            None => self.outbox.store().rows_by_job_id(ids).await,
        }
        .map_err(|e| e.to_string())
    }

    async fn check_outbox_rows(
        &self,
        tx: &mut Option<OutboxTransaction<'a>>,
        rows: &Value,
    ) -> Result<(), String> {
        let Some(rows) = rows.as_object() else {
            return Ok(());
        };
        let mut ids = Vec::new();
        for reference in rows.keys() {
            ids.push(self.id_of(reference)?.clone());
        }
        let states = self.outbox_rows(tx, &ids).await?;
        for (reference, expected) in rows {
            let id = self.id_of(reference)?;
            let actual = states
                .get(id)
                .map(|s| s.status.as_str())
                .unwrap_or("absent");
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

    async fn expect_backend(&self, step: &Value) -> Result<(), String> {
        let received = self.backend.received().await?;
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
        Ok(())
    }
}

/// Runs one case against one database and the dev backend at `backend_url` (reset first).
pub async fn run_case(case: &Case, database: &Database, backend_url: &str) -> Result<(), String> {
    let backend = Backend {
        url: backend_url.to_owned(),
        http: reqwest::Client::new(),
    };
    backend
        .call(reqwest::Method::POST, "/_dev/reset", None)
        .await?;
    let (database_url, table) = database.url_and_table(case);
    let mut config = suite_defaults();
    merge(
        &mut config,
        &json!({"ojs_url": backend_url, "database_url": database_url, "outbox": {"table_name": table}}),
    );
    if let Some(patch) = &case.config {
        merge(&mut config, patch);
    }
    let config = Config::from_value(&config).map_err(|e| format!("case config: {e}"))?;
    let outbox = Outbox::connect(config).await.map_err(|e| e.to_string())?;
    if let Database::Postgres { .. } = database {
        let drop = format!("DROP TABLE IF EXISTS {table}");
        let pool = outbox.store().postgres_pool().expect("postgres");
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(pool)
            .await
            .map_err(|e| e.to_string())?;
    }
    outbox.store().migrate().await.map_err(|e| e.to_string())?;
    if case.relay.as_deref() != Some("stopped") {
        outbox.start_relay();
    }
    let mut run = Run {
        outbox: &outbox,
        backend,
        refs: HashMap::new(),
        context: None,
        last_commit_us: 0,
    };
    let mut tx = None;
    let mut result = Ok(());
    for (index, step) in case.steps.iter().enumerate() {
        if let Err(why) = run.step(&mut tx, step).await {
            result = Err(format!(
                "step {index} ({}): {why}",
                step["op"].as_str().unwrap_or("?")
            ));
            break;
        }
    }
    drop(tx);
    outbox.kill_relay();
    outbox.store().close().await;
    result
}

//! The one contract at the FFI line: what the language bindings (Python, Node, Ruby) call, and
//! how each thing crosses. Everything crosses as text, integers and flat records; the core owns
//! the tokio runtime, so bindings never run async code of their own. Fork-safe: a process
//! forked after the relay started (pre-fork servers: gunicorn, Puma cluster, Node cluster) gets
//! a fresh runtime and relay on first use.
//!
//! | thing | crosses as | decoded by each binding into |
//! |---|---|---|
//! | configuration | JSON text (spec §5.2) and a [`Host`] record | — |
//! | a staged job ([`Bridge::stage_job`]) | [`StagedJob::encode`]: one text, fields NUL-separated: `[sql]`, `job_id`, `type`, `args`, `options`, `meta`, `[tenant]` | the INSERT's parameters |
//! | staged jobs ([`Bridge::stage`]) | [`Staged::to_json`]: `{"job_ids", "statements": [{"sql", "params"}], "needs_savepoint"}` | statements to run, in a savepoint when told |
//! | staged jobs, INSERT texts kept ([`Bridge::stage`] then [`Staged::encode`]) | one text, NUL-separated: `needs_savepoint`, the ids, per statement its text's key in [`KeptTexts`], the text when not held yet, the parameters | the same (Node) |
//! | an error | [`Error::to_json`](ojs_outbox::Error::to_json): `{"code", "field", "message", "retryable", "family"}` | the class for `code` (docs/errors.md) |
//! | an id list | [`encode_ids`]: the ids joined by `\n` | a list of strings |
//! | the request context | JSON text: its keys, or `{"headers": {...}}` of [`context_header_names`] | — |
//! | savepoint bookkeeping | a [`Ledger`] per host transaction, for hosts without a savepoint-aware hook | — |
//! | an operator command | [`Bridge::admin`]: JSON in, a [`Report`] (stdout, stderr, exit code) out | printed as it is |
//! | relay log records | [`drain_log_feed`]: flat [`LogRecord`]s | the framework's logger |
//! | relay events (a mount) | [`Bridge::relay_events`] → [`events::RelayFrames`]: SSE frame text per `next` | written to the response as it is |
//! | an event client (an SDK) | [`Bridge::subscribe_events`] → [`events::EventFeed`]: CloudEvents JSON text per `next` | the language's iterator |

pub mod db_url;
pub mod events;
pub mod js_options;
pub mod relay_command;
mod staged_text;
pub mod surface;
pub mod worker;

pub use ojs_outbox::admin::Report;
pub use ojs_outbox::{Error, ErrorCode, ErrorFamily, Host, Result};
pub use relay_command::{RelayCommand, Started, relay_command, relay_exit_code};
pub use staged_text::{KEPT_TEXTS, KeptTexts};

use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::js_options::Renames;
use ojs_outbox::config::{Config, RelayMode};
use ojs_outbox::job::{NewJob, PreparedJob, RequestContext, prepare, prepare_json};
use ojs_outbox::outbox::Outbox;
use ojs_outbox::sql::{Dialect, OutboxSql, Placeholder, Statement};

/// The savepoint bookkeeping of one host transaction, for a binding whose host library has no
/// savepoint-aware after-commit hook: record staged ids, savepoints, releases and rollbacks in
/// it, and at the outermost commit hand it to [`Bridge::committed`].
pub use ojs_outbox::ledger::Ledger;

/// Jobs validated and turned into statements for the host connection. Serializes (for the
/// bindings that take it as one JSON text) as `{"job_ids": [...], "statements": [{"sql": "...",
/// "params": [text or null, ...]}], "needs_savepoint": bool}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Staged {
    pub job_ids: Vec<String>,
    pub statements: Vec<Statement>,
    /// Run the statements inside a savepoint of their own, rolled back if one fails: they
    /// must be all or nothing (`ledger::needs_savepoint`). The binding never decides this.
    pub needs_savepoint: bool,
}

impl Staged {
    /// The JSON text above: one string for a binding to cross and parse, however many jobs.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("strings serialize")
    }
}

/// One job validated and turned into its single-row INSERT (`Bridge::stage_job`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedJob {
    /// A job with an ordering key or a unique key is staged by statements of its own
    /// (`OutboxSql::insert_jobs`): then this holds them, and `sql`/`params` are unused.
    pub keyed: Option<Staged>,
    pub job_id: String,
    /// The same text for every job of a dialect and placeholder style (built once).
    pub sql: Arc<str>,
    /// `job_id, job_type, job_args, job_options, job_meta, tenant_id`, in the SQL's order.
    pub params: [Option<String>; 6],
}

impl StagedJob {
    /// The staged job's one encoding across the FFI line: one text, the fields separated by
    /// NUL characters: the INSERT text when `with_sql`, then the six parameters in the SQL's
    /// order. Without a tenant the text ends after `job_meta` (5 parameters: the tenant is
    /// NULL); with one it is the last field (possibly empty). No field can hold a NUL: the SQL
    /// is the core's, the id a UUID, the type validated, args/options/meta JSON texts (which
    /// escape control characters), and a tenant holding one is refused at validation. The SQL
    /// is the same for every call of a dialect and placeholder style: ask for it once.
    ///
    /// A keyed job (`keyed`) encodes as an empty first field, then its `Staged::to_json`: the
    /// binding runs it as it runs a bulk of one (a UUID or an INSERT text is never empty).
    pub fn encode(&self, with_sql: bool) -> String {
        if let Some(staged) = &self.keyed {
            return format!("\0{}", staged.to_json());
        }
        let sql = with_sql.then_some(&*self.sql);
        let [job_id, job_type, args, options, meta, tenant] = &self.params;
        let fields =
            [job_id, job_type, args, options, meta].map(|field| field.as_deref().unwrap_or(""));
        let length: usize = sql
            .iter()
            .chain(&fields)
            .chain(tenant.as_deref().iter())
            .map(|field| field.len() + 1)
            .sum();
        let mut out = String::with_capacity(length);
        for (index, field) in sql
            .iter()
            .chain(&fields)
            .chain(tenant.as_deref().iter())
            .enumerate()
        {
            if index > 0 {
                out.push('\0');
            }
            out.push_str(field);
        }
        out
    }
}

/// An id list's one encoding across the FFI line: the ids joined by `\n` (empty: no ids).
pub fn encode_ids(job_ids: &[String]) -> String {
    job_ids.join("\n")
}

/// The ids of an [`encode_ids`] text.
pub fn decode_ids(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The error for a value a binding cannot turn into JSON (a `Set`, `NaN`, a Python object): the
/// code of the part it is in (`args` → `INVALID_ARGS`, `options` → `INVALID_OPTIONS`, `meta` and
/// `context` → `INVALID_META`, `type` → `INVALID_JOB_TYPE`), the part as the field, and the
/// value's path (`args[0].tags`, `jobs[1].options.priority`) at the start of the message.
pub fn unencodable(part: &str, path: &str, why: &str) -> Error {
    let code = match part {
        "type" => ErrorCode::InvalidJobType,
        "options" => ErrorCode::InvalidOptions,
        "meta" | "context" => ErrorCode::InvalidMeta,
        _ => ErrorCode::InvalidArgs,
    };
    Error {
        code,
        field: Some(part.to_owned()),
        message: format!("{path}: {why}"),
        existing_job_id: None,
    }
}

/// One job as a binding hands it over (an element of the `jobs` JSON array).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobInput {
    #[serde(rename = "type")]
    job_type: Value,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    options: Option<Value>,
    #[serde(default)]
    meta: Option<Value>,
}

struct Running {
    pid: u32,
    runtime: tokio::runtime::Runtime,
    outbox: Outbox,
}

/// What an HTTP-only call (an event client, a worker request) needs when this process has no
/// outbox connection: a runtime and the backend client, without the database.
struct Client {
    pid: u32,
    runtime: tokio::runtime::Runtime,
    backend: ojs_outbox::backend::Backend,
}

/// One configured adapter per application (a Django settings module, an Express app, a Rails app).
pub struct Bridge {
    config: Config,
    notice: Option<String>,
    running: Mutex<Option<Arc<Running>>>,
    client: Mutex<Option<Arc<Client>>>,
    /// The single-row staging INSERT per (dialect, placeholder style), built on first use.
    insert_one: [OnceLock<Arc<str>>; 6],
    /// Job options may also come in the JavaScript spelling (`js_options.rs`).
    js_options: bool,
    /// `id::fork_generation() + 1` of the process whose relay `ensure_relay` started; 0: none.
    relay_started: std::sync::atomic::AtomicU64,
}

impl Bridge {
    /// Parses the spec §5.2 configuration, not in development mode (a missing backend URL is
    /// an error naming `adapter.ojs_url`); no I/O.
    pub fn new(config_json: &str) -> Result<Bridge> {
        Bridge::for_host(config_json, &Host::PRODUCTION)
    }

    /// Parses the configuration as `host` runs: the binding says whether its framework is in
    /// development mode, how its users spell the URL setting, and whether this handle talks to
    /// the backend at all (see [`Host`]). No I/O.
    pub fn for_host(config_json: &str, host: &Host) -> Result<Bridge> {
        let loaded = Config::load_json(config_json, host)?;
        Ok(Bridge {
            config: loaded.config,
            notice: loaded.notice,
            running: Mutex::new(None),
            client: Mutex::new(None),
            insert_one: Default::default(),
            js_options: false,
            relay_started: Default::default(),
        })
    }

    /// Job options may also be spelled the JavaScript way: camelCase keys and durations in
    /// milliseconds (`js_options.rs`). They are respelled into the spec's form before
    /// validation, so the job on the wire is the same; errors name the caller's spelling.
    pub fn accept_js_options(mut self) -> Bridge {
        self.js_options = true;
        self
    }

    /// The line the binding logs once, at warning level, through the framework's logger when
    /// this adapter was built: set when the development default URL was taken.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn table_name(&self) -> &str {
        &self.config.outbox.table_name
    }

    /// Whether a request's `X-OJS-Tenant` header may decide its jobs' tenant
    /// (`adapter.trust_tenant_header`, off by default).
    pub fn trust_tenant_header(&self) -> bool {
        self.config.trust_tenant_header
    }

    /// The request context the core reads from a context JSON (its keys, or `{"headers"}`),
    /// as JSON with the core's keys (`null` for absent ones), under this app's header trust:
    /// what a binding shows as the request's context (Express `req.ojs.context`).
    pub fn request_context_json(&self, context_json: &str) -> Result<String> {
        let context = RequestContext::from_json(context_json, self.trust_tenant_header())?;
        Ok(serde_json::to_string(&context).expect("a context serializes"))
    }

    /// Whether the relay runs in this process (`in_process`) or elsewhere (`external`).
    pub fn relay_in_process(&self) -> bool {
        self.config.relay.mode == RelayMode::InProcess
    }

    /// The DDL for a host connection of this dialect (`postgres`/`postgresql`, `sqlite`).
    pub fn create_table_sql(&self, dialect: &str) -> Result<Vec<String>> {
        Ok(OutboxSql::new(parse_dialect(dialect)?, self.table_name()).create_table())
    }

    /// The statement that removes the outbox table (a framework migration's reverse step).
    pub fn drop_table_sql(&self, dialect: &str) -> Result<String> {
        Ok(OutboxSql::new(parse_dialect(dialect)?, self.table_name()).drop_table())
    }

    /// Validates jobs (a JSON array of `{"type", "args", "options"?, "meta"?}`), merges the
    /// request context (JSON object or null), assigns ids, and returns the INSERT statements
    /// for the host connection in its dialect and placeholder style. All or nothing: one
    /// invalid job fails the call, naming its index when there are several.
    pub fn stage(
        &self,
        dialect: &str,
        placeholder: &str,
        jobs_json: &str,
        context_json: Option<&str>,
    ) -> Result<Staged> {
        let sql = OutboxSql::for_config(parse_dialect(dialect)?, &self.config);
        let placeholder = parse_placeholder(placeholder)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let context = context.as_ref();
        // The common bulk in one pass over the text: an array of job objects of known keys
        // (reading each element as a whole first, then again, was a tenth of a bulk's cost).
        // Anything else is read element by element, which names the first bad job.
        let prepared = match serde_json::from_str::<Vec<JobObject>>(jobs_json) {
            Ok(jobs) => prepare_each(jobs, |JobObject(texts)| {
                prepare_job_texts(texts, context, self.js_options)
            }),
            Err(_) => {
                let inputs: Vec<&RawValue> = serde_json::from_str(jobs_json).map_err(|e| {
                    Error::field(
                        ErrorCode::InvalidArgs,
                        "jobs",
                        format!("not a JSON array of jobs: {e}"),
                    )
                })?;
                prepare_each(inputs, |input| {
                    prepare_input(input, context, self.js_options)
                })
            }
        }?;
        let prepared = prepared
            .into_iter()
            .map(|job| self.config.seal(job))
            .collect::<Result<Vec<_>>>()?;
        let (job_ids, statements) = sql.insert_jobs(placeholder, prepared);
        Ok(Staged {
            job_ids,
            needs_savepoint: ojs_outbox::ledger::needs_savepoint(statements.len()),
            statements,
        })
    }

    /// `stage` for one job given as JSON texts: the per-call hot path of
    /// `enqueue_after_commit`. Same validation, ids and row as `stage` (a one-job array);
    /// `None` or `"null"` options/meta mean unset.
    #[allow(clippy::too_many_arguments)]
    pub fn stage_job(
        &self,
        dialect: &str,
        placeholder: &str,
        job_type: &str,
        args_json: &str,
        options_json: Option<&str>,
        meta_json: Option<&str>,
        context_json: Option<&str>,
    ) -> Result<StagedJob> {
        let dialect = parse_dialect(dialect)?;
        let placeholder = parse_placeholder(placeholder)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let job = with_options_text(self.js_options, options_json, |options_json| {
            prepare_json(
                job_type,
                args_json,
                options_json,
                meta_json,
                context.as_ref(),
            )
        })?;
        let job = self.config.seal(job)?;
        if job.order_key.is_some() || job.unique.is_some() {
            let (job_ids, statements) =
                OutboxSql::for_config(dialect, &self.config).insert_jobs(placeholder, vec![job]);
            return Ok(StagedJob {
                keyed: Some(Staged {
                    needs_savepoint: ojs_outbox::ledger::needs_savepoint(statements.len()),
                    job_ids,
                    statements,
                }),
                job_id: String::new(),
                sql: Arc::from(""),
                params: Default::default(),
            });
        }
        let slot = &self.insert_one[dialect as usize * 3 + placeholder as usize];
        let sql = slot
            .get_or_init(|| {
                let mut statements = OutboxSql::for_config(dialect, &self.config)
                    .insert(placeholder, std::slice::from_ref(&job));
                Arc::from(statements.remove(0).sql)
            })
            .clone();
        let PreparedJob {
            job_id,
            job_type,
            args_json,
            options_json,
            meta_json,
            tenant_id,
            ..
        } = job;
        Ok(StagedJob {
            keyed: None,
            params: [
                Some(job_id.clone()),
                Some(job_type),
                Some(args_json),
                Some(options_json),
                Some(meta_json),
                tenant_id,
            ],
            job_id,
            sql,
        })
    }

    /// A job's args as the application staged them: `args_json` opened with this process's
    /// key ring when they are the encryption envelope (`meta_json` names the key), else as
    /// they are (also in a process without a key ring: the envelope is what it may see). For a
    /// host that reads an outbox row itself (`select_job_sql`). Envelope that the ring cannot
    /// open (an unknown key, altered data): an error naming the reason, never the data.
    pub fn open_args(&self, args_json: &str, meta_json: &str) -> Result<String> {
        let args: Value = serde_json::from_str(args_json)
            .map_err(|e| Error::field(ErrorCode::InvalidArgs, "args", e.to_string()))?;
        if !ojs_outbox::codec::is_encoded(&args) {
            return Ok(args_json.to_owned());
        }
        let Some(codec) = self.config.encryption.as_deref() else {
            return Ok(args_json.to_owned());
        };
        let meta: Value = serde_json::from_str(meta_json)
            .map_err(|e| Error::field(ErrorCode::InvalidMeta, "meta", e.to_string()))?;
        Ok(codec
            .open_args(&args, &meta)?
            .map_or_else(|| args_json.to_owned(), |plain| plain.to_string()))
    }

    /// What a unique job's enqueue call reports, once its staging statement (one with
    /// `returns`) ran: `token` is `returns.token`, `returned` the first column of the row it
    /// returned (`None`: no row). The job id to report (the staged job's, or the held job's for
    /// `ignore`), or `DUPLICATE` (`existing_job_id` names the held job).
    pub fn held_outcome(&self, token: &str, returned: Option<&str>) -> Result<String> {
        ojs_outbox::sql::held_outcome(token, returned)
    }

    /// This process's runtime and outbox, created on first use (or after a fork: the parent's
    /// runtime has no threads in the child, so it is leaked, not dropped). The lock is held only
    /// to look them up, never across I/O.
    fn running(&self) -> Result<Arc<Running>> {
        let mut guard = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let pid = std::process::id();
        if guard.as_ref().is_some_and(|running| running.pid != pid) {
            std::mem::forget(guard.take());
        }
        if let Some(running) = guard.as_ref() {
            return Ok(running.clone());
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ojs-relay")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorCode::Database,
                    format!("cannot start the relay runtime: {e}"),
                )
            })?;
        let outbox = runtime.block_on(Outbox::connect(self.config.clone()))?;
        let running = Arc::new(Running {
            pid,
            runtime,
            outbox,
        });
        *guard = Some(running.clone());
        Ok(running)
    }

    /// A runtime and the backend for a call that only speaks HTTP: the running state's when
    /// there is one, else a small one of its own (the outbox database need not be reachable).
    fn with_http<T>(
        &self,
        work: impl FnOnce(&tokio::runtime::Runtime, &ojs_outbox::backend::Backend) -> Result<T>,
    ) -> Result<T> {
        if let Some(running) = self.running_here() {
            return work(&running.runtime, running.outbox.backend());
        }
        let client = {
            let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
            let pid = std::process::id();
            if guard.as_ref().is_some_and(|client| client.pid != pid) {
                std::mem::forget(guard.take()); // a forked child: the parent's threads are gone
            }
            match guard.as_ref() {
                Some(client) => client.clone(),
                None => {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .thread_name("ojs-client")
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            Error::new(
                                ErrorCode::BackendUnavailable,
                                format!("cannot start the client runtime: {e}"),
                            )
                        })?;
                    let backend = ojs_outbox::backend::Backend::new(&self.config)?;
                    let client = Arc::new(Client {
                        pid,
                        runtime,
                        backend,
                    });
                    *guard = Some(client.clone());
                    client
                }
            }
        };
        work(&client.runtime, &client.backend)
    }

    /// The running state of this process, if any, without creating it.
    fn running_here(&self) -> Option<Arc<Running>> {
        let guard = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard
            .as_ref()
            .filter(|running| running.pid == std::process::id())
            .cloned()
    }

    fn with_running<T>(&self, work: impl FnOnce(&Running) -> Result<T>) -> Result<T> {
        let running = self.running()?;
        work(&running)
    }

    /// Starts the in-process relay (FA-R003) unless the mode is `external`. Idempotent.
    pub fn start_relay(&self) -> Result<()> {
        if !self.relay_in_process() {
            return Ok(());
        }
        self.with_running(|running| {
            let _entered = running.runtime.enter();
            running.outbox.start_relay();
            Ok(())
        })
    }

    /// Starts the in-process relay unless [`ensure_relay`](Self::ensure_relay) already did in
    /// this process: once per process, and again in a forked child (pre-fork servers). For the
    /// bindings that start the relay on first use; one atomic load when it runs already.
    pub fn ensure_relay(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let generation = ojs_outbox::id::fork_generation() + 1;
        if self.relay_started.load(Ordering::Acquire) == generation {
            return Ok(());
        }
        self.start_relay()?;
        self.relay_started.store(generation, Ordering::Release);
        Ok(())
    }

    /// Graceful stop: sends what the hot queue holds (within `shutdown_timeout`), releases leases.
    pub fn stop_relay(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        if let Some(running) = self.running_here() {
            running.runtime.block_on(running.outbox.stop_relay());
        }
    }

    /// Stops the relay gracefully and closes this process's database pool and runtime (an
    /// application shutting down). A later call starts afresh.
    pub fn close(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        let running = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(running) = running.filter(|running| running.pid == std::process::id()) {
            running.runtime.block_on(async {
                running.outbox.stop_relay().await;
                running.outbox.store().close().await;
            });
        }
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (conformance tests).
    pub fn kill_relay(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        if let Some(running) = self.running_here() {
            running.outbox.kill_relay();
        }
    }

    /// The after-commit hook. Never blocks on I/O, never fails: without a relay in this process
    /// the rows wait for a poller.
    pub fn notify_committed(&self, job_ids: Vec<String>) {
        if let Some(running) = self.running_here() {
            running.outbox.notify_committed(job_ids);
        }
    }

    /// The outermost transaction of `ledger` committed: wakes the relay for every id it still
    /// holds (none from rolled-back savepoints). The ledger is then ended.
    pub fn committed(&self, ledger: &mut Ledger) {
        let job_ids = ledger.commit();
        if !job_ids.is_empty() {
            self.notify_committed(job_ids);
        }
    }

    /// `enqueue`: one job straight to the backend, no outbox. Blocks until the backend answers.
    pub fn enqueue_now(&self, job_json: &str, context_json: Option<&str>) -> Result<String> {
        let input: Value = serde_json::from_str(job_json).map_err(|e| {
            Error::field(
                ErrorCode::InvalidArgs,
                "job",
                format!("not a JSON job: {e}"),
            )
        })?;
        let mut job = job_from_input(input)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let mut renames = Renames::default();
        if self.js_options
            && let Some(Value::Object(options)) = &mut job.options
        {
            let (spec, respelled) = js_options::to_spec(std::mem::take(options))?;
            *options = spec;
            renames = respelled;
        }
        self.with_running(|running| {
            running
                .runtime
                .block_on(running.outbox.enqueue_now(job, context.as_ref()))
        })
        .map_err(|error| renames.caller_error(error))
    }

    /// The Prometheus exposition of the relay running in this process (what a framework's
    /// `/metrics` mount serves), or without one the table's figures alone; `None` when the
    /// table cannot be read either.
    pub fn metrics_text(&self) -> Option<String> {
        let running = self.running().ok()?;
        running.runtime.block_on(running.outbox.prometheus_text())
    }

    /// What a mount's `GET /readyz` answers: `{"ready", "database", "backend"}` as JSON text
    /// (`ready` false: answer 503), checked through the relay's own connection.
    /// When the database cannot even be connected to, the same shape says why.
    pub fn readiness_json(&self) -> Result<String> {
        let running = match self.running() {
            Ok(running) => running,
            Err(unreachable) => {
                return self.with_http(|runtime, backend| {
                    let backend = match runtime.block_on(backend.health()) {
                        Ok(()) => "ok".to_owned(),
                        Err(why) => why.message,
                    };
                    let url = self.config.database_url.as_deref().unwrap_or("");
                    let database = format!(
                        "{}: {}",
                        ojs_outbox::admin::redact(url),
                        unreachable.message
                    );
                    let verdict = serde_json::json!({
                        "ready": false,
                        "database": database,
                        "backend": backend,
                    });
                    Ok(verdict.to_string())
                });
            }
        };
        Ok(running.runtime.block_on(running.outbox.readiness()).1)
    }

    /// A subscriber of the table's events, as SSE frames (what a framework's
    /// `/v1/events/stream` mount serves); `request_json` is an `events::StreamRequest`. With
    /// the event log (`relay.event_retention`, the default) any process serves every relay's
    /// events, whether a relay runs here or not; live only, it fails with `RELAY_SHUT_DOWN`
    /// when no relay runs here.
    pub fn relay_events(&self, request_json: &str) -> Result<events::RelayFrames> {
        let request: events::StreamRequest = serde_json::from_str(request_json)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "request", e.to_string()))?;
        let (bus, runtime) = self.event_bus()?;
        events::RelayFrames::open(bus, &request, runtime)
    }

    /// The table's event bus and the runtime its subscriptions wait on (see `relay_events`).
    fn event_bus(&self) -> Result<(Arc<ojs_outbox::events::EventBus>, tokio::runtime::Handle)> {
        let live_only = || {
            Error::new(
                ErrorCode::RelayShutDown,
                "no relay runs in this process, and events are live only (relay.event_retention is null): they stream from the process that runs the relay",
            )
        };
        let running = if self.config.relay.event_retention.is_some() {
            self.running()?
        } else {
            self.running_here().ok_or_else(live_only)?
        };
        let bus = running.outbox.events().ok_or_else(live_only)?;
        Ok((bus, running.runtime.handle().clone()))
    }

    /// An SDK's event client (`event_client::EventSubscription` as JSON: `url` of any OJS
    /// event stream, `token`, filters, `since`, `last_event_id`); reconnects and resumes itself.
    /// Without `url`: the configured backend's stream, `<ojs_url>/v1/events/stream`.
    pub fn subscribe_events(&self, options_json: &str) -> Result<events::EventFeed> {
        let mut options: serde_json::Value = serde_json::from_str(options_json)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "subscription", e.to_string()))?;
        if let Some(map) = options.as_object_mut()
            && map.get("url").is_none_or(serde_json::Value::is_null)
        {
            let base = self.config.ojs_url.trim_end_matches('/');
            map.insert("url".into(), format!("{base}/v1/events/stream").into());
        }
        self.with_http(|runtime, _| {
            events::EventFeed::open(&options.to_string(), runtime.handle().clone())
        })
    }

    /// A worker command (`ojs_outbox::worker::WorkerCommand` as JSON: fetch, ack, nack,
    /// heartbeat) sent to the configured backend; its answer as JSON text (a fetch's
    /// `{"jobs": [...]}`). For a framework's worker command.
    pub fn worker(&self, command_json: &str) -> Result<String> {
        let command = ojs_outbox::worker::WorkerCommand::from_json(command_json)?;
        self.with_http(|runtime, backend| {
            Ok(runtime
                .block_on(backend.worker_with_codec(&command, self.config.encryption.as_deref()))?
                .to_string())
        })
    }

    /// Starts the core worker loop against the configured backend (`worker.rs`; options as
    /// JSON: `{"queues", "concurrency"?, "visibility_timeout_ms"?, "worker_id"?,
    /// "idle_poll_ms"?}`). Encrypted args are opened with `adapter.encryption`'s keys.
    pub fn start_worker(&self, options_json: &str) -> Result<worker::Worker> {
        let backend = ojs_outbox::backend::Backend::new(&self.config)?;
        worker::Worker::start(options_json, backend, self.config.encryption.clone())
    }

    /// The statement that reads one outbox row by job id on the host's own connection
    /// (`OutboxSql::select_job`: `job_type, job_args, status, attempts, error,
    /// created_at_ms`), e.g. for a task result read inside the transaction that staged it.
    pub fn select_job_sql(&self, dialect: &str, placeholder: &str) -> Result<String> {
        let (dialect, placeholder) = (parse_dialect(dialect)?, parse_placeholder(placeholder)?);
        Ok(OutboxSql::new(dialect, self.table_name()).select_job(placeholder))
    }

    /// Transaction control for a host whose driver has none (`sql::transaction_sql`).
    pub fn transaction_sql(step: &str, depth: usize) -> Result<String> {
        ojs_outbox::sql::transaction_sql(step, depth).ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidConfig,
                "step",
                format!(
                    "{step:?}: expected begin, commit, rollback, savepoint, release or rollback_to"
                ),
            )
        })
    }

    /// The relay's metrics as JSON (`null` when no relay runs in this process).
    pub fn metrics_json(&self) -> String {
        let metrics = self
            .running_here()
            .and_then(|running| running.outbox.metrics());
        serde_json::to_string(&metrics).expect("metrics serialize")
    }

    /// Deletes `sent` rows older than `older_than` (ISO-8601); returns how many.
    pub fn prune(&self, older_than: &str) -> Result<u64> {
        let retention = ojs_outbox::duration::parse(older_than)
            .map_err(|why| Error::field(ErrorCode::InvalidConfig, "older_than", why))?;
        self.with_running(|running| {
            running
                .runtime
                .block_on(running.outbox.store().prune(retention, usize::MAX >> 1))
        })
    }

    /// Creates the outbox table through the relay's own connection.
    pub fn migrate(&self) -> Result<()> {
        self.with_running(|running| running.runtime.block_on(running.outbox.store().migrate()))
    }

    /// Counts by status, oldest pending age and lag, as JSON.
    pub fn status_json(&self) -> Result<String> {
        self.with_running(|running| {
            let status = running.runtime.block_on(running.outbox.store().status())?;
            Ok(serde_json::to_string(&status).expect("status serializes"))
        })
    }

    /// Dead rows of a tenant (or all), oldest first, as a JSON array; at most `limit`
    /// (`store::DEAD_LIST_LIMIT` when `None`).
    pub fn dead_list_json(&self, tenant: Option<&str>, limit: Option<u32>) -> Result<String> {
        let limit = limit.map_or(ojs_outbox::store::DEAD_LIST_LIMIT, |limit| limit as usize);
        self.with_running(|running| {
            let rows = running
                .runtime
                .block_on(running.outbox.store().dead_list(tenant, limit))?;
            Ok(serde_json::to_string(&rows).expect("rows serialize"))
        })
    }

    pub fn dead_replay(&self, tenant: Option<&str>) -> Result<u64> {
        self.with_running(|running| running.runtime.block_on(running.outbox.dead_replay(tenant)))
    }

    pub fn dead_purge(&self, tenant: Option<&str>) -> Result<u64> {
        self.with_running(|running| running.runtime.block_on(running.outbox.dead_purge(tenant)))
    }

    /// A framework command line's operator command (`admin::Command` as JSON: migrate,
    /// status, dead list / replay / purge): what to print and the exit code, in the words and
    /// by the rules of `ojs-relay` (`admin.rs`), through the relay's connection.
    pub fn admin(&self, command_json: &str) -> Result<ojs_outbox::admin::Report> {
        let command = ojs_outbox::admin::Command::from_json(command_json)?;
        if !command.writes() && self.running_here().is_none() {
            return self.admin_read_only(&command);
        }
        self.with_running(|running| {
            let events = running.outbox.events();
            let target = ojs_outbox::admin::Target {
                store: running.outbox.store(),
                table: self.table_name(),
                database_url: self.config.database_url.as_deref().unwrap_or(""),
                create_table_with: &command.create_table_with,
                events: events.as_deref(),
            };
            running
                .runtime
                .block_on(ojs_outbox::admin::execute(&target, &command))
        })
    }

    /// A command that only reads (`status`, `dead list`, a purge without `yes`) in a process
    /// that has not opened the relay's pool: on a store opened read-only, closed after, so a
    /// dry run writes nothing, not even a SQLite file's journal mode (`ojs-relay` does the same).
    fn admin_read_only(
        &self,
        command: &ojs_outbox::admin::Command,
    ) -> Result<ojs_outbox::admin::Report> {
        let database_url = self.config.database_url.as_deref().ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidConfig,
                "adapter.database_url",
                "is required for the relay's own connection",
            )
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::new(ErrorCode::Database, format!("cannot start a runtime: {e}")))?;
        runtime.block_on(async {
            let store = ojs_outbox::Store::connect_read_only(database_url, self.table_name())
                .await
                .map_err(|e| match e.code {
                    // No file, so no outbox table: the framework's migration makes both.
                    ErrorCode::Database
                        if e.message.starts_with(ojs_outbox::store::NO_SQLITE_FILE) =>
                    {
                        Error::new(
                            ErrorCode::OutboxTableMissing,
                            format!(
                                "the outbox table {:?} does not exist ({}); create it with {}",
                                self.table_name(),
                                e.message,
                                command.create_table_with
                            ),
                        )
                    }
                    _ => e,
                })?;
            let target = ojs_outbox::admin::Target {
                store: &store,
                table: self.table_name(),
                database_url,
                create_table_with: &command.create_table_with,
                events: None,
            };
            let report = ojs_outbox::admin::execute(&target, command).await;
            store.close().await;
            report
        })
    }

    /// The state of these jobs' rows as committed, as JSON `{job_id: {status, attempts, error}}`.
    pub fn rows_json(&self, job_ids: Vec<String>) -> Result<String> {
        self.with_running(|running| {
            let rows = running
                .runtime
                .block_on(running.outbox.store().rows_by_job_id(&job_ids))?;
            Ok(serde_json::to_string(&rows).expect("rows serialize"))
        })
    }

    /// Runs the relay as this process's only job (a framework's `ojs_relay` command) until
    /// SIGINT or SIGTERM, then stops gracefully. Same engine as `ojs-relay run`. A signal that
    /// arrived since [`arm_stop_signals`] stops it before it starts.
    pub fn run_relay_until_signal(&self) -> Result<()> {
        arm_stop_signals()?;
        self.with_running(|running| {
            running.runtime.block_on(async {
                let stop = ojs_outbox::stop_signal::wait();
                let store = running.outbox.store().clone();
                store.check_table().await?;
                let relay = ojs_outbox::Relay::start(
                    store,
                    running.outbox.backend().clone(),
                    &self.config,
                    false,
                );
                let stopped = stop.await;
                relay.shutdown().await;
                stopped
            })
        })
    }
}

/// The top-level keys of the adapter configuration as a framework's options offer them, each
/// once: the backend URL as `url` (the spelling of the spec's framework examples). A binding
/// whose options are these keys in its own case style (Express: camelCase) accepts exactly
/// those, besides its own.
pub fn option_keys() -> Vec<String> {
    ojs_outbox::config::OPTION_KEYS
        .iter()
        .map(|key| (*key).to_owned())
        .collect()
}

/// The relay's database URL from a framework's connection settings (`db_url::ConnectionParts`
/// as JSON): one rule for every binding.
pub fn database_url_from_parts(parts_json: &str) -> Result<String> {
    crate::db_url::from_parts(&crate::db_url::ConnectionParts::from_json(parts_json)?)
}

/// The HTTP request headers a middleware reads for the request context, lowercase; it passes
/// them as `{"headers": {...}}` in the context JSON (`RequestContext::from_json`).
pub fn context_header_names() -> Vec<String> {
    ojs_outbox::job::CONTEXT_HEADERS
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

/// The `INVALID_CONFIG` error for an option `key` that is none of `accepted` (the binding's
/// spellings), naming the accepted spelling when `key` is a near miss of one.
pub fn unknown_option_error(key: &str, accepted: &[String]) -> Error {
    ojs_outbox::config::unknown_option(key, accepted)
}

/// Called first thing by a framework's relay command: from now on SIGINT and SIGTERM stop
/// [`Bridge::run_relay_until_signal`] gracefully (before it starts, too) instead of killing the
/// process. Idempotent.
pub fn arm_stop_signals() -> Result<()> {
    ojs_outbox::stop_signal::arm()
}

fn parse_dialect(name: &str) -> Result<Dialect> {
    Dialect::parse(name).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidConfig,
            "dialect",
            format!("{name:?} is not supported (postgresql or sqlite)"),
        )
    })
}

fn parse_placeholder(name: &str) -> Result<Placeholder> {
    Placeholder::parse(name).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidConfig,
            "placeholder",
            format!("{name:?} is not dollar, question or percent"),
        )
    })
}

/// The request context of a context JSON; `X-OJS-Tenant` counts only where the app's
/// `adapter.trust_tenant_header` says so (`RequestContext::from_json`).
fn parse_context(
    context_json: Option<&str>,
    trust_tenant_header: bool,
) -> Result<Option<RequestContext>> {
    match context_json.map(str::trim) {
        None | Some("") | Some("null") => Ok(None),
        Some(text) => RequestContext::from_json(text, trust_tenant_header).map(Some),
    }
}

/// Each job of a bulk prepared in order; the first failure fails all, naming its index
/// (`jobs[i]: ...`) when there are several.
fn prepare_each<T>(
    inputs: Vec<T>,
    mut prepare: impl FnMut(T) -> Result<PreparedJob>,
) -> Result<Vec<PreparedJob>> {
    let many = inputs.len() > 1;
    let mut prepared = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.into_iter().enumerate() {
        match prepare(input) {
            Ok(job) => prepared.push(job),
            Err(error) if many => {
                return Err(Error {
                    message: format!("jobs[{index}]: {}", error.message),
                    ..error
                });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(prepared)
}

/// A job object of `stage`'s array: its parts as texts, borrowed from the array's text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobTexts<'a> {
    #[serde(rename = "type", borrow)]
    job_type: &'a RawValue,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
    #[serde(default, borrow)]
    options: Option<&'a RawValue>,
    #[serde(default, borrow)]
    meta: Option<&'a RawValue>,
}

/// [`JobTexts`] read from a JSON object only: serde would also fill the struct from an array
/// (`["a", [1]]`), which is no job.
struct JobObject<'a>(JobTexts<'a>);

impl<'de> Deserialize<'de> for JobObject<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = JobTexts<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a job object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<JobTexts<'de>, A::Error> {
                JobTexts::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Object).map(JobObject)
    }
}

/// One element of `stage`'s array, prepared from its texts (`prepare_json`) without building
/// JSON values for its args: the same rules and messages as `job_from_input` then `prepare`.
fn prepare_input(
    input: &RawValue,
    context: Option<&RequestContext>,
    js_options: bool,
) -> Result<PreparedJob> {
    if !input.get().starts_with('{') {
        return job_from_input(serde_json::from_str(input.get()).unwrap_or(Value::Null))
            .and_then(|job| prepare(job, context));
    }
    let texts: JobTexts = serde_json::from_str(input.get()).map_err(|e| {
        let keys: Map<String, Value> = serde_json::from_str(input.get()).unwrap_or_default();
        malformed_job(keys.keys(), e)
    })?;
    prepare_job_texts(texts, context, js_options)
}

/// A job object's texts prepared (`prepare_texts`): its type must be a JSON string.
fn prepare_job_texts(
    texts: JobTexts,
    context: Option<&RequestContext>,
    js_options: bool,
) -> Result<PreparedJob> {
    let raw_type = texts.job_type.get();
    // Borrowed from the array's text unless it holds escapes: one allocation fewer a job.
    let job_type: std::borrow::Cow<str> = match serde_json::from_str::<&str>(raw_type) {
        Ok(job_type) => job_type.into(),
        Err(_) => serde_json::from_str::<String>(raw_type)
            .map_err(|_| {
                Error::field(
                    ErrorCode::InvalidJobType,
                    "type",
                    format!("must be a string, got {raw_type}"),
                )
            })?
            .into(),
    };
    with_options_text(js_options, texts.options.map(RawValue::get), |options| {
        ojs_outbox::job::prepare_texts(
            &job_type,
            texts.args.map_or("null", RawValue::get),
            options,
            texts.meta.map(RawValue::get),
            context,
            true,
        )
    })
}

/// `prepare` on an options text respelled from the JavaScript form when `js_options` (errors
/// then name the caller's spelling); anything but an object is left for `prepare` to refuse.
fn with_options_text<T>(
    js_options: bool,
    options_json: Option<&str>,
    prepare: impl FnOnce(Option<&str>) -> Result<T>,
) -> Result<T> {
    let parsed = match options_json {
        Some(text) if js_options => serde_json::from_str::<Value>(text).ok(),
        _ => None,
    };
    let Some(Value::Object(options)) = parsed else {
        return prepare(options_json);
    };
    let (options, renames) = js_options::to_spec(options)?;
    let text = Value::Object(options).to_string();
    prepare(Some(&text)).map_err(|error| renames.caller_error(error))
}

/// A job object that does not fit `{"type", "args", "options", "meta"}`: the field is the first
/// unknown key when there is one (a bulk job with `queue` beside `type`), else `job`.
fn malformed_job<'k>(
    keys: impl Iterator<Item = &'k String>,
    error: impl std::fmt::Display,
) -> Error {
    const KEYS: [&str; 4] = ["type", "args", "options", "meta"];
    let mut keys = keys;
    match keys.find(|key| !KEYS.contains(&key.as_str())) {
        Some(key) if ojs_outbox::job::OPTION_KEYS.contains(&key.as_str()) => Error::field(
            ErrorCode::InvalidArgs,
            key.as_str(),
            "unknown key of a job (type, args, options, meta): put it in \"options\"",
        ),
        Some(key) => Error::field(
            ErrorCode::InvalidArgs,
            key.as_str(),
            "unknown key of a job (type, args, options, meta)",
        ),
        None => Error::field(
            ErrorCode::InvalidArgs,
            "job",
            format!("expected {{\"type\", \"args\", \"options\", \"meta\"}}: {error}"),
        ),
    }
}

fn job_from_input(input: Value) -> Result<NewJob> {
    // serde would also fill the struct from an array (`["a", [1]]`): only an object is a job.
    if !input.is_object() {
        return Err(Error::field(
            ErrorCode::InvalidArgs,
            "job",
            format!("must be an object {{\"type\", \"args\", ...}}, got {input}"),
        ));
    }
    let keys: Vec<String> = input
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys().cloned())
        .collect();
    let input: JobInput =
        serde_json::from_value(input).map_err(|e| malformed_job(keys.iter(), e))?;
    let job_type = match input.job_type {
        Value::String(job_type) => job_type,
        other => {
            return Err(Error::field(
                ErrorCode::InvalidJobType,
                "type",
                format!("must be a string, got {other}"),
            ));
        }
    };
    let mut job = NewJob::new(job_type, input.args.unwrap_or(Value::Null));
    job.options = input.options.filter(|o| !o.is_null());
    job.meta = input.meta.filter(|m| !m.is_null());
    Ok(job)
}

/// The code of a database error raised by a host driver (Django, knex, ActiveRecord), from its
/// SQLSTATE (PostgreSQL) and message: the same rule the core applies to its own statements.
pub fn database_error_code(sqlstate: Option<&str>, message: &str) -> ErrorCode {
    ojs_outbox::error::database_error_code(sqlstate, message)
}

/// One record of the relay's log feed as it crosses the FFI line: `level` is `info`,
/// `warning` or `error`; `message` the whole line (job id included); `job_id` the job a dead
/// letter is about; `table` the outbox table of the relay that wrote it (empty for the
/// feed's own "records were dropped" warning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub level: String,
    pub message: String,
    pub job_id: Option<String>,
    pub table: String,
}

/// Turns the relay's log feed on for this process ([`ojs_outbox::log_feed`]): from now on every
/// relay pause, resume, dead letter, refusal and database or prune failure is queued (bounded)
/// for [`drain_log_feed`]. A binding calls it before it starts a relay whose records it drains.
pub fn enable_log_feed() {
    ojs_outbox::log_feed::enable();
}

/// The relay log records queued in this process since the last call, oldest first. Never
/// blocks on I/O (a short lock on the queue); empty when nothing happened or the feed is off.
pub fn drain_log_feed() -> Vec<LogRecord> {
    ojs_outbox::log_feed::drain()
        .into_iter()
        .map(|record| LogRecord {
            level: record.level.as_str().to_owned(),
            message: record.message,
            job_id: record.job_id,
            table: record.table,
        })
        .collect()
}

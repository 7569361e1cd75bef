//! uniffi glue between the core's binding surface (`ojs_bridge::Bridge`) and the
//! `ojs-adapter-rails` gem. It converts types and nothing else: every rule lives in the core.
//!
//! One FFI mechanism, one handle system, one error channel, one panic channel:
//! - the native class is uniffi's `Bridge` (its methods named and ordered as
//!   `ojs_bridge::Bridge`'s); a `Stager` (uniffi object too) is a Bridge bound to one dialect
//!   and placeholder style, for the per-job calls;
//! - every error crosses as uniffi's `NativeError::Failure { json }`, the JSON text of
//!   `Error::to_json` (`{"code", "field", "message", "retryable", "family"}`, and
//!   `"existing_job_id"` for `DUPLICATE`), decoded by one Ruby function (`OJS::Error.from_json`);
//!   a panic is uniffi's "unexpected error" status;
//! - the calls made once per job or per commit (`hot.rs`) are exported from this library as C
//!   functions, because uniffi's generated Ruby lowers a string byte by byte (measured:
//!   docs/rails.md, "Performance"). They take the uniffi handles of `Bridge`/`Stager` (borrowed,
//!   no registry of their own) and uniffi's `RustCallStatus` (`uniffi::rust_call`: the same
//!   error and panic channel); their answers are the core's encodings
//!   (`StagedJob::encode`, `Staged::to_json`, `encode_ids`). `lib/ojs/native.rb` binds them,
//!   and `test/native_signature_test.rb` checks the bindings against the declarations;
//! - the calls that wait for something that comes (an event, a frame, a mount's answer:
//!   `events.rs`; a job for a worker slot, a worker's stop: `worker.rs`) are C functions of the
//!   same kind, bound with the ffi gem's `blocking: true` (the GVL is released while they wait);
//! - cheap calls that never touch the network or the relay's database are synchronous methods;
//!   calls that block on I/O are `async` top-level functions taking the Bridge
//!   (`bridge_<verb>`): Ruby's ffi keeps the GVL during a synchronous call, so blocking work runs
//!   on a thread of its own and the Ruby caller waits on a future, which releases the GVL.
//!   uniffi does not generate async methods on objects for Ruby, hence the flat functions.

use std::sync::Arc;

mod events;
mod hot;
mod worker;

uniffi::setup_scaffolding!();

/// Every core error: the JSON text of `ojs_bridge::Error::to_json`.
#[derive(Debug, uniffi::Error)]
pub enum NativeError {
    Failure { json: String },
}

impl std::fmt::Display for NativeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let NativeError::Failure { json } = self;
        f.write_str(json)
    }
}

impl std::error::Error for NativeError {}

impl From<ojs_bridge::Error> for NativeError {
    fn from(error: ojs_bridge::Error) -> Self {
        NativeError::Failure {
            json: error.to_json(),
        }
    }
}

type NativeResult<T> = Result<T, NativeError>;

/// The core's error codes with their family and retryable flag (`error::codes_json`), so the
/// gem's tests check its exception classes against the core's list.
#[uniffi::export]
pub fn error_codes_json() -> String {
    ojs_bridge::codes_json()
}

/// The workspace version this library was built from (`[workspace.package] version`).
#[uniffi::export]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

/// The core's code for a database error raised by ActiveRecord's driver while staging (pg's
/// SQLSTATE when there is one, and the driver's message): `OUTBOX_TABLE_MISSING` for a missing
/// table, else `DATABASE`.
#[uniffi::export]
pub fn database_error_code(sqlstate: Option<String>, message: String) -> String {
    ojs_bridge::database_error_code(sqlstate.as_deref(), &message)
        .as_str()
        .to_owned()
}

/// The relay's database URL from ActiveRecord's connection settings (`db_url::ConnectionParts`
/// as JSON).
#[uniffi::export]
pub fn database_url_from_parts(parts_json: String) -> NativeResult<String> {
    Ok(ojs_bridge::database_url_from_parts(&parts_json)?)
}

/// The request headers the middleware passes in the context's `"headers"` (lowercase).
#[uniffi::export]
pub fn context_header_names() -> Vec<String> {
    ojs_bridge::context_header_names()
}

/// The error (as `Error::to_json` text) for a value Ruby cannot turn into JSON: `part` is
/// `args`, `options`, `meta`, `context` or `type`, `path` where the value is.
#[uniffi::export]
pub fn unencodable(part: String, path: String, why: String) -> String {
    ojs_bridge::unencodable(&part, &path, &why).to_json()
}

/// The error (as `Error::to_json` text) for a setting `key` that is none of `accepted` (the
/// gem's setting names), naming the accepted spelling when `key` is a near miss of one.
#[uniffi::export]
pub fn unknown_option_error(key: String, accepted: Vec<String>) -> String {
    ojs_bridge::unknown_option_error(&key, &accepted).to_json()
}

/// What an operator command printed and its exit code (`admin::Report`).
#[derive(Debug, uniffi::Record)]
pub struct Report {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// One configured `ojs_bridge::Bridge` per application.
#[derive(uniffi::Object)]
pub struct Bridge {
    inner: Arc<ojs_bridge::Bridge>,
}

/// A Bridge staging for one host connection kind (dialect and placeholder style, checked by
/// the core on each call): the handle of the per-job calls (`hot.rs`).
#[derive(uniffi::Object)]
pub struct Stager {
    bridge: Arc<ojs_bridge::Bridge>,
    dialect: String,
    placeholder: String,
}

#[uniffi::export]
impl Bridge {
    /// Parses the spec §5.2 configuration (JSON text) as the host runs (`config::Host`):
    /// `development` (Rails' development environment), `url_setting` (named when the backend
    /// URL is missing), `needs_backend` (false for a DDL-only handle). No I/O.
    #[uniffi::constructor]
    pub fn new(
        config_json: String,
        development: bool,
        url_setting: String,
        needs_backend: bool,
    ) -> NativeResult<Arc<Self>> {
        let host = ojs_bridge::Host {
            development,
            url_setting: &url_setting,
            needs_backend,
        };
        let inner = Arc::new(ojs_bridge::Bridge::for_host(&config_json, &host)?);
        Ok(Arc::new(Bridge { inner }))
    }

    /// The line to log once (warn) when the development default URL was taken, else nil.
    pub fn notice(&self) -> Option<String> {
        self.inner.notice().map(str::to_owned)
    }

    pub fn table_name(&self) -> String {
        self.inner.table_name().to_owned()
    }

    pub fn relay_in_process(&self) -> bool {
        self.inner.relay_in_process()
    }

    pub fn create_table_sql(&self, dialect: String) -> NativeResult<Vec<String>> {
        Ok(self.inner.create_table_sql(&dialect)?)
    }

    pub fn drop_table_sql(&self, dialect: String) -> NativeResult<String> {
        Ok(self.inner.drop_table_sql(&dialect)?)
    }

    /// The handle of `ojs_ruby_bridge_stage` / `ojs_ruby_bridge_stage_job` (`hot.rs`) for
    /// this dialect and placeholder style.
    pub fn stager(&self, dialect: String, placeholder: String) -> Arc<Stager> {
        Arc::new(Stager {
            bridge: Arc::clone(&self.inner),
            dialect,
            placeholder,
        })
    }

    /// What a unique job's enqueue call reports once its staging statement (one with
    /// `returns`) ran (`ojs_bridge::Bridge::held_outcome`): `token` is the statement's
    /// `returns.token`, `returned` the first column of the row it returned (nil: no row). The
    /// job id to report for job `returns.job`, or the core's `DUPLICATE` error (with
    /// `existing_job_id`). Called once per unique job, never per plain one.
    pub fn held_outcome(&self, token: String, returned: Option<String>) -> NativeResult<String> {
        Ok(self.inner.held_outcome(&token, returned.as_deref())?)
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (tests of recovery).
    pub fn kill_relay(&self) {
        self.inner.kill_relay();
    }

    pub fn metrics_json(&self) -> String {
        self.inner.metrics_json()
    }
}

/// Runs blocking core work on a thread of its own; the returned future completes with it.
async fn off_thread<T: Send + 'static>(
    bridge: &Arc<Bridge>,
    work: impl FnOnce(&ojs_bridge::Bridge) -> T + Send + 'static,
) -> T {
    let inner = Arc::clone(&bridge.inner);
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("ojs-ruby-call".into())
        .spawn(move || {
            let _ = sender.send(work(&inner));
        })
        .expect("spawn a thread for a blocking core call");
    receiver.await.expect("the core call's thread panicked")
}

#[uniffi::export]
pub async fn bridge_start_relay(bridge: Arc<Bridge>) -> NativeResult<()> {
    Ok(off_thread(&bridge, |inner| inner.start_relay()).await?)
}

#[uniffi::export]
pub async fn bridge_stop_relay(bridge: Arc<Bridge>) {
    off_thread(&bridge, |inner| inner.stop_relay()).await
}

#[uniffi::export]
pub async fn bridge_close(bridge: Arc<Bridge>) {
    off_thread(&bridge, |inner| inner.close()).await
}

#[uniffi::export]
pub async fn bridge_enqueue_now(
    bridge: Arc<Bridge>,
    job_json: String,
    context_json: Option<String>,
) -> NativeResult<String> {
    Ok(off_thread(&bridge, move |inner| {
        inner.enqueue_now(&job_json, context_json.as_deref())
    })
    .await?)
}

#[uniffi::export]
pub async fn bridge_prune(bridge: Arc<Bridge>, older_than: String) -> NativeResult<u64> {
    Ok(off_thread(&bridge, move |inner| inner.prune(&older_than)).await?)
}

#[uniffi::export]
pub async fn bridge_migrate(bridge: Arc<Bridge>) -> NativeResult<()> {
    Ok(off_thread(&bridge, |inner| inner.migrate()).await?)
}

#[uniffi::export]
pub async fn bridge_status_json(bridge: Arc<Bridge>) -> NativeResult<String> {
    Ok(off_thread(&bridge, |inner| inner.status_json()).await?)
}

#[uniffi::export]
pub async fn bridge_dead_list_json(
    bridge: Arc<Bridge>,
    tenant: Option<String>,
    limit: Option<u32>,
) -> NativeResult<String> {
    Ok(off_thread(&bridge, move |inner| {
        inner.dead_list_json(tenant.as_deref(), limit)
    })
    .await?)
}

#[uniffi::export]
pub async fn bridge_dead_replay(bridge: Arc<Bridge>, tenant: Option<String>) -> NativeResult<u64> {
    Ok(off_thread(&bridge, move |inner| inner.dead_replay(tenant.as_deref())).await?)
}

#[uniffi::export]
pub async fn bridge_dead_purge(bridge: Arc<Bridge>, tenant: Option<String>) -> NativeResult<u64> {
    Ok(off_thread(&bridge, move |inner| inner.dead_purge(tenant.as_deref())).await?)
}

/// An operator command (`admin::Command` as JSON) of `rake ojs:status` / `ojs:dead:*`.
#[uniffi::export]
pub async fn bridge_admin(bridge: Arc<Bridge>, command_json: String) -> NativeResult<Report> {
    let report = off_thread(&bridge, move |inner| inner.admin(&command_json)).await?;
    Ok(Report {
        exit_code: report.exit_code,
        stdout: report.stdout,
        stderr: report.stderr,
    })
}

/// The committed state of these jobs' rows (ids as `ojs_bridge::encode_ids` text), as JSON.
#[uniffi::export]
pub async fn bridge_outbox_rows_json(bridge: Arc<Bridge>, job_ids: String) -> NativeResult<String> {
    Ok(off_thread(&bridge, move |inner| {
        inner.rows_json(ojs_bridge::decode_ids(&job_ids))
    })
    .await?)
}

/// Runs the relay as the process's only job until SIGINT/SIGTERM (`rake ojs:relay`).
#[uniffi::export]
pub async fn bridge_run_relay_until_signal(bridge: Arc<Bridge>) -> NativeResult<()> {
    Ok(off_thread(&bridge, |inner| inner.run_relay_until_signal()).await?)
}

/// The relay command line of `rake ojs:relay` (`ojs_bridge::relay_command`): `args` are the
/// options of `ojs-relay run` (what follows `--`, or `OJS_RELAY_ARGS`), `framework_json` the
/// command's description (`program`, `config`: the app's OJS settings, `development`,
/// `url_setting`, `create_table_with`, `after_help`). `--help` and a usage error (exit 2,
/// naming the accepted options) come back as the report; otherwise the standalone relay runs
/// (with the `--listen` surface when asked) until SIGINT/SIGTERM (the core's stop signals,
/// armed by `arm_stop_signals`), then stops gracefully: exit code 0.
#[uniffi::export]
pub async fn relay_command(args: Vec<String>, framework_json: String) -> NativeResult<Report> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("ojs-ruby-relay".into())
        .spawn(move || {
            let report = ojs_bridge::relay_command(args, &framework_json)
                .and_then(|command| command.run_until_signal());
            let _ = sender.send(report);
        })
        .expect("spawn a thread for the relay command");
    let report = receiver
        .await
        .expect("the relay command's thread panicked")?;
    Ok(Report {
        exit_code: report.exit_code,
        stdout: report.stdout,
        stderr: report.stderr,
    })
}

/// What `relay_command_check` found: the report to print and exit with when nothing runs
/// (`--help`, a usage error), else the outbox table the settings name.
#[derive(Debug, uniffi::Record)]
pub struct RelayCheck {
    pub exit: Option<Report>,
    pub table: Option<String>,
}

/// Parses the relay command line and builds its settings without running anything (no I/O):
/// the `--help` text or usage error to print, or the table (a configuration error is raised).
#[uniffi::export]
pub fn relay_command_check(args: Vec<String>, framework_json: String) -> NativeResult<RelayCheck> {
    let command = ojs_bridge::relay_command(args, &framework_json)?;
    if let Some(report) = command.exit() {
        return Ok(RelayCheck {
            exit: Some(Report {
                exit_code: report.exit_code,
                stdout: report.stdout,
                stderr: report.stderr,
            }),
            table: None,
        });
    }
    Ok(RelayCheck {
        exit: None,
        table: Some(command.table()?),
    })
}

/// The exit code of a failed relay command for an error code (2: usage and configuration
/// errors; 1: the rest), as `ojs-relay` exits.
#[uniffi::export]
pub fn relay_exit_code(code: String) -> i32 {
    ojs_bridge::ErrorCode::parse(&code).map_or(1, ojs_bridge::relay_exit_code)
}

/// From now on SIGINT and SIGTERM no longer kill the process but stop
/// `bridge_run_relay_until_signal` gracefully, also one that arrives before the relay runs
/// (`ojs_bridge::arm_stop_signals`). Called first thing by `rake ojs:relay`, after its Ruby
/// traps (the core's handlers chain to them). Idempotent.
#[uniffi::export]
pub fn arm_stop_signals() -> NativeResult<()> {
    Ok(ojs_bridge::arm_stop_signals()?)
}

/// One record of the relay's log feed: `level` is "info", "warning" or "error"; `job_id` the
/// job of a dead letter, else nil; `table` the outbox table of the relay that wrote it.
#[derive(Debug, uniffi::Record)]
pub struct LogRecord {
    pub level: String,
    pub message: String,
    pub job_id: Option<String>,
    pub table: String,
}

/// Turns the relay's log feed on for this process (`ojs_bridge::enable_log_feed`). Idempotent.
#[uniffi::export]
pub fn enable_log_feed() {
    ojs_bridge::enable_log_feed();
}

/// The relay log records queued since the last call, oldest first. Synchronous and cheap (a
/// short lock on the core's queue, no I/O): `OJS::RelayLog`'s thread calls it every 250 ms.
#[uniffi::export]
pub fn drain_log_feed() -> Vec<LogRecord> {
    ojs_bridge::drain_log_feed()
        .into_iter()
        .map(|record| LogRecord {
            level: record.level,
            message: record.message,
            job_id: record.job_id,
            table: record.table,
        })
        .collect()
}

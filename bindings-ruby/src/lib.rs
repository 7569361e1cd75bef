//! uniffi glue between the core's binding surface (`ojs_bridge::Bridge`) and the
//! `ojs-adapter-rails` gem. It converts types and nothing else: every rule lives in the core.
//!
//! Shape of the line, dictated by uniffi's Ruby backend (docs toolchain.md):
//! - what runs once per job or per commit (staging for `enqueue_after_commit` and
//!   `enqueue_bulk`, the after-commit wake-up) is plain C entry points (`hot.rs`), because
//!   uniffi's Ruby side costs more per call than the INSERT they prepare; a `NativeAdapter`
//!   hands out the ids they take (`registry_id`, `stager`);
//! - other cheap calls that never touch the network or the relay's database
//!   (`create_table_sql`, `metrics_json`, ...) are synchronous methods of `NativeAdapter`;
//! - calls that block on I/O are `async` top-level functions taking the adapter handle
//!   (`adapter_<verb>`). Ruby's ffi keeps the GVL during a synchronous call, so blocking work
//!   runs on a thread of its own and the Ruby caller waits on a future, which releases the GVL.
//!   uniffi does not generate async methods on objects for Ruby, hence the flat functions.

use std::sync::{Arc, Mutex};

use ojs_bridge::Bridge;
use ojs_outbox::ErrorCode;

mod hot;

uniffi::setup_scaffolding!();

/// Every core error, with the stable code of `docs/errors.md`.
#[derive(Debug, uniffi::Error)]
pub enum NativeError {
    Failure {
        code: String,
        field: Option<String>,
        message: String,
        retryable: bool,
    },
}

impl std::fmt::Display for NativeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let NativeError::Failure { code, message, .. } = self;
        write!(f, "[{code}] {message}")
    }
}

impl std::error::Error for NativeError {}

impl From<ojs_outbox::Error> for NativeError {
    fn from(error: ojs_outbox::Error) -> Self {
        NativeError::Failure {
            code: error.code.as_str().to_owned(),
            field: error.field,
            message: error.message,
            retryable: error.code.retryable(),
        }
    }
}

type NativeResult<T> = Result<T, NativeError>;

/// One error code of the core and whether retrying the same call may succeed.
#[derive(Debug, uniffi::Record)]
pub struct ErrorCodeInfo {
    pub code: String,
    pub retryable: bool,
}

/// The core's error codes, so the gem builds its exception classes from the core's list.
#[uniffi::export]
pub fn error_codes() -> Vec<ErrorCodeInfo> {
    ErrorCode::ALL
        .iter()
        .map(|code| ErrorCodeInfo {
            code: code.as_str().to_owned(),
            retryable: code.retryable(),
        })
        .collect()
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

/// One configured adapter (`bridge::Bridge`) per application.
#[derive(uniffi::Object)]
pub struct NativeAdapter {
    inner: Arc<Bridge>,
    /// This adapter's id in the registry of the C entry points (`hot.rs`).
    registry_id: u64,
    /// The stager ids it handed out for them.
    stagers: Mutex<Vec<u64>>,
}

impl Drop for NativeAdapter {
    fn drop(&mut self) {
        let ids = self
            .stagers
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        hot::unregister(self.registry_id, ids);
    }
}

#[uniffi::export]
impl NativeAdapter {
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
        let host = ojs_outbox::Host {
            development,
            url_setting: &url_setting,
            needs_backend,
        };
        let inner = Arc::new(Bridge::for_host(&config_json, &host)?);
        Ok(Arc::new(NativeAdapter {
            registry_id: hot::register_adapter(&inner),
            inner,
            stagers: Mutex::new(Vec::new()),
        }))
    }

    pub fn table_name(&self) -> String {
        self.inner.table_name().to_owned()
    }

    /// The line to log once (warn) when the development default URL was taken, else nil.
    pub fn notice(&self) -> Option<String> {
        self.inner.notice().map(str::to_owned)
    }

    pub fn relay_in_process(&self) -> bool {
        self.inner.relay_in_process()
    }

    pub fn create_table_sql(&self, dialect: String) -> NativeResult<Vec<String>> {
        Ok(self.inner.create_table_sql(&dialect)?)
    }

    /// An id for `ojs_ruby_stage_job` / `ojs_ruby_stage` (`hot.rs`) that stages with this
    /// adapter in a dialect and placeholder style (checked by the core on each call). Valid
    /// while this adapter lives.
    pub fn stager(&self, dialect: String, placeholder: String) -> u64 {
        let id = hot::register_stager(&self.inner, dialect, placeholder);
        self.stagers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(id);
        id
    }

    /// This adapter's id for `ojs_ruby_notify_committed` (`hot.rs`): the after-commit wake-up,
    /// which would cost several µs per job id through uniffi's Ruby side. Valid while this
    /// adapter lives.
    pub fn registry_id(&self) -> u64 {
        self.registry_id
    }

    pub fn metrics_json(&self) -> String {
        self.inner.metrics_json()
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (tests of recovery).
    pub fn kill_relay(&self) {
        self.inner.kill_relay();
    }
}

/// Runs blocking core work on a thread of its own; the returned future completes with it.
async fn off_thread<T: Send + 'static>(
    adapter: &Arc<NativeAdapter>,
    work: impl FnOnce(&Bridge) -> T + Send + 'static,
) -> T {
    let inner = Arc::clone(&adapter.inner);
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
pub async fn adapter_start_relay(adapter: Arc<NativeAdapter>) -> NativeResult<()> {
    Ok(off_thread(&adapter, |inner| inner.start_relay()).await?)
}

#[uniffi::export]
pub async fn adapter_stop_relay(adapter: Arc<NativeAdapter>) {
    off_thread(&adapter, |inner| inner.stop_relay()).await
}

#[uniffi::export]
pub async fn adapter_enqueue_now(
    adapter: Arc<NativeAdapter>,
    job_json: String,
    context_json: Option<String>,
) -> NativeResult<String> {
    Ok(off_thread(&adapter, move |inner| {
        inner.enqueue_now(&job_json, context_json.as_deref())
    })
    .await?)
}

#[uniffi::export]
pub async fn adapter_prune(adapter: Arc<NativeAdapter>, older_than: String) -> NativeResult<u64> {
    Ok(off_thread(&adapter, move |inner| inner.prune(&older_than)).await?)
}

#[uniffi::export]
pub async fn adapter_migrate(adapter: Arc<NativeAdapter>) -> NativeResult<()> {
    Ok(off_thread(&adapter, |inner| inner.migrate()).await?)
}

#[uniffi::export]
pub async fn adapter_status_json(adapter: Arc<NativeAdapter>) -> NativeResult<String> {
    Ok(off_thread(&adapter, |inner| inner.status_json()).await?)
}

#[uniffi::export]
pub async fn adapter_dead_list_json(
    adapter: Arc<NativeAdapter>,
    tenant: Option<String>,
    limit: Option<u32>,
) -> NativeResult<String> {
    Ok(off_thread(&adapter, move |inner| {
        inner.dead_list_json(tenant.as_deref(), limit)
    })
    .await?)
}

#[uniffi::export]
pub async fn adapter_dead_replay(
    adapter: Arc<NativeAdapter>,
    tenant: Option<String>,
) -> NativeResult<u64> {
    Ok(off_thread(&adapter, move |inner| inner.dead_replay(tenant.as_deref())).await?)
}

#[uniffi::export]
pub async fn adapter_dead_purge(
    adapter: Arc<NativeAdapter>,
    tenant: Option<String>,
) -> NativeResult<u64> {
    Ok(off_thread(&adapter, move |inner| inner.dead_purge(tenant.as_deref())).await?)
}

#[uniffi::export]
pub async fn adapter_rows_json(
    adapter: Arc<NativeAdapter>,
    job_ids: Vec<String>,
) -> NativeResult<String> {
    Ok(off_thread(&adapter, move |inner| inner.rows_json(job_ids)).await?)
}

/// Runs the relay as the process's only job until SIGINT/SIGTERM (`rake ojs:relay`).
#[uniffi::export]
pub async fn adapter_run_relay_until_signal(adapter: Arc<NativeAdapter>) -> NativeResult<()> {
    Ok(off_thread(&adapter, |inner| inner.run_relay_until_signal()).await?)
}

/// From now on SIGINT and SIGTERM no longer kill the process but stop
/// `adapter_run_relay_until_signal` gracefully, also one that arrives before the relay runs
/// (`ojs_bridge::arm_stop_signals`). Called first thing by `rake ojs:relay`, after
/// its Ruby traps (the core's handlers chain to them). Idempotent.
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

/// Turns the relay's log feed on for this process (`bridge::enable_log_feed`). Idempotent.
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

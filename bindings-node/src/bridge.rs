//! `NativeAdapter`: one configured core adapter (`bridge::Bridge`) per `createOjs` call.
//! Method names and order follow `bridge::Bridge`. `Stager` and `stage_job`: the per-call
//! staging hot path, a plain function on an external handle.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{AsyncTask, External, ToNapiValue, TypeName};
use napi::{Env, Task};
use napi_derive::napi;
use ojs_bridge::Bridge;
use ojs_outbox::ErrorCode;

use crate::error::to_js;

type Work<T> = Box<dyn FnOnce() -> ojs_outbox::Result<T> + Send>;

/// A blocking core call run on libuv's thread pool; its promise resolves with the result.
pub struct Blocking<T: Send + 'static> {
    work: Option<Work<T>>,
}

impl<T: ToNapiValue + TypeName + Send + 'static> Blocking<T> {
    fn task(work: impl FnOnce() -> ojs_outbox::Result<T> + Send + 'static) -> AsyncTask<Self> {
        AsyncTask::new(Blocking {
            work: Some(Box::new(work)),
        })
    }
}

impl<T: ToNapiValue + TypeName + Send + 'static> Task for Blocking<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let work = self
            .work
            .take()
            .ok_or_else(|| napi::Error::from_reason("task already ran"))?;
        work().map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}

/// The core adapter behind a JavaScript handle.
///
/// Deliberately missing: `bridge::Bridge::run_relay_until_signal` (and anything else that
/// installs native SIGINT/SIGTERM handlers). In a Node process the signals belong to Node: a
/// native handler chains to Node's own SIGTERM handler, which re-raises the signal at itself
/// expecting the default action, and the pair re-deliver it forever (100% CPU, no exit).
/// `bin/ojs-relay.js` takes the signals with `process.on` and stops the relay with `close`. `close` stops the relay and lets the runtime
/// and its database pool go (once calls still running have finished); later calls fail with
/// `RELAY_SHUT_DOWN`.
#[napi]
pub struct NativeAdapter {
    inner: Shared,
}

/// The adapter of a `NativeAdapter`, shared with its stagers; `None` once closed.
type Shared = Arc<Mutex<Option<Arc<Bridge>>>>;

fn current(shared: &Shared) -> Option<Arc<Bridge>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

fn closed() -> ojs_outbox::Error {
    ojs_outbox::Error::new(ErrorCode::RelayShutDown, "the adapter is closed")
}

impl NativeAdapter {
    fn adapter(&self) -> Option<Arc<Bridge>> {
        current(&self.inner)
    }

    fn sync<T>(&self, work: impl FnOnce(&Bridge) -> ojs_outbox::Result<T>) -> napi::Result<T> {
        let adapter = self.adapter().ok_or_else(|| to_js(closed()))?;
        work(&adapter).map_err(to_js)
    }

    fn blocking<T: ToNapiValue + TypeName + Send + 'static>(
        &self,
        work: impl FnOnce(&Bridge) -> ojs_outbox::Result<T> + Send + 'static,
    ) -> AsyncTask<Blocking<T>> {
        let adapter = self.adapter();
        Blocking::task(move || {
            let adapter = adapter.ok_or_else(closed)?;
            work(&adapter)
        })
    }
}

/// What the application tells the core about itself (`ojs_outbox::Host`).
#[napi(object)]
#[derive(Default)]
pub struct NativeHost {
    /// `NODE_ENV === "development"`: a missing URL takes the core's development default.
    pub development: Option<bool>,
    /// The user's spelling of the URL setting, named in the messages (`createOjs({ url })`).
    pub url_setting: Option<String>,
    /// `false` for a handle that never talks to the backend (a migration's DDL).
    pub needs_backend: Option<bool>,
}

/// The core's top-level configuration keys as options offer them (`bridge::option_keys`).
#[napi]
pub fn option_keys() -> Vec<String> {
    ojs_bridge::option_keys()
}

/// Throws the core's `INVALID_CONFIG` for an unknown option `key`, naming the closest of
/// `accepted` when it is a near miss.
#[napi]
pub fn reject_option(key: String, accepted: Vec<String>) -> napi::Result<()> {
    Err(to_js(ojs_bridge::unknown_option_error(&key, &accepted)))
}

#[napi]
impl NativeAdapter {
    /// Parses the spec §5.2 configuration (JSON text) as the host runs (`config::Host`); no
    /// I/O. Without `host`: not in development mode, the URL named `adapter.ojs_url`.
    #[napi(constructor)]
    pub fn new(config_json: String, host: Option<NativeHost>) -> napi::Result<Self> {
        let host = host.unwrap_or_default();
        let host = ojs_outbox::Host {
            development: host.development.unwrap_or(false),
            url_setting: host
                .url_setting
                .as_deref()
                .unwrap_or(ojs_outbox::Host::PRODUCTION.url_setting),
            needs_backend: host.needs_backend.unwrap_or(true),
        };
        Bridge::for_host(&config_json, &host)
            .map(|adapter| NativeAdapter {
                // JavaScript callers may spell job options in camelCase with milliseconds.
                inner: Arc::new(Mutex::new(Some(Arc::new(adapter.accept_js_options())))),
            })
            .map_err(to_js)
    }

    /// The line to log once (warning) when the development default URL was taken, else null.
    #[napi(getter)]
    pub fn notice(&self) -> napi::Result<Option<String>> {
        self.sync(|adapter| Ok(adapter.notice().map(str::to_owned)))
    }

    #[napi(getter)]
    pub fn table_name(&self) -> napi::Result<String> {
        self.sync(|adapter| Ok(adapter.table_name().to_owned()))
    }

    #[napi(getter)]
    pub fn relay_in_process(&self) -> napi::Result<bool> {
        self.sync(|adapter| Ok(adapter.relay_in_process()))
    }

    /// The core's `relay.hot_queue_capacity`: the most wake-up ids the relay host channel
    /// holds in the application process while a message is being written (`relay-host.js`).
    #[napi(getter)]
    pub fn hot_queue_capacity(&self) -> napi::Result<u32> {
        self.sync(|adapter| {
            Ok(u32::try_from(adapter.config().relay.hot_queue_capacity).unwrap_or(u32::MAX))
        })
    }

    /// The statement that drops the outbox table (a migration's `down`).
    #[napi]
    pub fn drop_table_sql(&self, dialect: String) -> napi::Result<String> {
        self.sync(|adapter| adapter.drop_table_sql(&dialect))
    }

    #[napi]
    pub fn create_table_sql(&self, dialect: String) -> napi::Result<Vec<String>> {
        self.sync(|adapter| adapter.create_table_sql(&dialect))
    }

    /// Validated jobs (`bridge::Bridge::stage`) as one JSON text (`Staged::to_json`:
    /// `{"job_ids": [...], "statements": [{"sql", "params"}]}`). One string crossing into
    /// JavaScript (and one `JSON.parse` there) costs far less than arrays filled element by
    /// element through Node-API: a bulk of 1,000 jobs has up to 6,000 parameters.
    #[napi]
    pub fn stage_json(
        &self,
        dialect: String,
        placeholder: String,
        jobs_json: String,
        context_json: Option<String>,
    ) -> napi::Result<String> {
        let staged = self.sync(|adapter| {
            adapter.stage(&dialect, &placeholder, &jobs_json, context_json.as_deref())
        })?;
        Ok(staged.to_json())
    }

    /// The staging handle for one dialect and placeholder style, for `stage_job` (which
    /// judges both names, as `stage` does). It follows this adapter: once the adapter is
    /// closed, staging through it fails as every call does.
    #[napi]
    pub fn stager(&self, dialect: String, placeholder: String) -> External<Stager> {
        External::new(Stager {
            adapter: self.inner.clone(),
            dialect,
            placeholder,
        })
    }

    #[napi]
    pub fn start_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| adapter.start_relay())
    }

    #[napi]
    pub fn stop_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| {
            adapter.stop_relay();
            Ok(())
        })
    }

    /// Never fails: a closed adapter has no relay to wake, and the poller finds the rows.
    #[napi]
    pub fn notify_committed(&self, job_ids: Vec<String>) {
        if let Some(adapter) = self.adapter() {
            adapter.notify_committed(job_ids);
        }
    }

    #[napi]
    pub fn enqueue_now(
        &self,
        job_json: String,
        context_json: Option<String>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.enqueue_now(&job_json, context_json.as_deref()))
    }

    #[napi]
    pub fn metrics_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|adapter| Ok(adapter.metrics_json()))
    }

    #[napi]
    pub fn migrate(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| adapter.migrate())
    }

    #[napi]
    pub fn status_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|adapter| adapter.status_json())
    }

    #[napi]
    pub fn dead_list_json(
        &self,
        tenant: Option<String>,
        limit: Option<u32>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.dead_list_json(tenant.as_deref(), limit))
    }

    #[napi]
    pub fn dead_replay(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.dead_replay(tenant.as_deref()).map(saturate))
    }

    #[napi]
    pub fn dead_purge(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.dead_purge(tenant.as_deref()).map(saturate))
    }

    #[napi]
    pub fn prune(&self, older_than: String) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.prune(&older_than).map(saturate))
    }

    #[napi]
    pub fn rows_json(&self, job_ids: Vec<String>) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.rows_json(job_ids))
    }

    /// Stops the relay (gracefully) and releases the handle; idempotent.
    #[napi]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let adapter = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        Blocking::task(move || {
            if let Some(adapter) = adapter {
                adapter.stop_relay();
            }
            Ok(())
        })
    }
}

/// What `stage_job` stages with: an adapter, a dialect and a placeholder style.
pub struct Stager {
    adapter: Shared,
    dialect: String,
    placeholder: String,
}

/// One job staged (`bridge::Bridge::stage_job`, the per-call hot path of
/// `enqueueAfterCommit`), returned as one text: the INSERT text when `with_sql`, then the six
/// INSERT parameters in the SQL's order (`job_id, job_type, job_args, job_options, job_meta,
/// tenant_id`), separated by NUL characters; without a tenant the text ends after `job_meta`.
/// No field before the tenant can hold a NUL (an SQL text around a validated identifier, a
/// UUID, a validated type, JSON texts), so JavaScript cuts at the first five NULs and takes the
/// rest as the tenant. The INSERT text is the same for every call of a dialect and placeholder
/// style, so JavaScript asks for it once and keeps it.
///
/// Why this shape: per call, Node-API costs more than the core's staging. A plain function on
/// an external handle avoids a class method's receiver checks; the handle carries the dialect
/// and placeholder (two strings fewer to convert); one string crossing back costs a fraction of
/// an array filled element by element, or of a `JSON.parse`.
#[napi]
pub fn stage_job(
    stager: &External<Stager>,
    job_type: String,
    args_json: String,
    options_json: Option<String>,
    meta_json: Option<String>,
    context_json: Option<String>,
    with_sql: bool,
) -> napi::Result<String> {
    let adapter = current(&stager.adapter).ok_or_else(|| to_js(closed()))?;
    let staged = adapter
        .stage_job(
            &stager.dialect,
            &stager.placeholder,
            &job_type,
            &args_json,
            options_json.as_deref(),
            meta_json.as_deref(),
            context_json.as_deref(),
        )
        .map_err(to_js)?;
    let sql = with_sql.then_some(&*staged.sql);
    let [job_id, job_type, args, options, meta, tenant] = &staged.params;
    let fields =
        [job_id, job_type, args, options, meta].map(|field| field.as_deref().unwrap_or(""));
    if sql.iter().chain(&fields).any(|field| field.contains('\0')) {
        // Cannot happen (see above); checked so that it could never shift the parameters.
        return Err(napi::Error::from_reason(
            "stage_job: a staged field holds a NUL character",
        ));
    }
    let length: usize = sql.iter().chain(&fields).map(|field| field.len() + 1).sum();
    let mut out = String::with_capacity(length + tenant.as_ref().map_or(0, |t| t.len() + 1));
    for (index, field) in sql.iter().chain(&fields).enumerate() {
        if index > 0 {
            out.push('\0');
        }
        out.push_str(field);
    }
    if let Some(tenant) = tenant {
        out.push('\0');
        out.push_str(tenant);
    }
    Ok(out)
}

/// Row counts as JavaScript numbers.
fn saturate(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

//! `NativeBridge`: one configured `ojs_bridge::Bridge` per `createOjs` call, its methods named
//! and ordered as `Bridge`'s. `Stager`, `stage_job` and `stage_jobs`: staging, plain functions
//! on an external handle. `NativeLedger`: the core's savepoint bookkeeping
//! (`ojs_bridge::Ledger`) of one outermost knex transaction, for `NativeBridge::committed`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};

use napi::bindgen_prelude::{AsyncTask, External, ToNapiValue, TypeName};
use napi::{Env, Task};
use napi_derive::napi;
use ojs_bridge::{Bridge, ErrorCode, KeptTexts, Ledger};

use crate::error::to_js;
use crate::events::{NativeEventFeed, NativeRelayFrames};
use crate::worker::NativeWorker;

type Work<T> = Box<dyn FnOnce() -> ojs_bridge::Result<T> + Send>;

/// A blocking core call run on libuv's thread pool; its promise resolves with the result.
pub struct Blocking<T: Send + 'static> {
    work: Option<Work<T>>,
}

impl<T: ToNapiValue + TypeName + Send + 'static> Blocking<T> {
    fn task(work: impl FnOnce() -> ojs_bridge::Result<T> + Send + 'static) -> AsyncTask<Self> {
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

/// The core bridge behind a JavaScript handle.
///
/// Deliberately missing: `Bridge::run_relay_until_signal` (and anything else that installs
/// native SIGINT/SIGTERM handlers). In a Node process the signals belong to Node: a native
/// handler chains to Node's own SIGTERM handler, which re-raises the signal at itself expecting
/// the default action, and the pair re-deliver it forever (100% CPU, no exit).
/// `bin/ojs-relay.js` takes the signals with `process.on` and stops the relay with `close`.
/// `close` stops the relay and lets the runtime and its database pool go (once calls still
/// running have finished); later calls fail with `RELAY_SHUT_DOWN`. `stop_relay_sync` is the
/// stop of a process that is ending (`process.on('exit')`, a cluster worker's `disconnect`),
/// where nothing asynchronous runs any more.
#[napi]
pub struct NativeBridge {
    inner: Shared,
    stops: Stops,
}

/// The stops under way on libuv's pool (`stop_relay`, `close`), counted from the call on the
/// JavaScript thread until their flush has ended: `stop_relay_sync` waits for them, so a
/// process that exits during one still ends after its flush.
type Stops = Arc<(Mutex<usize>, Condvar)>;

/// One stop under way (`Stops`); dropped when its work has run, or with the task unrun.
struct StopUnderWay(Stops);

impl StopUnderWay {
    fn new(stops: &Stops) -> StopUnderWay {
        *stops
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
        StopUnderWay(stops.clone())
    }
}

impl Drop for StopUnderWay {
    fn drop(&mut self) {
        let (count, ended) = &*self.0;
        *count
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) -= 1;
        ended.notify_all();
    }
}

/// The bridge of a `NativeBridge`, shared with its stagers; `None` once closed.
type Shared = Arc<Mutex<Option<Arc<Bridge>>>>;

fn current(shared: &Shared) -> Option<Arc<Bridge>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

fn closed() -> ojs_bridge::Error {
    ojs_bridge::Error::new(ErrorCode::RelayShutDown, "the adapter is closed")
}

impl NativeBridge {
    fn bridge(&self) -> Option<Arc<Bridge>> {
        current(&self.inner)
    }

    fn sync<T>(&self, work: impl FnOnce(&Bridge) -> ojs_bridge::Result<T>) -> napi::Result<T> {
        let bridge = self.bridge().ok_or_else(|| to_js(closed()))?;
        work(&bridge).map_err(to_js)
    }

    fn blocking<T: ToNapiValue + TypeName + Send + 'static>(
        &self,
        work: impl FnOnce(&Bridge) -> ojs_bridge::Result<T> + Send + 'static,
    ) -> AsyncTask<Blocking<T>> {
        let bridge = self.bridge();
        Blocking::task(move || {
            let bridge = bridge.ok_or_else(closed)?;
            work(&bridge)
        })
    }
}

/// What the application tells the core about itself (`ojs_bridge::Host`).
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

/// What an operator command prints and how its process ends (`ojs_bridge::Report`).
#[napi(object)]
pub struct AdminReport {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The core's top-level configuration keys as options offer them (`ojs_bridge::option_keys`).
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

/// The relay's database URL from the host's connection settings (`db_url::ConnectionParts`
/// as JSON): `ojs_bridge::database_url_from_parts`.
#[napi]
pub fn database_url_from_parts(parts_json: String) -> napi::Result<String> {
    ojs_bridge::database_url_from_parts(&parts_json).map_err(to_js)
}

/// Transaction control for a driver without a transaction API (pg): `Bridge::transaction_sql`.
#[napi]
pub fn transaction_sql(step: String, depth: u32) -> napi::Result<String> {
    ojs_bridge::Bridge::transaction_sql(&step, depth as usize).map_err(to_js)
}

/// The HTTP request headers the middleware passes in the context's `headers`, lowercase.
#[napi]
pub fn context_header_names() -> Vec<String> {
    ojs_bridge::context_header_names()
}

/// Whether `path` (under the mount) is one of the surface's (`Bridge::surface_serves`): the
/// router passes the others on to the application.
#[napi]
pub fn surface_serves(path: String) -> bool {
    Bridge::surface_serves(&path)
}

/// Whether `path` (under the mount) answers every caller (`Bridge::surface_is_open`): the
/// router asks the app's `authorize` only for the other paths.
#[napi]
pub fn surface_is_open(path: String) -> bool {
    Bridge::surface_is_open(&path)
}

/// The answer of the HTTP surface to one request (`ojs_bridge::surface::SurfaceAnswer`): the
/// status, the headers (`[name, value]` pairs, `Content-Type` included), then the body, or,
/// with `stream`, the SSE frames to write as they come (the keep-alive comments included).
#[napi(object, object_from_js = false)]
pub struct SurfaceAnswer {
    pub status: u32,
    pub headers: Vec<Vec<String>>,
    pub body: String,
    pub stream: Option<NativeRelayFrames>,
}

#[napi]
impl NativeBridge {
    /// Parses the spec §5.2 configuration (JSON text) as the host runs (`Host`); no I/O.
    /// Without `host`: not in development mode, the URL named `adapter.ojs_url`.
    #[napi(constructor)]
    pub fn new(config_json: String, host: Option<NativeHost>) -> napi::Result<Self> {
        let host = host.unwrap_or_default();
        let host = ojs_bridge::Host {
            development: host.development.unwrap_or(false),
            url_setting: host
                .url_setting
                .as_deref()
                .unwrap_or(ojs_bridge::Host::PRODUCTION.url_setting),
            needs_backend: host.needs_backend.unwrap_or(true),
        };
        Bridge::for_host(&config_json, &host)
            .map(|bridge| NativeBridge {
                // JavaScript callers may spell job options in camelCase with milliseconds.
                inner: Arc::new(Mutex::new(Some(Arc::new(bridge.accept_js_options())))),
                stops: Stops::default(),
            })
            .map_err(to_js)
    }

    /// The line to log once (warning) when the development default URL was taken, else null.
    #[napi(getter)]
    pub fn notice(&self) -> napi::Result<Option<String>> {
        self.sync(|bridge| Ok(bridge.notice().map(str::to_owned)))
    }

    /// The core's `relay.hot_queue_capacity`: the most wake-up ids the relay host channel
    /// holds in the application process while a message is being written (`relay-host.js`).
    #[napi(getter)]
    pub fn hot_queue_capacity(&self) -> napi::Result<u32> {
        self.sync(|bridge| {
            Ok(u32::try_from(bridge.config().relay.hot_queue_capacity).unwrap_or(u32::MAX))
        })
    }

    #[napi(getter)]
    pub fn table_name(&self) -> napi::Result<String> {
        self.sync(|bridge| Ok(bridge.table_name().to_owned()))
    }

    #[napi(getter)]
    pub fn relay_in_process(&self) -> napi::Result<bool> {
        self.sync(|bridge| Ok(bridge.relay_in_process()))
    }

    /// The request context the core reads from a context JSON (its keys, or `{"headers", ...}`),
    /// as JSON with the core's keys (`null` for the ones absent), under this app's
    /// `trust_tenant_header` (`Bridge::request_context_json`): what `req.ojs.context` shows.
    #[napi]
    pub fn request_context_json(&self, context_json: String) -> napi::Result<String> {
        self.sync(|bridge| bridge.request_context_json(&context_json))
    }

    #[napi]
    pub fn create_table_sql(&self, dialect: String) -> napi::Result<Vec<String>> {
        self.sync(|bridge| bridge.create_table_sql(&dialect))
    }

    /// The statement that drops the outbox table (a migration's `down`).
    #[napi]
    pub fn drop_table_sql(&self, dialect: String) -> napi::Result<String> {
        self.sync(|bridge| bridge.drop_table_sql(&dialect))
    }

    /// The staging handle for one dialect and placeholder style, for `stage_job` and
    /// `stage_jobs` (which judge both names). It follows this bridge: once the bridge is
    /// closed, staging through it fails as every call does.
    #[napi]
    pub fn stager(&self, dialect: String, placeholder: String) -> External<Stager> {
        External::new(Stager {
            bridge: self.inner.clone(),
            dialect,
            placeholder,
            kept: RefCell::default(),
        })
    }

    #[napi]
    pub fn start_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|bridge| bridge.start_relay())
    }

    /// Starts the in-process relay unless it runs in this process already (`ensure_relay`).
    #[napi]
    pub fn ensure_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|bridge| bridge.ensure_relay())
    }

    #[napi]
    pub fn stop_relay(&self) -> AsyncTask<Blocking<()>> {
        let under_way = StopUnderWay::new(&self.stops);
        self.blocking(move |bridge| {
            bridge.stop_relay();
            drop(under_way);
            Ok(())
        })
    }

    /// Stops the relay (gracefully) and releases the handle; idempotent.
    #[napi]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let under_way = StopUnderWay::new(&self.stops);
        let bridge = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        Blocking::task(move || {
            if let Some(bridge) = bridge {
                bridge.stop_relay();
            }
            drop(under_way);
            Ok(())
        })
    }

    /// The stop of an ending process, on the calling (JavaScript) thread: waits for the stops
    /// under way (`stop_relay`, `close`), then stops the relay if one still runs here, flushing
    /// within `relay.shutdown_timeout` (`Bridge::stop_relay`). Staging keeps working; the
    /// runtime and its pool are left to the process's end. Never fails.
    #[napi]
    pub fn stop_relay_sync(&self) {
        let (count, ended) = &*self.stops;
        let mut under_way = count
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        while *under_way > 0 {
            under_way = ended
                .wait(under_way)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        drop(under_way);
        if let Some(bridge) = self.bridge() {
            bridge.stop_relay();
        }
    }

    /// Wakes the relay for committed ids (an `encode_ids` text). Never fails: a closed bridge
    /// has no relay to wake, and the poller finds the rows.
    #[napi]
    pub fn notify_committed(&self, job_ids: String) {
        if let Some(bridge) = self.bridge() {
            bridge.notify_committed(ojs_bridge::decode_ids(&job_ids));
        }
    }

    /// The outermost transaction of `ledger` committed: the core wakes the relay for the ids
    /// it still holds (`Bridge::committed`). The ledger is ended, also on a closed bridge.
    #[napi]
    pub fn committed(&self, ledger: &NativeLedger) {
        let mut ledger = ledger.inner.borrow_mut();
        match self.bridge() {
            Some(bridge) => bridge.committed(&mut ledger),
            None => ledger.rollback(),
        }
    }

    #[napi]
    pub fn enqueue_now(
        &self,
        job_json: String,
        context_json: Option<String>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |bridge| bridge.enqueue_now(&job_json, context_json.as_deref()))
    }

    #[napi]
    pub fn metrics_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|bridge| Ok(bridge.metrics_json()))
    }

    #[napi]
    pub fn prune(&self, older_than: String) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |bridge| bridge.prune(&older_than).map(saturate))
    }

    #[napi]
    pub fn migrate(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|bridge| bridge.migrate())
    }

    #[napi]
    pub fn status_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|bridge| bridge.status_json())
    }

    #[napi]
    pub fn dead_list_json(
        &self,
        tenant: Option<String>,
        limit: Option<u32>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |bridge| bridge.dead_list_json(tenant.as_deref(), limit))
    }

    #[napi]
    pub fn dead_replay(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |bridge| bridge.dead_replay(tenant.as_deref()).map(saturate))
    }

    #[napi]
    pub fn dead_purge(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |bridge| bridge.dead_purge(tenant.as_deref()).map(saturate))
    }

    /// An operator command (`admin::Command` as JSON): what to print and the exit code, in the
    /// words and by the rules of the core (`Bridge::admin`).
    #[napi]
    pub fn admin(&self, command_json: String) -> AsyncTask<Blocking<AdminReport>> {
        self.blocking(move |bridge| {
            let report = bridge.admin(&command_json)?;
            Ok(AdminReport {
                exit_code: report.exit_code,
                stdout: report.stdout,
                stderr: report.stderr,
            })
        })
    }

    /// The Prometheus exposition of this process's relay (what `/metrics` serves), the table's
    /// figures alone without one, or null when the table cannot be read (`Bridge::metrics_text`).
    #[napi]
    pub fn metrics_text(&self) -> AsyncTask<Blocking<Option<String>>> {
        self.blocking(|bridge| Ok(bridge.metrics_text()))
    }

    /// What `/readyz` answers, as JSON text: `{"ready", "database", "backend"}`
    /// (`Bridge::readiness_json`: checked through the relay's own connection).
    #[napi]
    pub fn readiness_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|bridge| bridge.readiness_json())
    }

    /// One request of the router's mount, answered by the core's surface (`Bridge::surface`;
    /// `request_json`: `method`, `path` under the mount, `query`, `last_event_id`, `access`
    /// (the app's decision), `access_field`, `body`). On the thread pool: readiness and
    /// metrics do I/O. An `access` that is not a decision is `INVALID_CONFIG` naming
    /// `access_field`; every other outcome is an answer.
    #[napi]
    pub fn surface(&self, request_json: String) -> AsyncTask<Blocking<SurfaceAnswer>> {
        self.blocking(move |bridge| {
            let answer = bridge.surface(&request_json)?;
            let stream = match answer.stream {
                Some(frames) => Some(NativeRelayFrames::new(frames).map_err(|e| {
                    ojs_bridge::Error::new(ErrorCode::RelayShutDown, e.reason.clone())
                })?),
                None => None,
            };
            Ok(SurfaceAnswer {
                status: u32::from(answer.status),
                headers: (answer.headers.into_iter())
                    .map(|(name, value)| vec![name, value])
                    .collect(),
                body: answer.body,
                stream,
            })
        })
    }

    /// A subscriber of this process's relay events, as SSE frames (`Bridge::relay_events`;
    /// `request_json`: `types`, `queues`, `job_types`, `tenant`, `since`, `last_event_id`).
    /// No I/O, but a replay copies what the relay kept (up to `relay.event_history` events):
    /// on the thread pool. `RELAY_SHUT_DOWN` when no relay runs here.
    #[napi]
    pub fn relay_events(&self, request_json: String) -> AsyncTask<Blocking<NativeRelayFrames>> {
        self.blocking(move |bridge| {
            let frames = bridge.relay_events(&request_json)?;
            NativeRelayFrames::new(frames)
                .map_err(|e| ojs_bridge::Error::new(ErrorCode::RelayShutDown, e.reason.clone()))
        })
    }

    /// An event client of an OJS event stream (`Bridge::subscribe_events`; without `url`, the
    /// configured backend's). On the thread pool: the first call of a process connects the
    /// core's runtime.
    #[napi]
    pub fn subscribe_events(&self, options_json: String) -> AsyncTask<Blocking<NativeEventFeed>> {
        self.blocking(move |bridge| {
            let feed = bridge.subscribe_events(&options_json)?;
            NativeEventFeed::new(feed)
                .map_err(|e| ojs_bridge::Error::new(ErrorCode::RelayShutDown, e.reason.clone()))
        })
    }

    /// Starts the core worker loop against this adapter's backend (`Bridge::start_worker`;
    /// options JSON: `queues`, `concurrency`, `visibility_timeout_ms`, `worker_id`,
    /// `idle_poll_ms`, an unknown key `INVALID_CONFIG`). No I/O (the loop's first fetch runs on
    /// its own runtime), so synchronous: bad options throw at the call.
    #[napi]
    pub fn start_worker(&self, options_json: String) -> napi::Result<NativeWorker> {
        let worker = self.sync(|bridge| bridge.start_worker(&options_json))?;
        NativeWorker::new(worker)
    }

    /// What a unique job's enqueue call reports (`Bridge::held_outcome`): see `held_outcome`.
    #[napi]
    pub fn held_outcome(&self, token: String, returned: Option<String>) -> napi::Result<String> {
        self.sync(|bridge| bridge.held_outcome(&token, returned.as_deref()))
    }

    /// The committed rows of these jobs (an `encode_ids` text), as JSON.
    #[napi]
    pub fn rows_json(&self, job_ids: String) -> AsyncTask<Blocking<String>> {
        self.blocking(move |bridge| bridge.rows_json(ojs_bridge::decode_ids(&job_ids)))
    }
}

/// The savepoint bookkeeping of one outermost knex transaction for one bridge
/// (`ojs_bridge::Ledger`): `lib/knex.js` reports each savepoint's end to it as knex settles
/// it, `stage_job` records staged ids in it (through `handle`), and `NativeBridge::committed`
/// takes it at the outermost commit. Used on the JavaScript thread only.
#[napi]
pub struct NativeLedger {
    inner: LedgerHandle,
}

/// The ledger as `stage_job` takes it: an external handle costs a fraction of a class
/// instance's unwrap per call (measured: about 0.07 µs against 0.27 µs).
pub type LedgerHandle = Rc<RefCell<Ledger>>;

#[napi]
impl NativeLedger {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeLedger {
            inner: Rc::new(RefCell::new(Ledger::new())),
        }
    }

    /// The handle `stage_job` records ids through (ask once per ledger).
    #[napi]
    pub fn handle(&self) -> External<LedgerHandle> {
        External::new(self.inner.clone())
    }

    /// Open levels: 1 in the outermost transaction, +1 per open savepoint, 0 once ended.
    #[napi(getter)]
    pub fn depth(&self) -> u32 {
        u32::try_from(self.inner.borrow().depth()).unwrap_or(u32::MAX)
    }

    /// Records ids (an `encode_ids` text) staged at the innermost open level.
    #[napi]
    pub fn staged(&self, job_ids: String) -> napi::Result<()> {
        self.inner
            .borrow_mut()
            .staged(ojs_bridge::decode_ids(&job_ids))
            .map_err(to_js)
    }

    #[napi]
    pub fn savepoint(&self) -> napi::Result<()> {
        self.inner.borrow_mut().savepoint().map_err(to_js)
    }

    #[napi]
    pub fn release(&self) -> napi::Result<()> {
        self.inner.borrow_mut().release().map_err(to_js)
    }

    #[napi]
    pub fn rollback_savepoint(&self) -> napi::Result<()> {
        self.inner.borrow_mut().rollback_savepoint().map_err(to_js)
    }

    /// The outermost transaction rolled back: nothing wakes the relay.
    #[napi]
    pub fn rollback(&self) {
        self.inner.borrow_mut().rollback();
    }

    /// The outermost transaction committed, for a relay in another process (the SQLite relay
    /// host): the ids to wake as an `encode_ids` text; the ledger is ended.
    #[napi]
    pub fn commit(&self) -> String {
        ojs_bridge::encode_ids(&self.inner.borrow_mut().commit())
    }
}

/// What `stage_job` and `stage_jobs` stage with: a bridge, a dialect and a placeholder style;
/// and the bulk INSERT texts the JavaScript side of this handle keeps (`stager.texts`).
pub struct Stager {
    bridge: Shared,
    dialect: String,
    placeholder: String,
    kept: RefCell<KeptTexts>,
}

/// One job staged (`Bridge::stage_job`, the per-call hot path of `enqueueAfterCommit`),
/// returned as its one encoding, `StagedJob::encode(with_sql)`. The INSERT text is the same
/// for every call of a dialect and placeholder style, so JavaScript asks for it once. In a
/// transaction, `ledger` is its outermost transaction's ledger (`NativeLedger::handle`): the
/// job id is recorded there, at the innermost open level, here (one call fewer per job). The
/// INSERT runs right after, on the same connection, so the id belongs to the level its row is
/// written in; should the INSERT fail and the transaction still commit, the wake-up for the
/// id finds no row (a wake-up is a hint: the relay claims only rows that exist).
///
/// Why this shape: per call, Node-API costs more than the core's staging. A plain function on
/// an external handle avoids a class method's receiver checks; the handle carries the dialect
/// and placeholder (two strings fewer to convert); one string crossing back costs a fraction of
/// an array filled element by element, or of a `JSON.parse`.
#[napi]
#[allow(clippy::too_many_arguments)]
pub fn stage_job(
    stager: &External<Stager>,
    ledger: Option<&External<LedgerHandle>>,
    job_type: String,
    args_json: String,
    options_json: Option<String>,
    meta_json: Option<String>,
    context_json: Option<String>,
    with_sql: bool,
) -> napi::Result<String> {
    let bridge = current(&stager.bridge).ok_or_else(|| to_js(closed()))?;
    let staged = bridge
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
    // A keyed job (`StagedJob::keyed`: an empty first field, then its `Staged` JSON) has no id
    // yet that is sure: a unique job's is known once its statement ran (`held_outcome`).
    // JavaScript records the ids it reports, as for a bulk.
    if let (Some(ledger), None) = (ledger, &staged.keyed) {
        ledger
            .borrow_mut()
            .staged(std::iter::once(staged.job_id.clone()))
            .map_err(to_js)?;
    }
    Ok(staged.encode(with_sql))
}

/// Several jobs staged (`Bridge::stage`, for `enqueueBulk`: a JSON array of `{type, args,
/// options?, meta?}`), returned as one text, `Staged::encode`: the INSERT texts cross once per
/// stager and are kept on its JavaScript side, the parameters cross NUL-separated. Measured
/// for 1,000 jobs against the JSON reply (`Staged::to_json` then `JSON.parse`): see
/// docs/express.md, "Staging cost".
#[napi]
pub fn stage_jobs(
    stager: &External<Stager>,
    jobs_json: String,
    context_json: Option<String>,
) -> napi::Result<String> {
    let bridge = current(&stager.bridge).ok_or_else(|| to_js(closed()))?;
    let staged = bridge
        .stage(
            &stager.dialect,
            &stager.placeholder,
            &jobs_json,
            context_json.as_deref(),
        )
        .map_err(to_js)?;
    // The kept-texts encoding has no field for a statement's `returns` (a unique job's): such
    // a bulk crosses as `StagedJob::encode` sends a keyed job, an empty first field and then
    // `Staged::to_json` (the kept-texts text starts with `1` or `0`, never with NUL).
    if staged
        .statements
        .iter()
        .any(|statement| statement.returns.is_some())
    {
        return Ok(format!("\0{}", staged.to_json()));
    }
    Ok(staged.encode(&mut stager.kept.borrow_mut()))
}

/// Row counts as JavaScript numbers.
fn saturate(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// What `NativeRelayCommand::start` started (`ojs_bridge::Started`).
#[napi(object)]
pub struct RelayStarted {
    pub table: String,
    pub listening_on: Option<String>,
}

/// The relay command line (`bin/ojs-relay.js`): parsed by the core as `ojs-relay`'s
/// (`ojs_bridge::relay_command`); an operator command runs with `execute`, `run` with `start`
/// and `stop` (the signals stay Node's: no native handler is installed).
#[napi]
pub struct NativeRelayCommand {
    inner: Arc<ojs_bridge::RelayCommand>,
}

#[napi]
impl NativeRelayCommand {
    /// Parses `args` (the argv after the program name) for the command `framework_json`
    /// describes (`program`, `subcommands`, `config`, ...: `ojs_bridge::relay_command`). No I/O.
    #[napi(constructor)]
    pub fn new(args: Vec<String>, framework_json: String) -> napi::Result<Self> {
        ojs_bridge::relay_command(args, &framework_json)
            .map(|inner| NativeRelayCommand {
                inner: Arc::new(inner),
            })
            .map_err(to_js)
    }

    /// What to print and the exit code when nothing runs (`--help`, `--version`, a usage
    /// error: exit 2 naming the accepted options); null otherwise.
    #[napi]
    pub fn exit(&self) -> Option<AdminReport> {
        self.inner.exit().map(|report| AdminReport {
            exit_code: report.exit_code,
            stdout: report.stdout,
            stderr: report.stderr,
        })
    }

    /// Whether the command is `run`.
    #[napi(getter)]
    pub fn is_run(&self) -> bool {
        self.inner.is_run()
    }

    /// Runs an operator command (`migrate`, `status`, `dead ...`): what to print and the code.
    #[napi]
    pub fn execute(&self) -> AsyncTask<Blocking<AdminReport>> {
        let inner = self.inner.clone();
        Blocking::task(move || {
            let report = inner.execute()?;
            Ok(AdminReport {
                exit_code: report.exit_code,
                stdout: report.stdout,
                stderr: report.stderr,
            })
        })
    }

    /// `run`: starts the standalone relay (no hot path) and the `--listen` surface; resolves
    /// with the table it relays and the address the surface listens on (or null).
    #[napi]
    pub fn start(&self) -> AsyncTask<Blocking<RelayStarted>> {
        let inner = self.inner.clone();
        Blocking::task(move || {
            let started = inner.start()?;
            Ok(RelayStarted {
                table: started.table,
                listening_on: started.listening_on,
            })
        })
    }

    /// The graceful stop of what `start` started (flushes within `relay.shutdown_timeout`).
    #[napi]
    pub fn stop(&self) -> AsyncTask<Blocking<()>> {
        let inner = self.inner.clone();
        Blocking::task(move || {
            inner.stop();
            Ok(())
        })
    }
}

/// The exit code of a failed relay command for an error code (2: usage and configuration
/// errors; 1: the rest), as `ojs-relay` exits.
#[napi]
pub fn relay_exit_code(code: String) -> i32 {
    ErrorCode::parse(&code).map_or(1, ojs_bridge::relay_exit_code)
}

//! `Bridge`: one configured core bridge (`ojs_bridge::Bridge`) per Django database alias (or
//! per explicit configuration). Method names and order follow `ojs_bridge::Bridge`; each value
//! crosses in the bridge's one encoding (its crate doc): a staged job as `StagedJob::encode`,
//! staged jobs as `Staged::to_json`, id lists as `encode_ids` text, errors as `Error::to_json`.

use ojs_bridge as bridge;
use pyo3::prelude::*;

use crate::error::to_py;
use crate::events::{EventFeed, RelayFrames};
use crate::worker::Worker;

#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct Bridge {
    inner: bridge::Bridge,
}

#[pymethods]
impl Bridge {
    /// Parses the spec §5.2 configuration (JSON text) as the host runs (`config::Host`):
    /// `development` (Django's `DEBUG`), `url_setting` (named when the backend URL is
    /// missing), `needs_backend` (false for a DDL-only handle). No I/O.
    #[new]
    #[pyo3(signature = (config_json, development=false, url_setting="OJS_CONFIG[\"ojs_url\"]", needs_backend=true))]
    fn new(
        config_json: &str,
        development: bool,
        url_setting: &str,
        needs_backend: bool,
    ) -> PyResult<Self> {
        let host = bridge::Host {
            development,
            url_setting,
            needs_backend,
        };
        Ok(Bridge {
            inner: bridge::Bridge::for_host(config_json, &host).map_err(to_py)?,
        })
    }

    /// The line to log once at WARNING when the development default URL was taken, else None.
    #[getter]
    fn notice(&self) -> Option<String> {
        self.inner.notice().map(str::to_owned)
    }

    #[getter]
    fn table_name(&self) -> String {
        self.inner.table_name().to_owned()
    }

    #[getter]
    fn relay_in_process(&self) -> bool {
        self.inner.relay_in_process()
    }

    /// The DDL for a host connection of this dialect, one statement per element.
    fn create_table_sql(&self, dialect: &str) -> PyResult<Vec<String>> {
        self.inner.create_table_sql(dialect).map_err(to_py)
    }

    fn drop_table_sql(&self, dialect: &str) -> PyResult<String> {
        self.inner.drop_table_sql(dialect).map_err(to_py)
    }

    /// Validates the jobs (JSON array text) and returns `Staged::to_json`: `{"job_ids",
    /// "statements": [{"sql", "params", "returns"?}], "needs_savepoint"}` (a statement with
    /// `returns` is run as a query; see `held_outcome`). Pure computation: keeps the GIL.
    #[pyo3(signature = (dialect, placeholder, jobs_json, context_json=None))]
    fn stage(
        &self,
        dialect: &str,
        placeholder: &str,
        jobs_json: &str,
        context_json: Option<&str>,
    ) -> PyResult<String> {
        self.inner
            .stage(dialect, placeholder, jobs_json, context_json)
            .map(|staged| staged.to_json())
            .map_err(to_py)
    }

    /// `stage` for one job given as JSON texts (the per-call hot path): `StagedJob::encode`,
    /// one NUL-separated text, the INSERT first when `with_sql` (ask for it once per dialect).
    /// A keyed job (`ordering_key`, `unique`) is a text starting with NUL, then the job's
    /// `Staged::to_json` (run as a bulk of one; its SQL is never the per-job INSERT).
    /// Keeps the GIL: pure computation of a few microseconds.
    #[pyo3(signature = (dialect, placeholder, job_type, args_json, options_json=None, meta_json=None, context_json=None, with_sql=false))]
    #[allow(clippy::too_many_arguments)]
    fn stage_job(
        &self,
        dialect: &str,
        placeholder: &str,
        job_type: &str,
        args_json: &str,
        options_json: Option<&str>,
        meta_json: Option<&str>,
        context_json: Option<&str>,
        with_sql: bool,
    ) -> PyResult<String> {
        self.inner
            .stage_job(
                dialect,
                placeholder,
                job_type,
                args_json,
                options_json,
                meta_json,
                context_json,
            )
            .map(|staged| staged.encode(with_sql))
            .map_err(to_py)
    }

    /// What a unique job's enqueue call reports once its staging statement (one with
    /// `returns`) ran (`Bridge::held_outcome`): `token` is `returns.token`, `returned` the first
    /// column of the first row the statement returned (None: no row). The job id to report, or
    /// `NativeError` (DUPLICATE, with `existing_job_id`). Pure computation: keeps the GIL.
    #[pyo3(signature = (token, returned=None))]
    fn held_outcome(&self, token: &str, returned: Option<&str>) -> PyResult<String> {
        self.inner.held_outcome(token, returned).map_err(to_py)
    }

    /// A row's args as the application staged them (`Bridge::open_args`): opened with the key
    /// ring when they are the encryption envelope, else as they are. Pure computation: keeps
    /// the GIL.
    fn open_args(&self, args_json: &str, meta_json: &str) -> PyResult<String> {
        self.inner.open_args(args_json, meta_json).map_err(to_py)
    }

    /// The SELECT of one outbox row by job id (`Bridge::select_job_sql`), for the host to run
    /// on its own connection, so it sees what its open transaction staged: `job_type, job_args`
    /// (JSON text), `status, attempts, error, created_at_ms, job_meta` (JSON text); one
    /// parameter, the job id. Pure computation: keeps the GIL.
    fn select_job_sql(&self, dialect: &str, placeholder: &str) -> PyResult<String> {
        self.inner
            .select_job_sql(dialect, placeholder)
            .map_err(to_py)
    }

    fn start_relay(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.start_relay()).map_err(to_py)
    }

    /// Starts the in-process relay once per process, and again in a forked child; one atomic
    /// load when it runs already (the per-enqueue call).
    fn ensure_relay(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.ensure_relay()).map_err(to_py)
    }

    fn stop_relay(&self, py: Python<'_>) {
        py.detach(|| self.inner.stop_relay())
    }

    /// Stops the relay and closes this process's pool and runtime (settings changed).
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close())
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (recovery tests).
    fn kill_relay(&self, py: Python<'_>) {
        py.detach(|| self.inner.kill_relay())
    }

    /// The after-commit wake-up for an `encode_ids` text. Detached: it may wait for the core's
    /// lock while another thread's admin call holds it.
    fn notify_committed(&self, py: Python<'_>, job_ids: &str) {
        let job_ids = bridge::decode_ids(job_ids);
        py.detach(|| self.inner.notify_committed(job_ids))
    }

    #[pyo3(signature = (job_json, context_json=None))]
    fn enqueue_now(
        &self,
        py: Python<'_>,
        job_json: &str,
        context_json: Option<&str>,
    ) -> PyResult<String> {
        py.detach(|| self.inner.enqueue_now(job_json, context_json))
            .map_err(to_py)
    }

    fn metrics_json(&self, py: Python<'_>) -> String {
        py.detach(|| self.inner.metrics_json())
    }

    /// The Prometheus exposition of this process's relay (what a `/metrics` mount serves);
    /// `None` when no relay runs in this process.
    fn metrics_text(&self, py: Python<'_>) -> Option<String> {
        py.detach(|| self.inner.metrics_text())
    }

    /// What `/readyz` answers, as JSON text: `{"ready", "database", "backend"}` (`ready`
    /// false: answer 503), checked through the relay's own connection.
    fn readiness_json(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.inner.readiness_json()).map_err(to_py)
    }

    /// A subscriber of this process's relay events as SSE frames; `request_json` is the
    /// request of `GET /v1/events/stream` (`events::StreamRequest`: `types`, `queues`,
    /// `job_types` as comma-separated text, `tenant`, `since`, `last_event_id`). Raises
    /// `NativeError` (RELAY_SHUT_DOWN) when no relay runs in this process.
    fn relay_events(&self, py: Python<'_>, request_json: &str) -> PyResult<RelayFrames> {
        py.detach(|| self.inner.relay_events(request_json))
            .map(|inner| RelayFrames { inner })
            .map_err(to_py)
    }

    /// One request of the mount, answered by the core's surface policy
    /// (`ojs_bridge::surface`): `request_json` is `{"method", "path", "query",
    /// "last_event_id", "access", "access_field", "keep_alive_ms"}`; the answer is
    /// `(status, headers, body, stream)`, `stream` the frames of an event stream (the
    /// keep-alive comment included). Raises `NativeError` (INVALID_CONFIG) when `access` is
    /// not a decision. Detached: readiness and metrics read the database.
    #[allow(clippy::type_complexity)]
    fn surface(
        &self,
        py: Python<'_>,
        request_json: &str,
    ) -> PyResult<(u16, Vec<(String, String)>, String, Option<RelayFrames>)> {
        let answer = py
            .detach(|| self.inner.surface(request_json))
            .map_err(to_py)?;
        let stream = answer.stream.map(|inner| RelayFrames { inner });
        Ok((answer.status, answer.headers, answer.body, stream))
    }

    /// Whether `path` (under the mount) answers every caller: only the others need access.
    #[staticmethod]
    fn surface_is_open(path: &str) -> bool {
        bridge::Bridge::surface_is_open(path)
    }

    /// A client of an OJS event stream (`event_client::EventSubscription` as JSON: `url`
    /// (without it, the configured backend's stream), `token`, `types`, `queues`,
    /// `job_types` (lists), `tenant`, `since`, `last_event_id`).
    fn subscribe_events(&self, py: Python<'_>, options_json: &str) -> PyResult<EventFeed> {
        py.detach(|| self.inner.subscribe_events(options_json))
            .map(|inner| EventFeed { inner })
            .map_err(to_py)
    }

    /// Deletes sent rows older than an ISO-8601 duration; returns how many.
    fn prune(&self, py: Python<'_>, older_than: &str) -> PyResult<u64> {
        py.detach(|| self.inner.prune(older_than)).map_err(to_py)
    }

    fn migrate(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.migrate()).map_err(to_py)
    }

    fn status_json(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.inner.status_json()).map_err(to_py)
    }

    #[pyo3(signature = (tenant=None, limit=None))]
    fn dead_list_json(
        &self,
        py: Python<'_>,
        tenant: Option<&str>,
        limit: Option<u32>,
    ) -> PyResult<String> {
        py.detach(|| self.inner.dead_list_json(tenant, limit))
            .map_err(to_py)
    }

    #[pyo3(signature = (tenant=None))]
    fn dead_replay(&self, py: Python<'_>, tenant: Option<&str>) -> PyResult<u64> {
        py.detach(|| self.inner.dead_replay(tenant)).map_err(to_py)
    }

    #[pyo3(signature = (tenant=None))]
    fn dead_purge(&self, py: Python<'_>, tenant: Option<&str>) -> PyResult<u64> {
        py.detach(|| self.inner.dead_purge(tenant)).map_err(to_py)
    }

    /// An operator command (`admin::Command` as JSON) run by the core's rules and words:
    /// `(exit_code, stdout, stderr)`, printed as they are by `manage.py ojs_outbox`.
    fn admin(&self, py: Python<'_>, command_json: &str) -> PyResult<(i32, String, String)> {
        py.detach(|| self.inner.admin(command_json))
            .map(|report| (report.exit_code, report.stdout, report.stderr))
            .map_err(to_py)
    }

    /// One worker request (`worker::WorkerCommand` as JSON: `{"op": "fetch" | "ack" | "nack" |
    /// "heartbeat", ...}`) to the configured backend's `/ojs/v1/workers/*`; the server's answer
    /// as JSON text. Detached: it waits on the network.
    fn worker(&self, py: Python<'_>, command_json: &str) -> PyResult<String> {
        py.detach(|| self.inner.worker(command_json)).map_err(to_py)
    }

    /// Starts the core worker loop (`worker::Worker`) on this configuration's backend (and key
    /// ring): `options_json` is `{"queues", "concurrency"?, "visibility_timeout_ms"?,
    /// "worker_id"?, "idle_poll_ms"?}`; an absent key takes the core's default.
    fn start_worker(&self, py: Python<'_>, options_json: &str) -> PyResult<Worker> {
        py.detach(|| self.inner.start_worker(options_json))
            .map(|inner| Worker { inner })
            .map_err(to_py)
    }

    /// The committed state of the rows of an `encode_ids` text, as JSON.
    fn rows_json(&self, py: Python<'_>, job_ids: &str) -> PyResult<String> {
        let job_ids = bridge::decode_ids(job_ids);
        py.detach(|| self.inner.rows_json(job_ids)).map_err(to_py)
    }

    /// Runs the relay as this process's only job until SIGINT or SIGTERM.
    fn run_relay_until_signal(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.run_relay_until_signal())
            .map_err(to_py)
    }
}

/// The relay command line of `manage.py ojs_relay` (`ojs_bridge::relay_command`): the options
/// of `ojs-relay run`, parsed by the core over Django's settings.
#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct RelayCommand {
    inner: bridge::RelayCommand,
}

#[pymethods]
impl RelayCommand {
    /// Parses `args` (the relay's options) for the command `framework_json` describes
    /// (`program`, `config`, `development`, `url_setting`, `create_table_with`, `after_help`).
    /// No I/O.
    #[new]
    fn new(args: Vec<String>, framework_json: &str) -> PyResult<Self> {
        Ok(RelayCommand {
            inner: bridge::relay_command(args, framework_json).map_err(to_py)?,
        })
    }

    /// `(exit_code, stdout, stderr)` when nothing runs (`--help`, `--version`, a usage error:
    /// exit 2 naming the accepted options), else None.
    fn exit(&self) -> Option<(i32, String, String)> {
        self.inner
            .exit()
            .map(|report| (report.exit_code, report.stdout, report.stderr))
    }

    /// The outbox table of the settings (a configuration error is raised here).
    fn table(&self) -> PyResult<String> {
        self.inner.table().map_err(to_py)
    }

    /// Runs the relay until SIGINT or SIGTERM (the core's stop signals), then stops it
    /// gracefully: `(exit_code, stdout, stderr)`. Detached.
    fn run_until_signal(&self, py: Python<'_>) -> PyResult<(i32, String, String)> {
        py.detach(|| self.inner.run_until_signal())
            .map(|report| (report.exit_code, report.stdout, report.stderr))
            .map_err(to_py)
    }
}

/// The exit code of a failed relay command for an error code (2: usage and configuration
/// errors; 1: the rest), as `ojs-relay` exits.
#[pyfunction]
pub fn relay_exit_code(code: &str) -> i32 {
    ojs_bridge::ErrorCode::parse(code).map_or(1, bridge::relay_exit_code)
}

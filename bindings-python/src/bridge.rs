//! `Adapter`: one configured core adapter per Django project (or per explicit configuration).
//! Method names and order follow `ojs_bridge::Bridge`.

use ojs_bridge as bridge;
use pyo3::prelude::*;

use crate::error::to_py;

/// One staging statement for the host cursor: SQL text and its parameters (text or None).
type Statement = (String, Vec<Option<String>>);

#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct Adapter {
    inner: bridge::Bridge,
}

#[pymethods]
impl Adapter {
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
        let host = ojs_outbox::Host {
            development,
            url_setting,
            needs_backend,
        };
        Ok(Adapter {
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

    /// Validates the jobs (JSON array text) and returns `(job_ids, [(sql, params), ...])` for
    /// the host cursor. Pure computation: keeps the GIL (it is on the hot path).
    #[pyo3(signature = (dialect, placeholder, jobs_json, context_json=None))]
    fn stage(
        &self,
        dialect: &str,
        placeholder: &str,
        jobs_json: &str,
        context_json: Option<&str>,
    ) -> PyResult<(Vec<String>, Vec<Statement>)> {
        let staged = self
            .inner
            .stage(dialect, placeholder, jobs_json, context_json)
            .map_err(to_py)?;
        let statements = staged
            .statements
            .into_iter()
            .map(|statement| (statement.sql, statement.params))
            .collect();
        Ok((staged.job_ids, statements))
    }

    /// `stage` for one job given as JSON texts (the per-call hot path): returns
    /// `(job_id, sql, params)`. Keeps the GIL: pure computation of a few microseconds.
    #[pyo3(signature = (dialect, placeholder, job_type, args_json, options_json=None, meta_json=None, context_json=None))]
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
    ) -> PyResult<(String, String, Vec<Option<String>>)> {
        let staged = self
            .inner
            .stage_job(
                dialect,
                placeholder,
                job_type,
                args_json,
                options_json,
                meta_json,
                context_json,
            )
            .map_err(to_py)?;
        Ok((staged.job_id, staged.sql.to_string(), staged.params.into()))
    }

    fn start_relay(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.start_relay()).map_err(to_py)
    }

    fn stop_relay(&self, py: Python<'_>) {
        py.detach(|| self.inner.stop_relay())
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (recovery tests).
    fn kill_relay(&self, py: Python<'_>) {
        py.detach(|| self.inner.kill_relay())
    }

    /// Deletes sent rows older than an ISO-8601 duration; returns how many.
    fn prune(&self, py: Python<'_>, older_than: &str) -> PyResult<u64> {
        py.detach(|| self.inner.prune(older_than)).map_err(to_py)
    }

    fn drop_table_sql(&self, dialect: &str) -> PyResult<String> {
        self.inner.drop_table_sql(dialect).map_err(to_py)
    }

    /// The after-commit wake-up. Detached: it may wait for the core's lock while another
    /// thread's admin call holds it.
    fn notify_committed(&self, py: Python<'_>, job_ids: Vec<String>) {
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

    fn rows_json(&self, py: Python<'_>, job_ids: Vec<String>) -> PyResult<String> {
        py.detach(|| self.inner.rows_json(job_ids)).map_err(to_py)
    }

    /// Runs the relay as this process's only job until SIGINT or SIGTERM.
    fn run_relay_until_signal(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.run_relay_until_signal())
            .map_err(to_py)
    }
}

//! The core worker loop (`ojs_bridge::worker::Worker`, issue 28) for `manage.py ojs_worker`:
//! Python runs the handler slots (threads), each calling `next`, running the Django task, and
//! calling `finish`; every rule (fetch, heartbeat, ack and nack, backoff, `timeout_ms`, graceful
//! stop, trace context, decryption, unknown types) is the loop's. Jobs and outcomes cross as the
//! JSON of the bridge's module doc. The waits release the GIL.
//! What the loop has to tell the operator (the backend down and back, an ack or nack not
//! delivered, a job timed out or given back, a job it could not decrypt) is drained with
//! `drain_log` and logged on `ojs_adapter_django.worker`.

use ojs_bridge::worker::{self, Next};
use pyo3::prelude::*;

use crate::error::to_py;

/// A running worker loop (`Bridge.start_worker`).
#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct Worker {
    pub(crate) inner: worker::Worker,
}

#[pymethods]
impl Worker {
    /// The worker id sent with every fetch (given, or the core's `host-pid-random`).
    #[getter]
    fn worker_id(&self) -> String {
        self.inner.worker_id().to_owned()
    }

    /// Handler slots: the loop holds at most this many jobs at once.
    #[getter]
    fn concurrency(&self) -> usize {
        self.inner.concurrency()
    }

    /// Waits up to `timeout_ms` for a job for a free slot: its JSON text, `""` when none came
    /// in time, `None` once the worker stops (the slot ends).
    fn next(&self, py: Python<'_>, timeout_ms: u64) -> Option<String> {
        match py.detach(|| self.inner.next(timeout_ms)) {
            Next::Job(json) => Some(json),
            Next::Idle => Some(String::new()),
            Next::Stopped => None,
        }
    }

    /// Settles a job `next` handed out with the handler's outcome (JSON). False: the loop no
    /// longer held it (its `timeout_ms` ran out, or the stopping loop gave it back); the outcome
    /// is dropped. A malformed outcome raises `NativeError` (INVALID_ARGS).
    fn finish(&self, job_id: &str, outcome_json: &str) -> PyResult<bool> {
        self.inner.finish(job_id, outcome_json).map_err(to_py)
    }

    /// Jobs handed out and not finished.
    #[getter]
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// The loop's log records since the last call, oldest first: `(level, message, job_id)`,
    /// `level` one of "info", "warning", "error". Never blocks on I/O.
    fn drain_log(&self) -> Vec<(String, String, Option<String>)> {
        (self.inner.drain_log().into_iter())
            .map(|record| (record.level, record.message, record.job_id))
            .collect()
    }

    /// Whether the backend did not answer the loop's last request (an outage being waited out).
    #[getter]
    fn backend_down(&self) -> bool {
        self.inner.backend_down()
    }

    /// Whether `stop` began.
    #[getter]
    fn stopping(&self) -> bool {
        self.inner.stopping()
    }

    /// How long a stop without `deadline_ms` waits for the jobs in flight (the option
    /// `stop_deadline_ms`, else the core's default).
    #[getter]
    fn stop_deadline_ms(&self) -> u64 {
        self.inner.stop_deadline_ms()
    }

    /// Graceful stop: no more fetches, `next` answers `None`, the jobs handed out have up to
    /// `deadline_ms` (`None`: `stop_deadline_ms`) to be finished, the rest is given back;
    /// returns once every ack and nack went. Releases the GIL.
    #[pyo3(signature = (deadline_ms=None))]
    fn stop(&self, py: Python<'_>, deadline_ms: Option<u64>) {
        py.detach(|| self.inner.stop(deadline_ms))
    }
}

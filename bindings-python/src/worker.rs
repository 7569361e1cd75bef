//! The core worker loop (`ojs_bridge::worker::Worker`, issue 28) for `manage.py ojs_worker`:
//! Python runs the handler slots (threads), each calling `next`, running the Django task, and
//! calling `finish`; every rule (fetch, heartbeat, ack and nack, backoff, `timeout_ms`, graceful
//! stop, trace context, decryption, unknown types) is the loop's. Jobs and outcomes cross as the
//! JSON of the bridge's module doc. The waits release the GIL.
//!
//! The loop writes what it has to tell the operator (the backend down and back, an ack or nack
//! not delivered, a job timed out or given back, a job it could not decrypt) as `tracing`
//! events of its modules only, which no binding receives. Until the bridge hands them over as it
//! does the relay's records (`drain_log_feed`), this module collects those events (targets
//! `ojs_outbox::worker_loop` and `ojs_outbox::worker`, INFO and above; nothing else) in a bounded
//! queue that `drain_worker_log` empties, so the Python worker logs them on
//! `ojs_adapter_django.worker`. The collector is the process's `tracing` subscriber, installed
//! when the first worker starts, and only if the process has none.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Mutex, Once};

use ojs_bridge::worker::{self, Next};
use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber, span};

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

    /// Whether `stop` began.
    #[getter]
    fn stopping(&self) -> bool {
        self.inner.stopping()
    }

    /// Graceful stop: no more fetches, `next` answers `None`, the jobs handed out have up to
    /// `deadline_ms` to be finished, the rest is given back; returns once every ack and nack
    /// went. Releases the GIL.
    fn stop(&self, py: Python<'_>, deadline_ms: u64) {
        py.detach(|| self.inner.stop(deadline_ms))
    }
}

/// The most records kept between two drains; more are counted and dropped.
const CAPACITY: usize = 1_000;
/// The loop's module and the worker protocol's (a fetched job that cannot be decrypted): their
/// events are the records.
const TARGETS: [&str; 2] = ["ojs_outbox::worker_loop", "ojs_outbox::worker"];

#[derive(Default)]
struct Queue {
    records: VecDeque<(String, String, Option<String>)>,
    dropped: usize,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    records: VecDeque::new(),
    dropped: 0,
});
static INSTALL: Once = Once::new();

/// Starts collecting the loop's records (once per process; not when the process already has
/// a `tracing` subscriber).
pub(crate) fn collect_log() {
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(LoopLog);
    });
}

/// The worker loop's records since the last call, oldest first: `(level, message, job_id)`,
/// `level` one of "info", "warning", "error". Never blocks on I/O.
#[pyfunction]
pub fn drain_worker_log() -> Vec<(String, String, Option<String>)> {
    let mut queue = QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Vec::with_capacity(queue.records.len() + 1);
    if queue.dropped > 0 {
        let dropped = std::mem::take(&mut queue.dropped);
        let message = format!(
            "{dropped} worker log records were dropped: more than {CAPACITY} came between two reads"
        );
        out.push(("warning".to_owned(), message, None));
    }
    out.extend(queue.records.drain(..));
    out
}

/// The `tracing` subscriber that keeps the loop's events (see the module doc).
struct LoopLog;

impl LoopLog {
    fn wanted(metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && TARGETS.contains(&metadata.target())
            && *metadata.level() <= Level::INFO
    }
}

impl Subscriber for LoopLog {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Self::wanted(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        Self::wanted(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            _ => "info",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut queue = QUEUE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if queue.records.len() < CAPACITY {
            let record = (level.to_owned(), fields.message, fields.job_id);
            queue.records.push_back(record);
        } else {
            queue.dropped += 1;
        }
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// An event's message and `job_id` field.
#[derive(Default)]
struct Fields {
    message: String,
    job_id: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "job_id" => self.job_id = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "job_id" => self.job_id = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

//! The worker side for the gem (issue 28): `OJS::Worker` runs `concurrency` Ruby threads, each
//! looping `next` → the job's handler (an ActiveJob job or a registered handler) → `finish`, on
//! the core worker loop (`ojs_bridge::worker::Worker`). Every rule (fetch, heartbeat, ack and
//! nack, backoff while the backend is down, `timeout_ms`, graceful stop, trace context,
//! decryption, unknown types) is the loop's; this module converts handles and text.
//!
//! The calls that wait (`next`, `stop`, and the start, which builds the loop's runtime) are C
//! functions bound with the ffi gem's `blocking: true`, exactly as the event surface's
//! (`events.rs`): the GVL is released while they wait, uniffi handles are borrowed for the call,
//! uniffi's `RustCallStatus` carries errors and panics, and a text answer is uniffi's own
//! lowered `Option<String>`. `finish` never waits (a short lock and a queue push: the loop's
//! own tasks send the ack or nack), so it keeps the GVL, as the after-commit wake-up does.
//! The cheap reads (`worker_id`, `concurrency`, `in_flight`, `stopping`, `drain_log`,
//! `backend_down`) are uniffi methods.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use ojs_bridge::worker::Next;
use uniffi::{RustBuffer, RustCallError, RustCallStatus};

use crate::events::lowered;
use crate::hot::{borrow, lower, text};
use crate::{Bridge, NativeError};

/// A running worker loop (`Bridge::start_worker`).
#[derive(uniffi::Object)]
pub struct Worker {
    inner: ojs_bridge::worker::Worker,
}

#[uniffi::export]
impl Worker {
    /// The worker id sent with every fetch (given, or made up by the core).
    pub fn worker_id(&self) -> String {
        self.inner.worker_id().to_owned()
    }

    /// Handler slots: the Ruby threads to run.
    pub fn concurrency(&self) -> u32 {
        u32::try_from(self.inner.concurrency()).unwrap_or(u32::MAX)
    }

    /// Jobs handed out and not finished.
    pub fn in_flight(&self) -> u32 {
        u32::try_from(self.inner.in_flight()).unwrap_or(u32::MAX)
    }

    /// Whether the stop began.
    pub fn stopping(&self) -> bool {
        self.inner.stopping()
    }

    /// What the loop said since the last call, oldest first (an outage and its end, a timeout,
    /// a job given back, an ack or nack not delivered, a job whose args could not be decoded):
    /// `level` "info", "warning" or "error", `job_id` the job's when it is about one, `table`
    /// empty. Cheap (a short lock on the loop's queue): the slots call it after each wait.
    pub fn drain_log(&self) -> Vec<crate::LogRecord> {
        (self.inner.drain_log().into_iter())
            .map(|record| crate::LogRecord {
                level: record.level,
                message: record.message,
                job_id: record.job_id,
                table: record.table,
            })
            .collect()
    }

    /// Whether the backend did not answer the loop's last request (an outage being waited out).
    pub fn backend_down(&self) -> bool {
        self.inner.backend_down()
    }
}

/// `Bridge::start_worker`: starts the worker loop (`options_json`: `queues`, `concurrency`,
/// `visibility_timeout_ms`, `worker_id`, `idle_poll_ms`; the core validates them and names an
/// unknown key). Answers the uniffi handle of a new `Worker`. Bound with `blocking: true` (it
/// builds the loop's runtime).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `options` null or `options_len` readable bytes;
/// `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_start_worker(
    bridge: u64,
    options: *const u8,
    options_len: usize,
    status: &mut RustCallStatus,
) -> u64 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            let work = || -> Result<u64, NativeError> {
                // SAFETY (both): the caller's contract.
                let bridge = unsafe { borrow::<Bridge>(bridge) };
                let options = unsafe { text(options, options_len, "config")? };
                let inner = bridge.inner.start_worker(options.unwrap_or("{}"))?;
                Ok(lowered(Arc::new(Worker { inner })).as_raw())
            };
            work().map_err(|error| RustCallError::Error(lower(error)))
        }),
    )
}

/// `Worker::next`: waits up to `timeout_ms` for a job for this slot. The answer is a lowered
/// `Option<String>`: the job's JSON (`ojs_bridge::worker`'s module doc), `""` when none came in
/// time, nil once the worker stops (the slot ends). Bound with `blocking: true`.
///
/// # Safety
/// `worker` is a live `Worker` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_next(
    worker: u64,
    timeout_ms: u64,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let worker = unsafe { borrow::<Worker>(worker) };
            let next = match worker.inner.next(timeout_ms) {
                Next::Job(json) => Some(json),
                Next::Idle => Some(String::new()),
                Next::Stopped => None,
            };
            Ok(lowered(next))
        }),
    )
}

/// `Worker::finish`: settles a job `next` handed out with the handler's outcome (JSON:
/// `{"outcome": "completed", "result"?}`, `{"outcome": "failed", "code", "message",
/// "retryable"?, "details"?}`, `{"outcome": "unknown_type"}`, `{"outcome": "requeue"}`).
/// Returns 1 when the loop settles it, 0 when it no longer held the job (its `timeout_ms` ran
/// out and it was nacked `timeout`, or the stopping worker gave it back: the outcome is
/// dropped) or on an error (see `status`: a malformed outcome). Never waits.
///
/// # Safety
/// `worker` is a live `Worker` handle; `job_id` and `outcome` null or that many readable
/// bytes; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_finish(
    worker: u64,
    job_id: *const u8,
    job_id_len: usize,
    outcome: *const u8,
    outcome_len: usize,
    status: &mut RustCallStatus,
) -> i8 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            let work = || -> Result<i8, NativeError> {
                // SAFETY (all): the caller's contract.
                let worker = unsafe { borrow::<Worker>(worker) };
                let job_id = unsafe { text(job_id, job_id_len, "args")? };
                let outcome = unsafe { text(outcome, outcome_len, "args")? };
                let held = worker
                    .inner
                    .finish(job_id.unwrap_or_default(), outcome.unwrap_or("null"))?;
                Ok(i8::from(held))
            };
            work().map_err(|error| RustCallError::Error(lower(error)))
        }),
    )
}

/// `Worker::stop`: graceful stop (no more fetches, the slots' next waits end, the jobs handed
/// out have up to `deadline_ms` to finish, the rest is given back); returns once every ack and
/// nack went. Returns 1. Bound with `blocking: true`.
///
/// # Safety
/// `worker` is a live `Worker` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_stop(
    worker: u64,
    deadline_ms: u64,
    status: &mut RustCallStatus,
) -> i8 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let worker = unsafe { borrow::<Worker>(worker) };
            worker.inner.stop(deadline_ms);
            Ok(1)
        }),
    )
}

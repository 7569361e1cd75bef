//! The worker side for the gem (issue 28): `OJS::Worker` runs `concurrency` Ruby threads, each
//! looping `next` → the job's handler (an ActiveJob job or a registered handler) → `finish`, on
//! the core worker loop (`ojs_bridge::worker::Worker`). Every rule (fetch, heartbeat, ack and
//! nack, backoff while the backend is down, `timeout_ms`, graceful stop, trace context,
//! decryption, unknown types) is the loop's; this module converts handles and text by the
//! protocol of `lib.rs`.
//!
//! The calls that wait (`next`, `stop`, and the start, which builds the loop's runtime) are
//! bound with `blocking: true`, as the event surface's are. `finish` never waits (a short lock
//! and a queue push: the loop's own tasks send the ack or nack), so it keeps the GVL, as the
//! after-commit wake-up does, and so do the cheap reads (`facts`, `drain_log`).

use ojs_bridge::worker::Next;

use crate::facade::Bridge;
use crate::{Answer, OjsRubyOut, borrow, call, free, into_handle, log_records_json, text};

/// A running worker loop (`Bridge::start_worker`).
pub struct Worker(ojs_bridge::worker::Worker);

/// `Bridge::start_worker`: starts the worker loop (`options` JSON: `queues`, `concurrency`,
/// `visibility_timeout_ms`, `worker_id`, `idle_poll_ms`; the core validates them and names an
/// unknown key). Answers a new `Worker`. Bound with `blocking: true` (it builds the loop's
/// runtime).
///
/// # Safety
/// `bridge` a live `Bridge`; `options` null or `options_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_start_worker(
    bridge: *const Bridge,
    options: *const u8,
    options_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let options = text(options, options_len, "config")?.unwrap_or("{}");
            let worker = borrow(bridge).inner.start_worker(options)?;
            Ok(into_handle(Worker(worker)))
        })
    }
}

/// Frees a `Worker` (Ruby's finalizer).
///
/// # Safety
/// `worker` null or a `Worker` of this library, not freed yet, borrowed by no call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_free(worker: *mut Worker) {
    unsafe { free(worker) }
}

/// `Worker::next`: waits up to `timeout_ms` for a job for this slot: the job's JSON
/// (`ojs_bridge::worker`'s module doc), `""` when none came in time, none (nil) once the worker
/// stops (the slot ends). Bound with `blocking: true`.
///
/// # Safety
/// `worker` a live `Worker`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_next(
    worker: *const Worker,
    timeout_ms: u64,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            Ok(match borrow(worker).0.next(timeout_ms) {
                Next::Job(json) => Some(json),
                Next::Idle => Some(String::new()),
                Next::Stopped => None,
            })
        })
    }
}

/// `Worker::finish`: settles a job `next` handed out with the handler's outcome (JSON:
/// `{"outcome": "completed", "result"?}`, `{"outcome": "failed", "code", "message",
/// "retryable"?, "details"?}`, `{"outcome": "unknown_type"}`, `{"outcome": "requeue"}`). The
/// `value` is 1 when the loop settles it, 0 when it no longer held the job (its `timeout_ms`
/// ran out and it was nacked `timeout`, or the stopping worker gave it back: the outcome is
/// dropped). A malformed outcome is the core's error. Never waits.
///
/// # Safety
/// `worker` a live `Worker`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_finish(
    worker: *const Worker,
    job_id: *const u8,
    job_id_len: usize,
    outcome: *const u8,
    outcome_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let job_id = text(job_id, job_id_len, "args")?.unwrap_or_default();
            let outcome = text(outcome, outcome_len, "args")?.unwrap_or("null");
            borrow(worker).0.finish(job_id, outcome)
        })
    }
}

/// `Worker::stop`: graceful stop (no more fetches, the slots' next waits end, the jobs handed
/// out have up to `deadline_ms` to finish, the rest is given back); returns once every ack and
/// nack went. Bound with `blocking: true`.
///
/// # Safety
/// `worker` a live `Worker`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_stop(
    worker: *const Worker,
    deadline_ms: u64,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            borrow(worker).0.stop(Some(deadline_ms));
            Ok(())
        })
    }
}

/// The loop's state, one JSON object: `worker_id` (given, or made up by the core),
/// `concurrency` (the slots: the Ruby threads to run), `in_flight` (jobs handed out and not
/// finished), `stopping` (the stop began), `backend_down` (the backend did not answer the
/// loop's last request: an outage being waited out), `stop_deadline_ms` (a stop's wait when
/// it names none: the option, else the core's default). Cheap (no I/O).
///
/// # Safety
/// `worker` a live `Worker`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_facts(worker: *const Worker, out: *mut OjsRubyOut) -> i32 {
    unsafe {
        call(out, || {
            let worker = &borrow(worker).0;
            Ok(serde_json::json!({
                "worker_id": worker.worker_id(),
                "concurrency": worker.concurrency(),
                "in_flight": worker.in_flight(),
                "stopping": worker.stopping(),
                "backend_down": worker.backend_down(),
                "stop_deadline_ms": worker.stop_deadline_ms(),
            })
            .to_string())
        })
    }
}

/// What the loop said since the last call, oldest first (an outage and its end, a timeout, a
/// job given back, an ack or nack not delivered, a job whose args could not be decoded), as a
/// JSON array of log records (`level` "info", "warning" or "error", `message`, `job_id` the
/// job's when it is about one, `table` empty). Cheap (a short lock on the loop's queue): the
/// slots call it after each wait.
///
/// # Safety
/// `worker` a live `Worker`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_worker_drain_log(
    worker: *const Worker,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            Ok(Answer::from(log_records_json(borrow(worker).0.drain_log())))
        })
    }
}

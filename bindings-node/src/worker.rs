//! The running side of jobs for JavaScript (issue 28): the core worker loop
//! (`ojs_bridge::worker::Worker`, started by `NativeBridge::start_worker`) as a Node-API class.
//! Every rule (fetch, heartbeat, ack and nack, backoff, `timeout_ms`, graceful stop, trace
//! context, decryption, unknown types) is the loop's; `lib/worker.js` calls the handlers.
//!
//! The waits (`next`) block up to their timeout, so they run off the JavaScript thread, on a
//! thread of the worker's own (`events::Waiter`), as the event streams' waits do, for the same
//! reason: a worker waits almost all its life and would hold one of libuv's four pool threads.
//! One thread per worker, not one per handler slot: `lib/worker.js` keeps exactly one wait
//! outstanding, for every slot at once (`next(slots, ..)`, the core's `next_up_to`: the loop
//! fetches only for slots waiting, and a wait hands over every job there, no I/O of its own),
//! so one waiter feeds every slot; a thread per slot would be up to `concurrency` (1000)
//! threads idling in the same wait. `stop` blocks until the jobs in flight
//! have finished or its deadline passed: it runs on a thread of its own, so that it never
//! waits behind a wait in progress (and the wait, woken by the stop, ends with `null`).
//! `finish` only hands the outcome to the loop (the ack or nack is sent by the loop's tasks):
//! synchronous.

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::Object;
use napi_derive::napi;
use ojs_bridge::worker::{NextJobs, Worker};

use crate::error::to_js;
use crate::events::Waiter;
use crate::log::LogRecord;

/// A running core worker loop (`Bridge::start_worker`).
#[napi]
pub struct NativeWorker {
    worker: Arc<Worker>,
    /// The thread of the waits; closed once a stop has ended (later waits end at once).
    waiter: Arc<Waiter>,
}

impl NativeWorker {
    pub fn new(worker: Worker) -> napi::Result<Self> {
        Ok(NativeWorker {
            worker: Arc::new(worker),
            waiter: Arc::new(Waiter::new("ojs-worker-next", "the worker's wait")?),
        })
    }
}

#[napi]
impl NativeWorker {
    /// The worker id sent with every fetch (given, or the core's).
    #[napi(getter)]
    pub fn worker_id(&self) -> String {
        self.worker.worker_id().to_owned()
    }

    /// Handler slots (given, or the core's default).
    #[napi(getter)]
    pub fn concurrency(&self) -> u32 {
        u32::try_from(self.worker.concurrency()).unwrap_or(u32::MAX)
    }

    /// How long a stop without `deadlineMs` waits for the jobs in flight (the option
    /// `stopDeadlineMs`, else the core's default).
    #[napi(getter)]
    pub fn stop_deadline_ms(&self) -> f64 {
        self.worker.stop_deadline_ms() as f64
    }

    /// Jobs handed out and not finished.
    #[napi(getter)]
    pub fn in_flight(&self) -> u32 {
        u32::try_from(self.worker.in_flight()).unwrap_or(u32::MAX)
    }

    /// Whether a stop began.
    #[napi(getter)]
    pub fn stopping(&self) -> bool {
        self.worker.stopping()
    }

    /// Whether the backend did not answer the loop's last request (an outage being waited out).
    #[napi(getter)]
    pub fn backend_down(&self) -> bool {
        self.worker.backend_down()
    }

    /// What the loop said since the last call, oldest first (`Worker::drain_log`: the backend
    /// down and back, a timeout, a job given back, an ack or nack not delivered, a job whose
    /// args could not be decoded); `table` is empty. Never blocks: `lib/worker.js` calls it
    /// after each wait and hands the records to the application's logger (`lib/log.js`).
    #[napi]
    pub fn drain_log(&self) -> Vec<LogRecord> {
        (self.worker.drain_log().into_iter())
            .map(LogRecord::from)
            .collect()
    }

    /// Waits up to `timeoutMs` for jobs for up to `slots` free handler slots
    /// (`Worker::next_up_to`: the loop fetches only for slots waiting here): as soon as one is
    /// there, every one there, each as its JSON (`ojs_bridge::worker`'s module doc); `[]` when
    /// none came in time, `null` once the worker stops.
    #[napi(ts_return_type = "Promise<string[] | null>")]
    pub fn next<'env>(
        &self,
        env: &'env Env,
        slots: u32,
        timeout_ms: u32,
    ) -> napi::Result<Object<'env>> {
        let worker = self.worker.clone();
        let slots = usize::try_from(slots).unwrap_or(usize::MAX);
        self.waiter.run(env, move || {
            Ok(match worker.next_up_to(slots, u64::from(timeout_ms)) {
                NextJobs::Jobs(jobs) => Some(jobs),
                NextJobs::Idle => Some(Vec::new()),
                NextJobs::Stopped => None,
            })
        })
    }

    /// Settles a job `next` handed out with the handler's outcome (JSON: `completed`, `failed`,
    /// `unknown_type`, `requeue`). `false`: the loop no longer held it (its `timeout_ms` ran out
    /// and it was nacked `timeout`, or the stopping worker gave it back): the outcome is
    /// dropped. An outcome the core cannot read throws (`INVALID_ARGS`, field `outcome...`).
    #[napi]
    pub fn finish(&self, job_id: String, outcome_json: String) -> napi::Result<bool> {
        self.worker.finish(&job_id, &outcome_json).map_err(to_js)
    }

    /// Graceful stop: no more fetches, the jobs in flight have up to `deadlineMs` (absent:
    /// `stopDeadlineMs`) to finish, the rest is given back; resolves once every ack and nack
    /// went. Calling it again (with a shorter deadline: `0` gives back at once) is allowed
    /// while one runs.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn stop<'env>(
        &self,
        env: &'env Env,
        deadline_ms: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let worker = self.worker.clone();
        let waiter = self.waiter.clone();
        let stopper = Waiter::new("ojs-worker-stop", "the worker's stop")?;
        let promise = stopper.run(env, move || {
            worker.stop(deadline_ms.map(u64::from));
            waiter.close(None);
            Ok(Some(()))
        });
        // The stop's thread ends after this one stop.
        stopper.close(None);
        promise
    }
}

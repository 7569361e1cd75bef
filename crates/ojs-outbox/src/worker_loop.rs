//! The worker loop every binding runs its handlers on (issue 28): fetch with concurrency,
//! heartbeat, ack and nack, backoff while the backend is down, `timeout_ms` enforcement,
//! graceful stop, trace context and decryption. Pull-based, so no callback crosses the FFI
//! line: a binding runs `concurrency` handler slots, each calling [`WorkerLoop::next`] and then
//! [`WorkerLoop::finish`]; every request is sent by the loop's own tokio tasks. The loop
//! fetches only for slots waiting in `next`, so every job it reserves has a slot that asked for
//! it, and a graceful stop lets that slot run it.
//!
//! The seed-003 order on a fetched job: the trace context is read from `meta` first, then the
//! deadline is set (`options.timeout_ms`, counted from the fetch) and the args are decoded
//! (`Backend::worker_with_codec`, which nacks `decode_failed` what it cannot open, so such a
//! job is never handed out); then the binding's handler runs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::backoff;
use crate::codec::Codec;
use crate::config::unknown_option;
use crate::error::{Error, ErrorCode, Result};
use crate::log_feed::Level;
use crate::worker::{DECODE_FAILED, MAX_FETCH, NackError, WorkerCommand};

/// The first and the longest wait after the backend did not answer.
const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Tries of one ack or nack while the backend is unavailable: after the reservation runs out
/// the backend gives the job to a worker again anyway.
const SETTLE_TRIES: u32 = 5;
/// Nack codes: `timeout_ms` ran out (retryable); no handler knows the type (retryable, so a
/// worker of a newer deploy runs it later); given back by a stopping worker (`requeue`).
pub const TIMEOUT: &str = "timeout";
pub const UNKNOWN_TYPE: &str = "unknown_type";
pub const WORKER_STOPPING: &str = "worker_stopping";
/// A graceful stop's wait for the jobs in flight when the binding names none: below the 30 s
/// that Kubernetes (`terminationGracePeriodSeconds`) and Heroku wait after SIGTERM before
/// SIGKILL, so what is still running is given back (no attempt used) rather than killed and
/// left until its reservation runs out. Sidekiq's default, 25 s, for the same reason.
pub const DEFAULT_STOP_DEADLINE: Duration = Duration::from_secs(25);

/// How a worker runs ([`WorkerOptions::from_json`] reads them from the bindings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    pub queues: Vec<String>,
    /// Handler slots: at most this many jobs are held (buffered or handed out) at once.
    pub concurrency: usize,
    /// The reservation asked for at fetch; renewed every quarter of it.
    pub visibility_timeout: Duration,
    pub worker_id: String,
    /// The wait after a fetch that found nothing.
    pub idle_poll: Duration,
    /// A graceful stop's wait for the jobs in flight when the stop names none.
    pub stop_deadline: Duration,
}

const OPTION_KEYS: [&str; 6] = [
    "queues",
    "concurrency",
    "visibility_timeout_ms",
    "worker_id",
    "idle_poll_ms",
    "stop_deadline_ms",
];

impl WorkerOptions {
    /// `{"queues": [...], "concurrency"?: 1, "visibility_timeout_ms"?: 30000, "worker_id"?:
    /// host-pid-random, "idle_poll_ms"?: 1000, "stop_deadline_ms"?: 25000}`; an unknown key
    /// is `INVALID_CONFIG`.
    pub fn from_json(text: &str) -> Result<WorkerOptions> {
        let invalid = |field: &str, why: &str| Error::field(ErrorCode::InvalidConfig, field, why);
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid("worker", &e.to_string()))?;
        let map = value
            .as_object()
            .ok_or_else(|| invalid("worker", "must be a JSON object"))?;
        if let Some(key) = map.keys().find(|key| !OPTION_KEYS.contains(&key.as_str())) {
            return Err(unknown_option(key, &OPTION_KEYS));
        }
        let positive = |key: &str, default: u64| match map.get(key) {
            None => Ok(default),
            Some(v) => (v.as_u64().filter(|n| *n > 0))
                .ok_or_else(|| invalid(key, "must be a positive integer")),
        };
        let queues: Vec<String> = (map.get("queues").and_then(Value::as_array))
            .and_then(|items| {
                items
                    .iter()
                    .map(|q| q.as_str().map(str::to_owned))
                    .collect()
            })
            .filter(|queues: &Vec<String>| !queues.is_empty())
            .ok_or_else(|| invalid("queues", "name at least one queue (a list of names)"))?;
        for queue in &queues {
            crate::job::validate_queue(queue)?;
        }
        let concurrency = positive("concurrency", 1)?;
        if concurrency > u64::from(MAX_FETCH) {
            return Err(invalid("concurrency", "must be 1..=1000"));
        }
        let worker_id = match map.get("worker_id") {
            None => default_worker_id(),
            Some(Value::String(id)) if !id.trim().is_empty() => id.clone(),
            Some(_) => return Err(invalid("worker_id", "must be a non-empty string")),
        };
        Ok(WorkerOptions {
            queues,
            concurrency: concurrency as usize,
            visibility_timeout: Duration::from_millis(positive("visibility_timeout_ms", 30_000)?),
            worker_id,
            idle_poll: Duration::from_millis(positive("idle_poll_ms", 1_000)?),
            stop_deadline: match map.get("stop_deadline_ms") {
                None => DEFAULT_STOP_DEADLINE,
                Some(v) => Duration::from_millis(v.as_u64().ok_or_else(|| {
                    invalid(
                        "stop_deadline_ms",
                        "must be a whole number of milliseconds >= 0",
                    )
                })?),
            },
        })
    }
}

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// One job for a handler slot, args decoded.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub job_id: String,
    pub job_type: String,
    pub args: Value,
    pub meta: Value,
    /// Failed attempts so far (the backend's `attempt`).
    pub attempt: u32,
    /// When the loop nacks the job as `timeout` (`options.timeout_ms` after the fetch).
    pub deadline: Option<std::time::Instant>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// The whole job as fetched (args decoded), for what a binding needs beyond the above.
    pub job: Value,
}

/// How a handler ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed(Option<Value>),
    /// The handler failed: nacked with this error; the backend retries per the job's policy.
    Failed {
        code: String,
        message: String,
        retryable: Option<bool>,
        details: Option<Value>,
    },
    /// No handler for the type: nacked retryable, never discarded by this worker.
    UnknownType,
    /// Given back unrun (no attempt used).
    Requeue,
}

impl Outcome {
    fn command(self, job_id: &str, worker_id: &str) -> WorkerCommand {
        let (code, message, retryable, details) = match self {
            Outcome::Completed(result) => {
                let job_id = job_id.to_owned();
                return WorkerCommand::Ack { job_id, result };
            }
            Outcome::Requeue => return requeue(job_id, "the handler gave the job back"),
            Outcome::Failed {
                code,
                message,
                retryable,
                details,
            } => (code, message, retryable, clip_details(details)),
            Outcome::UnknownType => (
                UNKNOWN_TYPE.into(),
                "no handler of this worker knows the job's type".into(),
                Some(true),
                Some(json!({ "worker_id": worker_id })),
            ),
        };
        let error = NackError {
            code,
            message: clip(message, MAX_MESSAGE),
            retryable,
            details,
        };
        let job_id = job_id.to_owned();
        WorkerCommand::Nack {
            job_id,
            error,
            requeue: false,
        }
    }
}

/// The longest nack `message` and string in `details` sent (characters; the middle of a
/// longer text is cut): a nack is one HTTP request, and the backend keeps every error.
const MAX_MESSAGE: usize = 2_000;
const MAX_DETAIL: usize = 32_000;

fn clip(text: String, limit: usize) -> String {
    let count = text.chars().count();
    if count <= limit {
        return text;
    }
    let half = limit / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!(
        "{head}\n[... {} characters cut ...]\n{tail}",
        count - 2 * half
    )
}

fn clip_details(details: Option<Value>) -> Option<Value> {
    let Some(Value::Object(map)) = details else {
        return details;
    };
    let clipped = map.into_iter().map(|(key, value)| match value {
        Value::String(text) => (key, Value::String(clip(text, MAX_DETAIL))),
        other => (key, other),
    });
    Some(Value::Object(clipped.collect()))
}

fn nack(job_id: &str, code: &str, message: &str, retryable: Option<bool>) -> WorkerCommand {
    WorkerCommand::Nack {
        job_id: job_id.to_owned(),
        error: NackError {
            code: code.to_owned(),
            message: message.to_owned(),
            retryable,
            details: None,
        },
        requeue: false,
    }
}

fn requeue(job_id: &str, message: &str) -> WorkerCommand {
    let mut command = nack(job_id, WORKER_STOPPING, message, None);
    if let WorkerCommand::Nack { requeue, .. } = &mut command {
        *requeue = true;
    }
    command
}

/// A job fetched and not settled; `handed_out` once `next` gave it to a slot.
struct Held {
    deadline: Option<Instant>,
    handed_out: bool,
    /// Its `process` span (tracing on), from the hand-out to the ack or nack.
    span: Option<crate::otel::ProcessSpan>,
}

impl Held {
    /// Ends the job's `process` span: `error_type` for a failure (status Error), `event` for
    /// a job given back.
    fn end_span(&mut self, error_type: Option<&str>, event: Option<&'static str>) {
        if let Some(span) = self.span.take() {
            span.finish(error_type, event);
        }
    }
}

#[derive(Default)]
struct State {
    buffer: VecDeque<Assignment>,
    held: HashMap<String, Held>,
    stopping: bool,
    /// The fetcher ended (stopping, after its fetch in progress): nothing more will be buffered.
    fetcher_done: bool,
    /// Slots waiting in `next`: the fetcher fetches only for them, so every job fetched has a
    /// slot that asked for it.
    waiting: usize,
}

struct Shared {
    backend: Backend,
    codec: Option<Arc<Codec>>,
    options: WorkerOptions,
    state: Mutex<State>,
    /// A job entered the buffer, or the loop stops: `next` looks again.
    ready: Notify,
    /// A held job was settled, or a slot stopped waiting: the fetcher may fetch again, `stop`
    /// looks whether all are.
    freed: Notify,
    /// A slot began to wait in `next`: the fetcher fetches for it.
    demand: Notify,
    /// A job with a deadline is held: the supervisor recomputes its wake-up.
    deadlines: Notify,
    /// Acks and nacks for the settler; `None` is `stop`'s word that nothing more comes.
    settle: mpsc::UnboundedSender<Option<WorkerCommand>>,
    /// Set during an outage, so that it is logged once at warning.
    down: AtomicBool,
    /// What the loop has to say, for the binding's logger ([`WorkerLoop::drain_log`]).
    log: Mutex<WorkerLog>,
}

/// The loop's log records not yet drained (at most [`LOG_CAPACITY`]; then counted).
#[derive(Default)]
struct WorkerLog {
    records: VecDeque<LogEntry>,
    dropped: u64,
}

const LOG_CAPACITY: usize = 1_000;
const LOG_TARGET: &str = "ojs_outbox::worker_loop";

/// One thing the loop said: an outage and its end, a timeout, a job given back, an ack or nack
/// not delivered, a job that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub level: Level,
    pub job_id: Option<String>,
    pub message: String,
}

/// The running loop; see the module doc.
pub struct WorkerLoop {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// The fetcher, the supervisor, the settler; taken by `stop`.
    tasks: Mutex<Option<[JoinHandle<()>; 3]>>,
}

impl WorkerLoop {
    /// Starts the fetcher, the supervisor (heartbeat, deadlines) and the settler (acks,
    /// nacks) on the current tokio runtime.
    pub fn start(
        backend: Backend,
        codec: Option<Arc<Codec>>,
        options: WorkerOptions,
    ) -> WorkerLoop {
        let (settle, commands) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            backend,
            codec,
            options,
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            freed: Notify::new(),
            demand: Notify::new(),
            deadlines: Notify::new(),
            settle,
            down: AtomicBool::new(false),
            log: Mutex::new(WorkerLog::default()),
        });
        let tasks = [
            tokio::spawn(fetcher(shared.clone(), stopped.clone())),
            tokio::spawn(supervisor(shared.clone(), stopped)),
            tokio::spawn(settler(shared.clone(), commands)),
        ];
        let tasks = Mutex::new(Some(tasks));
        WorkerLoop {
            shared,
            stop,
            tasks,
        }
    }

    pub fn options(&self) -> &WorkerOptions {
        &self.shared.options
    }

    /// The next job for a free handler slot; `None` when none came within `timeout`, or once
    /// the loop stops and holds no job not yet handed out.
    pub async fn next(&self, timeout: Duration) -> Option<Assignment> {
        self.next_up_to(1, timeout).await.pop()
    }

    /// Up to `slots` jobs for that many free handler slots (a host that runs its handlers on
    /// one event loop asks for all its free slots in one wait): as soon as one is there, every
    /// one there (at most `slots`); empty when none came within `timeout` or the loop stops.
    pub async fn next_up_to(&self, slots: usize, timeout: Duration) -> Vec<Assignment> {
        let until = Instant::now() + timeout;
        let slots = slots.max(1);
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let ready = self.shared.ready.notified();
            tokio::pin!(ready);
            // Registered before the look, so that a job buffered in between still wakes us.
            ready.as_mut().enable();
            {
                // A stopping loop still hands out what it fetched (each job for a slot that
                // asked, also by the fetch in progress when the stop came): a graceful stop
                // finishes it.
                let mut state = self.shared.lock();
                if !state.buffer.is_empty() {
                    let count = slots.min(state.buffer.len());
                    let mut taken: Vec<Assignment> = state.buffer.drain(..count).collect();
                    let traced = crate::otel::enabled();
                    for assignment in &mut taken {
                        if let Some(held) = state.held.get_mut(&assignment.job_id) {
                            held.handed_out = true;
                            if traced {
                                held.span = process_span(assignment, &self.shared.options);
                            }
                        }
                    }
                    return taken;
                }
                if state.stopping && state.fetcher_done {
                    return Vec::new();
                }
                if waiting.is_none() {
                    state.waiting += slots;
                    waiting = Some(Waiting(&self.shared, slots));
                    drop(state);
                    self.shared.demand.notify_waiters();
                }
            }
            if tokio::time::timeout_at(until, ready).await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Settles a handed-out job (the ack or nack is sent by the loop). `false` when the loop
    /// no longer holds it: its deadline passed and it was nacked `timeout`, the stopping loop
    /// gave it back, or the id is unknown.
    pub fn finish(&self, job_id: &str, outcome: Outcome) -> bool {
        let mut state = self.shared.lock();
        if !state.held.get(job_id).is_some_and(|held| held.handed_out) {
            return false;
        }
        let held = state.held.remove(job_id);
        drop(state);
        if let Some(mut held) = held.filter(|held| held.span.is_some()) {
            match &outcome {
                Outcome::Completed(_) => held.end_span(None, None),
                Outcome::Failed { code, .. } => held.end_span(Some(code), None),
                Outcome::UnknownType => held.end_span(Some(UNKNOWN_TYPE), None),
                Outcome::Requeue => held.end_span(None, Some("ojs.job.requeued")),
            }
        }
        let worker_id = &self.shared.options.worker_id;
        self.shared.send_later(outcome.command(job_id, worker_id));
        self.shared.freed.notify_waiters();
        true
    }

    /// The records since the last drain, oldest first (a warning first when some were dropped).
    /// Each was also a `tracing` event (target `ojs_outbox::worker_loop`).
    pub fn drain_log(&self) -> Vec<LogEntry> {
        let mut log = self.shared.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(log.records.len() + 1);
        if log.dropped > 0 {
            let dropped = std::mem::take(&mut log.dropped);
            out.push(LogEntry {
                level: Level::Warning,
                job_id: None,
                message: format!(
                    "{dropped} worker log records were dropped: more than {LOG_CAPACITY} came between two drains"
                ),
            });
        }
        out.extend(log.records.drain(..));
        out
    }

    /// Whether the backend did not answer the last request (an outage, being waited out).
    pub fn backend_down(&self) -> bool {
        self.shared.down.load(Ordering::Relaxed)
    }

    /// Whether `stop` began: `next` hands out nothing more.
    pub fn stopping(&self) -> bool {
        self.shared.lock().stopping
    }

    /// Jobs handed out and not finished.
    pub fn in_flight(&self) -> usize {
        let state = self.shared.lock();
        state.held.values().filter(|held| held.handed_out).count()
    }

    /// Stops fetching; the jobs already fetched (each for a free slot) are still handed out,
    /// then `next` answers `None`. Waits up to `deadline` for every held job to finish, gives
    /// back the rest (`requeue`), then ends the tasks once every ack and nack was sent or
    /// given up.
    pub async fn stop(&self, deadline: Duration) {
        let until = Instant::now() + deadline;
        self.shared.lock().stopping = true;
        let _ = self.stop.send(true);
        self.shared.ready.notify_waiters();
        let taken = self.tasks.lock().map(|mut t| t.take()).unwrap_or(None);
        // The fetcher ends after its fetch in progress, whose jobs the slots still take; one
        // still waiting for an answer at the deadline is dropped, and what the backend reserved
        // for it comes back when the visibility timeout runs out.
        let rest = match taken {
            Some([mut fetcher, supervisor, settler]) => {
                if tokio::time::timeout_at(until, &mut fetcher).await.is_err() {
                    fetcher.abort();
                }
                Some((supervisor, settler))
            }
            None => None, // stopped before (or stopping in parallel)
        };
        self.shared.fetcher_done();
        // Until every held job is settled, or none is in a slot's hands and no slot waits
        // for the rest (a slot that gave up waiting, then ended): those are given back now.
        loop {
            let freed = self.shared.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let settled = {
                let state = self.shared.lock();
                let in_hands = state.held.values().any(|held| held.handed_out);
                state.held.is_empty() || (!in_hands && state.waiting == 0)
            };
            if settled || tokio::time::timeout_at(until, freed).await.is_err() {
                break;
            }
        }
        let left: Vec<String> = {
            let mut state = self.shared.lock();
            state.buffer.clear();
            (state.held.drain())
                .map(|(job_id, mut held)| {
                    held.end_span(None, Some("ojs.job.requeued"));
                    job_id
                })
                .collect()
        };
        for job_id in left {
            let said = "job given back unfinished (the worker stops)".to_owned();
            self.shared.log(Level::Info, Some(&job_id), said);
            let message = "the worker stopped before the job finished";
            self.shared.send_later(requeue(&job_id, message));
        }
        // A stop waiting in parallel (a second signal) looks again: nothing is held now.
        self.shared.freed.notify_waiters();
        if crate::otel::enabled() {
            // The jobs' spans leave before the process may exit.
            let _ = tokio::task::spawn_blocking(crate::otel::flush).await;
        }
        let Some((supervisor, settler)) = rest else {
            return;
        };
        supervisor.abort();
        let _ = supervisor.await;
        self.shared.settle.send(None).ok();
        let _ = settler.await;
    }
}

/// Slots counted as waiting in `next` until it returns (also when its future is dropped).
struct Waiting<'a>(&'a Shared, usize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting -= self.1;
        // `stop` looks again: a job buffered for this slot may now have no taker.
        self.0.freed.notify_waiters();
    }
}

impl Drop for WorkerLoop {
    fn drop(&mut self) {
        if let Some(tasks) = self.tasks.lock().map(|mut t| t.take()).unwrap_or(None) {
            tasks.iter().for_each(JoinHandle::abort);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Nothing more will be buffered: the slots waiting in `next` may end.
    fn fetcher_done(&self) {
        self.lock().fetcher_done = true;
        self.ready.notify_waiters();
    }

    /// One record: a `tracing` event and an entry for [`WorkerLoop::drain_log`].
    fn log(&self, level: Level, job_id: Option<&str>, message: String) {
        match level {
            Level::Info => tracing::info!(target: LOG_TARGET, job_id, "{message}"),
            Level::Warning => tracing::warn!(target: LOG_TARGET, job_id, "{message}"),
            Level::Error => tracing::error!(target: LOG_TARGET, job_id, "{message}"),
        }
        self.note(level, job_id, message);
    }

    /// An entry for [`WorkerLoop::drain_log`] of what was already a `tracing` event.
    fn note(&self, level: Level, job_id: Option<&str>, message: String) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.records.len() < LOG_CAPACITY {
            let job_id = job_id.map(str::to_owned);
            log.records.push_back(LogEntry {
                level,
                job_id,
                message,
            });
        } else {
            log.dropped += 1;
        }
    }

    fn send_later(&self, command: WorkerCommand) {
        let _ = self.settle.send(Some(command));
    }

    /// Sends one command; logs the start and the end of an outage once each.
    async fn send(&self, command: &WorkerCommand) -> Result<Value> {
        let codec = self.codec.as_deref();
        let answer = self.backend.worker_with_codec(command, codec).await;
        let unavailable = matches!(&answer, Err(e) if e.code == ErrorCode::BackendUnavailable);
        match (self.down.swap(unavailable, Ordering::Relaxed), &answer) {
            (false, Err(error)) if unavailable => self.log(
                Level::Warning,
                None,
                format!(
                    "the OJS backend is unavailable, retrying with backoff until it answers: {}",
                    error.message
                ),
            ),
            (true, _) if !unavailable => {
                self.log(Level::Info, None, "the OJS backend answers again".into())
            }
            _ => {}
        }
        answer
    }
}

/// Fetches as many jobs as there are free slots, while not stopping.
async fn fetcher(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let options = &shared.options;
    let mut failures = 0u32;
    while !*stopped.borrow() {
        let freed = shared.freed.notified();
        let demand = shared.demand.notified();
        tokio::pin!(freed, demand);
        freed.as_mut().enable();
        demand.as_mut().enable();
        // As many jobs as slots wait for (less those already buffered for them), within the
        // concurrency.
        let wanted = {
            let state = shared.lock();
            let free = (options.concurrency).saturating_sub(state.held.len());
            state.waiting.saturating_sub(state.buffer.len()).min(free)
        };
        if wanted == 0 {
            tokio::select! {
                _ = freed => {}
                _ = demand => {}
                _ = stopped.changed() => {}
            }
            continue;
        }
        let command = WorkerCommand::Fetch {
            queues: options.queues.clone(),
            count: wanted as u32,
            worker_id: options.worker_id.clone(),
            visibility_timeout_ms: Some(options.visibility_timeout.as_millis() as u64),
        };
        let fetched_at = Instant::now();
        let wait = match shared.send(&command).await {
            Ok(answer) => {
                failures = 0;
                // Nacked `decode_failed` by the fetch itself (`worker.rs`, which traced them).
                for failed in (answer.get(DECODE_FAILED).and_then(Value::as_array))
                    .into_iter()
                    .flatten()
                {
                    let job_id = failed["job_id"].as_str();
                    let reason = failed["reason"].as_str().unwrap_or("");
                    let said = format!(
                        "its args could not be decoded ({reason}); nacked as {DECODE_FAILED}, not retried"
                    );
                    shared.note(Level::Warning, job_id, said);
                }
                match answer.get("jobs").and_then(Value::as_array) {
                    Some(jobs) if !jobs.is_empty() => {
                        take(&shared, jobs, fetched_at);
                        continue;
                    }
                    _ => options.idle_poll,
                }
            }
            Err(error) => {
                failures += 1;
                if error.code != ErrorCode::BackendUnavailable && failures == 1 {
                    let message = format!("the fetch was refused, retrying with backoff: {error}");
                    shared.log(Level::Error, None, message);
                }
                backoff::jittered(failures, BACKOFF_INITIAL, BACKOFF_MAX)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => {}
        }
    }
    shared.fetcher_done();
}

/// Buffers fetched jobs, or gives them back when the loop began to stop during the fetch.
fn take(shared: &Shared, jobs: &[Value], fetched_at: Instant) {
    let mut state = shared.lock();
    let mut any_deadline = false;
    for job in jobs {
        // Also while stopping: the fetch was for free slots, which still take its jobs.
        let (assignment, deadline) = assignment(job.clone(), fetched_at);
        any_deadline |= deadline.is_some();
        let held = Held {
            deadline,
            handed_out: false,
            span: None,
        };
        state.held.insert(assignment.job_id.clone(), held);
        state.buffer.push_back(assignment);
    }
    drop(state);
    shared.ready.notify_waiters();
    if any_deadline {
        shared.deadlines.notify_one();
    }
}

fn assignment(job: Value, fetched_at: Instant) -> (Assignment, Option<Instant>) {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let meta = job.get("meta").cloned().unwrap_or_else(|| json!({}));
    let timeout_ms = (job
        .pointer("/options/timeout_ms")
        .or_else(|| job.get("timeout_ms")))
    .and_then(Value::as_u64)
    .filter(|ms| *ms > 0);
    let deadline = timeout_ms.map(|ms| fetched_at + Duration::from_millis(ms));
    let assignment = Assignment {
        // Trace context first (seed 003), so that everything after runs inside it.
        traceparent: text(meta.get("traceparent")),
        tracestate: text(meta.get("tracestate")),
        deadline: deadline.map(Instant::into_std),
        job_id: text(job.get("id")).unwrap_or_default(),
        job_type: text(job.get("type")).unwrap_or_default(),
        args: job.get("args").cloned().unwrap_or_else(|| json!([])),
        attempt: job.get("attempt").and_then(Value::as_u64).unwrap_or(0) as u32,
        meta,
        job,
    };
    (assignment, deadline)
}

/// The `process` span of a job handed out (`otel::ProcessSpan`), linked to the creation
/// context in its meta; the handler gets the span's own context as its `traceparent`.
fn process_span(
    assignment: &mut Assignment,
    options: &WorkerOptions,
) -> Option<crate::otel::ProcessSpan> {
    let span = crate::otel::ProcessSpan::start(
        &assignment.job,
        &assignment.job_id,
        &assignment.job_type,
        assignment.attempt,
        &options.worker_id,
        assignment.traceparent.as_deref(),
        assignment.tracestate.as_deref(),
    )?;
    let (traceparent, tracestate) = span.header();
    assignment.traceparent = Some(traceparent);
    assignment.tracestate = tracestate;
    Some(span)
}

/// Renews every held job's reservation each quarter of the visibility timeout (one request
/// for all), and nacks `timeout` each job whose deadline passed.
async fn supervisor(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let quarter = shared.options.visibility_timeout / 4;
    let mut next_beat = Instant::now() + quarter;
    loop {
        let earliest = shared.lock().held.values().filter_map(|h| h.deadline).min();
        let wake = earliest.map_or(next_beat, |deadline| deadline.min(next_beat));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = shared.deadlines.notified() => continue,
            // A stopping loop still renews and enforces deadlines until `stop` ends this task.
            _ = stopped.changed() => {}
        }
        expire(&shared, Instant::now());
        if Instant::now() >= next_beat {
            next_beat = Instant::now() + quarter;
            heartbeat(&shared).await;
        }
    }
}

fn expire(shared: &Shared, now: Instant) {
    let mut state = shared.lock();
    let expired: Vec<String> = (state.held.iter())
        .filter(|(_, held)| held.deadline.is_some_and(|deadline| deadline <= now))
        .map(|(id, _)| id.clone())
        .collect();
    if expired.is_empty() {
        return;
    }
    for job_id in &expired {
        if let Some(mut held) = state.held.remove(job_id) {
            held.end_span(Some(TIMEOUT), None);
        }
        state.buffer.retain(|a| a.job_id != *job_id);
        let said = format!("job timed out (options.timeout_ms); nacked as {TIMEOUT}");
        shared.log(Level::Warning, Some(job_id), said);
        let message = "the job did not finish within its timeout_ms";
        shared.send_later(nack(job_id, TIMEOUT, message, Some(true)));
    }
    drop(state);
    shared.freed.notify_waiters();
}

async fn heartbeat(shared: &Shared) {
    let active_jobs: Vec<String> = shared.lock().held.keys().cloned().collect();
    if active_jobs.is_empty() {
        return;
    }
    let command = WorkerCommand::Heartbeat {
        worker_id: shared.options.worker_id.clone(),
        active_jobs,
        visibility_timeout_ms: Some(shared.options.visibility_timeout.as_millis() as u64),
    };
    if let Err(error) = shared.send(&command).await {
        tracing::debug!(
            "heartbeat failed (tried again in a quarter of the visibility timeout): {error}"
        );
    }
}

/// Sends acks and nacks, each on its own task so that one waiting out an outage does not
/// hold up the others; at `stop`'s word, waits for those still running.
async fn settler(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Option<WorkerCommand>>,
) {
    let mut running = JoinSet::new();
    while let Some(Some(command)) = commands.recv().await {
        running.spawn(settle(shared.clone(), command));
        while running.try_join_next().is_some() {}
    }
    while running.join_next().await.is_some() {}
}

/// One ack or nack, tried again with backoff while the backend is unavailable; logged, never
/// raised, when it cannot be delivered.
async fn settle(shared: Arc<Shared>, command: WorkerCommand) {
    let (op, job_id) = match &command {
        WorkerCommand::Ack { job_id, .. } => ("ack", job_id),
        WorkerCommand::Nack { job_id, .. } => ("nack", job_id),
        _ => return,
    };
    for attempt in 1..=SETTLE_TRIES {
        match shared.send(&command).await {
            Ok(_) => return,
            Err(error) if error.code == ErrorCode::BackendUnavailable && attempt < SETTLE_TRIES => {
                tokio::time::sleep(backoff::jittered(attempt, BACKOFF_INITIAL, BACKOFF_MAX)).await;
            }
            Err(error) => {
                let said = format!("the {op} was not delivered: {error}");
                shared.log(Level::Warning, Some(job_id), said);
                return;
            }
        }
    }
}

//! A job's worker life: claim (fetch, or the control API's start), complete (ack), fail
//! (nack), give back (nack with `requeue`, or a reservation that ran out), extend (heartbeat).
//! The HTTP endpoints (`worker_api.rs`) and the control API (`/_dev/jobs/{id}/...`) both go
//! through here, so they move jobs the same way and emit the same events.
//!
//! As the reference servers do it: a claim leaves `attempt` alone and a failure adds one, so
//! `attempt` counts failed attempts; a job is discarded once the failures reach
//! `max_attempts` (see `retry.rs`). Events carry the number of the attempt they are about
//! (failures so far + 1 while it runs), as RFC-0005 numbers them.
//!
//! Finding work costs the enqueue path nothing: the [`WorkIndex`] is built by the first fetch
//! and caught up by each later one (the jobs stored since), then kept current by the
//! transitions here. Every transition and its events happen under the state lock.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use crate::app::App;
use crate::envelope::write_stored_job;
use crate::envelope::{max_attempts_of, options_map, priority_of, queue_of};
use crate::events::{EventHub, JobEvent};
use crate::model::JobControlError;
use crate::retry::{self, Decision, FailureFacts};
use crate::store::{JobState, Run, State, StoredJob};
use crate::timefmt::{format_ms, now_us};
use crate::validate::{format_job_id, parse_job_id};

/// The reservation of a fetched job when neither the fetch nor the job names one (both
/// servers' `DefaultVisibilityTimeoutMs`, the binding's default).
pub(crate) const DEFAULT_VISIBILITY_MS: u64 = 30_000;
/// The worker id the control API's `start` uses when none is given.
pub(crate) const DEFAULT_WORKER_ID: &str = "devserver-worker";

/// Where fetches find work. `ready`: per queue, the jobs that may be or become available,
/// ordered by priority (highest first), then acceptance order; an entry whose job moved on is
/// dropped when a fetch meets it. `active`: reservations by deadline; an entry whose job was
/// settled or extended since is skipped.
#[derive(Default)]
pub(crate) struct WorkIndex {
    indexed: usize,
    ready: HashMap<String, BTreeSet<(i64, u32)>>,
    active: BTreeSet<(u64, u32)>,
}

impl WorkIndex {
    /// Files the jobs stored since the last fetch.
    fn catch_up(&mut self, jobs: &[StoredJob]) {
        for slot in self.indexed..jobs.len() {
            self.file(jobs, slot as u32);
        }
        self.indexed = jobs.len();
    }

    /// Files a job whose state changed, if the index has seen it (else `catch_up` will).
    fn refile(&mut self, jobs: &[StoredJob], slot: u32) {
        if (slot as usize) < self.indexed {
            self.file(jobs, slot);
        }
    }

    fn file(&mut self, jobs: &[StoredJob], slot: u32) {
        let job = &jobs[slot as usize];
        if job.cancellation().is_some() {
            return;
        }
        match job.run().map(|run| (run.state, run.visible_until_us)) {
            Some((JobState::Active, until)) => {
                self.active.insert((until, slot));
            }
            None | Some((JobState::Available | JobState::Retryable, _)) => {
                let options = options_map(job.options());
                self.ready
                    .entry(queue_of(options.as_ref()).to_owned())
                    .or_default()
                    .insert((-priority_of(options.as_ref()), slot));
            }
            Some(_) => {}
        }
    }

    /// Gives back every active job whose reservation ran out before `now`: `available` again,
    /// `attempt` unchanged, `started_at` and `worker_id` cleared (both servers' stalled-job
    /// requeue, here run by the fetch instead of a timer).
    fn requeue_expired(&mut self, jobs: &mut [StoredJob], now: u64) {
        while let Some(&(until, slot)) = self.active.first() {
            if now <= until {
                break;
            }
            self.active.pop_first();
            let job = &mut jobs[slot as usize];
            let cancelled = job.cancellation().is_some();
            if let Some(run) = job.run_mut()
                && run.state == JobState::Active
                && run.visible_until_us == until
                && !cancelled
            {
                give_back(run);
                self.file(jobs, slot);
            }
        }
    }
}

fn give_back(run: &mut Run) {
    run.state = JobState::Available;
    run.started_at_us = None;
    run.worker_id = None;
}

/// What a fetch asks for, read as the servers read it.
pub(crate) struct Fetch<'a> {
    pub queues: &'a [String],
    pub count: usize,
    pub worker_id: Option<&'a str>,
    /// From the request, when positive; else the job's `options.visibility_timeout_ms`.
    pub visibility_ms: Option<u64>,
}

/// A failure as a worker reports it.
pub(crate) struct Failure<'a> {
    pub facts: FailureFacts<'a>,
    /// What the job records as its `error`.
    pub recorded: Option<Value>,
    /// Add the failed attempt's number (0-based, as the servers write it) to `recorded`.
    pub add_attempt: bool,
    /// Give the job back (`available` now, no attempt used) instead of failing it.
    pub requeue: bool,
}

/// Where an acknowledgement or a failure left the job.
pub(crate) struct Settled {
    pub job_id: String,
    pub state: JobState,
    /// Failed attempts after the change.
    pub attempt: u32,
    pub max_attempts: i64,
    /// `completed_at`, `discarded_at` or `next_attempt_at`, by `state`.
    pub at_us: u64,
    /// The job's envelope after the change.
    pub envelope: Vec<u8>,
}

/// A transition of the control API.
pub(crate) enum Transition<'a> {
    Start { worker_id: &'a str },
    Complete,
    Fail { error: &'a Value },
}

impl App {
    /// Claims up to `count` available jobs, queue by queue in the order asked, each queue by
    /// priority then acceptance order; gives back expired reservations first. Returns the
    /// envelopes of the claimed jobs.
    pub fn fetch(&self, fetch: &Fetch<'_>) -> Vec<Vec<u8>> {
        let now = now_us();
        let mut state = self.state();
        let (jobs, work) = state.work_parts();
        work.catch_up(jobs);
        work.requeue_expired(jobs, now);
        let mut claimed: Vec<u32> = Vec::new();
        for queue in fetch.queues {
            let Some(ready) = work.ready.get_mut(queue.as_str()) else {
                continue;
            };
            let mut leaving = Vec::new();
            for &(key, slot) in ready.iter() {
                if claimed.len() >= fetch.count {
                    break;
                }
                match jobs[slot as usize].state(now) {
                    JobState::Available => {
                        claimed.push(slot);
                        leaving.push((key, slot));
                    }
                    JobState::Scheduled | JobState::Retryable => {}
                    _ => leaving.push((key, slot)),
                }
            }
            for entry in &leaving {
                ready.remove(entry);
            }
        }
        claimed
            .into_iter()
            .map(|slot| {
                let job = &mut jobs[slot as usize];
                let visibility_ms = fetch
                    .visibility_ms
                    .or_else(|| job_visibility_ms(job))
                    .unwrap_or(DEFAULT_VISIBILITY_MS);
                claim(job, &self.events, fetch.worker_id, visibility_ms, now);
                work.refile(jobs, slot);
                envelope(&jobs[slot as usize], now)
            })
            .collect()
    }

    /// `active` → `completed` with the result (JSON text), clearing the last error.
    pub fn ack(&self, id_text: &str, result: Option<&str>) -> Result<Settled, JobControlError> {
        let now = now_us();
        let mut state = self.state();
        let slot = active_slot(&state, id_text, now)?;
        let (jobs, _) = state.work_parts();
        let job = &mut jobs[slot as usize];
        let run = job.run_mut().expect("an active job has a run");
        run.state = JobState::Completed;
        run.ended_at_us = Some(now);
        run.error = None;
        run.result = result.map(Box::from);
        let (attempt, started) = (run.attempt, run.started_at_us.unwrap_or(now));
        publish(
            &self.events,
            job,
            "job.completed",
            JobState::Completed,
            json!({ "attempt": attempt + 1, "duration_ms": now.saturating_sub(started) / 1000 }),
        );
        Ok(settled(job, JobState::Completed, now, now))
    }

    /// A failed attempt: `retryable` (with its backoff) or `discarded`, or with `requeue`
    /// `available` at once.
    pub fn nack(&self, id_text: &str, failure: Failure<'_>) -> Result<Settled, JobControlError> {
        let now = now_us();
        let mut state = self.state();
        let slot = active_slot(&state, id_text, now)?;
        let (jobs, work) = state.work_parts();
        let job = &mut jobs[slot as usize];
        let options = options_map(job.options());
        let run = job.run_mut().expect("an active job has a run");
        if failure.requeue {
            give_back(run);
            work.refile(jobs, slot);
            return Ok(settled(&jobs[slot as usize], JobState::Available, now, now));
        }
        let failed_attempt = run.attempt;
        run.attempt += 1;
        let recorded = failure.recorded.map(|mut error| {
            if failure.add_attempt
                && let Value::Object(map) = &mut error
            {
                map.insert("attempt".into(), json!(failed_attempt));
            }
            error
        });
        if let Some(error) = &recorded {
            let text: Box<str> = error.to_string().into();
            run.errors.push(text.clone());
            run.error = Some(text);
        }
        run.worker_id = None;
        let decision = retry::decide(options.as_ref(), run.attempt, &failure.facts);
        let (new_state, at_us) = match decision {
            Decision::Retry { delay_us } => {
                run.state = JobState::Retryable;
                run.next_attempt_at_us = now + delay_us;
                run.retry_delay_ms = Some(delay_us / 1000);
                (JobState::Retryable, now + delay_us)
            }
            Decision::Discard => {
                run.state = JobState::Discarded;
                run.ended_at_us = Some(now);
                (JobState::Discarded, now)
            }
        };
        let attempt = run.attempt;
        let error = recorded.unwrap_or(Value::Null);
        publish(
            &self.events,
            job,
            "job.failed",
            new_state,
            json!({ "attempt": attempt, "error": error }),
        );
        match decision {
            Decision::Retry { .. } => publish(
                &self.events,
                job,
                "job.retrying",
                new_state,
                json!({ "attempt": attempt, "next_attempt_at": format_ms(at_us) }),
            ),
            Decision::Discard => publish(
                &self.events,
                job,
                "job.discarded",
                new_state,
                json!({ "attempt": attempt, "error": error }),
            ),
        }
        work.refile(jobs, slot);
        Ok(settled(&jobs[slot as usize], new_state, now, at_us))
    }

    /// Extends the reservation of each listed job that is active to now + `visibility_ms`;
    /// returns the ids extended. Unknown or inactive ids are skipped, as the servers do.
    pub fn heartbeat(&self, ids: &[String], visibility_ms: u64) -> Vec<String> {
        let now = now_us();
        let mut state = self.state();
        let mut extended = Vec::new();
        for id_text in ids {
            let Ok(slot) = active_slot(&state, id_text, now) else {
                continue;
            };
            let (jobs, work) = state.work_parts();
            if let Some(run) = jobs[slot as usize].run_mut() {
                run.visible_until_us = now + visibility_ms * 1000;
            }
            work.refile(jobs, slot);
            extended.push(id_text.clone());
        }
        extended
    }

    /// The control API: start, complete or fail one job as a worker would. Returns the job's
    /// envelope as it is afterwards.
    pub fn transition(
        &self,
        id_text: &str,
        transition: Transition<'_>,
    ) -> Result<Vec<u8>, JobControlError> {
        match transition {
            Transition::Start { worker_id } => self.start(id_text, worker_id),
            Transition::Complete => self.ack(id_text, None).map(|s| s.envelope),
            Transition::Fail { error } => {
                let text = |key: &str| error.get(key).and_then(Value::as_str);
                let failure = Failure {
                    facts: FailureFacts {
                        retryable: error.get("retryable").and_then(Value::as_bool),
                        kind: text("type").or_else(|| text("code")),
                        message: text("message").unwrap_or(""),
                    },
                    recorded: Some(error.clone()),
                    add_attempt: false,
                    requeue: false,
                };
                self.nack(id_text, failure).map(|s| s.envelope)
            }
        }
    }

    /// A client's cancel (`DELETE /ojs/v1/jobs/{id}`), as the reference servers do it: any
    /// state that is not terminal (`scheduled`, `available`, `active`, `retryable`) →
    /// `cancelled`, with `cancelled_at`; a worker holding the job can no longer ack, nack or
    /// extend it (`409`). A terminal job (`completed`, `discarded`, `cancelled`) is refused
    /// (`409`). Returns the job's envelope as it is afterwards, and emits `job.cancelled`.
    pub fn cancel(&self, id_text: &str) -> Result<Vec<u8>, JobControlError> {
        let now = now_us();
        let mut state = self.state();
        let slot = resolve(&state, id_text)?;
        let (jobs, work) = state.work_parts();
        let job = &mut jobs[slot as usize];
        let current = job.state(now);
        if matches!(
            current,
            JobState::Completed | JobState::Discarded | JobState::Cancelled
        ) {
            return Err(refusal(
                job,
                current,
                "scheduled, available, active or retryable",
            ));
        }
        job.cancel_by_client(now);
        let attempt = job.run().map_or(0, |run| run.attempt);
        publish(
            &self.events,
            job,
            "job.cancelled",
            JobState::Cancelled,
            json!({ "attempt": attempt, "cancelled_by": "client" }),
        );
        work.refile(jobs, slot);
        Ok(envelope(&jobs[slot as usize], now))
    }

    /// `available` or `retryable` (even before its backoff ran out) → `active`.
    fn start(&self, id_text: &str, worker_id: &str) -> Result<Vec<u8>, JobControlError> {
        let now = now_us();
        let mut state = self.state();
        let slot = resolve(&state, id_text)?;
        let (jobs, work) = state.work_parts();
        let job = &mut jobs[slot as usize];
        let current = job.state(now);
        if !matches!(current, JobState::Available | JobState::Retryable) {
            return Err(refusal(job, current, "available or retryable"));
        }
        let visibility_ms = job_visibility_ms(job).unwrap_or(DEFAULT_VISIBILITY_MS);
        claim(job, &self.events, Some(worker_id), visibility_ms, now);
        work.refile(jobs, slot);
        Ok(envelope(&jobs[slot as usize], now))
    }
}

/// The slot of the stored job `id_text` (`404` when there is none).
fn resolve(state: &State, id_text: &str) -> Result<u32, JobControlError> {
    parse_job_id(id_text)
        .and_then(|id| state.stored_slot(id))
        .ok_or_else(|| JobControlError::NotFound {
            job_id: id_text.to_owned(),
        })
}

/// The slot of the stored job `id_text`, which must be active (`409` otherwise).
fn active_slot(state: &State, id_text: &str, now: u64) -> Result<u32, JobControlError> {
    let slot = resolve(state, id_text)?;
    let job = state.job_at(slot);
    match job.state(now) {
        JobState::Active => Ok(slot),
        current => Err(refusal(job, current, "active")),
    }
}

fn refusal(job: &StoredJob, current: JobState, expected: &str) -> JobControlError {
    JobControlError::InvalidTransition {
        job_id: format_job_id(job.id),
        current_state: current.as_str().to_owned(),
        expected_state: expected.to_owned(),
    }
}

/// The job's own `options.visibility_timeout_ms`.
fn job_visibility_ms(job: &StoredJob) -> Option<u64> {
    options_map(job.options())
        .as_ref()
        .and_then(|options| options.get("visibility_timeout_ms"))
        .and_then(Value::as_u64)
        .filter(|ms| *ms > 0)
}

/// Marks a job active for `worker_id` until now + `visibility_ms`, and emits `job.started`.
fn claim(
    job: &mut StoredJob,
    events: &EventHub,
    worker_id: Option<&str>,
    visibility_ms: u64,
    now: u64,
) {
    let mut run = job.run().cloned().unwrap_or_else(Run::first);
    run.state = JobState::Active;
    run.started_at_us = Some(now);
    run.worker_id = worker_id.map(Box::from);
    run.visible_until_us = now + visibility_ms * 1000;
    run.next_attempt_at_us = 0;
    let attempt = run.attempt + 1;
    job.set_run(run);
    publish(
        events,
        job,
        "job.started",
        JobState::Active,
        json!({ "attempt": attempt, "worker_id": worker_id }),
    );
}

fn publish(events: &EventHub, job: &StoredJob, kind: &'static str, state: JobState, extra: Value) {
    let options = options_map(job.options());
    events.publish(JobEvent {
        kind,
        job_id: job.id,
        job_type: &job.job_type,
        queue: queue_of(options.as_ref()),
        state: state.as_str(),
        extra: match extra {
            Value::Object(map) => map,
            _ => Map::new(),
        },
    });
}

fn envelope(job: &StoredJob, now: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + job.args().len());
    write_stored_job(&mut out, job, now);
    out
}

fn settled(job: &StoredJob, state: JobState, now: u64, at_us: u64) -> Settled {
    let options = options_map(job.options());
    Settled {
        job_id: format_job_id(job.id),
        state,
        attempt: job.run().map_or(0, |run| run.attempt),
        max_attempts: max_attempts_of(options.as_ref()),
        at_us,
        envelope: envelope(job, now),
    }
}

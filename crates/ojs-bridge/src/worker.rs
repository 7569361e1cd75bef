//! The core worker loop (`ojs_outbox::worker_loop`) for a binding: the binding runs
//! `concurrency` handler slots, each a thread (Python, Ruby) or a promise chain (Node) that
//! calls [`Worker::next`], runs the language's handler, and calls [`Worker::finish`]. Every
//! rule (fetch, heartbeat, ack and nack, backoff, `timeout_ms`, graceful stop, trace context,
//! decryption, unknown types) is the loop's; the binding only calls the handler.
//!
//! | thing | crosses as |
//! |---|---|
//! | options | JSON: `{"queues", "concurrency"?, "visibility_timeout_ms"?, "worker_id"?, "idle_poll_ms"?, "stop_deadline_ms"?}` |
//! | a job for a slot | JSON: `{"id", "type", "queue", "args", "meta", "attempt", "timeout_ms", "traceparent", "tracestate", "job"}` (`timeout_ms`: what is left of the job's, or `null`) |
//! | how the handler ended | JSON: `{"outcome": "completed", "result"?}`, `{"outcome": "failed", "code", "message", "retryable"?, "details"?}`, `{"outcome": "unknown_type"}` or `{"outcome": "requeue"}` |

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::Bridge;
use ojs_outbox::worker_loop::{Assignment, Outcome, WorkerLoop, WorkerOptions};
use ojs_outbox::{Error, ErrorCode, Result};

/// A running worker loop and the runtime it runs on.
/// A running worker loop on a runtime of its own (a worker process runs no relay; a process
/// that runs both keeps them apart).
pub struct Worker {
    inner: WorkerLoop,
    runtime: tokio::runtime::Runtime,
}

/// What a wait for a job gave.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// A job for the slot, as JSON (module doc).
    Job(String),
    /// None came in time; ask again.
    Idle,
    /// The worker stops: the slot ends.
    Stopped,
}

impl Worker {
    pub(crate) fn start(
        options_json: &str,
        backend: ojs_outbox::backend::Backend,
        codec: Option<std::sync::Arc<ojs_outbox::codec::Codec>>,
    ) -> Result<Worker> {
        let options = WorkerOptions::from_json(options_json)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ojs-worker")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorCode::BackendUnavailable,
                    format!("cannot start the worker runtime: {e}"),
                )
            })?;
        let inner = {
            let _entered = runtime.enter();
            WorkerLoop::start(backend, codec, options)
        };
        Ok(Worker { inner, runtime })
    }

    /// The worker id sent with every fetch (given, or made up from host and pid).
    pub fn worker_id(&self) -> &str {
        &self.inner.options().worker_id
    }

    pub fn concurrency(&self) -> usize {
        self.inner.options().concurrency
    }

    /// Waits up to `timeout_ms` for a job for a free slot. Blocks: call it off the language's
    /// main thread (or release its lock).
    pub fn next(&self, timeout_ms: u64) -> Next {
        let wait = self.inner.next(Duration::from_millis(timeout_ms));
        match self.runtime.block_on(wait) {
            Some(assignment) => Next::Job(assignment_json(&assignment)),
            None if self.inner.stopping() => Next::Stopped,
            None => Next::Idle,
        }
    }

    /// Waits up to `timeout_ms` for jobs for up to `slots` free slots (a host that runs its
    /// handlers on one event loop asks for all of them in one wait): every job there as soon
    /// as one is (at most `slots`), each as JSON (module doc).
    pub fn next_up_to(&self, slots: usize, timeout_ms: u64) -> NextJobs {
        let wait = self
            .inner
            .next_up_to(slots, Duration::from_millis(timeout_ms));
        let jobs = self.runtime.block_on(wait);
        if !jobs.is_empty() {
            return NextJobs::Jobs(jobs.iter().map(assignment_json).collect());
        }
        if self.inner.stopping() {
            NextJobs::Stopped
        } else {
            NextJobs::Idle
        }
    }

    /// Settles a job handed out by [`next`](Self::next) with the handler's outcome (JSON, the
    /// module doc). `Ok(false)`: the loop no longer held it (its `timeout_ms` ran out and it was
    /// nacked `timeout`, or the stopping worker gave it back); the outcome is dropped.
    pub fn finish(&self, job_id: &str, outcome_json: &str) -> Result<bool> {
        let outcome = outcome_from_json(outcome_json)?;
        Ok(self.inner.finish(job_id, outcome))
    }

    /// Jobs handed out and not finished.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// What the loop said since the last call (an outage and its end, a timeout, a job given
    /// back, an ack or nack not delivered, a job whose args could not be decoded), for the
    /// framework's logger; `table` is empty. Call it after each wait.
    pub fn drain_log(&self) -> Vec<crate::LogRecord> {
        (self.inner.drain_log().into_iter())
            .map(|entry| crate::LogRecord {
                level: entry.level.as_str().to_owned(),
                message: entry.message,
                job_id: entry.job_id,
                table: String::new(),
            })
            .collect()
    }

    /// Whether the backend did not answer the loop's last request (an outage being waited out).
    pub fn backend_down(&self) -> bool {
        self.inner.backend_down()
    }

    /// Whether [`stop`](Self::stop) began.
    pub fn stopping(&self) -> bool {
        self.inner.stopping()
    }

    /// How long a stop that names no deadline waits for the jobs in flight (the option
    /// `stop_deadline_ms`, else the core's default): what a binding's stop message says.
    pub fn stop_deadline_ms(&self) -> u64 {
        u64::try_from(self.inner.options().stop_deadline.as_millis()).unwrap_or(u64::MAX)
    }

    /// Graceful stop: no more fetches, the slots' next waits end, handed-out jobs have up to
    /// `deadline_ms` (`None`: [`stop_deadline_ms`](Self::stop_deadline_ms)) to finish, the rest
    /// is given back. Blocks until every ack and nack went.
    pub fn stop(&self, deadline_ms: Option<u64>) {
        let deadline =
            deadline_ms.map_or(self.inner.options().stop_deadline, Duration::from_millis);
        self.runtime.block_on(self.inner.stop(deadline));
    }
}

/// What a wait for several slots gave ([`Worker::next_up_to`]).
#[derive(Debug, PartialEq)]
pub enum NextJobs {
    Jobs(Vec<String>),
    Idle,
    Stopped,
}

fn assignment_json(assignment: &Assignment) -> String {
    let timeout_ms = assignment.deadline.map(|deadline| {
        let left = deadline.saturating_duration_since(Instant::now());
        u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
    });
    json!({
        "id": assignment.job_id,
        "type": assignment.job_type,
        "queue": assignment.job.get("queue").cloned().unwrap_or(Value::Null),
        "args": assignment.args,
        "meta": assignment.meta,
        "attempt": assignment.attempt,
        "timeout_ms": timeout_ms,
        "traceparent": assignment.traceparent,
        "tracestate": assignment.tracestate,
        "job": assignment.job,
    })
    .to_string()
}

#[derive(Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
enum OutcomeInput {
    Completed {
        #[serde(default)]
        result: Option<Value>,
    },
    Failed {
        code: String,
        message: String,
        #[serde(default)]
        retryable: Option<bool>,
        #[serde(default)]
        details: Option<Value>,
    },
    UnknownType,
    Requeue,
}

fn outcome_from_json(text: &str) -> Result<Outcome> {
    let input: OutcomeInput = serde_json::from_str(text)
        .map_err(|e| Error::field(ErrorCode::InvalidArgs, "outcome", e.to_string()))?;
    Ok(match input {
        OutcomeInput::Completed { result } => Outcome::Completed(result),
        OutcomeInput::Failed {
            code,
            message,
            retryable,
            details,
        } => {
            if code.trim().is_empty() {
                return Err(Error::field(
                    ErrorCode::InvalidArgs,
                    "outcome.code",
                    "must be a non-empty string",
                ));
            }
            Outcome::Failed {
                code,
                message,
                retryable,
                details,
            }
        }
        OutcomeInput::UnknownType => Outcome::UnknownType,
        OutcomeInput::Requeue => Outcome::Requeue,
    })
}

impl Bridge {
    /// A worker command (`ojs_outbox::worker::WorkerCommand` as JSON: fetch, ack, nack,
    /// heartbeat) sent to the configured backend; its answer as JSON text (a fetch's
    /// `{"jobs": [...]}`). For a framework's worker command.
    pub fn worker(&self, command_json: &str) -> Result<String> {
        let command = ojs_outbox::worker::WorkerCommand::from_json(command_json)?;
        self.with_http(|runtime, backend| {
            Ok(runtime
                .block_on(backend.worker_with_codec(&command, self.config.encryption.as_deref()))?
                .to_string())
        })
    }

    /// Starts the core worker loop against the configured backend (`worker.rs`; options as
    /// JSON: `{"queues", "concurrency"?, "visibility_timeout_ms"?, "worker_id"?,
    /// "idle_poll_ms"?}`). Encrypted args are opened with `adapter.encryption`'s keys.
    pub fn start_worker(&self, options_json: &str) -> Result<Worker> {
        let backend = ojs_outbox::backend::Backend::new(&self.config)?;
        Worker::start(options_json, backend, self.config.encryption.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_parse_and_unknown_keys_are_refused() {
        let completed = outcome_from_json(r#"{"outcome":"completed","result":{"n":1}}"#);
        assert_eq!(
            completed.unwrap(),
            Outcome::Completed(Some(json!({"n": 1})))
        );
        let failed = outcome_from_json(
            r#"{"outcome":"failed","code":"TypeError","message":"boom","details":{"stack":"at x"}}"#,
        )
        .unwrap();
        assert!(matches!(failed, Outcome::Failed { ref code, .. } if code == "TypeError"));
        assert_eq!(
            outcome_from_json(r#"{"outcome":"unknown_type"}"#).unwrap(),
            Outcome::UnknownType
        );
        let typo = outcome_from_json(r#"{"outcome":"completed","reslt":1}"#).unwrap_err();
        assert_eq!(typo.code, ErrorCode::InvalidArgs);
        assert!(typo.message.contains("reslt"), "{}", typo.message);
        let blank = outcome_from_json(r#"{"outcome":"failed","code":" ","message":"m"}"#);
        assert_eq!(blank.unwrap_err().field.as_deref(), Some("outcome.code"));
    }
}

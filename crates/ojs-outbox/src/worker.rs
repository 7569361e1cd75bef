//! The worker side of the OJS HTTP binding, for hosts that run jobs (a framework's worker
//! command): `POST /ojs/v1/workers/fetch|ack|nack|heartbeat`, and `GET /ojs/v1/jobs/{id}` to
//! read a job's state and result back. One command in, the server's answer out, both JSON;
//! the rules of each request live here once.
//!
//! A fetch answers only jobs the host can run: encrypted args (the OJS encryption extension,
//! `codec.rs`) are decoded first (ENC-004), and a job that cannot be decoded, or is encrypted
//! while this process has no `adapter.encryption`, is nacked at once as `decode_failed`, not
//! retryable, so the backend discards or dead-letters it, and is left out of the answer.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::Backend;
use crate::codec::{self, Codec};
use crate::error::{Error, ErrorCode, Result};

/// One worker request (JSON from the bindings: `{"op": "fetch", ...}`).
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum WorkerCommand {
    /// Up to `count` available jobs of these queues (in the order given).
    Fetch {
        queues: Vec<String>,
        #[serde(default = "one")]
        count: u32,
        worker_id: String,
        #[serde(default)]
        visibility_timeout_ms: Option<u64>,
    },
    /// The job ran: its result (any JSON) is recorded.
    Ack {
        job_id: String,
        #[serde(default)]
        result: Option<Value>,
    },
    /// The job failed: the backend retries it per its policy or discards it; `requeue` gives
    /// it back unrun (a stopping worker).
    Nack {
        job_id: String,
        error: NackError,
        #[serde(default)]
        requeue: bool,
    },
    /// The job as the backend holds it (`{"job": {...}}`: state, attempt, result, error); `null` when the
    /// backend has no such job.
    Get { job_id: String },
    /// Still working on these jobs: their reservations are extended.
    Heartbeat {
        worker_id: String,
        #[serde(default)]
        active_jobs: Vec<String>,
        #[serde(default)]
        visibility_timeout_ms: Option<u64>,
    },
}

fn one() -> u32 {
    1
}

/// What failed, as the spec's nack body carries it.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NackError {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The nack code of a fetched job whose args could not be decoded.
pub const DECODE_FAILED: &str = "decode_failed";

/// The largest `count` a fetch may ask for.
pub const MAX_FETCH: u32 = 1000;

impl WorkerCommand {
    pub fn from_json(text: &str) -> Result<WorkerCommand> {
        let command: WorkerCommand = serde_json::from_str(text)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "command", e.to_string()))?;
        command.validate()?;
        Ok(command)
    }

    fn validate(&self) -> Result<()> {
        let invalid = |field: &str, why: &str| Error::field(ErrorCode::InvalidConfig, field, why);
        let id = |field: &str, value: &str| {
            if value.trim().is_empty() {
                Err(invalid(field, "must not be empty"))
            } else {
                Ok(())
            }
        };
        match self {
            WorkerCommand::Fetch {
                queues,
                count,
                worker_id,
                visibility_timeout_ms,
            } => {
                if queues.is_empty() {
                    return Err(invalid("queues", "name at least one queue"));
                }
                for queue in queues {
                    crate::job::validate_queue(queue)?;
                }
                if !(1..=MAX_FETCH).contains(count) {
                    return Err(invalid("count", "must be 1..=1000"));
                }
                if *visibility_timeout_ms == Some(0) {
                    return Err(invalid("visibility_timeout_ms", "must be positive"));
                }
                id("worker_id", worker_id)
            }
            WorkerCommand::Ack { job_id, .. } | WorkerCommand::Get { job_id } => {
                id("job_id", job_id)
            }
            WorkerCommand::Nack { job_id, error, .. } => {
                id("job_id", job_id)?;
                id("error.code", &error.code)
            }
            WorkerCommand::Heartbeat { worker_id, .. } => id("worker_id", worker_id),
        }
    }

    /// The request: its method, path and JSON body (none for a GET).
    fn request(&self) -> (reqwest::Method, String, Option<Value>) {
        let post = |endpoint: &str, body: Value| {
            let path = format!("/ojs/v1/workers/{endpoint}");
            (reqwest::Method::POST, path, Some(body))
        };
        match self {
            WorkerCommand::Get { job_id } => {
                let path = format!("/ojs/v1/jobs/{}", urlencoding_path(job_id));
                (reqwest::Method::GET, path, None)
            }
            WorkerCommand::Fetch {
                queues,
                count,
                worker_id,
                visibility_timeout_ms,
            } => {
                let mut body = json!({"queues": queues, "count": count, "worker_id": worker_id});
                if let Some(ms) = visibility_timeout_ms {
                    body["visibility_timeout_ms"] = json!(ms);
                }
                post("fetch", body)
            }
            WorkerCommand::Ack { job_id, result } => {
                let mut body = json!({ "job_id": job_id });
                if let Some(result) = result {
                    body["result"] = result.clone();
                }
                post("ack", body)
            }
            WorkerCommand::Nack {
                job_id,
                error,
                requeue,
            } => post(
                "nack",
                json!({"job_id": job_id, "error": error, "requeue": requeue}),
            ),
            WorkerCommand::Heartbeat {
                worker_id,
                active_jobs,
                visibility_timeout_ms,
            } => {
                let mut body = json!({"worker_id": worker_id, "active_jobs": active_jobs});
                if let Some(ms) = visibility_timeout_ms {
                    body["visibility_timeout_ms"] = json!(ms);
                }
                post("heartbeat", body)
            }
        }
    }
}

impl Backend {
    /// [`Backend::worker_with_codec`] without a key ring: a fetched job with encrypted args
    /// is nacked as `decode_failed` and left out of the answer.
    pub async fn worker(&self, command: &WorkerCommand) -> Result<Value> {
        self.worker_with_codec(command, None).await
    }

    /// Sends one worker command; the server's answer as JSON. No answer, a 5xx or a 429 is
    /// `BACKEND_UNAVAILABLE` (try again later); another refusal is `BACKEND_REJECTED` with the
    /// server's message (e.g. an ack for a job that is not active).
    ///
    /// A fetch's jobs (`jobs`, and `job` where the server sends the first one alone too) come
    /// back with their args decoded by `codec` (`Config::encryption`). A job it cannot decode,
    /// or an encrypted one when `codec` is `None`, is nacked at once (`{"code":
    /// "decode_failed", "retryable": false}`, the message naming the job id and the reason,
    /// never the data) and is not in the answer; a failed nack is logged, and the backend
    /// gives the job to a worker again once its visibility timeout runs out.
    pub async fn worker_with_codec(
        &self,
        command: &WorkerCommand,
        codec: Option<&Codec>,
    ) -> Result<Value> {
        let answer = self.send_worker(command).await?;
        match command {
            WorkerCommand::Fetch { .. } => Ok(self.open_fetched(answer, codec).await),
            // A job read back (its state, its result) shows its args as the application
            // staged them when this process holds the key; as stored when it cannot open them.
            WorkerCommand::Get { .. } => {
                let mut answer = answer;
                if let Some(job) = answer.get_mut("job").filter(|job| job.is_object()) {
                    let _ = open_job(job, codec);
                }
                Ok(answer)
            }
            _ => Ok(answer),
        }
    }

    /// The fetch answer with every job's args decoded, the undecodable jobs nacked and removed.
    async fn open_fetched(&self, mut answer: Value, codec: Option<&Codec>) -> Value {
        let mut failed: Vec<(String, String)> = Vec::new();
        if let Some(jobs) = answer.get_mut("jobs").and_then(Value::as_array_mut) {
            jobs.retain_mut(|job| match open_job(job, codec) {
                Ok(()) => true,
                Err(reason) => {
                    failed.push((job_id_of(job), reason));
                    false
                }
            });
        }
        if let Some(job) = answer.get_mut("job").filter(|job| job.is_object()) {
            let id = job_id_of(job);
            let gone = failed.iter().any(|(failed_id, _)| *failed_id == id);
            let keep = !gone
                && match open_job(job, codec) {
                    Ok(()) => true,
                    Err(reason) => {
                        failed.push((id, reason));
                        false
                    }
                };
            if !keep && let Some(answer) = answer.as_object_mut() {
                // `job` is the first of `jobs` (the compat form): the first one left, if any.
                match answer.get("jobs").and_then(|jobs| jobs.get(0)).cloned() {
                    Some(first) => answer.insert("job".into(), first),
                    None => answer.remove("job"),
                };
            }
        }
        // Said in the answer too, for a host that reports them (the worker loop's log).
        let said: Vec<Value> = (failed.iter())
            .map(|(job_id, reason)| serde_json::json!({"job_id": job_id, "reason": reason}))
            .collect();
        if !said.is_empty()
            && let Some(answer) = answer.as_object_mut()
        {
            answer.insert(DECODE_FAILED.into(), Value::Array(said));
        }
        for (job_id, reason) in failed {
            if job_id.is_empty() {
                tracing::warn!(
                    "a fetched job without an id could not be decoded and was dropped: {reason}"
                );
                continue;
            }
            let message = format!("job {job_id}: its args could not be decoded: {reason}");
            tracing::warn!(job_id = %job_id, "{message}; nacking it as {DECODE_FAILED}");
            let nack = WorkerCommand::Nack {
                job_id: job_id.clone(),
                error: NackError {
                    code: DECODE_FAILED.to_owned(),
                    message,
                    retryable: Some(false),
                    details: None,
                },
                requeue: false,
            };
            if let Err(error) = self.send_worker(&nack).await {
                tracing::warn!(job_id = %job_id, "the nack of an undecodable job failed: {error}");
            }
        }
        answer
    }

    /// One worker request, its answer as JSON (see [`Backend::worker_with_codec`]).
    async fn send_worker(&self, command: &WorkerCommand) -> Result<Value> {
        let (method, path, body) = command.request();
        let (status, text) = self.exchange(method.clone(), &path, body).await?;
        if method == reqwest::Method::GET && status == 404 {
            return Ok(Value::Null);
        }
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        let message = answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or(text.as_str());
        let code = if status >= 500 || status == 429 {
            ErrorCode::BackendUnavailable
        } else {
            ErrorCode::BackendRejected
        };
        Err(Error::new(
            code,
            format!("{method} {path} answered {status}: {message}"),
        ))
    }
}

/// A fetched job's id, or `""`.
fn job_id_of(job: &Value) -> String {
    job.get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Decodes one fetched job's args in place; the reason (no data) when it cannot.
fn open_job(job: &mut Value, codec: Option<&Codec>) -> std::result::Result<(), String> {
    let Some(args) = job.get("args") else {
        return Ok(());
    };
    if !codec::is_encoded(args) {
        return Ok(());
    }
    let Some(codec) = codec else {
        return Err(
            "its args are encrypted (ojs_encoded) and this process has no adapter.encryption configured"
                .to_owned(),
        );
    };
    let meta = job.get("meta").unwrap_or(&Value::Null);
    match codec.open_args(args, meta) {
        Ok(Some(plain)) => {
            job["args"] = plain;
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(error) => Err(error.message),
    }
}

/// A job id as one path segment (ids are UUIDs, but a caller's text is not trusted).
fn urlencoding_path(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_checked_before_anything_is_sent() {
        let code = |text: &str| WorkerCommand::from_json(text).err().map(|e| e.code);
        assert_eq!(
            code(r#"{"op": "fetch", "queues": ["default"], "worker_id": "w1"}"#),
            None
        );
        assert_eq!(
            code(r#"{"op": "fetch", "queues": [], "worker_id": "w1"}"#),
            Some(ErrorCode::InvalidConfig)
        );
        assert_eq!(
            code(r#"{"op": "fetch", "queues": ["Bad Queue"], "worker_id": "w1"}"#),
            Some(ErrorCode::InvalidQueue)
        );
        assert_eq!(
            code(r#"{"op": "fetch", "queues": ["q"], "worker_id": "w1", "count": 0}"#),
            Some(ErrorCode::InvalidConfig)
        );
        assert_eq!(
            code(r#"{"op": "ack", "job_id": ""}"#),
            Some(ErrorCode::InvalidConfig)
        );
        assert_eq!(
            code(r#"{"op": "nack", "job_id": "j", "error": {"message": "boom"}}"#),
            Some(ErrorCode::InvalidConfig),
            "the spec's nack error has a code"
        );
        assert_eq!(
            code(r#"{"op": "ack", "job_id": "j", "extra": 1}"#),
            Some(ErrorCode::InvalidConfig)
        );
    }
}

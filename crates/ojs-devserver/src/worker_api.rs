//! The worker endpoints of the HTTP binding (§10), read and answered as the reference
//! servers' `WorkerHandler` does (`internal/api/handler_workers.go` in both): a body that does
//! not decode is `400 invalid_request` ("Invalid JSON in request body."), a missing `queues`,
//! `job_id` or `worker_id` is `400 invalid_request`, an unknown job `404 not_found`, a job that
//! is not active `409` (`invalid_request`, `details.current_state` / `expected_state`).
//!
//! - `POST /ojs/v1/workers/fetch` `{"queues": [..], "count"?, "worker_id"?,
//!   "visibility_timeout_ms"?}` → `200 {"jobs": [envelope...], "job": first}` (`job` only when
//!   a job was claimed; `jobs: []` when none).
//! - `POST /ojs/v1/workers/ack` `{"job_id", "result"?}` → `200 {"acknowledged": true, "job_id",
//!   "state": "completed", "completed_at", "job"}`.
//! - `POST /ojs/v1/workers/nack` `{"job_id", "error"?: {"code"?, "type"?, "message",
//!   "retryable"?, "details"?}, "requeue"?}` → `200 {"job_id", "state", "attempt",
//!   "max_attempts", "next_attempt_at" | "discarded_at", "job"}`.
//! - `POST /ojs/v1/workers/heartbeat` `{"worker_id", "active_jobs"? | "job_id"?,
//!   "visibility_timeout_ms"?}` → `200 {"state": "active", "directive": "continue",
//!   "jobs_extended"?, "server_time"}`.

use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::app::App;
use crate::respond::{
    BodyRead, Resp, control_error_response, invalid_request, ojs_json, read_body_limited,
};
use crate::retry::FailureFacts;
use crate::store::JobState;
use crate::timefmt::{format_ms, now_us};
use crate::worker::{DEFAULT_VISIBILITY_MS, Failure, Fetch, Settled};

/// One of the four worker endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkerOp {
    Fetch,
    Ack,
    Nack,
    Heartbeat,
}

impl WorkerOp {
    pub fn of(path: &str) -> Option<WorkerOp> {
        match path.strip_prefix("/ojs/v1/workers/")? {
            "fetch" => Some(WorkerOp::Fetch),
            "ack" => Some(WorkerOp::Ack),
            "nack" => Some(WorkerOp::Nack),
            "heartbeat" => Some(WorkerOp::Heartbeat),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct FetchIn {
    #[serde(default)]
    queues: Option<Vec<String>>,
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    worker_id: Option<String>,
    #[serde(default)]
    visibility_timeout_ms: Option<i64>,
}

#[derive(Deserialize)]
struct AckIn<'a> {
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct NackIn {
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    error: Option<ErrorIn>,
    #[serde(default)]
    requeue: Option<bool>,
}

/// The error of a nack, with the fields (and types) the servers' `JobError` reads.
#[derive(Deserialize)]
struct ErrorIn {
    #[serde(default)]
    code: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    retryable: Option<bool>,
    #[serde(default)]
    details: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct HeartbeatIn {
    #[serde(default)]
    worker_id: Option<String>,
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    active_jobs: Option<Vec<String>>,
    #[serde(default)]
    visibility_timeout_ms: Option<i64>,
}

pub(crate) async fn answer(app: &App, op: WorkerOp, request: Request<Incoming>) -> Resp {
    let BodyRead::Complete(body) = read_body_limited(request).await else {
        return bad_json();
    };
    match op {
        WorkerOp::Fetch => fetch(app, &body),
        WorkerOp::Ack => ack(app, &body),
        WorkerOp::Nack => nack(app, &body),
        WorkerOp::Heartbeat => heartbeat(app, &body),
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

fn bad_json() -> Resp {
    invalid_request("Invalid JSON in request body.", None)
}

fn required(field: &str) -> Resp {
    invalid_request(
        &format!("The '{field}' field is required."),
        Some(json!({ "field": field, "reason": "is required" })),
    )
}

/// A positive number of milliseconds, or nothing (the servers read 0 and below as unset).
fn positive_ms(value: Option<i64>) -> Option<u64> {
    value.filter(|ms| *ms > 0).map(|ms| ms as u64)
}

fn fetch(app: &App, body: &[u8]) -> Resp {
    let Some(input) = decode::<FetchIn>(body) else {
        return bad_json();
    };
    let queues = input.queues.unwrap_or_default();
    if queues.is_empty() {
        return invalid_request(
            "The 'queues' field is required and must not be empty.",
            Some(json!({ "field": "queues", "reason": "is required and must not be empty" })),
        );
    }
    let claimed = app.fetch(&Fetch {
        queues: &queues,
        count: input.count.filter(|n| *n > 0).map_or(1, |n| n as usize),
        worker_id: input.worker_id.as_deref().filter(|w| !w.is_empty()),
        visibility_ms: positive_ms(input.visibility_timeout_ms),
    });
    let mut out = Vec::with_capacity(16 + claimed.iter().map(Vec::len).sum::<usize>() * 2);
    out.extend_from_slice(b"{\"jobs\":[");
    for (i, envelope) in claimed.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(envelope);
    }
    out.push(b']');
    if let Some(first) = claimed.first() {
        out.extend_from_slice(b",\"job\":");
        out.extend_from_slice(first);
    }
    out.push(b'}');
    ojs_json(StatusCode::OK, out)
}

fn ack(app: &App, body: &[u8]) -> Resp {
    let input: AckIn<'_> = match serde_json::from_slice(body) {
        Ok(input) => input,
        Err(_) => return bad_json(),
    };
    let Some(job_id) = input.job_id.filter(|id| !id.is_empty()) else {
        return required("job_id");
    };
    match app.ack(&job_id, input.result.map(RawValue::get)) {
        Ok(settled) => settled_response(&settled, true),
        Err(error) => control_error_response(&error),
    }
}

fn nack(app: &App, body: &[u8]) -> Resp {
    let Some(input) = decode::<NackIn>(body) else {
        return bad_json();
    };
    let Some(job_id) = input.job_id.filter(|id| !id.is_empty()) else {
        return required("job_id");
    };
    let error = input.error;
    let kind = error.as_ref().and_then(|e| {
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        nonempty(&e.kind).or_else(|| nonempty(&e.code))
    });
    // The error as both servers record it: `message`, `type` (the type, else the code),
    // `retryable` and `details` when given, and the failed attempt (added under the lock).
    let recorded = error.as_ref().map(|e| {
        let mut map = Map::new();
        map.insert(
            "message".into(),
            json!(e.message.clone().unwrap_or_default()),
        );
        if let Some(kind) = &kind {
            map.insert("type".into(), json!(kind));
        }
        if let Some(retryable) = e.retryable {
            map.insert("retryable".into(), json!(retryable));
        }
        if let Some(details) = &e.details {
            map.insert("details".into(), Value::Object(details.clone()));
        }
        Value::Object(map)
    });
    let failure = Failure {
        facts: FailureFacts {
            retryable: error.as_ref().and_then(|e| e.retryable),
            kind: kind.as_deref(),
            message: error
                .as_ref()
                .and_then(|e| e.message.as_deref())
                .unwrap_or(""),
        },
        recorded,
        add_attempt: true,
        requeue: input.requeue == Some(true),
    };
    match app.nack(&job_id, failure) {
        Ok(settled) => settled_response(&settled, false),
        Err(error) => control_error_response(&error),
    }
}

fn heartbeat(app: &App, body: &[u8]) -> Resp {
    let Some(input) = decode::<HeartbeatIn>(body) else {
        return bad_json();
    };
    if input.worker_id.as_deref().is_none_or(str::is_empty) {
        return required("worker_id");
    }
    let mut ids = input.active_jobs.unwrap_or_default();
    if ids.is_empty()
        && let Some(id) = input.job_id.filter(|id| !id.is_empty())
    {
        ids.push(id);
    }
    let visibility_ms = positive_ms(input.visibility_timeout_ms).unwrap_or(DEFAULT_VISIBILITY_MS);
    let extended = app.heartbeat(&ids, visibility_ms);
    let mut answer = json!({
        "state": "active",
        "directive": "continue",
        "server_time": format_ms(now_us()),
    });
    if !extended.is_empty() {
        answer["jobs_extended"] = json!(extended);
    }
    ojs_json(StatusCode::OK, answer.to_string().into_bytes())
}

/// The answer to an ack (`acknowledged`, `completed_at`) or a nack (`attempt`,
/// `max_attempts`, and `next_attempt_at` or `discarded_at`), with the job's envelope.
fn settled_response(settled: &Settled, acknowledged: bool) -> Resp {
    let mut head = Map::new();
    if acknowledged {
        head.insert("acknowledged".into(), json!(true));
    }
    head.insert("job_id".into(), json!(settled.job_id));
    head.insert("state".into(), json!(settled.state.as_str()));
    let at = format_ms(settled.at_us);
    if acknowledged {
        head.insert("completed_at".into(), json!(at));
    } else {
        head.insert("attempt".into(), json!(settled.attempt));
        head.insert("max_attempts".into(), json!(settled.max_attempts));
        match settled.state {
            JobState::Retryable => head.insert("next_attempt_at".into(), json!(at)),
            JobState::Discarded => head.insert("discarded_at".into(), json!(at)),
            _ => None,
        };
    }
    let mut out = Value::Object(head).to_string().into_bytes();
    out.pop();
    out.extend_from_slice(b",\"job\":");
    out.extend_from_slice(&settled.envelope);
    out.push(b'}');
    ojs_json(StatusCode::OK, out)
}

//! The public data types of the control API: what the devserver received, and the faults a
//! test can inject. They serialize to exactly the JSON that `/_dev/*` speaks, so a test in any
//! language sees the same shapes as a Rust test calling [`crate::DevServer`] directly.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Everything the devserver stored and counted since start or the last reset
/// (`GET /_dev/received`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Received {
    /// Every job the backend holds, in acceptance order: stored and not replaced. A job that a
    /// unique `replace` cancelled moves to `replaced` (its `seq` leaves a gap here).
    pub jobs: Vec<ReceivedJob>,
    /// Jobs cancelled by a later job's unique `replace` policy, in acceptance order. They are
    /// still stored (`GET /ojs/v1/jobs/{id}` answers them with `state: "cancelled"`), but the
    /// backend no longer holds them as work.
    #[serde(default)]
    pub replaced: Vec<ReplacedJob>,
    /// Per job id, how many enqueue requests (single, or batch element) carried that id:
    /// accepted ones, ones answered `409 duplicate` or `400`, ones whose connection was dropped
    /// after acceptance. Requests refused by an injected status fault are not counted: the
    /// backend never looked at them. A job stored under a server-generated id counts 1.
    pub deliveries: BTreeMap<String, u64>,
    /// How many requests reached each handler.
    pub requests: RequestCounts,
}

/// One stored job as the backend received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceivedJob {
    /// 0-based position in acceptance order.
    pub seq: u64,
    pub id: String,
    /// The job's `type` (a Rust keyword, hence the field name).
    #[serde(rename = "type")]
    pub job_type: String,
    pub args: Value,
    /// `None` (JSON `null`) when the request had no `meta`.
    pub meta: Option<Value>,
    /// `None` (JSON `null`) when the request had no `options`.
    pub options: Option<Value>,
    /// The other top-level attributes of the request, as sent (an object), `None` when there
    /// were none. Attributes named like one the envelope writes itself (`state`, `queue`, ...)
    /// are not kept.
    #[serde(default)]
    pub attributes: Option<Value>,
    /// `available`, `scheduled` (its `scheduled_at` / `delay_until` is still ahead), where a
    /// worker or the control API moved it (`active`, `completed`, `retryable`, `discarded`) or,
    /// for a replaced job, `cancelled`; computed when the document is written.
    #[serde(default)]
    pub state: String,
    /// Wall-clock time of acceptance, microseconds since the Unix epoch.
    pub received_at_us: u64,
    /// Index of the enqueue request that brought the job, counting single and batch enqueue
    /// requests together from 0 (requests answered by a fault or an error count too).
    pub batch_request: u64,
}

/// A stored job that a later job's unique `replace` policy cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplacedJob {
    #[serde(flatten)]
    pub job: ReceivedJob,
    /// The id of the job that replaced it.
    pub replaced_by: String,
    /// Wall-clock time of the replacement, microseconds since the Unix epoch.
    pub cancelled_at_us: u64,
}

/// Requests that reached the OJS handlers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    /// `POST /ojs/v1/jobs`.
    pub single: u64,
    /// `POST /ojs/v1/jobs/batch` (also while batch is disabled and answered 404).
    pub batch: u64,
    /// `GET /ojs/v1/jobs/{id}`.
    pub get: u64,
}

/// Cheap counters (`GET /_dev/stats`), for pollers that must not copy a million jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Number of jobs the backend holds (stored and not replaced): `Received::jobs.len()`.
    pub jobs: u64,
    /// Number of stored jobs a unique `replace` cancelled: `Received::replaced.len()`.
    #[serde(default)]
    pub replaced: u64,
    /// Sum of all delivery counts.
    pub deliveries: u64,
    pub requests: RequestCounts,
}

/// Which requests a fault may hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultScope {
    /// Only `POST /ojs/v1/jobs` and `POST /ojs/v1/jobs/batch`.
    #[default]
    Enqueue,
    /// Every OJS request (not the `/_dev` control API).
    All,
}

/// An injected misbehaviour (`POST /_dev/faults`). Faults form a FIFO list; each request uses
/// the first fault that applies to it and decrements its `count`.
///
/// Unknown keys are ignored, so a runner can post a conformance step (`{"op": ..., ...}`) as is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Answer with this status (400..=599) and an error body; nothing is stored.
    #[serde(default)]
    pub status: Option<u16>,
    /// The error `code` of that answer; defaults by status (429 `rate_limited`, ...).
    #[serde(default)]
    pub code: Option<String>,
    /// Value of a `Retry-After` header on that answer.
    #[serde(default)]
    pub retry_after: Option<String>,
    /// Sleep this long before handling the request.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Handle the request normally (store, count), then close the connection without sending
    /// a single response byte. Combined with `status`: refuse (store nothing), then close.
    #[serde(default, deserialize_with = "null_as_default")]
    pub drop_after_accept: bool,
    /// How many requests this fault hits; `None` means until cleared.
    #[serde(default)]
    pub count: Option<u32>,
    /// Only hit enqueue requests carrying at least one job of this type.
    #[serde(default)]
    pub match_type: Option<String>,
    /// Which requests the fault may hit; default `enqueue`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub applies_to: FaultScope,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl Fault {
    /// Answer enqueue requests with `status` (and the default code for it).
    pub fn status_code(status: u16) -> Fault {
        Fault {
            status: Some(status),
            ..Fault::default()
        }
    }

    /// Delay enqueue requests by `latency_ms`, then handle them normally.
    pub fn latency(latency_ms: u64) -> Fault {
        Fault {
            latency_ms: Some(latency_ms),
            ..Fault::default()
        }
    }

    /// Accept enqueue requests, then drop the connection without answering.
    pub fn accept_then_drop() -> Fault {
        Fault {
            drop_after_accept: true,
            ..Fault::default()
        }
    }

    pub fn with_code(mut self, code: impl Into<String>) -> Fault {
        self.code = Some(code.into());
        self
    }

    pub fn with_retry_after(mut self, retry_after: impl Into<String>) -> Fault {
        self.retry_after = Some(retry_after.into());
        self
    }

    pub fn with_latency_ms(mut self, latency_ms: u64) -> Fault {
        self.latency_ms = Some(latency_ms);
        self
    }

    /// Hit only the next `count` matching requests.
    pub fn times(mut self, count: u32) -> Fault {
        self.count = Some(count);
        self
    }

    /// Hit only enqueue requests carrying a job of this type.
    pub fn matching_type(mut self, job_type: impl Into<String>) -> Fault {
        self.match_type = Some(job_type.into());
        self
    }

    /// Hit every OJS request, not only enqueues.
    pub fn on_all_requests(mut self) -> Fault {
        self.applies_to = FaultScope::All;
        self
    }

    /// Why this fault cannot be used, if it cannot.
    pub(crate) fn problem(&self) -> Option<&'static str> {
        if let Some(status) = self.status
            && !(400..=599).contains(&status)
        {
            return Some("status must be within 400..=599");
        }
        if self.count == Some(0) {
            return Some("count must be at least 1 (or null for until cleared)");
        }
        if self.status.is_none() && self.latency_ms.is_none() && !self.drop_after_accept {
            return Some("a fault must set status, latency_ms or drop_after_accept");
        }
        None
    }

    /// The error code an injected `status` answers with.
    pub(crate) fn effective_code(&self, status: u16) -> String {
        if let Some(code) = &self.code {
            return code.clone();
        }
        match status {
            400 => "invalid_request",
            422 => "validation_error",
            401 => "unauthorized",
            403 => "forbidden",
            409 => "duplicate",
            413 => "payload_too_large",
            429 => "rate_limited",
            500 => "internal_error",
            503 => "backend_unavailable",
            _ => "error",
        }
        .to_string()
    }
}

/// Why a control-API transition (`start_job`, `complete_job`, `fail_job`) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobControlError {
    /// No stored job has this id (`404 not_found`).
    NotFound { job_id: String },
    /// The job is not in a state this transition starts from (`409`, binding §7.4, §16.2).
    InvalidTransition {
        job_id: String,
        current_state: String,
        expected_state: String,
    },
    /// The request itself is wrong, e.g. a failure without an `error` object (`400`).
    InvalidRequest { message: String },
}

impl std::fmt::Display for JobControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobControlError::NotFound { job_id } => write!(f, "job {job_id} not found"),
            JobControlError::InvalidTransition {
                job_id,
                current_state,
                expected_state,
            } => write!(
                f,
                "job {job_id} is {current_state}; this transition needs {expected_state}"
            ),
            JobControlError::InvalidRequest { message } => f.write_str(message),
        }
    }
}

impl std::error::Error for JobControlError {}

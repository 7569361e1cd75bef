//! What a backend answer means for the row, decided by the OJS error code first and the HTTP
//! status second (see docs/relay.md). Pure: unit-tested without a network.

use std::time::Duration;

use serde_json::Value;

/// The relay's decision for one send.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Accepted: 201, or 200 with the existing job under a unique `ignore` policy.
    Delivered { deduplicated: bool },
    /// 409 duplicate: the id (or its unique key) exists; a GET tells whether it is ours.
    /// `existing_job_id`: the job the backend holds instead (`error.details.existing_job_id`).
    Duplicate { existing_job_id: Option<String> },
    /// A failure of this job that may pass later (500, `retryable: true`): consumes an attempt.
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The queue is paused: try again later without consuming an attempt.
    Defer {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The job can never be accepted: dead at once.
    Terminal { reason: String },
    /// The backend is unreachable or overloaded (transport error, 502/503/504): pause the
    /// relay, consume no attempt.
    Unavailable {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// Backpressure (429, queue full): pause for `Retry-After` (1 s if absent), consume no attempt.
    Backpressure {
        reason: String,
        retry_after: Duration,
    },
    /// 401/403/404/405: the relay is misconfigured (credentials, URL). Pause, keep rows, report loudly.
    Misconfigured { reason: String },
}

impl Outcome {
    /// A word for the outcome (the relay's `send` span, `ojs.relay.outcome`).
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Delivered {
                deduplicated: false,
            } => "delivered",
            Outcome::Delivered { deduplicated: true } => "deduplicated",
            Outcome::Duplicate { .. } => "duplicate",
            Outcome::Retry { .. } => "retry",
            Outcome::Defer { .. } => "deferred",
            Outcome::Terminal { .. } => "terminal",
            Outcome::Unavailable { .. } => "unavailable",
            Outcome::Backpressure { .. } => "backpressure",
            Outcome::Misconfigured { .. } => "misconfigured",
        }
    }

    /// Outcomes that stop the whole relay for a while rather than settle one row.
    pub fn pauses_relay(&self) -> bool {
        matches!(
            self,
            Outcome::Unavailable { .. }
                | Outcome::Backpressure { .. }
                | Outcome::Misconfigured { .. }
        )
    }
}

/// The error object of an OJS response, in either spelling the spec documents
/// (`{"error": {...}}` or bare, upper- or lower-case codes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorBody {
    pub code: Option<String>,
    pub message: Option<String>,
    pub retryable: Option<bool>,
    pub deduplicated: bool,
}

pub fn parse_body(body: &str) -> ErrorBody {
    let Ok(reply) = serde_json::from_str::<Reply>(body) else {
        return ErrorBody::default();
    };
    let flag = |value: Option<&Value>| value.and_then(Value::as_bool).unwrap_or(false);
    let deduplicated = flag(reply.deduplicated.as_ref())
        || flag(reply.job.as_ref().and_then(|job| job.get("deduplicated")));
    let field = |name: &str| match reply.error.as_ref().filter(|e| e.is_object()) {
        Some(error) => error.get(name).cloned(),
        None => match name {
            "code" => reply.code.clone(),
            "message" => reply.message.clone(),
            _ => reply.retryable.clone(),
        },
    };
    ErrorBody {
        code: field("code")
            .as_ref()
            .and_then(Value::as_str)
            .map(|c| c.to_ascii_lowercase()),
        message: field("message")
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_owned),
        retryable: field("retryable").as_ref().and_then(Value::as_bool),
        deduplicated,
    }
}

/// The members of an answer that `parse_body` reads. Every other member (a batch answer's
/// `jobs`: hundreds of job objects) is skipped by the parser without being built.
#[derive(serde::Deserialize)]
struct Reply {
    deduplicated: Option<Value>,
    job: Option<Value>,
    error: Option<Value>,
    code: Option<Value>,
    message: Option<Value>,
    retryable: Option<Value>,
}

/// The index of the job a refused batch names as its cause (`error.details.index`).
pub fn failed_index(body: &str) -> Option<usize> {
    let value = serde_json::from_str::<Value>(body).ok()?;
    let index = value
        .pointer("/error/details/index")
        .or_else(|| value.pointer("/details/index"))?;
    index.as_u64().map(|i| i as usize)
}

/// The job a `409 duplicate` names as the one the backend holds (`error.details.existing_job_id`).
fn existing_job_id(body: &str) -> Option<String> {
    let value = serde_json::from_str::<Value>(body).ok()?;
    value
        .pointer("/error/details/existing_job_id")
        .or_else(|| value.pointer("/details/existing_job_id"))?
        .as_str()
        .filter(|id| !id.is_empty() && id.len() <= 200)
        .map(str::to_owned)
}

/// `Retry-After` as seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: time::OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(86_400.0)));
    }
    let date =
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc2822).ok()?;
    let delta = date - now;
    Some(if delta.is_negative() {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(delta.as_seconds_f64().min(86_400.0))
    })
}

/// Classifies one HTTP answer.
pub fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> Outcome {
    let parsed = parse_body(body);
    if (200..300).contains(&status) {
        // A push creates with 201; a 200 answers with an existing job (`ojs-unique-jobs.md`
        // §5.4: "200 OK (not 201 Created) to distinguish from a newly created job"). The
        // reference servers send that 200 without the spec's `deduplicated: true`.
        return Outcome::Delivered {
            deduplicated: parsed.deduplicated || status == 200,
        };
    }
    let code = parsed.code.clone().unwrap_or_default();
    let reason = match &parsed.message {
        Some(message) => format!("HTTP {status} {code}: {message}"),
        None => format!("HTTP {status} {code}").trim_end().to_owned(),
    };
    match code.as_str() {
        "duplicate" | "duplicate_job" => {
            return Outcome::Duplicate {
                existing_job_id: existing_job_id(body),
            };
        }
        "queue_paused" => {
            return Outcome::Defer {
                reason,
                retry_after,
            };
        }
        "rate_limited" | "queue_full" | "backpressure" => {
            return Outcome::Backpressure {
                reason,
                retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
            };
        }
        "payload_too_large" => return Outcome::Terminal { reason },
        _ => {}
    }
    match status {
        429 => {
            return Outcome::Backpressure {
                reason,
                retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
            };
        }
        409 if parsed.code.is_none() => {
            return Outcome::Duplicate {
                existing_job_id: existing_job_id(body),
            };
        }
        413 => return Outcome::Terminal { reason },
        401 | 403 | 404 | 405 => return Outcome::Misconfigured { reason },
        _ => {}
    }
    let transient_status = matches!(status, 502..=504);
    match parsed.retryable {
        Some(true) if transient_status => Outcome::Unavailable {
            reason,
            retry_after,
        },
        Some(true) => Outcome::Retry {
            reason,
            retry_after,
        },
        Some(false) => Outcome::Terminal { reason },
        None if transient_status => Outcome::Unavailable {
            reason,
            retry_after,
        },
        None if status >= 500 => Outcome::Retry {
            reason,
            retry_after,
        },
        None => Outcome::Terminal { reason },
    }
}

//! The job envelope the devserver returns (enqueue, batch, `GET /ojs/v1/jobs/{id}`), field by
//! field as `ojs-core.md` §5 and `enqueue-response.schema.json` define it and the reference
//! servers write it (`core.Job.MarshalJSON`): the system-managed attributes (`state`,
//! `attempt`, `created_at`, `enqueued_at`, `cancelled_at`), the attributes taken from
//! `options` (`queue`, `priority`, `max_attempts`, and `timeout_ms`, `tags`, `scheduled_at`,
//! `expires_at`, `retry`, `unique` when given), `meta` only when sent, and every other
//! top-level attribute of the request as it was sent.

use std::io::Write as _;

use serde_json::{Map, Value};

use crate::store::{JobState, Run, StoredJob, write_json_string};
use crate::timefmt::format_ms;
use crate::validate::format_job_id;

/// The spec's defaults for what `options` may leave out.
const DEFAULT_QUEUE: &str = "default";
const DEFAULT_PRIORITY: i64 = 0;
/// `ojs-retry.md` §8 and both reference servers' `DefaultRetryPolicy`.
const DEFAULT_MAX_ATTEMPTS: i64 = 3;

/// The job's queue: `options.queue`, else `default`.
pub(crate) fn queue_of(options: Option<&Map<String, Value>>) -> &str {
    options
        .and_then(|options| options.get("queue"))
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_QUEUE)
}

/// The job's priority: `options.priority`, else 0.
pub(crate) fn priority_of(options: Option<&Map<String, Value>>) -> i64 {
    options
        .and_then(|options| options.get("priority"))
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_PRIORITY)
}

/// The job's `max_attempts`: `options.retry.max_attempts`, else 3.
pub(crate) fn max_attempts_of(options: Option<&Map<String, Value>>) -> i64 {
    options
        .and_then(|options| options.get("retry"))
        .and_then(|retry| retry.get("max_attempts"))
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_MAX_ATTEMPTS)
}

/// Everything the envelope is written from.
pub(crate) struct JobView<'a> {
    pub id: u128,
    pub job_type: &'a str,
    pub state: JobState,
    pub args: &'a str,
    /// Raw JSON object, `None` when the request had no `meta`.
    pub meta: Option<&'a str>,
    /// The parsed `options` (`None` when absent or empty).
    pub options: Option<&'a Map<String, Value>>,
    /// Preserved top-level attributes as JSON members (`"k":v,...`), possibly empty.
    pub attributes: &'a str,
    pub created_at_us: u64,
    pub cancelled_at_us: Option<u64>,
    /// The control API's worker life, once the job was started.
    pub run: Option<&'a Run>,
}

/// Appends the envelope of `job` as one JSON object.
pub(crate) fn write_job(out: &mut Vec<u8>, job: &JobView<'_>) {
    let option = |key: &str| job.options.and_then(|options| options.get(key));
    let _ = write!(out, "{{\"id\":\"{}\",\"type\":", format_job_id(job.id));
    write_json_string(out, job.job_type);
    let _ = write!(out, ",\"state\":\"{}\",\"queue\":", job.state.as_str());
    write_json_string(out, queue_of(job.options));
    out.extend_from_slice(b",\"args\":");
    out.extend_from_slice(job.args.as_bytes());
    if let Some(meta) = job.meta {
        out.extend_from_slice(b",\"meta\":");
        out.extend_from_slice(meta.as_bytes());
    }
    let priority = priority_of(job.options);
    let max_attempts = max_attempts_of(job.options);
    let attempt = job.run.map_or(0, |run| run.attempt);
    let _ = write!(
        out,
        ",\"priority\":{priority},\"attempt\":{attempt},\"max_attempts\":{max_attempts}"
    );
    if let Some(timeout_ms) = option("timeout_ms") {
        let _ = write!(out, ",\"timeout_ms\":{timeout_ms}");
    }
    if let Some(tags) = option("tags").filter(|t| t.as_array().is_some_and(|t| !t.is_empty())) {
        let _ = write!(out, ",\"tags\":{tags}");
    }
    if let Some(at) = option("scheduled_at").or_else(|| option("delay_until")) {
        let _ = write!(out, ",\"scheduled_at\":{at}");
    }
    if let Some(at) = option("expires_at") {
        let _ = write!(out, ",\"expires_at\":{at}");
    }
    for key in ["retry", "unique"] {
        if let Some(policy) = option(key) {
            let _ = write!(out, ",\"{key}\":{policy}");
        }
    }
    // The job enters `available` (or `scheduled`) when it is pushed: the servers set both
    // timestamps at push time (ojs-core.md §6.3, PUSH: "Set created_at, enqueued_at").
    let created_at = format_ms(job.created_at_us);
    let _ = write!(
        out,
        ",\"created_at\":\"{created_at}\",\"enqueued_at\":\"{created_at}\""
    );
    if let Some(run) = job.run {
        write_run(out, job.state, run);
    }
    if let Some(at) = job.cancelled_at_us {
        let _ = write!(out, ",\"cancelled_at\":\"{}\"", format_ms(at));
    }
    if !job.attributes.is_empty() {
        out.push(b',');
        out.extend_from_slice(job.attributes.as_bytes());
    }
    out.push(b'}');
}

/// What a worker's life added to the job: `worker_id` (while active), `started_at`,
/// `completed_at` (completed or discarded, as both servers set it), `retry_delay_ms`,
/// `result`, `error` and `errors`.
fn write_run(out: &mut Vec<u8>, state: JobState, run: &Run) {
    if let (JobState::Active, Some(worker_id)) = (state, &run.worker_id) {
        out.extend_from_slice(b",\"worker_id\":");
        write_json_string(out, worker_id);
    }
    if let Some(at) = run.started_at_us {
        let _ = write!(out, ",\"started_at\":\"{}\"", format_ms(at));
    }
    if let (JobState::Completed | JobState::Discarded, Some(at)) = (run.state, run.ended_at_us) {
        let _ = write!(out, ",\"completed_at\":\"{}\"", format_ms(at));
    }
    if let Some(ms) = run.retry_delay_ms {
        let _ = write!(out, ",\"retry_delay_ms\":{ms}");
    }
    if let Some(result) = &run.result {
        let _ = write!(out, ",\"result\":{result}");
    }
    if let Some(error) = &run.error {
        let _ = write!(out, ",\"error\":{error}");
    }
    if !run.errors.is_empty() {
        out.extend_from_slice(b",\"errors\":[");
        for (i, error) in run.errors.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(error.as_bytes());
        }
        out.push(b']');
    }
}

/// Parses stored options text back into the map the envelope reads (`None` for `{}`).
pub(crate) fn options_map(options: Option<&str>) -> Option<Map<String, Value>> {
    options
        .filter(|text| *text != "{}")
        .and_then(|text| serde_json::from_str(text).ok())
}

/// The envelope of a stored job, as it is now.
pub(crate) fn write_stored_job(out: &mut Vec<u8>, job: &StoredJob, now_us: u64) {
    let options = options_map(job.options());
    write_job(
        out,
        &JobView {
            id: job.id,
            job_type: &job.job_type,
            state: job.state(now_us),
            args: job.args(),
            meta: job.meta(),
            options: options.as_ref(),
            attributes: job.attributes(),
            created_at_us: job.received_at_us,
            cancelled_at_us: job.cancellation().map(|c| c.at_us),
            run: job.run(),
        },
    );
}

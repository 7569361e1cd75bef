//! Request handling: routing, the OJS endpoints, the `/_dev` control API, fault injection.
//!
//! An enqueue goes through four steps: read the body (bounded), parse and validate it without
//! the lock, count the request and pick a fault under the lock, then (unless a fault answers
//! instead) count deliveries and store atomically under the lock. Responses are built after
//! the lock is released.

use std::borrow::Cow;
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::model::Fault;
use crate::store::{Duplicate, RequestKind, State, write_json_string};
use crate::validate::{
    CarriedId, FieldError, JobIn, MAX_BODY_BYTES, ValidJob, carried_id, carried_type,
    format_job_id, is_json_content_type, queue_of, validate_job,
};

pub(crate) type Resp = Response<Full<Bytes>>;

const OJS_CONTENT_TYPE: &str = "application/openjobspec+json";
/// How much of an oversized body is read and discarded so the client can see the 413
/// (closing a socket with unread data makes the kernel reset it under the client's feet).
const DRAIN_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

/// Shared server state.
pub(crate) struct App {
    state: Mutex<State>,
}

impl App {
    pub fn new(batch_enqueue: bool) -> App {
        App {
            state: Mutex::new(State::new(batch_enqueue)),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Back to the start configuration; the old jobs are freed outside the lock.
    pub fn reset(&self) {
        let old = {
            let mut state = self.state();
            let fresh = state.fresh();
            std::mem::replace(&mut *state, fresh)
        };
        drop(old);
    }

    pub fn received_json(&self) -> Vec<u8> {
        let state = self.state();
        let mut out = Vec::with_capacity(256 + state.stats().jobs as usize * 200);
        state.write_received(&mut out);
        out
    }
}

/// Entry point of every request. `kill` closes this request's connection without a response.
pub(crate) async fn handle(
    app: Arc<App>,
    kill: Arc<Notify>,
    request: Request<Incoming>,
) -> Result<Resp, Infallible> {
    let path = request.uri().path().to_owned();
    let response = match path.strip_prefix("/_dev/") {
        Some(control_path) => control(&app, control_path, request).await,
        None => ojs(&app, &kill, &path, request).await,
    };
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// OJS endpoints

enum Route<'p> {
    Enqueue(RequestKind),
    GetJob(&'p str),
    Health,
    Manifest,
    MethodNotAllowed(&'static str),
    NotFound,
}

fn route<'p>(method: &Method, path: &'p str) -> Route<'p> {
    match path {
        "/ojs/v1/jobs" if method == Method::POST => Route::Enqueue(RequestKind::EnqueueSingle),
        "/ojs/v1/jobs" => Route::MethodNotAllowed("POST"),
        "/ojs/v1/jobs/batch" if method == Method::POST => Route::Enqueue(RequestKind::EnqueueBatch),
        "/ojs/v1/health" if method == Method::GET => Route::Health,
        "/ojs/v1/health" => Route::MethodNotAllowed("GET"),
        "/ojs/manifest" if method == Method::GET => Route::Manifest,
        "/ojs/manifest" => Route::MethodNotAllowed("GET"),
        _ => match path.strip_prefix("/ojs/v1/jobs/") {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                if method == Method::GET {
                    Route::GetJob(id)
                } else if id == "batch" {
                    Route::MethodNotAllowed("POST")
                } else {
                    Route::MethodNotAllowed("GET")
                }
            }
            _ => Route::NotFound,
        },
    }
}

async fn ojs(app: &App, kill: &Notify, path: &str, request: Request<Incoming>) -> Resp {
    let route = route(request.method(), path);
    if let Route::Enqueue(kind) = route {
        return enqueue(app, kill, kind, request).await;
    }
    let kind = match route {
        Route::GetJob(_) => RequestKind::GetJob,
        _ => RequestKind::Other,
    };
    let (_, fault) = app.state().arrive(kind, &[]);
    if let Some(response) = fault_before_handling(fault.as_ref(), None, kill).await {
        return response;
    }
    let response = match route {
        Route::GetJob(id) => get_job(app, id),
        Route::Health => ojs_json(StatusCode::OK, br#"{"status":"ok"}"#.to_vec()),
        Route::Manifest => {
            let batch_enqueue = app.state().batch_enqueue();
            ojs_json(
                StatusCode::OK,
                manifest(batch_enqueue).to_string().into_bytes(),
            )
        }
        Route::MethodNotAllowed(allow) => {
            let mut response = error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                &format!("method not allowed; use {allow}"),
                false,
                None,
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            response
        }
        Route::NotFound | Route::Enqueue(_) => not_found(&format!("no endpoint at {path}")),
    };
    fault_after_handling(response, fault.as_ref(), kill).await
}

pub(crate) fn manifest(batch_enqueue: bool) -> Value {
    json!({
        "specversion": "1.0",
        "implementation": {
            "name": "ojs-devserver",
            "version": env!("CARGO_PKG_VERSION"),
            "language": "rust",
        },
        "protocols": ["http"],
        "backend": "memory",
        "conformance_level": 4,
        "capabilities": {
            "batch_enqueue": batch_enqueue,
            "schema_validation": true,
            "unique_jobs": false,
            "cron_jobs": false,
            "workflows": false,
            "dead_letter": false,
            "priority_queues": false,
        },
    })
}

fn get_job(app: &App, id_text: &str) -> Resp {
    let body = crate::validate::parse_job_id(id_text).and_then(|id| {
        let state = app.state();
        let job = state.job(id)?;
        let queue = job.options().and_then(queue_of);
        let mut out = Vec::with_capacity(128 + job.args().len());
        out.extend_from_slice(b"{\"job\":");
        write_job(
            &mut out,
            &JobView {
                id: job.id,
                job_type: &job.job_type,
                args: job.args(),
                meta: job.meta(),
                options: job.options(),
                queue: queue.as_deref(),
                created_at_us: job.received_at_us,
            },
        );
        out.push(b'}');
        Some(out)
    });
    match body {
        Some(body) => ojs_json(StatusCode::OK, body),
        None => not_found(&format!("job {id_text} not found")),
    }
}

/// What a job looks like on the wire, wherever it comes from.
struct JobView<'a> {
    id: u128,
    job_type: &'a str,
    args: &'a str,
    meta: Option<&'a str>,
    options: Option<&'a str>,
    queue: Option<&'a str>,
    created_at_us: u64,
}

fn write_job(out: &mut Vec<u8>, job: &JobView<'_>) {
    let _ = write!(out, "{{\"id\":\"{}\",\"type\":", format_job_id(job.id));
    write_json_string(out, job.job_type);
    out.extend_from_slice(b",\"args\":");
    out.extend_from_slice(job.args.as_bytes());
    out.extend_from_slice(b",\"meta\":");
    out.extend_from_slice(job.meta.unwrap_or("null").as_bytes());
    out.extend_from_slice(b",\"options\":");
    out.extend_from_slice(job.options.unwrap_or("null").as_bytes());
    out.extend_from_slice(b",\"state\":\"available\",\"queue\":");
    write_json_string(out, job.queue.unwrap_or("default"));
    let _ = write!(
        out,
        ",\"created_at\":\"{}\"}}",
        rfc3339_utc(job.created_at_us)
    );
}

/// RFC 3339 in UTC with microseconds, e.g. `2026-03-01T09:00:00.123456Z`.
pub(crate) fn rfc3339_utc(unix_us: u64) -> String {
    let seconds = unix_us / 1_000_000;
    let micros = unix_us % 1_000_000;
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

// ---------------------------------------------------------------------------------------------
// Enqueue

/// The request body, read with a bound.
enum BodyRead {
    Complete(Vec<u8>),
    TooLarge,
    Broken,
}

async fn read_body_limited(request: Request<Incoming>) -> BodyRead {
    let declared_len = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut too_large = declared_len.is_some_and(|n| n > MAX_BODY_BYTES as u64);
    let capacity = match declared_len {
        Some(n) if !too_large => n as usize,
        _ => 0,
    };
    let mut buffer: Vec<u8> = Vec::with_capacity(capacity);
    let mut total: u64 = 0;
    let mut body = request.into_body();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return BodyRead::Broken;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > MAX_BODY_BYTES as u64 && !too_large {
            too_large = true;
            buffer = Vec::new();
        }
        if too_large {
            if total > DRAIN_LIMIT_BYTES {
                break;
            }
            continue;
        }
        buffer.extend_from_slice(&data);
    }
    if too_large {
        BodyRead::TooLarge
    } else {
        BodyRead::Complete(buffer)
    }
}

/// One job of an enqueue request, parsed and checked, still borrowing the body.
struct Element<'a> {
    carried: CarriedId<'a>,
    job_type: Option<Cow<'a, str>>,
    checked: Result<ValidJob<'a>, FieldError>,
}

/// An enqueue request after the lock-free part of the work.
enum Prepared<'a> {
    /// Refused before any job could be read: no deliveries are counted.
    Refused(Resp),
    Jobs(Vec<Element<'a>>),
}

#[derive(Deserialize)]
struct BatchIn<'a> {
    #[serde(borrow, default)]
    jobs: Option<&'a RawValue>,
}

fn element<'a>(job: &JobIn<'a>) -> Element<'a> {
    Element {
        carried: carried_id(job),
        job_type: carried_type(job),
        checked: validate_job(job),
    }
}

fn prepare(kind: RequestKind, content_type_ok: bool, body: &BodyRead) -> Prepared<'_> {
    if !content_type_ok {
        return Prepared::Refused(error_response(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Content-Type must be application/openjobspec+json or application/json",
            false,
            None,
        ));
    }
    let bytes = match body {
        BodyRead::Complete(bytes) => bytes,
        BodyRead::TooLarge => {
            return Prepared::Refused(error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                &format!("request body exceeds {MAX_BODY_BYTES} bytes"),
                false,
                Some(json!({ "max_bytes": MAX_BODY_BYTES })),
            ));
        }
        BodyRead::Broken => {
            return Prepared::Refused(invalid_request("could not read the request body"));
        }
    };
    // serde would also read a struct from a JSON array; the binding wants an object.
    if !starts_with_object(bytes) {
        return Prepared::Refused(invalid_request("the body must be a JSON object"));
    }
    if kind == RequestKind::EnqueueSingle {
        return match serde_json::from_slice::<JobIn<'_>>(bytes) {
            Ok(job) => Prepared::Jobs(vec![element(&job)]),
            Err(e) => Prepared::Refused(invalid_request(&format!(
                "body is not a JSON job object: {e}"
            ))),
        };
    }
    let batch = match serde_json::from_slice::<BatchIn<'_>>(bytes) {
        Ok(batch) => batch,
        Err(e) => {
            return Prepared::Refused(invalid_request(&format!(
                "body is not a JSON object {{\"jobs\": [...]}}: {e}"
            )));
        }
    };
    let Some(jobs) = batch.jobs else {
        return Prepared::Refused(batch_shape_error("is required"));
    };
    let Ok(raw_jobs) = serde_json::from_str::<Vec<&RawValue>>(jobs.get()) else {
        return Prepared::Refused(batch_shape_error("must be an array of job objects"));
    };
    if raw_jobs.is_empty() {
        return Prepared::Refused(batch_shape_error("must not be empty"));
    }
    let elements = raw_jobs
        .iter()
        .map(|raw| {
            let parsed = if raw.get().starts_with('{') {
                serde_json::from_str::<JobIn<'_>>(raw.get()).map_err(|e| e.to_string())
            } else {
                Err("must be a JSON object".to_string())
            };
            match parsed {
                Ok(job) => element(&job),
                Err(reason) => Element {
                    carried: CarriedId::None,
                    job_type: None,
                    checked: Err(FieldError {
                        field: "job",
                        reason,
                    }),
                },
            }
        })
        .collect();
    Prepared::Jobs(elements)
}

fn starts_with_object(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

fn batch_shape_error(reason: &str) -> Resp {
    error_response(
        StatusCode::BAD_REQUEST,
        "validation_error",
        &format!("jobs {reason}"),
        false,
        Some(json!({ "field": "jobs", "reason": reason })),
    )
}

async fn enqueue(app: &App, kill: &Notify, kind: RequestKind, request: Request<Incoming>) -> Resp {
    let content_type_ok = is_json_content_type(
        request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let body = read_body_limited(request).await;
    let prepared = prepare(kind, content_type_ok, &body);
    let (batch_request, fault) = {
        let types: Vec<&str> = match &prepared {
            Prepared::Jobs(elements) => elements
                .iter()
                .filter_map(|e| e.job_type.as_deref())
                .collect(),
            Prepared::Refused(_) => Vec::new(),
        };
        app.state().arrive(kind, &types)
    };
    // A batch refused for one job names it, as a real server's validation error does.
    let named = match (
        &prepared,
        fault.as_ref().and_then(|f| f.match_type.as_deref()),
    ) {
        (Prepared::Jobs(elements), Some(wanted)) if kind == RequestKind::EnqueueBatch => elements
            .iter()
            .position(|e| e.job_type.as_deref() == Some(wanted))
            .map(|index| json!({ "index": index })),
        _ => None,
    };
    if let Some(response) = fault_before_handling(fault.as_ref(), named, kill).await {
        return response;
    }
    let response = accept(app, kind, prepared, batch_request);
    fault_after_handling(response, fault.as_ref(), kill).await
}

/// The stateful part of an enqueue: deliveries, duplicates, storage.
fn accept(app: &App, kind: RequestKind, prepared: Prepared<'_>, batch_request: u64) -> Resp {
    let elements = match prepared {
        Prepared::Refused(response) => return response,
        Prepared::Jobs(elements) => elements,
    };
    let is_batch = kind == RequestKind::EnqueueBatch;
    let mut state = app.state();
    if is_batch && !state.batch_enqueue() {
        drop(state);
        return not_found("batch enqueue is disabled on this server");
    }
    for element in &elements {
        state.count_delivery(&element.carried);
    }
    if let Some((index, error)) = elements
        .iter()
        .enumerate()
        .find_map(|(i, e)| e.checked.as_ref().err().map(|error| (i, error)))
    {
        drop(state);
        let (message, details) = if is_batch {
            (
                format!("jobs[{index}].{} {}", error.field, error.reason),
                json!({ "index": index, "field": error.field, "reason": error.reason }),
            )
        } else {
            (
                format!("{} {}", error.field, error.reason),
                json!({ "field": error.field, "reason": error.reason }),
            )
        };
        return error_response(
            StatusCode::BAD_REQUEST,
            "validation_error",
            &message,
            false,
            Some(details),
        );
    }
    let jobs: Vec<ValidJob<'_>> = elements
        .into_iter()
        .filter_map(|e| e.checked.ok())
        .collect();
    let stored = state.store(&jobs, batch_request);
    drop(state);
    let (ids, received_at_us) = match stored {
        Ok(stored) => stored,
        Err(Duplicate { index, id }) => {
            let id = format_job_id(id);
            let details = if is_batch {
                json!({ "index": index, "existing_job_id": id })
            } else {
                json!({ "existing_job_id": id })
            };
            return error_response(
                StatusCode::CONFLICT,
                "duplicate",
                &format!("a job with id {id} already exists"),
                false,
                Some(details),
            );
        }
    };

    let body_hint: usize = jobs.iter().map(|j| 200 + j.args.len()).sum();
    let mut out = Vec::with_capacity(body_hint);
    out.extend_from_slice(if is_batch {
        b"{\"jobs\":["
    } else {
        b"{\"job\":"
    });
    for (i, (job, id)) in jobs.iter().zip(&ids).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_job(
            &mut out,
            &JobView {
                id: *id,
                job_type: &job.job_type,
                args: job.args,
                meta: job.meta,
                options: job.options,
                queue: job.queue.as_deref(),
                created_at_us: received_at_us,
            },
        );
    }
    if is_batch {
        let _ = write!(out, "],\"count\":{}}}", jobs.len());
    } else {
        out.push(b'}');
    }
    let mut response = ojs_json(StatusCode::CREATED, out);
    if !is_batch {
        let location = format!("/ojs/v1/jobs/{}", format_job_id(ids[0]));
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Faults

/// Applies the part of a fault that acts before handling: latency, then an injected status.
/// Returns the response that replaces handling, if any.
async fn fault_before_handling(
    fault: Option<&Fault>,
    details: Option<Value>,
    kill: &Notify,
) -> Option<Resp> {
    let fault = fault?;
    if let Some(latency_ms) = fault.latency_ms {
        tokio::time::sleep(Duration::from_millis(latency_ms)).await;
    }
    let status = fault.status?;
    if fault.drop_after_accept {
        return Some(close_without_response(kill).await);
    }
    let status_code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retryable = status == 429 || status >= 500;
    let mut response = error_response(
        status_code,
        &fault.effective_code(status),
        "injected fault",
        retryable,
        details,
    );
    if let Some(retry_after) = &fault.retry_after
        && let Ok(value) = HeaderValue::from_str(retry_after)
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    Some(response)
}

/// Applies `drop_after_accept` once the request was handled normally.
async fn fault_after_handling(response: Resp, fault: Option<&Fault>, kill: &Notify) -> Resp {
    if fault.is_some_and(|f| f.drop_after_accept) {
        return close_without_response(kill).await;
    }
    response
}

/// Asks the connection task to drop the connection, and never produces a response: the
/// connection task drops this future together with the connection, so no byte is written.
async fn close_without_response(kill: &Notify) -> Resp {
    kill.notify_one();
    std::future::pending::<Resp>().await
}

// ---------------------------------------------------------------------------------------------
// Control API

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestToggle {
    batch_enqueue: bool,
}

async fn control(app: &App, control_path: &str, request: Request<Incoming>) -> Resp {
    let method = request.method().clone();
    match (method, control_path) {
        (Method::POST, "reset") => {
            app.reset();
            dev_json(StatusCode::OK, json!({ "ok": true }))
        }
        (Method::GET, "received") => {
            let body = app.received_json();
            json_response(StatusCode::OK, "application/json", body)
        }
        (Method::GET, "stats") => {
            let stats = app.state().stats();
            dev_json(StatusCode::OK, json!(stats))
        }
        (Method::GET, "faults") => faults_response(app),
        (Method::DELETE, "faults") => {
            app.state().clear_faults();
            faults_response(app)
        }
        (Method::POST, "faults") => {
            let BodyRead::Complete(body) = read_body_limited(request).await else {
                return invalid_request("could not read a fault body under 1 MiB");
            };
            let fault: Fault = match serde_json::from_slice(&body) {
                Ok(fault) => fault,
                Err(e) => return invalid_request(&format!("not a fault object: {e}")),
            };
            if let Some(problem) = fault.problem() {
                return invalid_request(problem);
            }
            app.state().push_fault(fault);
            faults_response(app)
        }
        (Method::POST, "manifest") => {
            let BodyRead::Complete(body) = read_body_limited(request).await else {
                return invalid_request("could not read the body");
            };
            let toggle: ManifestToggle = match serde_json::from_slice(&body) {
                Ok(toggle) => toggle,
                Err(e) => {
                    return invalid_request(&format!("expected {{\"batch_enqueue\": bool}}: {e}"));
                }
            };
            app.state().set_batch_enqueue(toggle.batch_enqueue);
            dev_json(StatusCode::OK, manifest(toggle.batch_enqueue))
        }
        _ => not_found(&format!("no control endpoint at /_dev/{control_path}")),
    }
}

fn faults_response(app: &App) -> Resp {
    let faults = app.state().faults();
    dev_json(StatusCode::OK, json!({ "faults": faults }))
}

// ---------------------------------------------------------------------------------------------
// Responses

fn json_response(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Resp {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn ojs_json(status: StatusCode, body: Vec<u8>) -> Resp {
    let mut response = json_response(status, OJS_CONTENT_TYPE, body);
    response
        .headers_mut()
        .insert("ojs-version", HeaderValue::from_static("1.0"));
    response
}

fn dev_json(status: StatusCode, body: Value) -> Resp {
    json_response(status, "application/json", body.to_string().into_bytes())
}

fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    retryable: bool,
    details: Option<Value>,
) -> Resp {
    let mut error = json!({ "code": code, "message": message, "retryable": retryable });
    if let Some(details) = details {
        error["details"] = details;
    }
    ojs_json(status, json!({ "error": error }).to_string().into_bytes())
}

fn invalid_request(message: &str) -> Resp {
    error_response(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        message,
        false,
        None,
    )
}

fn not_found(message: &str) -> Resp {
    error_response(StatusCode::NOT_FOUND, "not_found", message, false, None)
}

#[cfg(test)]
mod tests {
    use super::rfc3339_utc;

    #[test]
    fn formats_rfc3339_in_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29T12:34:56.789012Z (a leap day)
        assert_eq!(
            rfc3339_utc(1_709_210_096_789_012),
            "2024-02-29T12:34:56.789012Z"
        );
        assert_eq!(
            rfc3339_utc(1_767_225_599_000_001),
            "2025-12-31T23:59:59.000001Z"
        );
    }
}

//! Request handling: routing, the OJS endpoints, the event stream (`GET /v1/events/stream`),
//! the `/_dev` control API, fault injection.
//!
//! An enqueue goes through four steps: read the body (bounded), parse and validate it without
//! the lock, count the request and pick a fault under the lock, then (unless a fault answers
//! instead) count deliveries, decide unique conflicts and store atomically under the lock.
//! Responses are built after the lock is released (except the envelope of an existing job a
//! unique `ignore` answers with).
//!
//! Every response carries `X-Request-Id` (HTTP binding §6.5, §19: the client's value when it
//! sent one, else `req_<UUIDv7>`), and every error body carries it as `error.request_id`
//! (§16.1). Errors are built as an [`ErrorBody`] response extension and rendered in [`handle`],
//! once the request id is known.

use std::borrow::Cow;
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::app::App;
use crate::envelope::write_stored_job;
use crate::envelope::{JobView, options_map, queue_of, write_job};
use crate::events::{EventStream, JobEvent, ReplayFrom, parse_query};
use crate::model::Fault;
use crate::respond::{
    BodyRead, ErrorBody, OJS_VERSION, Resp, control_error_response, dev_json, error_response,
    fault_response, invalid_request, json_response, not_found, ojs_json, read_body_limited,
};
use crate::store::{JobState, Placed, Refused, RequestKind, State, Stored};
use crate::timefmt::{now_us, parse_rfc3339_us};
use crate::unique;
use crate::validate::{
    CarriedId, FieldError, JobIn, MAX_BODY_BYTES, Refusal, ValidJob, carried_id, carried_type,
    field_error, format_job_id, is_json_content_type, validate_job,
};
use crate::worker::{DEFAULT_WORKER_ID, Transition};
use crate::worker_api::{self, WorkerOp};

/// What goes on the wire: a whole body, or an event stream.
pub(crate) type WireBody = Either<Full<Bytes>, EventStream>;

const X_REQUEST_ID: &str = "x-request-id";

/// Entry point of every request. `kill` closes this request's connection without a response.
pub(crate) async fn handle(
    app: Arc<App>,
    kill: Arc<Notify>,
    request: Request<Incoming>,
) -> Result<Response<WireBody>, Infallible> {
    let request_id = request
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map_or_else(|| format!("req_{}", uuid::Uuid::now_v7()), str::to_owned);
    let path = request.uri().path().to_owned();
    if path == EVENTS_PATH
        && request.method() == Method::GET
        && let Ok(mut response) = event_stream(&app, &request)
    {
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            response.headers_mut().insert(X_REQUEST_ID, value);
        }
        return Ok(response);
    }
    let mut response = match path.strip_prefix("/_dev/") {
        Some(control_path) => control(&app, control_path, request).await,
        // Not a GET, or a `since` that is not a time.
        None if path == EVENTS_PATH => events_refusal(request),
        None => ojs(&app, &kill, &path, request).await,
    };
    if let Some(ErrorBody(mut error)) = response.extensions_mut().remove::<ErrorBody>() {
        error.insert("request_id".into(), Value::String(request_id.clone()));
        let body = json!({ "error": error }).to_string();
        *response.body_mut() = Full::new(Bytes::from(body));
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    Ok(response.map(Either::Left))
}

// ---------------------------------------------------------------------------------------------
// The event stream (RFC-0005 §1)

const EVENTS_PATH: &str = "/v1/events/stream";

/// `GET /v1/events/stream`: a stream, or (`Err`) a request to refuse with [`events_refusal`].
fn event_stream(app: &App, request: &Request<Incoming>) -> Result<Response<WireBody>, ()> {
    let query = parse_query(request.uri().query());
    let last_event_id = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let from = match (last_event_id, query.since.as_deref()) {
        (Some(id), _) => Some(ReplayFrom::AfterId(id.to_owned())),
        (None, Some(since)) => Some(ReplayFrom::Since(parse_rfc3339_us(since).ok_or(())?)),
        (None, None) => None,
    };
    let stream = app.events.subscribe(query.filter, from.as_ref());
    let mut response = Response::new(Either::Right(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("ojs-version", HeaderValue::from_static(OJS_VERSION));
    Ok(response)
}

/// The answer to a request for the event stream that gets no stream.
fn events_refusal(request: Request<Incoming>) -> Resp {
    if request.method() != Method::GET {
        let mut response = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "method not allowed; use GET",
            None,
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let since = parse_query(request.uri().query()).since.unwrap_or_default();
    invalid_request(
        &format!("since: {since:?} is not an RFC 3339 time"),
        Some(json!({ "field": "since", "reason": "must be an RFC 3339 date-time" })),
    )
}

// ---------------------------------------------------------------------------------------------
// OJS endpoints

enum Route<'p> {
    Enqueue(RequestKind),
    GetJob(&'p str),
    CancelJob(&'p str),
    Health,
    Manifest,
    Worker(WorkerOp),
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
        _ if path.starts_with("/ojs/v1/workers/") => match WorkerOp::of(path) {
            Some(op) if method == Method::POST => Route::Worker(op),
            Some(_) => Route::MethodNotAllowed("POST"),
            None => Route::NotFound,
        },
        _ => match path.strip_prefix("/ojs/v1/jobs/") {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                if method == Method::GET {
                    Route::GetJob(id)
                } else if id == "batch" {
                    Route::MethodNotAllowed("POST")
                } else if method == Method::DELETE {
                    Route::CancelJob(id)
                } else {
                    Route::MethodNotAllowed("GET, DELETE")
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
        Route::CancelJob(id) => match app.cancel(id) {
            Ok(envelope) => {
                let mut body = Vec::with_capacity(envelope.len() + 8);
                body.extend_from_slice(b"{\"job\":");
                body.extend_from_slice(&envelope);
                body.push(b'}');
                ojs_json(StatusCode::OK, body)
            }
            Err(error) => control_error_response(&error),
        },
        Route::Worker(op) => worker_api::answer(app, op, request).await,
        Route::Health => ojs_json(
            StatusCode::OK,
            json!({
                "status": "ok",
                "version": OJS_VERSION,
                "uptime_seconds": app.started.elapsed().as_secs(),
                "backend": {"type": "memory", "status": "connected"},
            })
            .to_string()
            .into_bytes(),
        ),
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
                "invalid_request",
                &format!("method not allowed; use {allow}"),
                None,
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            response
        }
        Route::NotFound | Route::Enqueue(_) => not_found(&format!("no endpoint at {path}"), None),
    };
    fault_after_handling(response, fault.as_ref(), kill).await
}

/// The conformance manifest: what the devserver implements, and nothing more. It serves the
/// level 0 operations of the binding (push, fetch, ack, nack, health, manifest) plus batch
/// push, info, heartbeat and cancel, and no other level 1 operation (activate, dead letter),
/// so `conformance_level` is 0; `conformance_tier: "runtime"` because workers run jobs
/// through it (fetch, ack, nack, retries, reservations). The capabilities name what a client
/// can observe: batch enqueue (switchable), unique jobs (strong: check and insert under one
/// lock), delayed jobs (the `scheduled` state) and priority queues (fetch takes the highest
/// priority first). `extensions` names `ext_events`, the extension registry's key for the
/// event system (`spec/registry/extensions.json`): the manifest has no other field for the
/// event stream (no capability flag, no endpoint key), so nothing else claims it.
pub(crate) fn manifest(batch_enqueue: bool) -> Value {
    json!({
        "ojs_version": OJS_VERSION,
        "specversion": OJS_VERSION,
        "implementation": {
            "name": "ojs-devserver",
            "version": env!("CARGO_PKG_VERSION"),
            "language": "rust",
        },
        "conformance_level": 0,
        "conformance_tier": "runtime",
        "protocols": ["http"],
        "backend": "memory",
        "capabilities": {
            "batch_enqueue": batch_enqueue,
            "unique_jobs": true,
            "unique_jobs_strength": "strong",
            "delayed_jobs": true,
            "schema_validation": false,
            "priority_queues": true,
            "job_ttl": false,
            "cron_jobs": false,
            "dead_letter": false,
            "workflows": false,
            "rate_limiting": false,
            "pause_resume": false,
        },
        "extensions": ["ext_events"],
        "endpoints": {"manifest": "/ojs/manifest", "health": "/ojs/v1/health"},
    })
}

fn get_job(app: &App, id_text: &str) -> Resp {
    let body = crate::validate::parse_job_id(id_text).and_then(|id| {
        let state = app.state();
        let job = state.job(id)?;
        let mut out = Vec::with_capacity(256 + job.args().len());
        out.extend_from_slice(b"{\"job\":");
        write_stored_job(&mut out, job, now_us());
        out.push(b'}');
        Some(out)
    });
    match body {
        Some(body) => ojs_json(StatusCode::OK, body),
        None => not_found(
            &format!("Job '{id_text}' not found."),
            Some(json!({ "resource_type": "job", "resource_id": id_text })),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Enqueue

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
        return Prepared::Refused(invalid_request(
            "Content-Type must be application/openjobspec+json or application/json",
            None,
        ));
    }
    let bytes = match body {
        BodyRead::Complete(bytes) => bytes,
        // The reference servers cut the body at 1 MiB and answer the failed read with
        // 400 invalid_request.
        BodyRead::TooLarge => {
            return Prepared::Refused(error_response(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("request body exceeds {MAX_BODY_BYTES} bytes"),
                Some(json!({ "field": "body", "max_bytes": MAX_BODY_BYTES })),
            ));
        }
        BodyRead::Broken => {
            return Prepared::Refused(invalid_request("could not read the request body", None));
        }
    };
    // serde would also read a struct from a JSON array; the binding wants an object.
    if !starts_with_object(bytes) {
        return Prepared::Refused(invalid_request("the body must be a JSON object", None));
    }
    if kind == RequestKind::EnqueueSingle {
        return match serde_json::from_slice::<JobIn<'_>>(bytes) {
            Ok(job) => Prepared::Jobs(vec![element(&job)]),
            Err(e) => Prepared::Refused(invalid_request(
                &format!("body is not a JSON job object: {e}"),
                None,
            )),
        };
    }
    let batch = match serde_json::from_slice::<BatchIn<'_>>(bytes) {
        Ok(batch) => batch,
        Err(e) => {
            return Prepared::Refused(invalid_request(
                &format!("body is not a JSON object {{\"jobs\": [...]}}: {e}"),
                None,
            ));
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
                    checked: Err(field_error("job", reason)),
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
    invalid_request(
        &format!("jobs {reason}"),
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

/// The answer to a refused job: `400 invalid_request`, or `422 validation_error` for a retry
/// policy rule; in a batch always 400 with the job's `index`, as the reference servers' batch
/// handler answers every validation error.
fn refused_job_response(error: &FieldError, index: Option<usize>) -> Resp {
    let (status, code) = match (error.refusal, index) {
        (Refusal::Validation, None) => (StatusCode::UNPROCESSABLE_ENTITY, "validation_error"),
        (Refusal::Validation, Some(_)) => (StatusCode::BAD_REQUEST, "validation_error"),
        (Refusal::InvalidRequest, _) => (StatusCode::BAD_REQUEST, "invalid_request"),
    };
    let mut details = Map::new();
    if let Some(index) = index {
        details.insert("index".into(), json!(index));
    }
    details.insert("field".into(), json!(error.field));
    details.insert("reason".into(), json!(error.reason));
    if let Some(expected) = error.expected {
        details.insert("expected".into(), json!(expected));
    }
    if let Some(received) = &error.received {
        details.insert("received".into(), received.clone());
    }
    let message = match index {
        Some(index) => format!(
            "Batch validation failed: job at index {index}: {} {}",
            error.field, error.reason
        ),
        None => format!("{} {}", error.field, error.reason),
    };
    error_response(status, code, &message, Some(Value::Object(details)))
}

/// The answer to an enqueue that stored nothing because of an id or a unique key.
fn conflict_response(refused: Refused, is_batch: bool) -> Resp {
    let (index, message, mut details) = match refused {
        Refused::DuplicateId { index, id } => {
            let id = format_job_id(id);
            (
                index,
                format!("a job with id {id} already exists"),
                json!({ "existing_job_id": id }),
            )
        }
        Refused::UniqueConflict {
            index,
            existing_id,
            existing_state,
            fingerprint,
        } => (
            index,
            "A job with the same unique key already exists.".to_owned(),
            json!({
                "existing_job_id": format_job_id(existing_id),
                "existing_job_state": existing_state.as_str(),
                "unique_key": unique::hex(&fingerprint),
            }),
        ),
    };
    if is_batch {
        details["index"] = json!(index);
    }
    error_response(StatusCode::CONFLICT, "duplicate", &message, Some(details))
}

/// `job.enqueued` for each job stored, each followed by `job.cancelled` for the job its unique
/// `replace` cancelled; published while the state lock is held, so in the order of the changes.
fn publish_stored(
    app: &App,
    state: &State,
    jobs: &[ValidJob<'_>],
    placed: &[Placed],
    cancelled: &[(usize, u32)],
) {
    let mut cancelled = cancelled.iter().peekable();
    for (index, (job, placed)) in jobs.iter().zip(placed).enumerate() {
        let Placed::Created {
            id,
            state: job_state,
        } = placed
        else {
            continue;
        };
        let stored = state.job(*id).expect("a created job is stored");
        app.events.publish(JobEvent {
            kind: "job.enqueued",
            job_id: *id,
            job_type: &stored.job_type,
            queue: queue_of(job.options_map.as_ref()),
            state: job_state.as_str(),
            extra: Map::new(),
        });
        while let Some(&(_, slot)) = cancelled.next_if(|(by, _)| *by == index) {
            let old = state.job_at(slot);
            let options = options_map(old.options());
            let mut extra = Map::new();
            extra.insert("cancelled_by".into(), json!("unique_replace"));
            extra.insert("replaced_by".into(), json!(format_job_id(*id)));
            app.events.publish(JobEvent {
                kind: "job.cancelled",
                job_id: old.id,
                job_type: &old.job_type,
                queue: queue_of(options.as_ref()),
                state: JobState::Cancelled.as_str(),
                extra,
            });
        }
    }
}

/// The stateful part of an enqueue: deliveries, duplicates, unique policies, storage.
fn accept(app: &App, kind: RequestKind, prepared: Prepared<'_>, batch_request: u64) -> Resp {
    let elements = match prepared {
        Prepared::Refused(response) => return response,
        Prepared::Jobs(elements) => elements,
    };
    let is_batch = kind == RequestKind::EnqueueBatch;
    let mut state = app.state();
    if is_batch && !state.batch_enqueue() {
        drop(state);
        return not_found("batch enqueue is disabled on this server", None);
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
        return refused_job_response(error, is_batch.then_some(index));
    }
    let jobs: Vec<ValidJob<'_>> = elements
        .into_iter()
        .filter_map(|e| e.checked.ok())
        .collect();
    let Stored {
        placed,
        received_at_us,
        cancelled,
    } = match state.store(&jobs, batch_request) {
        Ok(stored) => stored,
        Err(refused) => {
            drop(state);
            return conflict_response(refused, is_batch);
        }
    };
    publish_stored(app, &state, &jobs, &placed, &cancelled);
    // The existing jobs a unique `ignore` answers with, written while they cannot change.
    let now = now_us();
    let existing: Vec<Option<(u128, Vec<u8>)>> = placed
        .iter()
        .map(|placed| match placed {
            Placed::Existing { slot } => {
                let job = state.job_at(*slot);
                let mut out = Vec::with_capacity(256 + job.args().len());
                write_stored_job(&mut out, job, now);
                Some((job.id, out))
            }
            Placed::Created { .. } => None,
        })
        .collect();
    drop(state);

    let body_hint: usize = jobs.iter().map(|j| 300 + j.args.len()).sum();
    let mut out = Vec::with_capacity(body_hint);
    out.extend_from_slice(if is_batch {
        b"{\"jobs\":["
    } else {
        b"{\"job\":"
    });
    for (i, ((job, placed), existing)) in jobs.iter().zip(&placed).zip(&existing).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match (placed, existing) {
            (_, Some((_, envelope))) => out.extend_from_slice(envelope),
            (Placed::Created { id, state }, None) => write_job(
                &mut out,
                &JobView {
                    id: *id,
                    job_type: &job.job_type,
                    state: *state,
                    args: job.args,
                    meta: job.meta,
                    options: job.options_map.as_ref(),
                    attributes: &job.attributes,
                    created_at_us: received_at_us,
                    cancelled_at_us: (*state == JobState::Cancelled).then_some(received_at_us),
                    run: None,
                },
            ),
            (Placed::Existing { .. }, None) => unreachable!("existing envelopes are written"),
        }
    }
    if is_batch {
        let _ = write!(out, "],\"count\":{}}}", jobs.len());
        return ojs_json(StatusCode::CREATED, out);
    }
    // A single push a unique `ignore` answered: 200 with the existing job (ojs-unique-jobs.md
    // §5.4; the reference servers answer 200 too, without the `deduplicated` flag).
    let (status, id) = match (&placed[0], &existing[0]) {
        (_, Some((existing_id, _))) => {
            out.extend_from_slice(b",\"deduplicated\":true");
            (StatusCode::OK, *existing_id)
        }
        (Placed::Created { id, .. }, None) => (StatusCode::CREATED, *id),
        (Placed::Existing { .. }, None) => unreachable!("existing envelopes are written"),
    };
    out.push(b'}');
    let mut response = ojs_json(status, out);
    let location = format!("/ojs/v1/jobs/{}", format_job_id(id));
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
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
    let mut response = fault_response(
        status_code,
        &fault.effective_code(status),
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
                return invalid_request("could not read a fault body under 1 MiB", None);
            };
            let fault: Fault = match serde_json::from_slice(&body) {
                Ok(fault) => fault,
                Err(e) => return invalid_request(&format!("not a fault object: {e}"), None),
            };
            if let Some(problem) = fault.problem() {
                return invalid_request(problem, None);
            }
            app.state().push_fault(fault);
            faults_response(app)
        }
        (Method::POST, "events/drop") => {
            let dropped = app.events.drop_streams();
            dev_json(StatusCode::OK, json!({ "dropped": dropped }))
        }
        (Method::GET, "events") => {
            let (open, kept) = app.events.counts();
            dev_json(
                StatusCode::OK,
                json!({ "open_streams": open, "kept": kept }),
            )
        }
        (Method::POST, path) if path.starts_with("jobs/") => job_control(app, path, request).await,
        (Method::POST, "manifest") => {
            let BodyRead::Complete(body) = read_body_limited(request).await else {
                return invalid_request("could not read the body", None);
            };
            let toggle: ManifestToggle = match serde_json::from_slice(&body) {
                Ok(toggle) => toggle,
                Err(e) => {
                    return invalid_request(
                        &format!("expected {{\"batch_enqueue\": bool}}: {e}"),
                        None,
                    );
                }
            };
            app.state().set_batch_enqueue(toggle.batch_enqueue);
            dev_json(StatusCode::OK, manifest(toggle.batch_enqueue))
        }
        _ => not_found(
            &format!("no control endpoint at /_dev/{control_path}"),
            None,
        ),
    }
}

#[derive(Deserialize)]
struct StartIn {
    #[serde(default)]
    worker_id: Option<String>,
}

#[derive(Deserialize)]
struct FailIn {
    error: Option<Value>,
}

/// `POST /_dev/jobs/{id}/start|complete|fail`.
async fn job_control(app: &App, path: &str, request: Request<Incoming>) -> Resp {
    let Some((id, action)) = path
        .strip_prefix("jobs/")
        .and_then(|rest| rest.split_once('/'))
        .filter(|(id, action)| !id.is_empty() && matches!(*action, "start" | "complete" | "fail"))
    else {
        return not_found(&format!("no control endpoint at /_dev/{path}"), None);
    };
    let BodyRead::Complete(body) = read_body_limited(request).await else {
        return invalid_request("could not read a body under 1 MiB", None);
    };
    let empty = body.iter().all(u8::is_ascii_whitespace);
    let result = match action {
        "start" => {
            let start: StartIn = if empty {
                StartIn { worker_id: None }
            } else {
                match serde_json::from_slice(&body) {
                    Ok(start) => start,
                    Err(e) => {
                        return invalid_request(
                            &format!("expected {{\"worker_id\": string}} or no body: {e}"),
                            None,
                        );
                    }
                }
            };
            let worker_id = start.worker_id.as_deref().unwrap_or(DEFAULT_WORKER_ID);
            app.transition(id, Transition::Start { worker_id })
        }
        "complete" => app.transition(id, Transition::Complete),
        _ => {
            let error = match serde_json::from_slice::<FailIn>(&body) {
                Ok(FailIn {
                    error: Some(error @ Value::Object(_)),
                }) => error,
                _ => {
                    return invalid_request(
                        "expected {\"error\": {\"code\": ..., \"message\": ...}}",
                        Some(json!({ "field": "error", "reason": "must be an object" })),
                    );
                }
            };
            app.transition(id, Transition::Fail { error: &error })
        }
    };
    match result {
        Ok(envelope) => {
            let mut out = Vec::with_capacity(envelope.len() + 8);
            out.extend_from_slice(b"{\"job\":");
            out.extend_from_slice(&envelope);
            out.push(b'}');
            json_response(StatusCode::OK, "application/json", out)
        }
        Err(error) => control_error_response(&error),
    }
}

fn faults_response(app: &App) -> Resp {
    let faults = app.state().faults();
    dev_json(StatusCode::OK, json!({ "faults": faults }))
}

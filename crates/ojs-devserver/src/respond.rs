//! Answers and request bodies shared by the OJS routes (`http.rs`) and the worker routes
//! (`worker_api.rs`): the OJS content type and version header, the error shape (§16.1, with
//! the error catalog's `doc_url`), and the bounded body read.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::model::JobControlError;
use crate::validate::MAX_BODY_BYTES;

pub(crate) type Resp = Response<Full<Bytes>>;

pub(crate) const OJS_CONTENT_TYPE: &str = "application/openjobspec+json";
/// The spec version the devserver speaks (`OJS-Version`, manifest, health).
pub(crate) const OJS_VERSION: &str = "1.0";
/// How much of an oversized body is read and discarded so the client can see the refusal
/// (closing a socket with unread data makes the kernel reset it under the client's feet).
const DRAIN_LIMIT_BYTES: u64 = 16 * 1024 * 1024;

/// The request body, read with a bound.
pub(crate) enum BodyRead {
    Complete(Vec<u8>),
    TooLarge,
    Broken,
}

pub(crate) async fn read_body_limited(request: Request<Incoming>) -> BodyRead {
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

/// A refused transition in the binding's error shape: `404 not_found`, `400 invalid_request`,
/// or `409` with `code: "invalid_request"` and `details` `job_id`, `current_state`,
/// `expected_state`, as the binding's ACK and ACTIVATE conflicts are written (§10.2, §9.5);
/// the catalog's code for it is `INVALID_STATE_TRANSITION` (`ojs-errors.md` §4.1, §5.1: 409).
pub(crate) fn control_error_response(error: &JobControlError) -> Resp {
    match error {
        JobControlError::NotFound { job_id } => not_found(
            &format!("Job '{job_id}' not found."),
            Some(json!({ "resource_type": "job", "resource_id": job_id })),
        ),
        JobControlError::InvalidRequest { message } => invalid_request(message, None),
        JobControlError::InvalidTransition {
            job_id,
            current_state,
            expected_state,
        } => error_response(
            StatusCode::CONFLICT,
            "invalid_request",
            &format!("Cannot move job in state '{current_state}'; expected {expected_state}."),
            Some(json!({
                "job_id": job_id,
                "current_state": current_state,
                "expected_state": expected_state,
            })),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

/// An error answer waiting for its `request_id`: [`handle`] renders it as the body
/// `{"error": {...}}`.
#[derive(Clone)]
pub(crate) struct ErrorBody(pub(crate) Map<String, Value>);

pub(crate) fn json_response(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Resp {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

pub(crate) fn ojs_json(status: StatusCode, body: Vec<u8>) -> Resp {
    let mut response = json_response(status, OJS_CONTENT_TYPE, body);
    response
        .headers_mut()
        .insert("ojs-version", HeaderValue::from_static(OJS_VERSION));
    response
}

pub(crate) fn dev_json(status: StatusCode, body: Value) -> Resp {
    json_response(status, "application/json", body.to_string().into_bytes())
}

pub(crate) fn error_with(status: StatusCode, error: Map<String, Value>) -> Resp {
    let mut response = ojs_json(status, Vec::new());
    response.extensions_mut().insert(ErrorBody(error));
    response
}

/// An error of the devserver's own, in the binding's structure (§16.1): `code`, `message`,
/// `retryable`, `details`, and `type` for `validation_error` (as the reference servers write
/// it), plus the error catalog's optional `doc_url` (`ojs-errors.md` §3.2) naming the
/// catalog's code for the failure.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    details: Option<Value>,
) -> Resp {
    let field = details.as_ref().and_then(|d| {
        d.get("field").and_then(Value::as_str).or_else(|| {
            // A refused transition names no field; its marker is `current_state`.
            d.get("current_state").map(|_| "current_state")
        })
    });
    let catalog_code = catalog_code(code, field);
    let mut error = Map::new();
    error.insert("code".into(), json!(code));
    if code == "validation_error" {
        error.insert("type".into(), json!(code));
    }
    error.insert("message".into(), json!(message));
    error.insert("retryable".into(), json!(false));
    if let Some(details) = details {
        error.insert("details".into(), details);
    }
    error.insert(
        "doc_url".into(),
        json!(format!("https://openjobspec.org/errors/{catalog_code}")),
    );
    error_with(status, error)
}

/// The error catalog's code (`ojs-errors.md` §4) for one of the devserver's refusals.
pub(crate) fn catalog_code(code: &str, field: Option<&str>) -> &'static str {
    match (code, field) {
        ("duplicate", _) => "DUPLICATE_JOB",
        ("invalid_request", Some("current_state")) => "INVALID_STATE_TRANSITION",
        ("not_found", _) => "NOT_FOUND",
        ("validation_error", _) => "INVALID_RETRY_POLICY",
        (_, Some("type")) => "INVALID_JOB_TYPE",
        (_, Some("args")) => "INVALID_ARGS",
        (_, Some("meta")) => "INVALID_METADATA",
        (_, Some("options.queue")) => "INVALID_QUEUE",
        (_, Some("body")) => "PAYLOAD_TOO_LARGE",
        (_, Some(field)) if field.starts_with("options.retry") => "INVALID_RETRY_POLICY",
        _ => "INVALID_PAYLOAD",
    }
}

/// An injected fault's answer: exactly the code the test asked for.
pub(crate) fn fault_response(
    status: StatusCode,
    code: &str,
    retryable: bool,
    details: Option<Value>,
) -> Resp {
    let mut error = Map::new();
    error.insert("code".into(), json!(code));
    error.insert("message".into(), json!("injected fault"));
    error.insert("retryable".into(), json!(retryable));
    if let Some(details) = details {
        error.insert("details".into(), details);
    }
    error_with(status, error)
}

pub(crate) fn invalid_request(message: &str, details: Option<Value>) -> Resp {
    error_response(StatusCode::BAD_REQUEST, "invalid_request", message, details)
}

pub(crate) fn not_found(message: &str, details: Option<Value>) -> Resp {
    error_response(StatusCode::NOT_FOUND, "not_found", message, details)
}

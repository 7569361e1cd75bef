//! `ojs-relay run --listen ADDR`: the relay's HTTP surface for operators.
//!
//! - `GET /v1/events/stream`: the relay's events as Server-Sent Events (RFC-0005 §1), filtered
//!   by `types` (`job.*` globs), `queues`, `job_types` and `tenant`, replayed from
//!   `Last-Event-ID` or `since` when `relay.event_retention` keeps events;
//! - `GET /metrics`: the Prometheus text exposition;
//! - `GET /healthz`: the process answers; `GET /readyz`: database reachable, outbox table
//!   present, backend reachable;
//! - `POST /codec/decode`, `POST /codec/encode`: the Codec Server of the OJS encryption
//!   extension (§9.2) with the key ring of `adapter.encryption` (`ojs_outbox::codec`); 404
//!   when none is configured. Bodies up to 1 MiB; payloads are never logged.
//!
//! Every path but `/healthz` needs `Authorization: Bearer <token>`: the `--token` (or
//! `OJS_RELAY_TOKEN`) of the operator, or a `--tenant-token TENANT=TOKEN`, which sees only that
//! tenant's events (seed 003) and nothing else (a payload carries no tenant, so the Codec Server
//! is the operator's alone). `--no-auth` opens the surface, said out loud.
//! The core makes the stream and the text (`events::Subscription`, `Relay::prometheus_text`);
//! this module only serves them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ojs_outbox::backend::Backend;
use ojs_outbox::codec::Codec;
use ojs_outbox::events::{Filter, ReplayFrom, Subscription, parse_rfc3339_ms};
use ojs_outbox::{Relay, Store};
use serde_json::json;

/// Who may read what. There is no open default: `ojs-relay run --listen` needs a token, a
/// tenant token or `--no-auth` (`commands::access`).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The operator's token; `None` with `open`: no authentication (`--no-auth`).
    pub token: Option<String>,
    /// Tenant-bound tokens: (token, tenant).
    pub tenant_tokens: Vec<(String, String)>,
    /// `--no-auth`: the operator said the address is private; everyone is the operator.
    pub open: bool,
}

enum Caller {
    Operator,
    Tenant(String),
}

impl Access {
    fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        if self.open {
            return Some(Caller::Operator);
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))?;
        // Every token is compared, each in constant time, so the answer's timing says
        // nothing about which token, or how much of one, matched.
        let operator = self
            .token
            .as_deref()
            .is_some_and(|token| same_secret(token, given));
        let mut tenant = None;
        for (token, owner) in &self.tenant_tokens {
            if same_secret(token, given) {
                tenant = Some(owner);
            }
        }
        if operator {
            return Some(Caller::Operator);
        }
        tenant.map(|owner| Caller::Tenant(owner.clone()))
    }
}

/// Equal secrets, in time that depends only on their lengths.
pub fn same_secret(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut differ = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        differ |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(differ) == 0
}

pub struct Surface {
    pub relay: Arc<Relay>,
    pub store: Store,
    pub backend: Backend,
    pub table: String,
    pub access: Access,
    /// The key ring of `adapter.encryption`, for the Codec Server; `None`: it answers 404.
    pub codec: Option<Arc<Codec>>,
}

/// The largest Codec Server request body.
pub const CODEC_BODY_LIMIT: usize = 1024 * 1024;

pub fn router(surface: Arc<Surface>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/events/stream", get(events))
        .route("/codec/decode", post(codec_decode))
        .route("/codec/encode", post(codec_encode))
        .with_state(surface)
}

fn refused(status: StatusCode, why: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": "unauthorized", "message": why}})),
    )
        .into_response()
}

/// The refusal of a caller who is not the operator, if it is not.
fn operator_only(surface: &Surface, headers: &HeaderMap) -> Option<Response> {
    match surface.access.caller(headers) {
        Some(Caller::Operator) => None,
        Some(Caller::Tenant(_)) => Some(refused(
            StatusCode::FORBIDDEN,
            "a tenant token reads only /v1/events/stream",
        )),
        None => Some(refused(
            StatusCode::UNAUTHORIZED,
            "Authorization: Bearer <token> required",
        )),
    }
}

fn codec_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

async fn codec_decode(
    State(surface): State<Arc<Surface>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    codec_call(&surface, &headers, body, "decode").await
}

async fn codec_encode(
    State(surface): State<Arc<Surface>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    codec_call(&surface, &headers, body, "encode").await
}

/// One Codec Server request: the operator only, a configured key ring, a JSON body of at most
/// [`CODEC_BODY_LIMIT`] bytes. Errors name the payload and the reason, never its data.
async fn codec_call(
    surface: &Surface,
    headers: &HeaderMap,
    body: Body,
    operation: &str,
) -> Response {
    match surface.access.caller(headers) {
        Some(Caller::Operator) => {}
        Some(Caller::Tenant(_)) => {
            return refused(
                StatusCode::FORBIDDEN,
                "the Codec Server decodes any job's args and a payload carries no tenant, so only the operator's token may use it",
            );
        }
        None => {
            return refused(
                StatusCode::UNAUTHORIZED,
                "Authorization: Bearer <token> required",
            );
        }
    }
    let Some(codec) = &surface.codec else {
        return codec_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "this relay has no encryption configured (adapter.encryption, or OJS_ENCRYPTION_KEYS with --encryption-key-id), so it serves no Codec Server",
        );
    };
    let bytes = match axum::body::to_bytes(body, CODEC_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return codec_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                &format!(
                    "the request body is larger than {CODEC_BODY_LIMIT} bytes, or was cut off"
                ),
            );
        }
    };
    let request: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(_) => {
            return codec_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                r#"the body is not JSON; send {"payloads": [{"data": "<base64>", "metadata": {"encoding": "..."}}]}"#,
            );
        }
    };
    let answer = if operation == "decode" {
        ojs_outbox::codec::decode_payloads(codec, &request)
    } else {
        ojs_outbox::codec::encode_payloads(codec, &request)
    };
    match answer {
        Ok(answer) => Json(answer).into_response(),
        Err(error) => codec_error(
            StatusCode::BAD_REQUEST,
            &format!("{operation}_failed"),
            &error.message,
        ),
    }
}

async fn readyz(State(surface): State<Arc<Surface>>, headers: HeaderMap) -> Response {
    if let Some(refusal) = operator_only(&surface, &headers) {
        return refusal;
    }
    let (ready, body) = ojs_outbox::outbox::readiness(&surface.store, &surface.backend).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body: serde_json::Value = serde_json::from_str(&body).expect("our own JSON");
    (status, Json(body)).into_response()
}

async fn metrics(State(surface): State<Arc<Surface>>, headers: HeaderMap) -> Response {
    if let Some(refusal) = operator_only(&surface, &headers) {
        return refusal;
    }
    let status = surface.store.status().await.ok();
    let text = surface
        .relay
        .prometheus_text(&surface.table, status.as_ref());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn events(
    State(surface): State<Arc<Surface>>,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    // A parameter given twice is refused, not resolved: `?tenant=a&tenant=b` must not mean
    // one thing to the check and another to the filter.
    let mut query = HashMap::new();
    for (name, value) in pairs {
        if query.insert(name.clone(), value).is_some() {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": {"code": "invalid_request",
                    "message": format!("{name}: given more than once")}})),
            )
                .into_response();
        }
    }
    let tenant = match surface.access.caller(&headers) {
        None => {
            return refused(
                StatusCode::UNAUTHORIZED,
                "Authorization: Bearer <token> required",
            );
        }
        Some(Caller::Operator) => query.get("tenant").cloned(),
        Some(Caller::Tenant(own)) => {
            if query.get("tenant").is_some_and(|asked| *asked != own) {
                return refused(
                    StatusCode::FORBIDDEN,
                    "this token reads only its own tenant",
                );
            }
            Some(own)
        }
    };
    let filter = Filter::from_lists(
        query.get("types").map(String::as_str),
        query.get("queues").map(String::as_str),
        query.get("job_types").map(String::as_str),
        tenant.as_deref(),
    );
    let from = match (
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty()),
        query.get("since"),
    ) {
        (Some(id), _) => Some(ReplayFrom::AfterId(id.to_owned())),
        (None, Some(since)) => match parse_rfc3339_ms(since) {
            Some(ms) => Some(ReplayFrom::Since(ms)),
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": {"code": "invalid_request",
                        "message": format!("since: {since:?} is not an RFC 3339 time")}})),
                )
                    .into_response();
            }
        },
        (None, None) => None,
    };
    let subscription = Subscription::new(surface.relay.events(), filter, from.as_ref());
    let frames = futures_util::stream::unfold(subscription, |mut subscription| async move {
        subscription
            .next_frame()
            .await
            .map(|frame| (Ok::<_, Infallible>(frame), subscription))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

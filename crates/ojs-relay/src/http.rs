//! `ojs-relay run --listen ADDR`: the relay's HTTP surface for operators.
//!
//! - `GET /v1/events/stream`: the relay's events as Server-Sent Events (RFC-0005 §1), filtered
//!   by `types` (`job.*` globs), `queues`, `job_types` and `tenant`, replayed from
//!   `Last-Event-ID` or `since` when `relay.event_retention` keeps events;
//! - `GET /metrics`: the metrics in the OpenMetrics text format (Prometheus scrapes it);
//! - `GET /healthz`: the process answers; `GET /readyz`: database reachable, outbox table
//!   present, backend reachable;
//! - `POST /codec/decode`, `POST /codec/encode`: the Codec Server of the OJS encryption
//!   extension (§9.2) with the key ring of `adapter.encryption` (`ojs_outbox::codec`); 404
//!   when none is configured. Bodies up to 1 MiB; payloads are never logged.
//!
//! Every path but `/healthz` needs `Authorization: Bearer <token>`: the `--token` (or
//! `OJS_RELAY_TOKEN`) of the operator, a `--tenant-token TENANT=TOKEN`, which sees only that
//! tenant's events (seed 003) and nothing else (a payload carries no tenant, so the Codec Server
//! is the operator's alone), or a `--viewer-token TOKEN`, the read-only caller
//! ([`Caller::Viewer`] of everything: it reads what the operator reads and writes nothing).
//! `--no-auth` opens the surface, said out loud.
//! This module only finds the caller from the token; the policy (paths, scoping, answers) is
//! `ojs_outbox::surface`, the same the Django, Express and Rails mounts serve.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ojs_outbox::backend::Backend;
use ojs_outbox::codec::Codec;
use ojs_outbox::events::Subscription;
use ojs_outbox::surface::{self, Action, Answer, Caller};
use ojs_outbox::{Relay, Store};

/// Who may read what. There is no open default: `ojs-relay run --listen` needs a token, a
/// tenant token, a viewer token or `--no-auth` (`commands::access`).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The operator's token; `None` with `open`: no authentication (`--no-auth`).
    pub token: Option<String>,
    /// Tenant-bound tokens: (token, tenant).
    pub tenant_tokens: Vec<(String, String)>,
    /// Read-only tokens (`--viewer-token`): [`Caller::Viewer`] of every tenant.
    pub viewer_tokens: Vec<String>,
    /// `--no-auth`: the operator said the address is private; everyone is the operator.
    pub open: bool,
}

impl Access {
    fn caller(&self, headers: &HeaderMap) -> Caller {
        if self.open {
            return Caller::Operator;
        }
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return Caller::Anonymous;
        };
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
        let mut viewer = false;
        for token in &self.viewer_tokens {
            viewer |= same_secret(token, given);
        }
        // `commands::access` refuses a viewer token that is also another role's, so at most
        // one role matches; were it not so, the order here is the stronger role first.
        match (operator, tenant, viewer) {
            (true, _, _) => Caller::Operator,
            (false, Some(owner), _) => Caller::Tenant(owner.clone()),
            (false, None, true) => Caller::Viewer(None),
            (false, None, false) => Caller::Anonymous,
        }
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

pub fn router(surface: Arc<Surface>) -> Router {
    Router::new().fallback(serve).with_state(surface)
}

/// Every request: the caller from the token, the core's policy, then what it asks for.
async fn serve(State(surface): State<Arc<Surface>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let last_event_id = parts
        .headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok());
    let asked = surface::Request {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        last_event_id,
        write_header: parts
            .headers
            .get(ojs_outbox::dashboard::WRITE_HEADER)
            .and_then(|v| v.to_str().ok()),
        caller: surface.access.caller(&parts.headers),
    };
    let answer = match surface::route(&asked) {
        Action::Answer(answer) => answer,
        Action::Readiness => {
            let (ready, verdict) =
                ojs_outbox::outbox::readiness(&surface.store, &surface.backend).await;
            Answer::readiness(ready, verdict)
        }
        Action::Metrics => {
            let status = surface.store.counts().await.ok();
            let text = surface
                .relay
                .prometheus_text(&surface.table, status.as_ref());
            Answer::metrics(Some(text))
        }
        Action::Codec { decode } => {
            let bytes = axum::body::to_bytes(body, surface::CODEC_BODY_LIMIT)
                .await
                .ok();
            Answer::codec(decode, surface.codec.as_deref(), bytes.as_deref())
        }
        Action::Events { filter, from } => {
            let subscription = Subscription::new(surface.relay.events(), filter, from.as_ref());
            return stream(subscription);
        }
        Action::Dashboard { call, viewer } => {
            let readiness = match call {
                ojs_outbox::dashboard::Call::Overview => {
                    let (_, verdict) =
                        ojs_outbox::outbox::readiness(&surface.store, &surface.backend).await;
                    serde_json::from_str(&verdict).ok()
                }
                _ => None,
            };
            let events = surface.relay.events();
            let (answer, effects) = ojs_outbox::dashboard::answer(
                &surface.store,
                &call,
                &viewer,
                readiness,
                Some(&events),
            )
            .await;
            surface.relay.notify_committed(effects.replayed);
            answer
        }
    };
    let mut response = (
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK),
        answer.body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    for (name, value) in answer.headers {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The subscription's frames as they come, a keep-alive comment first and after every quiet
/// [`surface::KEEP_ALIVE`].
fn stream(subscription: Subscription) -> Response {
    let first = futures_util::stream::once(async {
        Ok::<_, Infallible>(surface::KEEP_ALIVE_FRAME.to_owned())
    });
    let frames = futures_util::stream::unfold(subscription, |mut subscription| async move {
        let frame = match tokio::time::timeout(surface::KEEP_ALIVE, subscription.next_frame()).await
        {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(_) => surface::KEEP_ALIVE_FRAME.to_owned(),
        };
        Some((Ok::<_, Infallible>(frame), subscription))
    });
    let mut response =
        Body::from_stream(futures_util::StreamExt::chain(first, frames)).into_response();
    for (name, value) in surface::STREAM_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        headers.insert(header::AUTHORIZATION, value);
        headers
    }

    #[test]
    fn each_token_is_its_callers() {
        let access = Access {
            token: Some("op".into()),
            tenant_tokens: vec![("ta".into(), "t1".into())],
            viewer_tokens: vec!["v1".into(), "v2".into()],
            open: false,
        };
        assert_eq!(access.caller(&bearer("op")), Caller::Operator);
        assert_eq!(access.caller(&bearer("ta")), Caller::Tenant("t1".into()));
        assert_eq!(access.caller(&bearer("v1")), Caller::Viewer(None));
        assert_eq!(access.caller(&bearer("v2")), Caller::Viewer(None));
        for wrong in ["v", "v1x", "", "V1"] {
            assert_eq!(
                access.caller(&bearer(wrong)),
                Caller::Anonymous,
                "{wrong:?}"
            );
        }
        assert_eq!(access.caller(&HeaderMap::new()), Caller::Anonymous);
        let viewers_only = Access {
            viewer_tokens: vec!["v1".into()],
            ..Access::default()
        };
        assert_eq!(viewers_only.caller(&bearer("v1")), Caller::Viewer(None));
        assert_eq!(viewers_only.caller(&bearer("op")), Caller::Anonymous);
    }
}

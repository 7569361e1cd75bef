//! The HTTP surface for a framework's mount (issue 28): one call, request in and answer out,
//! with the policy of `ojs_outbox::surface` (the same `ojs-relay run --listen` serves). The
//! mount only asks the app's `authorize` who the caller is and writes what comes back.
//!
//! | thing | crosses as |
//! |---|---|
//! | the request | JSON: `{"method", "path" (under the mount), "query"?, "last_event_id"?, "access", "access_field"?, "keep_alive_ms"?, "body"?}`; `access`: the app's decision (`true`, `false`/`null`, `{"tenant"}` or a tenant id) |
//! | the answer | [`SurfaceAnswer`]: status, content type, body text, or a stream of SSE frames (the keep-alive comment included) |

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::Bridge;
use crate::events::RelayFrames;
use ojs_outbox::surface::{self, Action, Answer, Caller};
use ojs_outbox::{Error, ErrorCode, Result};

/// What the mount writes: the status, the headers (`Content-Type` always), then the body, or,
/// with `stream`, each frame as it comes (the first at once: a keep-alive comment).
pub struct SurfaceAnswer {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub stream: Option<RelayFrames>,
}

impl From<Answer> for SurfaceAnswer {
    fn from(answer: Answer) -> SurfaceAnswer {
        SurfaceAnswer {
            status: answer.status,
            content_type: answer.content_type.to_owned(),
            headers: std::iter::once(("Content-Type", answer.content_type))
                .chain(answer.headers)
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            body: answer.body,
            stream: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SurfaceRequest {
    method: String,
    path: String,
    #[serde(default)]
    query: String,
    #[serde(default)]
    last_event_id: Option<String>,
    access: Value,
    #[serde(default)]
    access_field: Option<String>,
    #[serde(default)]
    keep_alive_ms: Option<u64>,
    #[serde(default)]
    body: Option<String>,
    /// The `X-OJS-Dashboard` header's value (a dashboard write needs `1`).
    #[serde(default)]
    write_header: Option<String>,
}

impl Bridge {
    /// Whether `path` (under the mount) answers every caller: ask the app's `authorize` only
    /// for the others.
    pub fn surface_is_open(path: &str) -> bool {
        surface::is_open(path)
    }

    /// Whether `path` (under the mount) is one of the surface's; a router that shares its
    /// prefix with the application passes the others on.
    pub fn surface_serves(path: &str) -> bool {
        surface::serves(path)
    }

    /// Serves one request of a mount (module doc). An `access` that is not a decision is
    /// `INVALID_CONFIG` naming `access_field` (the binding's setting: `authorize`,
    /// `OJS_HTTP_ACCESS`); everything else is an answer.
    pub fn surface(&self, request_json: &str) -> Result<SurfaceAnswer> {
        let request: SurfaceRequest = serde_json::from_str(request_json)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "request", e.to_string()))?;
        let field = request.access_field.as_deref().unwrap_or("authorize");
        let caller = Caller::from_decision(&request.access, field)?;
        let asked = surface::Request {
            method: &request.method,
            path: &request.path,
            query: &request.query,
            last_event_id: request.last_event_id.as_deref(),
            write_header: request.write_header.as_deref(),
            caller,
        };
        let answer = match surface::route(&asked) {
            Action::Answer(answer) => answer,
            Action::Readiness => {
                let verdict = self.readiness_json()?;
                let ready = serde_json::from_str::<Value>(&verdict)
                    .ok()
                    .and_then(|v| v["ready"].as_bool())
                    .unwrap_or(false);
                Answer::readiness(ready, verdict)
            }
            Action::Metrics => Answer::metrics(self.metrics_text()),
            Action::Codec { decode } => {
                let body = request.body.as_deref().map(str::as_bytes);
                let body = body.filter(|b| b.len() <= surface::CODEC_BODY_LIMIT);
                Answer::codec(decode, self.config.encryption.as_deref(), body)
            }
            Action::Dashboard { call, viewer } => self.dashboard(&call, &viewer)?,
            Action::Events { filter, from } => {
                let keep_alive = request
                    .keep_alive_ms
                    .map_or(surface::KEEP_ALIVE, Duration::from_millis);
                return match self.event_bus() {
                    Ok((bus, runtime)) => Ok(SurfaceAnswer {
                        status: 200,
                        content_type: "text/event-stream".into(),
                        headers: (surface::STREAM_HEADERS.iter())
                            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                            .collect(),
                        body: String::new(),
                        stream: Some(RelayFrames::with_filter(
                            bus,
                            filter,
                            from,
                            runtime,
                            Some(keep_alive),
                        )),
                    }),
                    Err(error) => Ok(Answer::stream_refused(&error).into()),
                };
            }
        };
        Ok(answer.into())
    }

    /// A dashboard call, through the relay's connection (`ojs_outbox::dashboard`); a replay
    /// wakes the relay here for the rows it put back.
    fn dashboard(
        &self,
        call: &ojs_outbox::dashboard::Call,
        viewer: &ojs_outbox::dashboard::Viewer,
    ) -> Result<Answer> {
        let readiness = match call {
            ojs_outbox::dashboard::Call::Overview if viewer.tenant.is_none() => {
                serde_json::from_str(&self.readiness_json()?).ok()
            }
            _ => None,
        };
        self.with_running(|running| {
            let events = running.outbox.events();
            let (answer, effects) = running.runtime.block_on(ojs_outbox::dashboard::answer(
                running.outbox.store(),
                call,
                viewer,
                readiness,
                events.as_deref(),
            ));
            running.outbox.notify_committed(effects.replayed);
            Ok(answer)
        })
    }
}

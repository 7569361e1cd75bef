//! The relay's HTTP surface policy, once (issue 28): what `ojs-relay run --listen` serves and
//! what the Django, Express and Rails mounts serve, decided here for all of them.
//!
//! | path (under the mount) | who | answer |
//! |---|---|---|
//! | `GET /healthz` | anyone | `ok` |
//! | `GET /readyz` | the operator | the readiness verdict; 503 when not ready |
//! | `GET /metrics` | the operator | the Prometheus text exposition |
//! | `GET /v1/events/stream` | the operator, or a tenant (its own events only) | SSE frames |
//! | `POST /codec/decode`, `/codec/encode` | the operator | the Codec Server (`codec.rs`) |
//! | `/dashboard/...` | the operator, a tenant, a viewer | the dashboard (`dashboard.rs`) |
//!
//! A host (the relay CLI, a mount) finds out who the caller is ([`Caller`]: from a token, or
//! from the app's `authorize` decision, [`Caller::from_decision`]), hands the request to
//! [`route`], and carries out the [`Action`] it gets: an answer to write as it is, or a
//! verdict, a text, a stream or a codec call that only the host can make, each turned into the
//! answer by this module ([`Answer::readiness`], [`Answer::metrics`], [`Answer::codec`]). So
//! the scoping (a tenant's query cannot widen it; a parameter given twice is refused), the
//! operator-only paths, the 401/403/404/405/503 bodies and the keep-alive are the same on
//! every surface. Messages never quote a token or what `authorize` returned.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::events::{Filter, ReplayFrom, parse_rfc3339_ms};

/// An idle stream writes [`KEEP_ALIVE_FRAME`] this often: proxies keep the connection, and a
/// failed write tells the server the client has gone.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// An SSE comment line (clients ignore it); also written first, so the headers leave at once.
pub const KEEP_ALIVE_FRAME: &str = ": keep-alive\n\n";
/// The headers of an event stream's answer (status 200).
pub const STREAM_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),
];
/// The largest Codec Server request body.
pub const CODEC_BODY_LIMIT: usize = 1024 * 1024;
const STREAM_PARAMETERS: [&str; 5] = ["types", "queues", "job_types", "tenant", "since"];
const METRICS_TYPE: &str = crate::prometheus::CONTENT_TYPE;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Everything.
    Operator,
    /// Only this tenant's events.
    Tenant(String),
    /// Reads what the operator (`None`) or a tenant reads, and writes nothing: no dashboard
    /// replay or purge, no Codec Server.
    Viewer(Option<String>),
    /// The app's `authorize` said no (403).
    Refused,
    /// No credentials, or none that match (401; the relay CLI's token check).
    Anonymous,
}

impl Caller {
    /// The app's decision as JSON: `true` (the operator), `false` or `null` (refused),
    /// `{"tenant": "t1"}` or `"t1"` (that tenant; non-empty), `{"read_only": true}` (a viewer
    /// of everything) or `{"tenant": "t1", "read_only": true}` (of that tenant). Anything else is
    /// `INVALID_CONFIG` naming `field` (the binding's setting), describing the value's shape,
    /// never its contents (it may be a user record or a token by mistake).
    pub fn from_decision(decision: &Value, field: &str) -> Result<Caller> {
        let read_only =
            |map: &serde_json::Map<String, Value>| map.get("read_only") == Some(&Value::Bool(true));
        let tenant = match decision {
            Value::Bool(true) => return Ok(Caller::Operator),
            Value::Bool(false) | Value::Null => return Ok(Caller::Refused),
            Value::String(tenant) => Some(tenant.as_str()),
            Value::Object(map) if map.len() == 1 && read_only(map) => {
                return Ok(Caller::Viewer(None));
            }
            Value::Object(map) if map.len() == 1 => map.get("tenant").and_then(Value::as_str),
            Value::Object(map) if map.len() == 2 && read_only(map) => {
                match map.get("tenant").and_then(Value::as_str) {
                    Some(tenant) if !tenant.is_empty() => {
                        return Ok(Caller::Viewer(Some(tenant.to_owned())));
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match tenant {
            Some(tenant) if !tenant.is_empty() => Ok(Caller::Tenant(tenant.to_owned())),
            _ => Err(Error::field(
                ErrorCode::InvalidConfig,
                field,
                format!(
                    "must answer true (everything), false (refused), a tenant id (only that tenant's; non-empty) or {{\"read_only\": true}} with or without a tenant; it answered {}",
                    shape(decision)
                ),
            )),
        }
    }
}

/// A value's shape for a message: its type and an object's keys, never a value.
fn shape(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) | Value::Number(_) => "a number".into(),
        Value::String(text) if text.is_empty() => "an empty string".into(),
        Value::String(_) => "a string".into(),
        Value::Array(items) => format!("a list of {}", items.len()),
        Value::Object(map) if map.is_empty() => "an empty object".into(),
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().take(10).map(String::as_str).collect();
            format!("an object with keys {}", keys.join(", "))
        }
    }
}

/// One request, as the host saw it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path under the mount (`/metrics`); a trailing `/` is ignored.
    pub path: &'a str,
    /// The raw query string, without `?`.
    pub query: &'a str,
    pub last_event_id: Option<&'a str>,
    /// The `X-OJS-Dashboard` header's value: a dashboard write needs `1`.
    pub write_header: Option<&'a str>,
    pub caller: Caller,
}

/// What the host does next.
#[derive(Debug)]
pub enum Action {
    /// Write this answer.
    Answer(Answer),
    /// Check readiness, then write [`Answer::readiness`].
    Readiness,
    /// Render the metrics, then write [`Answer::metrics`].
    Metrics,
    /// Open a subscription with this filter and replay point; write [`STREAM_HEADERS`] and
    /// its frames, [`KEEP_ALIVE_FRAME`] after [`KEEP_ALIVE`] without one.
    Events {
        filter: Filter,
        from: Option<ReplayFrom>,
    },
    /// Read the body (at most [`CODEC_BODY_LIMIT`] bytes) and write [`Answer::codec`].
    Codec { decode: bool },
    /// Make the dashboard's call on the outbox table ([`crate::dashboard::answer`]); for
    /// `Call::Overview`, with the readiness verdict.
    Dashboard {
        call: crate::dashboard::Call,
        viewer: crate::dashboard::Viewer,
    },
}

/// A complete answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Headers besides `Content-Type` (the dashboard's security and cache headers).
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Answer {
    fn json(status: u16, body: &Value) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            body: body.to_string(),
            headers: Vec::new(),
        }
    }

    /// `{"error": {"code", "message"}}`.
    pub fn error(status: u16, code: &str, message: &str) -> Answer {
        Answer::json(
            status,
            &json!({"error": {"code": code, "message": message}}),
        )
    }

    /// `GET /readyz`: the verdict (`{"ready", ...}` JSON text), 200 or 503.
    pub fn readiness(ready: bool, verdict: String) -> Answer {
        Answer {
            status: if ready { 200 } else { 503 },
            content_type: "application/json",
            body: verdict,
            headers: Vec::new(),
        }
    }

    /// `GET /metrics`: the text, or 503 when neither a relay nor the table could be read.
    pub fn metrics(text: Option<String>) -> Answer {
        match text {
            Some(body) => Answer {
                status: 200,
                content_type: METRICS_TYPE,
                body,
                headers: Vec::new(),
            },
            None => Answer::error(
                503,
                "relay_not_running",
                "neither a relay in this process nor the outbox table could be read: see /readyz",
            ),
        }
    }

    /// A stream that could not be opened: no relay here (503), else a bad request (400).
    pub fn stream_refused(error: &Error) -> Answer {
        match error.code {
            ErrorCode::RelayShutDown => Answer::error(503, "relay_not_running", &error.message),
            _ => Answer::error(400, "invalid_request", &error.message),
        }
    }

    /// A Codec Server call: `body` as read (`None`: larger than the limit, or cut off),
    /// `codec` the key ring (`None`: no encryption configured, 404). Errors name the payload
    /// and the reason, never its data.
    pub fn codec(decode: bool, codec: Option<&crate::codec::Codec>, body: Option<&[u8]>) -> Answer {
        let Some(codec) = codec else {
            return Answer::error(
                404,
                "not_found",
                "this surface has no encryption configured (adapter.encryption, or OJS_ENCRYPTION_KEYS with --encryption-key-id), so there is no Codec Server",
            );
        };
        let Some(body) = body else {
            let message =
                format!("the request body is larger than {CODEC_BODY_LIMIT} bytes, or was cut off");
            return Answer::error(413, "payload_too_large", &message);
        };
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return Answer::error(
                400,
                "invalid_request",
                r#"the body is not JSON; send {"payloads": [{"data": "<base64>", "metadata": {"encoding": "..."}}]}"#,
            );
        };
        let answer = if decode {
            crate::codec::decode_payloads(codec, &request)
        } else {
            crate::codec::encode_payloads(codec, &request)
        };
        match answer {
            Ok(answer) => Answer::json(200, &answer),
            Err(error) => {
                let code = if decode {
                    "decode_failed"
                } else {
                    "encode_failed"
                };
                Answer::error(400, code, &error.message)
            }
        }
    }
}

/// The surface's paths (under the mount).
const PATHS: [&str; 6] = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/events/stream",
    "/codec/decode",
    "/codec/encode",
];

/// Whether `path` is one of the surface's: a mount whose framework routes by prefix (an
/// Express router) passes the others on to the application instead of answering 404.
pub fn serves(path: &str) -> bool {
    PATHS.contains(&path.trim_end_matches('/')) || crate::dashboard::serves(path)
}

/// Whether `path` answers every caller (`/healthz`): a mount asks the app's `authorize`
/// only for the other paths.
pub fn is_open(path: &str) -> bool {
    path.trim_end_matches('/') == "/healthz"
}

/// The policy: what to do with `request`.
pub fn route(request: &Request<'_>) -> Action {
    if crate::dashboard::serves(request.path) {
        return dashboard(request);
    }
    let path = match request.path.trim_end_matches('/') {
        "" => "/",
        path => path,
    };
    let (wanted, operator_only) = match path {
        "/healthz" => ("GET", false),
        "/readyz" | "/metrics" => ("GET", true),
        "/v1/events/stream" => ("GET", false),
        "/codec/decode" | "/codec/encode" => ("POST", true),
        _ => {
            let message = format!("{path}: not a path of this surface");
            return Action::Answer(Answer::error(404, "not_found", &message));
        }
    };
    // HEAD is GET without a body (the host drops it).
    if request.method != wanted && !(wanted == "GET" && request.method == "HEAD") {
        let message = format!("{path} answers {wanted} only");
        return Action::Answer(Answer::error(405, "method_not_allowed", &message));
    }
    if is_open(path) {
        return Action::Answer(Answer {
            status: 200,
            content_type: "text/plain",
            body: "ok\n".into(),
            headers: Vec::new(),
        });
    }
    let tenant = match &request.caller {
        Caller::Anonymous => {
            let message = "Authorization: Bearer <token> required";
            return Action::Answer(Answer::error(401, "unauthorized", message));
        }
        Caller::Refused => {
            let message = "this caller may not read this surface";
            return Action::Answer(Answer::error(403, "forbidden", message));
        }
        Caller::Viewer(None) if path.starts_with("/codec/") => {
            let message = "a read-only caller may not use the Codec Server";
            return Action::Answer(Answer::error(403, "forbidden", message));
        }
        Caller::Tenant(_) | Caller::Viewer(Some(_)) if operator_only => {
            let message = if path.starts_with("/codec/") {
                "the Codec Server decodes any job's args and a payload carries no tenant, so only the operator may use it"
            } else {
                "a tenant-scoped caller reads only /v1/events/stream"
            };
            return Action::Answer(Answer::error(403, "forbidden", message));
        }
        Caller::Tenant(tenant) | Caller::Viewer(Some(tenant)) => Some(tenant),
        Caller::Operator | Caller::Viewer(None) => None,
    };
    match path {
        "/readyz" => Action::Readiness,
        "/metrics" => Action::Metrics,
        "/codec/decode" => Action::Codec { decode: true },
        "/codec/encode" => Action::Codec { decode: false },
        _ => events(request, tenant),
    }
}

/// The dashboard's paths: the same 401 and 403 as the rest, then `dashboard.rs`.
fn dashboard(request: &Request<'_>) -> Action {
    match &request.caller {
        Caller::Anonymous => {
            let message = "Authorization: Bearer <token> required";
            return Action::Answer(Answer::error(401, "unauthorized", message));
        }
        Caller::Refused => {
            let message = "this caller may not read this surface";
            return Action::Answer(Answer::error(403, "forbidden", message));
        }
        _ => {}
    }
    crate::dashboard::route(
        request.method,
        request.path,
        request.query,
        request.write_header,
        &request.caller,
    )
}

fn events(request: &Request<'_>, scope: Option<&String>) -> Action {
    let bad = |message: String| Action::Answer(Answer::error(400, "invalid_request", &message));
    // A parameter given twice means what each reader of the URL chooses (the first, the last,
    // both): refused rather than guessed, so `?tenant=a&tenant=b` cannot mean one thing to
    // the check and another to the filter.
    let mut query: HashMap<String, String> = HashMap::new();
    for (name, value) in form_urlencoded::parse(request.query.as_bytes()) {
        if !STREAM_PARAMETERS.contains(&name.as_ref()) {
            continue;
        }
        if query.insert(name.to_string(), value.into_owned()).is_some() {
            return bad(format!(
                "the query parameter {name} is given more than once"
            ));
        }
    }
    let tenant = match scope {
        // A scoped caller may name its own tenant, no other (seed 003).
        Some(own) if query.get("tenant").is_some_and(|asked| asked != own) => {
            let message = "this caller reads only its own tenant";
            return Action::Answer(Answer::error(403, "forbidden", message));
        }
        Some(own) => Some(own.clone()),
        None => query.get("tenant").cloned(),
    };
    let from = match (
        request.last_event_id.filter(|id| !id.is_empty()),
        query.get("since"),
    ) {
        (Some(id), _) => Some(ReplayFrom::AfterId(id.to_owned())),
        (None, Some(since)) => match parse_rfc3339_ms(since) {
            Some(ms) => Some(ReplayFrom::Since(ms)),
            None => return bad(format!("since: {since:?} is not an RFC 3339 time")),
        },
        (None, None) => None,
    };
    let filter = Filter::from_lists(
        query.get("types").map(String::as_str),
        query.get("queues").map(String::as_str),
        query.get("job_types").map(String::as_str),
        tenant.as_deref(),
    );
    Action::Events { filter, from }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(method: &'a str, path: &'a str, query: &'a str, caller: Caller) -> Request<'a> {
        Request {
            method,
            path,
            query,
            last_event_id: None,
            write_header: None,
            caller,
        }
    }

    fn answer(action: Action) -> Answer {
        match action {
            Action::Answer(answer) => answer,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn healthz_is_open_and_everything_else_is_closed() {
        let health = answer(route(&request("GET", "/healthz", "", Caller::Anonymous)));
        assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
        for path in ["/readyz", "/metrics", "/v1/events/stream"] {
            let anonymous = answer(route(&request("GET", path, "", Caller::Anonymous)));
            assert_eq!(anonymous.status, 401, "{path}");
            let refused = answer(route(&request("GET", path, "", Caller::Refused)));
            assert_eq!(refused.status, 403, "{path}");
        }
        let codec = answer(route(&request(
            "POST",
            "/codec/decode",
            "",
            Caller::Refused,
        )));
        assert_eq!(codec.status, 403);
    }

    #[test]
    fn a_tenant_reads_only_its_own_events() {
        let t1 = || Caller::Tenant("t1".into());
        for path in ["/readyz", "/metrics"] {
            assert_eq!(answer(route(&request("GET", path, "", t1()))).status, 403);
        }
        let codec = answer(route(&request("POST", "/codec/encode", "", t1())));
        assert_eq!(codec.status, 403);
        let other = answer(route(&request(
            "GET",
            "/v1/events/stream",
            "tenant=t2",
            t1(),
        )));
        assert_eq!(other.status, 403);
        let twice = route(&request(
            "GET",
            "/v1/events/stream",
            "tenant=t1&tenant=t2",
            t1(),
        ));
        assert_eq!(answer(twice).status, 400);
        let Action::Events { filter, .. } =
            route(&request("GET", "/v1/events/stream", "types=job.*", t1()))
        else {
            panic!("a stream")
        };
        assert_eq!(filter.tenant.as_deref(), Some("t1"));
        let Action::Events { filter, .. } = route(&request(
            "GET",
            "/v1/events/stream/",
            "tenant=t%32",
            Caller::Operator,
        )) else {
            panic!("a stream")
        };
        assert_eq!(
            filter.tenant.as_deref(),
            Some("t2"),
            "the operator may pick a tenant"
        );
    }

    #[test]
    fn methods_paths_and_times_are_checked() {
        let op = || Caller::Operator;
        assert_eq!(
            answer(route(&request("POST", "/metrics", "", op()))).status,
            405
        );
        assert_eq!(
            answer(route(&request("GET", "/codec/decode", "", op()))).status,
            405
        );
        assert_eq!(
            answer(route(&request("GET", "/nope", "", op()))).status,
            404
        );
        let since = route(&request(
            "GET",
            "/v1/events/stream",
            "since=yesterday",
            op(),
        ));
        assert!(answer(since).body.contains("RFC 3339"));
        assert!(matches!(
            route(&request("HEAD", "/metrics", "", op())),
            Action::Metrics
        ));
        assert!(matches!(
            route(&request("GET", "/readyz", "", op())),
            Action::Readiness
        ));
    }

    #[test]
    fn a_viewer_reads_but_never_writes_nor_decodes() {
        let viewer = Caller::from_decision(&json!({"read_only": true}), "f").unwrap();
        assert_eq!(viewer, Caller::Viewer(None));
        let scoped =
            Caller::from_decision(&json!({"read_only": true, "tenant": "t1"}), "f").unwrap();
        assert_eq!(scoped, Caller::Viewer(Some("t1".into())));
        assert!(Caller::from_decision(&json!({"read_only": true, "tenant": ""}), "f").is_err());
        assert!(matches!(
            route(&request("GET", "/metrics", "", viewer.clone())),
            Action::Metrics
        ));
        let codec = answer(route(&request("POST", "/codec/decode", "", viewer.clone())));
        assert_eq!(codec.status, 403);
        let metrics = answer(route(&request("GET", "/metrics", "", scoped.clone())));
        assert_eq!(
            metrics.status, 403,
            "a tenant's viewer reads what the tenant reads"
        );
        let Action::Dashboard { viewer: seen, .. } = route(&request(
            "GET",
            "/dashboard/api/overview",
            "",
            scoped.clone(),
        )) else {
            panic!("a dashboard call")
        };
        assert_eq!((seen.tenant.as_deref(), seen.writes), (Some("t1"), false));
        let mut write = request("POST", "/dashboard/api/dead/replay", "job_id=x", viewer);
        write.write_header = Some("1");
        assert_eq!(answer(route(&write)).status, 403);
    }

    #[test]
    fn dashboard_writes_need_the_header_and_well_formed_ids() {
        let id = "01890a5d-ac96-774b-bcce-b302099a8057";
        let query = format!("job_id={id}");
        let mut write = request(
            "POST",
            "/dashboard/api/dead/purge",
            &query,
            Caller::Operator,
        );
        assert_eq!(answer(route(&write)).status, 403, "no header");
        write.write_header = Some("1");
        let Action::Dashboard { call, .. } = route(&write) else {
            panic!("a dashboard call")
        };
        assert_eq!(
            call,
            crate::dashboard::Call::Dead {
                replay: false,
                job_ids: vec![id.to_owned()]
            }
        );
        write.query = "job_id=nope";
        assert_eq!(answer(route(&write)).status, 400);
        write.query = "";
        assert_eq!(answer(route(&write)).status, 400);
        let anonymous = answer(route(&request("GET", "/dashboard/", "", Caller::Anonymous)));
        assert_eq!(anonymous.status, 401);
        let get = answer(route(&request(
            "GET",
            "/dashboard/api/dead/purge",
            "",
            Caller::Operator,
        )));
        assert_eq!(get.status, 405);
        assert!(serves("/dashboard") && serves("/dashboard/assets/x.js") && !serves("/dash"));
    }

    #[test]
    fn decisions_are_read_and_odd_ones_refused_without_their_values() {
        let tenant = Caller::from_decision(&json!({"tenant": "t1"}), "authorize").unwrap();
        assert_eq!(tenant, Caller::Tenant("t1".into()));
        assert_eq!(
            Caller::from_decision(&json!("t1"), "f").unwrap(),
            Caller::Tenant("t1".into())
        );
        assert_eq!(
            Caller::from_decision(&json!(true), "f").unwrap(),
            Caller::Operator
        );
        assert_eq!(
            Caller::from_decision(&Value::Null, "f").unwrap(),
            Caller::Refused
        );
        for odd in [
            json!({"token": "s3cret"}),
            json!(""),
            json!({"tenant": ""}),
            json!(1),
        ] {
            let error = Caller::from_decision(&odd, "OJS_HTTP_ACCESS").unwrap_err();
            assert_eq!(error.field.as_deref(), Some("OJS_HTTP_ACCESS"));
            assert!(!error.message.contains("s3cret"), "{}", error.message);
        }
    }
}

//! The operator's dashboard (issue 29), served under `/dashboard/` by every HTTP surface
//! (`ojs-relay run --listen` and the Django, Express and Rails mounts) with the surface's own
//! authorization: the page, its assets, and a JSON API over the outbox table.
//!
//! | path (under the mount) | method | who | answer |
//! |---|---|---|---|
//! | `/dashboard` | GET | a caller | `308` to `dashboard/` (the page's relative URLs need the slash) |
//! | `/dashboard/` | GET | a caller | the page (HTML, no inline script, a CSP) |
//! | `/dashboard/assets/app-<hash>.js`, `.css` | GET | a caller | the asset, cached for a year (the name changes with the content) |
//! | `/dashboard/api/overview` | GET | a caller | counts, oldest age, sent and lag per minute over the last hour, groups by type, queue, tenant; health for the operator |
//! | `/dashboard/api/rows?status=&type=&queue=&job_id=&limit=` | GET | a caller | rows, newest first (no args) |
//! | `/dashboard/api/rows/<job id>` | GET | a caller | one row with its args (encrypted args stay encrypted) |
//! | `/dashboard/api/dead/replay?job_id=..`, `/dead/purge?job_id=..` | POST | the operator or a tenant, not a viewer | `{"replayed"|"purged": n}` |
//!
//! A caller is the operator (everything), a tenant (its own rows only: every statement takes
//! the tenant as its first parameter, and no query parameter can widen it), or a viewer
//! (`{"read_only": true}` from the app's `authorize`, optionally with a `tenant`): the same
//! reads, no writes and no Codec Server. A write must carry `X-OJS-Dashboard: 1`, which a
//! page of another site cannot send without a CORS preflight this surface never grants (the
//! defence against cross-site request forgery that needs no session of our own).

use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::error::Result;
use crate::store::Store;
use crate::store::dashboard::{RowFilter, RowSummary};
use crate::surface::{Action, Answer, Caller};

/// The header a write must carry (value `1`), and the one the page sends.
pub const WRITE_HEADER: &str = "X-OJS-Dashboard";
/// The most job ids one replay or purge names.
const MAX_IDS: usize = 500;
/// Rows listed by default, and at most.
const DEFAULT_ROWS: i64 = 100;
const MAX_ROWS: i64 = 1000;

const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Content-Security-Policy", PAGE_CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
];
const NO_STORE: (&str, &str) = ("Cache-Control", "no-store");
/// Assets are named by their content's hash, so a new build is a new name.
const IMMUTABLE: (&str, &str) = ("Cache-Control", "private, max-age=31536000, immutable");

struct Asset {
    name: String,
    content_type: &'static str,
    body: &'static str,
}

const PAGE: &str = include_str!("../dashboard/index.html");
const SCRIPT: &str = include_str!("../dashboard/app.js");
const STYLE: &str = include_str!("../dashboard/app.css");

fn assets() -> &'static [Asset; 2] {
    static ASSETS: OnceLock<[Asset; 2]> = OnceLock::new();
    ASSETS.get_or_init(|| {
        [
            Asset {
                name: format!("app-{}.js", fnv(SCRIPT)),
                content_type: "text/javascript; charset=utf-8",
                body: SCRIPT,
            },
            Asset {
                name: format!("app-{}.css", fnv(STYLE)),
                content_type: "text/css; charset=utf-8",
                body: STYLE,
            },
        ]
    })
}

/// 64-bit FNV-1a as 16 hex digits: a name that changes with the content.
fn fnv(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Who is asking, as the dashboard needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    /// `Some`: only this tenant's rows.
    pub tenant: Option<String>,
    /// May replay and purge.
    pub writes: bool,
    /// May decode encrypted args through the Codec Server (the operator alone).
    pub decodes: bool,
}

/// What the host does for a dashboard request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Read the readiness verdict (the operator's overview shows it), then [`answer`].
    Overview,
    Rows(RowFilter),
    Row(String),
    Dead {
        replay: bool,
        job_ids: Vec<String>,
    },
}

/// Whether `path` (trailing `/` kept) is the dashboard's.
pub fn serves(path: &str) -> bool {
    path == "/dashboard" || path.starts_with("/dashboard/")
}

/// The dashboard's part of the surface policy, for a caller already known not to be
/// anonymous or refused: an answer, or a call for the host to make with [`answer`].
pub(crate) fn route(
    method: &str,
    path: &str,
    query: &str,
    write_header: Option<&str>,
    caller: &Caller,
) -> Action {
    match routed(method, path, query, write_header, caller) {
        Ok((call, viewer)) => Action::Dashboard { call, viewer },
        Err(answer) => Action::Answer(answer),
    }
}

/// `Err` carries every answer made here (the page and the assets too, not only refusals):
/// `?` then ends the routing wherever the answer is known.
fn routed(
    method: &str,
    path: &str,
    query: &str,
    write_header: Option<&str>,
    caller: &Caller,
) -> std::result::Result<(Call, Viewer), Answer> {
    let viewer = match caller {
        Caller::Operator => Viewer {
            tenant: None,
            writes: true,
            decodes: true,
        },
        Caller::Tenant(tenant) => Viewer {
            tenant: Some(tenant.clone()),
            writes: true,
            decodes: false,
        },
        Caller::Viewer(tenant) => Viewer {
            tenant: tenant.clone(),
            writes: false,
            decodes: false,
        },
        Caller::Anonymous | Caller::Refused => {
            return Err(Answer::error(403, "forbidden", "not a dashboard caller"));
        }
    };
    let get = method == "GET" || method == "HEAD";
    let rest = &path["/dashboard".len()..];
    let call = match rest {
        "" | "/" | "/index.html" if !get => return Err(method_not_allowed(path, "GET")),
        "" => {
            return Err(Answer {
                status: 308,
                content_type: "text/plain; charset=utf-8",
                body: "dashboard/\n".into(),
                headers: vec![("Location", "dashboard/"), NO_STORE],
            });
        }
        "/" | "/index.html" => return Err(page()),
        _ if rest.starts_with("/assets/") => {
            if !get {
                return Err(method_not_allowed(path, "GET"));
            }
            let name = &rest["/assets/".len()..];
            return Err(match assets().iter().find(|a| a.name == name) {
                Some(asset) => Answer {
                    status: 200,
                    content_type: asset.content_type,
                    body: asset.body.to_owned(),
                    headers: vec![("X-Content-Type-Options", "nosniff"), IMMUTABLE],
                },
                None => api_error(404, "not_found", &format!("{path}: no such asset")),
            });
        }
        "/api/overview" if get => Call::Overview,
        "/api/rows" if get => Call::Rows(rows_filter(query, viewer.tenant.clone())?),
        _ if rest.starts_with("/api/rows/") && get => {
            let id = &rest["/api/rows/".len()..];
            if !is_uuid(id) {
                return Err(api_error(400, "invalid_request", "job id: not a UUID"));
            }
            Call::Row(id.to_ascii_lowercase())
        }
        "/api/dead/replay" | "/api/dead/purge" if method == "POST" => {
            if !viewer.writes {
                let message = "this caller may read the dashboard but not replay or purge";
                return Err(api_error(403, "forbidden", message));
            }
            if write_header != Some("1") {
                let message = format!("a write needs the header {WRITE_HEADER}: 1");
                return Err(api_error(403, "forbidden", &message));
            }
            Call::Dead {
                replay: rest.ends_with("replay"),
                job_ids: job_ids(query)?,
            }
        }
        "/api/overview" | "/api/rows" => return Err(method_not_allowed(path, "GET")),
        "/api/dead/replay" | "/api/dead/purge" => return Err(method_not_allowed(path, "POST")),
        _ if rest.starts_with("/api/rows/") => return Err(method_not_allowed(path, "GET")),
        _ => {
            let message = format!("{path}: not a path of the dashboard");
            return Err(api_error(404, "not_found", &message));
        }
    };
    Ok((call, viewer))
}

fn page() -> Answer {
    let [script, style] = assets();
    let body = PAGE
        .replace("{{script}}", &format!("assets/{}", script.name))
        .replace("{{style}}", &format!("assets/{}", style.name));
    let mut headers = SECURITY_HEADERS.to_vec();
    headers.push(NO_STORE);
    Answer {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body,
        headers,
    }
}

fn api_error(status: u16, code: &str, message: &str) -> Answer {
    let mut answer = Answer::error(status, code, message);
    answer.headers = vec![NO_STORE, ("X-Content-Type-Options", "nosniff")];
    answer
}

fn method_not_allowed(path: &str, allowed: &str) -> Answer {
    api_error(
        405,
        "method_not_allowed",
        &format!("{path} answers {allowed} only"),
    )
}

fn api_json(value: &Value) -> Answer {
    Answer {
        status: 200,
        content_type: "application/json",
        body: value.to_string(),
        headers: vec![NO_STORE, ("X-Content-Type-Options", "nosniff")],
    }
}

fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The query's parameters; one given twice is refused (as the event stream refuses it).
fn parameters(query: &str, known: &[&str]) -> std::result::Result<Vec<(String, String)>, Answer> {
    let mut seen = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if !known.contains(&name.as_ref()) {
            let message = format!(
                "unknown query parameter {name}; known: {}",
                known.join(", ")
            );
            return Err(api_error(400, "invalid_request", &message));
        }
        if name != "job_id" && seen.iter().any(|(n, _): &(String, String)| *n == name) {
            let message = format!("the query parameter {name} is given more than once");
            return Err(api_error(400, "invalid_request", &message));
        }
        seen.push((name.into_owned(), value.into_owned()));
    }
    Ok(seen)
}

fn rows_filter(query: &str, tenant: Option<String>) -> std::result::Result<RowFilter, Answer> {
    let mut filter = RowFilter {
        tenant,
        limit: DEFAULT_ROWS,
        ..RowFilter::default()
    };
    let known = ["status", "type", "queue", "job_id", "limit"];
    for (name, value) in parameters(query, &known)? {
        let value = Some(value).filter(|v| !v.is_empty());
        match name.as_str() {
            "status" => {
                if let Some(status) = &value
                    && !["pending", "failed", "sent", "dead"].contains(&status.as_str())
                {
                    let message = "status: one of pending, failed, sent, dead";
                    return Err(api_error(400, "invalid_request", message));
                }
                filter.status = value;
            }
            "type" => filter.job_type = value,
            "queue" => filter.queue = value,
            "job_id" => {
                if value.as_deref().is_some_and(|id| !is_uuid(id)) {
                    return Err(api_error(400, "invalid_request", "job_id: not a UUID"));
                }
                filter.job_id = value.map(|id| id.to_ascii_lowercase());
            }
            _ => {
                let limit = value.as_deref().map(str::parse::<i64>);
                filter.limit = match limit {
                    None => DEFAULT_ROWS,
                    Some(Ok(n)) if (1..=MAX_ROWS).contains(&n) => n,
                    Some(_) => {
                        let message = format!("limit: a whole number from 1 to {MAX_ROWS}");
                        return Err(api_error(400, "invalid_request", &message));
                    }
                };
            }
        }
    }
    Ok(filter)
}

fn job_ids(query: &str) -> std::result::Result<Vec<String>, Answer> {
    let ids: Vec<String> = parameters(query, &["job_id"])?
        .into_iter()
        .map(|(_, id)| id.to_ascii_lowercase())
        .collect();
    if ids.is_empty() || ids.len() > MAX_IDS {
        let message = format!("job_id: name 1 to {MAX_IDS} dead rows (job_id=...&job_id=...)");
        return Err(api_error(400, "invalid_request", &message));
    }
    if ids.iter().any(|id| !is_uuid(id)) {
        return Err(api_error(400, "invalid_request", "job_id: not a UUID"));
    }
    Ok(ids)
}

/// What a dashboard call changed, for the host: the rows it put back to `pending`, to wake
/// its relay for (`Outbox::notify_committed`).
#[derive(Debug, Default)]
pub struct Effects {
    pub replayed: Vec<String>,
}

/// Carries out a call. `readiness`: the host's verdict (`{"ready", "database", "backend"}`)
/// for the operator's overview; `events`: the bus that announces a replay or purge.
pub async fn answer(
    store: &Store,
    call: &Call,
    viewer: &Viewer,
    readiness: Option<Value>,
    events: Option<&crate::events::EventBus>,
) -> (Answer, Effects) {
    match run(store, call, viewer, readiness, events).await {
        Ok(done) => done,
        Err(error) => {
            let status = if error.code == crate::error::ErrorCode::OutboxTableMissing {
                404
            } else {
                503
            };
            let answer = api_error(status, error.code.as_str(), &error.message);
            (answer, Effects::default())
        }
    }
}

async fn run(
    store: &Store,
    call: &Call,
    viewer: &Viewer,
    readiness: Option<Value>,
    events: Option<&crate::events::EventBus>,
) -> Result<(Answer, Effects)> {
    let tenant = viewer.tenant.as_deref();
    let value = match call {
        Call::Overview => {
            let counts = store.dashboard_counts(tenant).await?;
            let count = |status: &str| {
                let row = counts.iter().find(|(s, ..)| s == status);
                row.map_or(0, |(_, rows, _)| *rows)
            };
            let oldest = counts
                .iter()
                .filter(|(s, ..)| s == "pending" || s == "failed")
                .map(|(_, _, age)| *age)
                .max()
                .unwrap_or(0);
            json!({
                "viewer": viewer_json(viewer),
                "counts": {
                    "pending": count("pending"),
                    "failed": count("failed"),
                    "sent": count("sent"),
                    "dead": count("dead"),
                },
                "oldest_pending_age_ms": oldest,
                "minutes": store.dashboard_minutes(tenant).await?,
                "groups": store.dashboard_groups(tenant).await?,
                // The database, the backend and the relays are the operator's to see.
                "health": if tenant.is_none() { readiness } else { None },
                "relays": if tenant.is_none() { relays(store).await } else { Value::Null },
            })
        }
        Call::Rows(filter) => {
            let rows: Vec<RowSummary> = store.dashboard_rows(filter).await?;
            json!({ "viewer": viewer_json(viewer), "rows": rows, "limit": filter.limit })
        }
        Call::Row(job_id) => match store.dashboard_row(tenant, job_id).await? {
            None => {
                let message = format!("no row with job id {job_id} (in this caller's scope)");
                return Ok((api_error(404, "not_found", &message), Effects::default()));
            }
            Some(row) => {
                let args: Value = serde_json::from_str(&row.args).unwrap_or(Value::Null);
                let meta: Value = serde_json::from_str(&row.meta).unwrap_or(Value::Null);
                let encrypted = crate::codec::is_encoded(&args);
                // Encrypted args leave only as the Codec Server's payload, and only to the
                // one who may decode them.
                let (shown, payload) = match (encrypted, viewer.decodes) {
                    (false, _) => (args, Value::Null),
                    (true, true) => (
                        json!("encrypted"),
                        crate::codec::decode_request_for(&args, &meta),
                    ),
                    (true, false) => (json!("encrypted"), Value::Null),
                };
                json!({
                    "viewer": viewer_json(viewer),
                    "row": {
                        "summary": row.summary,
                        "available_at_ms": row.available_at_ms,
                        "order_key": row.order_key,
                        "args": shown,
                        "encrypted": encrypted,
                        "codec_request": payload,
                        "options": serde_json::from_str::<Value>(&row.options).unwrap_or(Value::Null),
                        "meta": meta,
                    },
                })
            }
        },
        Call::Dead { replay, job_ids } => {
            let (n, kind, key) = if *replay {
                let n = store.dead_replay_ids(tenant, job_ids).await?;
                (n, "ojs.outbox.dead_replayed", "replayed")
            } else {
                let n = store.dead_purge_ids(tenant, job_ids).await?;
                (n, "ojs.outbox.dead_purged", "purged")
            };
            if let Some(events) = events {
                events.operator_event(kind, tenant, n).await;
            }
            let effects = Effects {
                replayed: if *replay { job_ids.clone() } else { Vec::new() },
            };
            return Ok((api_json(&json!({ key: n })), effects));
        }
    };
    Ok((api_json(&value), Effects::default()))
}

fn viewer_json(viewer: &Viewer) -> Value {
    json!({
        "tenant": viewer.tenant,
        "writes": viewer.writes,
        "decodes": viewer.decodes,
    })
}

/// The relays' registry with each heartbeat's age; empty before any relay made it.
async fn relays(store: &Store) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let seen = store.relays().await.unwrap_or_default();
    Value::Array(
        seen.into_iter()
            .map(|relay| {
                let age = (now - relay.heartbeat_ms).max(0);
                let mut value = serde_json::to_value(relay).expect("a relay serializes");
                value["heartbeat_age_ms"] = json!(age);
                value
            })
            .collect(),
    )
}

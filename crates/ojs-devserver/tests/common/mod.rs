//! Shared helpers: a thin JSON client over reqwest (no `json` feature) and job builders.
#![allow(dead_code)]

use ojs_devserver::DevServer;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

pub const OJS_JSON: &str = "application/openjobspec+json";

/// A JSON answer: status, headers, parsed body (`Value::Null` when the body is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
}

impl Client {
    pub fn new(server: &DevServer) -> Client {
        Client {
            http: new_http_client(),
            base: server.url(),
        }
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("request failed");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            body,
        }
    }

    /// POST with the OJS content type.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.post_raw(path, OJS_JSON, body.to_string()).await
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: String) -> Answer {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", content_type)
                .body(body),
        )
        .await
    }

    /// POST that is expected to fail at the transport level (no HTTP response at all).
    pub async fn post_expecting_no_response(&self, path: &str, body: &Value) -> reqwest::Error {
        match self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", OJS_JSON)
            .body(body.to_string())
            .send()
            .await
        {
            Ok(response) => panic!(
                "expected a connection error, got HTTP {}",
                response.status()
            ),
            Err(error) => error,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn enqueue(&self, job: &Value) -> Answer {
        self.post("/ojs/v1/jobs", job).await
    }

    pub async fn enqueue_batch(&self, jobs: &[Value]) -> Answer {
        self.post("/ojs/v1/jobs/batch", &json!({ "jobs": jobs }))
            .await
    }

    pub async fn received(&self) -> Value {
        let answer = self.get("/_dev/received").await;
        assert_eq!(answer.status, 200);
        answer.body
    }
}

pub fn new_http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

pub async fn start() -> (DevServer, Client) {
    let server = DevServer::start(0).await.expect("start devserver");
    let client = Client::new(&server);
    (server, client)
}

/// A valid, distinct UUIDv7 per `n`.
pub fn job_id(n: u64) -> String {
    format!("0194fb3e-1c2d-7a4b-8c9d-{n:012x}")
}

/// A valid job with a client id.
pub fn job(n: u64, job_type: &str) -> Value {
    json!({ "id": job_id(n), "type": job_type, "args": [n] })
}

/// The ids of `GET /_dev/received` jobs, in arrival order.
pub fn received_ids(received: &Value) -> Vec<String> {
    received["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Response rules, written from the OJS documents (not copied from them):
// `ojs-http-binding.md` §6.5 (headers), §9.1/§9.2 (responses), §16 (errors), §21 (manifest);
// `ojs-core.md` §5 (the envelope); `schemas/v1/http/enqueue-response.schema.json`,
// `batch-enqueue-response.schema.json`, `manifest.schema.json` of `openjobspec/ojs-json-schema`.

/// The binding's error codes (§16.3) that an HTTP answer can carry; other codes need `x_`.
pub const BINDING_ERROR_CODES: [&str; 10] = [
    "invalid_payload",
    "invalid_request",
    "not_found",
    "backend_error",
    "rate_limited",
    "duplicate",
    "queue_paused",
    "schema_validation",
    "unsupported",
    // Not in §16.3, but the reference servers' code for a broken retry policy (422), listed in
    // `openapi.yaml`'s error codes.
    "validation_error",
];

/// The eight lifecycle states (`ojs-core.md` §6.1).
pub const JOB_STATES: [&str; 8] = [
    "scheduled",
    "available",
    "pending",
    "active",
    "completed",
    "retryable",
    "cancelled",
    "discarded",
];

/// Now plus `offset_ms`, as `YYYY-MM-DDTHH:MM:SS.mmmZ`: the form the devserver writes, so such
/// strings compare as the times they name.
pub fn utc_ms_after(offset_ms: i64) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + offset_ms;
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    // civil_from_days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// `^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`.
pub fn is_uuid_v7(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            14 => *c == b'7',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
}

/// JSON Schema `format: date-time` (RFC 3339) with the binding's rule (§6.3) that timestamps
/// are UTC with a `Z`: `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
pub fn is_utc_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let head = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let tail = &b[19.min(b.len())..];
    head && match tail {
        [b'Z'] => true,
        [b'.', rest @ .., b'Z'] => !rest.is_empty() && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// §6.5: every response carries `X-Request-Id` (non-empty); OJS answers also `OJS-Version`
/// and the OJS media type.
pub fn assert_ojs_headers(answer: &Answer) {
    let request_id = answer.header("x-request-id").unwrap_or("");
    assert!(!request_id.is_empty(), "X-Request-Id missing: {answer:?}");
    assert!(
        answer.header("ojs-version").is_some_and(|v| !v.is_empty()),
        "OJS-Version missing: {answer:?}"
    );
    assert_eq!(answer.header("content-type"), Some(OJS_JSON));
}

/// The job envelope as the enqueue response schema and `ojs-core.md` §5 define it, with
/// `states` the states allowed here (enqueue: available, scheduled, pending).
pub fn assert_envelope(job: &Value, states: &[&str]) {
    let object = job
        .as_object()
        .unwrap_or_else(|| panic!("job object: {job}"));
    for required in [
        "id",
        "type",
        "state",
        "args",
        "queue",
        "attempt",
        "created_at",
    ] {
        assert!(object.contains_key(required), "job lacks {required}: {job}");
    }
    assert!(is_uuid_v7(job["id"].as_str().unwrap_or("")), "id: {job}");
    assert!(job["type"].is_string(), "type: {job}");
    let state = job["state"].as_str().unwrap_or("");
    assert!(states.contains(&state), "state {state:?} not in {states:?}");
    assert!(job["args"].is_array(), "args: {job}");
    if let Some(meta) = object.get("meta") {
        assert!(
            meta.is_object(),
            "meta is an object or absent, never {meta}"
        );
    }
    assert!(job["queue"].is_string(), "queue: {job}");
    assert!(job["priority"].is_i64(), "priority: {job}");
    assert!(
        job["attempt"].as_i64().is_some_and(|a| a >= 0),
        "attempt: {job}"
    );
    assert!(
        job["max_attempts"].as_i64().is_some_and(|a| a >= 0),
        "max_attempts: {job}"
    );
    for timestamp in ["created_at", "enqueued_at"] {
        assert!(
            is_utc_timestamp(job[timestamp].as_str().unwrap_or("")),
            "{timestamp}: {job}"
        );
    }
    for optional in ["scheduled_at", "expires_at", "cancelled_at"] {
        if let Some(value) = object.get(optional) {
            assert!(value.is_string(), "{optional}: {job}");
        }
    }
    if let Some(tags) = object.get("tags") {
        assert!(
            tags.as_array()
                .is_some_and(|t| t.iter().all(Value::is_string)),
            "tags: {job}"
        );
    }
}

/// A `201` single push: `{"job": envelope}` and nothing else (the schema's
/// `additionalProperties: false`), a newly created job (`attempt` 0, state available,
/// scheduled or pending), `Location` naming it (§9.1).
pub fn assert_created(answer: &Answer) -> &Value {
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_ojs_headers(answer);
    let body = answer.body.as_object().expect("body object");
    assert_eq!(body.len(), 1, "only `job`: {}", answer.body);
    let job = &answer.body["job"];
    assert_envelope(job, &["available", "scheduled", "pending"]);
    assert_eq!(job["attempt"], 0);
    let location = format!("/ojs/v1/jobs/{}", job["id"].as_str().unwrap());
    assert_eq!(answer.header("location"), Some(location.as_str()));
    job
}

/// A `201` batch push (§9.2, batch-enqueue-response schema): `jobs` and `count` only, count
/// equal to the number of jobs and at least 1, every job an envelope.
pub fn assert_batch_created(answer: &Answer) -> &Vec<Value> {
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_ojs_headers(answer);
    let body = answer.body.as_object().expect("body object");
    assert_eq!(body.len(), 2, "only `jobs` and `count`: {}", answer.body);
    let jobs = answer.body["jobs"].as_array().expect("jobs array");
    assert!(!jobs.is_empty());
    assert_eq!(answer.body["count"], jobs.len());
    for job in jobs {
        assert_envelope(job, &JOB_STATES);
    }
    jobs
}

/// An error answer (§16.1): only `error`, holding a code of the vocabulary (§16.3, or
/// `x_`-prefixed), a non-empty message, `retryable`, `details` as an object when present, and
/// `request_id` equal to the `X-Request-Id` header (§19.1). Returns the error object.
pub fn assert_error<'a>(answer: &'a Answer, status: u16, code: &str) -> &'a Value {
    assert_eq!(answer.status, status, "{:?}", answer.body);
    assert_ojs_headers(answer);
    let body = answer.body.as_object().expect("body object");
    assert_eq!(body.len(), 1, "only `error`: {}", answer.body);
    let error = &answer.body["error"];
    let actual = error["code"].as_str().unwrap_or("");
    assert_eq!(actual, code, "{}", answer.body);
    assert!(
        BINDING_ERROR_CODES.contains(&actual) || actual.starts_with("x_"),
        "code {actual:?} outside the binding's vocabulary"
    );
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(error["retryable"].is_boolean(), "{}", answer.body);
    if let Some(details) = error.get("details") {
        assert!(details.is_object(), "details: {details}");
    }
    assert_eq!(
        error["request_id"].as_str(),
        answer.header("x-request-id"),
        "request_id mirrors X-Request-Id"
    );
    if code == "validation_error" {
        assert_eq!(error["type"], "validation_error", "{}", answer.body);
    }
    if let Some(doc_url) = error.get("doc_url") {
        assert!(
            doc_url.as_str().is_some_and(|u| u.starts_with("https://")),
            "doc_url is a URI: {doc_url}"
        );
    }
    error
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

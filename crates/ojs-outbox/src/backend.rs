//! The OJS HTTP client the relay speaks through (`POST /ojs/v1/jobs[/batch]`, `GET /jobs/{id}`,
//! `GET /ojs/manifest`). It turns every answer, or the lack of one, into an `Outcome`.

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};

use crate::classify::{self, Outcome};
use crate::config::Config;
use crate::error::{Error, ErrorCode, Result};

const OJS_JSON: &str = "application/openjobspec+json";

#[derive(Debug, Clone)]
pub struct Backend {
    client: reqwest::Client,
    base_url: String,
    auth_header: Option<String>,
}

impl Backend {
    /// Only a handle parsed for a host that needs no backend (`config::Host`) has no URL: it
    /// connects (migrate, status, dead letters) and every request it would make fails instead.
    pub fn new(config: &Config) -> Result<Backend> {
        let client = reqwest::Client::builder()
            .timeout(config.relay.request_timeout)
            .connect_timeout(config.relay.request_timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| {
                Error::field(ErrorCode::InvalidConfig, "adapter.ojs_url", e.to_string())
            })?;
        Ok(Backend {
            client,
            base_url: config.ojs_url.trim_end_matches('/').to_owned(),
            auth_header: config.auth_token.as_ref().map(|t| format!("Bearer {t}")),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The answer to any request of a handle configured without a URL.
    fn no_url(&self) -> Option<String> {
        self.base_url.is_empty().then(|| {
            "no OJS backend URL is set: this handle was configured for commands that do not send"
                .to_owned()
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut builder = self
            .client
            .request(method, format!("{}{path}", self.base_url))
            .header(ACCEPT, OJS_JSON);
        if let Some(auth) = &self.auth_header {
            builder = builder.header(AUTHORIZATION, auth);
        }
        builder
    }

    /// The outcome, the answer's text (empty when there was none) and what the request got.
    async fn post(&self, path: &str, body: String) -> (Outcome, String, Answer) {
        if let Some(reason) = self.no_url() {
            return (
                Outcome::Misconfigured { reason },
                String::new(),
                Answer::default(),
            );
        }
        let request = self
            .request(reqwest::Method::POST, path)
            .header(CONTENT_TYPE, OJS_JSON)
            .body(body);
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let answer = Answer {
                    status: Some(status),
                    transport: None,
                };
                let retry_after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| classify::parse_retry_after(v, time::OffsetDateTime::now_utc()));
                match response.text().await {
                    Ok(text) => (classify::classify(status, retry_after, &text), text, answer),
                    Err(e) => (transport(&e), String::new(), Answer::failed(&e)),
                }
            }
            Err(e) => (transport(&e), String::new(), Answer::failed(&e)),
        }
    }

    /// A request whose answer the caller reads itself: the status and the body's text (a
    /// JSON `body` is sent as the OJS content type). No answer at all is
    /// `BACKEND_UNAVAILABLE`.
    pub(crate) async fn exchange(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, String)> {
        if let Some(reason) = self.no_url() {
            return Err(Error::field(
                ErrorCode::InvalidConfig,
                crate::config::URL_FIELD,
                reason,
            ));
        }
        let unavailable = |e: reqwest::Error| {
            Error::new(
                ErrorCode::BackendUnavailable,
                format!("{method} {}{path}: {}", self.base_url, error_chain(&e)),
            )
        };
        let mut request = self.request(method.clone(), path);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, OJS_JSON)
                .body(body.to_string());
        }
        let response = request.send().await.map_err(unavailable)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(unavailable)?;
        Ok((status, text))
    }

    /// One job (its wire JSON).
    pub async fn send_one(&self, wire_json: String) -> Outcome {
        self.send_one_answered(wire_json).await.0
    }

    /// `send_one`, and what the request got (for the relay's span).
    pub async fn send_one_answered(&self, wire_json: String) -> (Outcome, Answer) {
        let (outcome, _, answer) = self.post("/ojs/v1/jobs", wire_json).await;
        (outcome, answer)
    }

    /// Several jobs in one request; `body` is `{"jobs": [...]}`.
    /// With a refusal, the index of the job the backend names as the cause (`details.index`).
    pub async fn send_batch(&self, body: String) -> (Outcome, Option<usize>, Answer) {
        let (outcome, text, answer) = self.post("/ojs/v1/jobs/batch", body).await;
        let index = match outcome {
            Outcome::Delivered { .. } => None,
            _ => classify::failed_index(&text),
        };
        (outcome, index, answer)
    }

    /// Whether the backend holds a job with this id (after a 409, to tell our own earlier
    /// delivery from a unique-key conflict). Err = could not tell.
    pub async fn job_exists(&self, job_id: &str) -> std::result::Result<bool, String> {
        if let Some(reason) = self.no_url() {
            return Err(reason);
        }
        let response = self
            .request(reqwest::Method::GET, &format!("/ojs/v1/jobs/{job_id}"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            other => Err(format!("GET /ojs/v1/jobs/{job_id} answered {other}")),
        }
    }

    /// `job_exists` for each of `ids`, answers in their order, with at most `in_flight`
    /// requests at a time: the OJS binding has no lookup of several ids in one request. After
    /// the first failure, or once `deadline` has passed, no further request starts, and the
    /// ids not asked about are `None`.
    pub async fn jobs_exist(
        &self,
        ids: &[&str],
        in_flight: usize,
        deadline: Option<tokio::time::Instant>,
    ) -> Vec<Option<std::result::Result<bool, String>>> {
        let mut answers: Vec<Option<std::result::Result<bool, String>>> = vec![None; ids.len()];
        let mut running = tokio::task::JoinSet::new();
        let mut next = 0;
        let mut failed = false;
        loop {
            while next < ids.len()
                && running.len() < in_flight.max(1)
                && !failed
                && deadline.is_none_or(|deadline| tokio::time::Instant::now() < deadline)
            {
                let (backend, id, index) = (self.clone(), ids[next].to_owned(), next);
                running.spawn(async move { (index, backend.job_exists(&id).await) });
                next += 1;
            }
            let Some(done) = running.join_next().await else {
                return answers;
            };
            // A panicked lookup leaves its id unasked (`None`).
            if let Ok((index, answer)) = done {
                failed |= answer.is_err();
                answers[index] = Some(answer);
            }
        }
    }

    /// Whether the manifest offers `POST /ojs/v1/jobs/batch`. Err = could not tell.
    pub async fn batch_supported(&self) -> std::result::Result<bool, String> {
        if let Some(reason) = self.no_url() {
            return Err(reason);
        }
        let response = self
            .request(reqwest::Method::GET, "/ojs/manifest")
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(false); // no manifest: a Level 0 server, which has no batch endpoint
        }
        if !response.status().is_success() {
            return Err(format!("GET /ojs/manifest answered {}", response.status()));
        }
        let manifest: serde_json::Value = response.json_value().await?;
        Ok(manifest
            .pointer("/capabilities/batch_enqueue")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false))
    }

    /// `GET /ojs/v1/health`: Ok when the backend answers 200.
    pub async fn health(&self) -> Result<()> {
        if let Some(reason) = self.no_url() {
            return Err(Error::field(
                ErrorCode::InvalidConfig,
                crate::config::URL_FIELD,
                reason,
            ));
        }
        let unavailable = |why: String| {
            Error::new(
                ErrorCode::BackendUnavailable,
                format!("{}: {why}", self.base_url),
            )
        };
        let response = self
            .request(reqwest::Method::GET, "/ojs/v1/health")
            .send()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(unavailable(format!(
                "health answered {}",
                response.status()
            )))
        }
    }
}

trait JsonValue {
    async fn json_value(self) -> std::result::Result<serde_json::Value, String>;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> std::result::Result<serde_json::Value, String> {
        let text = self.text().await.map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }
}

/// What a POST got, beside its outcome: the HTTP status, or the kind of transport failure
/// (`timeout`, `connect`, `transport`) when no answer came. For the relay's `send` span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer {
    pub status: Option<u16>,
    pub transport: Option<&'static str>,
}

impl Answer {
    fn failed(error: &reqwest::Error) -> Answer {
        let kind = if error.is_timeout() {
            "timeout"
        } else if error.is_connect() {
            "connect"
        } else {
            "transport"
        };
        Answer {
            status: None,
            transport: Some(kind),
        }
    }
}

fn transport(error: &reqwest::Error) -> Outcome {
    Outcome::Unavailable {
        reason: error_chain(error),
        retry_after: None,
    }
}

/// The error with its causes ("error sending request: ...: Connection refused").
fn error_chain(error: &reqwest::Error) -> String {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        reason.push_str(": ");
        reason.push_str(&inner.to_string());
        source = inner.source();
    }
    reason
}

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

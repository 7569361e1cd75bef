//! A client of an OJS event stream (`GET /v1/events/stream`, RFC-0005 §1): an OJS backend's,
//! or a relay's own. Written once here for every SDK: it reads the Server-Sent Events, and when
//! the connection drops it reconnects (backing off, 100 ms to 5 s) with `Last-Event-ID` set to
//! the last event it handed over, and drops an event id it already handed over, so a consumer
//! loses nothing the server still keeps and sees no id twice.
//!
//! The SSE parser (`Parser`, below) is hand-written because the maintained crates change what a
//! byte the stream cannot decode does. Here, as in the HTML standard's "UTF-8 decode", invalid
//! bytes become U+FFFD in that line and the stream goes on. `eventsource-stream` 0.2.3 keeps
//! everything after the first invalid byte in its UTF-8 buffer and retries the same decode on
//! each chunk, so the connection hands over no further event while its buffer grows.
//! `sse-stream` 0.3 validates UTF-8 strictly and ends the stream at the first error. The
//! reconnect then sends `Last-Event-ID`, the server replays the same event, and the client
//! would loop on it. `sse-stream` also returns raw blocks, so it would not carry `id` across
//! events and would hand over metadata-only blocks. Feeding either crate lossily decoded text
//! would take a line buffer in front of it (a split at `\n` cannot cut a UTF-8 sequence), and
//! that buffer is most of this parser. The parser keeps CRLF and LF line ends, comments,
//! multi-line `data`, an `id` that lasts until the next one, and `retry` ignored: the client's
//! own backoff applies.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;

use crate::error::{Error, ErrorCode, Result};

/// What to subscribe to (JSON from the bindings: `EventSubscription::from_json`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSubscription {
    /// The stream's URL, e.g. `http://localhost:8080/v1/events/stream`.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`.
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub types: Vec<String>,
    #[serde(default)]
    pub queues: Vec<String>,
    #[serde(default)]
    pub job_types: Vec<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    /// Replay from this RFC 3339 time (first connection only).
    #[serde(default)]
    pub since: Option<String>,
    /// Resume after this event id (first connection; later ones use the last event received).
    #[serde(default)]
    pub last_event_id: Option<String>,
}

impl EventSubscription {
    /// The option keys, for a binding that checks or respells names.
    pub const KEYS: [&'static str; 8] = [
        "url",
        "token",
        "types",
        "queues",
        "job_types",
        "tenant",
        "since",
        "last_event_id",
    ];

    /// Parses and checks the options; an error names the option at fault.
    pub fn from_json(text: &str) -> Result<EventSubscription> {
        let invalid = |field: &str, why: String| Error::field(ErrorCode::InvalidConfig, field, why);
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| invalid("subscription", format!("not JSON: {e}")))?;
        let map = value
            .as_object()
            .ok_or_else(|| invalid("subscription", "must be an object".into()))?;
        for (key, option) in map {
            if !Self::KEYS.contains(&key.as_str()) {
                return Err(invalid(
                    key,
                    format!("unknown option; known: {}", Self::KEYS.join(", ")),
                ));
            }
            let list = matches!(key.as_str(), "types" | "queues" | "job_types");
            let fits = (option.is_null() && key != "url")
                || if list {
                    option
                        .as_array()
                        .is_some_and(|items| items.iter().all(serde_json::Value::is_string))
                } else {
                    option.is_string()
                };
            if !fits {
                let wanted = if list {
                    "a list of strings"
                } else {
                    "a string"
                };
                return Err(invalid(key, format!("must be {wanted}, not {option}")));
            }
        }
        // An option given as null is an option not given.
        let given: serde_json::Map<String, serde_json::Value> = map
            .iter()
            .filter(|(_, option)| !option.is_null())
            .map(|(key, option)| (key.clone(), option.clone()))
            .collect();
        let subscription: EventSubscription =
            serde_json::from_value(serde_json::Value::Object(given))
                .map_err(|e| invalid("subscription", e.to_string()))?;
        let url = reqwest::Url::parse(&subscription.url).map_err(|e| {
            Error::field(
                ErrorCode::InvalidConfig,
                "url",
                format!("{:?} is not a URL: {e}", subscription.url),
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::field(
                ErrorCode::InvalidConfig,
                "url",
                "must be http:// or https://",
            ));
        }
        Ok(subscription)
    }

    fn request_url(&self, first: bool) -> String {
        let mut url = reqwest::Url::parse(&self.url).expect("checked");
        {
            let mut query = url.query_pairs_mut();
            for (name, values) in [
                ("types", &self.types),
                ("queues", &self.queues),
                ("job_types", &self.job_types),
            ] {
                if !values.is_empty() {
                    query.append_pair(name, &values.join(","));
                }
            }
            if let Some(tenant) = &self.tenant {
                query.append_pair("tenant", tenant);
            }
            if let (true, Some(since)) = (first, &self.since) {
                query.append_pair("since", since);
            }
        }
        url.to_string()
    }
}

/// One event as received: its SSE `id`, `event` and `data` (the CloudEvents JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedEvent {
    pub id: String,
    pub kind: String,
    pub data: String,
}

/// A running subscription. Dropping it (or [`EventClient::close`]) stops the reader.
pub struct EventClient {
    events: mpsc::Receiver<Result<ReceivedEvent>>,
    task: tokio::task::JoinHandle<()>,
}

/// Events buffered between the reader and the consumer.
const BUFFER: usize = 1024;
/// How many recent ids are remembered to drop repeats after a reconnect.
const REMEMBERED_IDS: usize = 10_000;

impl EventClient {
    /// Starts reading on the current tokio runtime.
    pub fn start(subscription: EventSubscription) -> EventClient {
        let (sender, events) = mpsc::channel(BUFFER);
        let task = tokio::spawn(read_forever(subscription, sender));
        EventClient { events, task }
    }

    /// The next event; `None` once the client is closed. An `Err` is final: the server refused
    /// the subscription (401, 403, 404, 400), and the client stops.
    pub async fn next(&mut self) -> Option<Result<ReceivedEvent>> {
        self.events.recv().await
    }

    pub fn close(&self) {
        self.task.abort();
    }
}

impl Drop for EventClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_forever(
    subscription: EventSubscription,
    sender: mpsc::Sender<Result<ReceivedEvent>>,
) {
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            let _ = sender
                .send(Err(Error::new(
                    ErrorCode::BackendUnavailable,
                    e.to_string(),
                )))
                .await;
            return;
        }
    };
    let mut last_id = subscription.last_event_id.clone();
    let mut seen = Seen::default();
    let mut first = true;
    let mut failures: u32 = 0;
    loop {
        let mut request = http
            .get(subscription.request_url(first))
            .header("Accept", "text/event-stream");
        if let Some(token) = &subscription.token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = &last_id {
            request = request.header("Last-Event-ID", id);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => {
                first = false;
                failures = 0;
                let mut response = response;
                let mut parser = Parser::default();
                // Until the server ends or drops the stream: then reconnect.
                while let Ok(Some(bytes)) = response.chunk().await {
                    for event in parser.push(&bytes) {
                        if !seen.insert(&event.id) {
                            continue;
                        }
                        if !event.id.is_empty() {
                            last_id = Some(event.id.clone());
                        }
                        if sender.send(Ok(event)).await.is_err() {
                            return; // the consumer is gone
                        }
                    }
                }
            }
            Ok(response) if is_refusal(response.status().as_u16()) => {
                let status = response.status();
                let body = response.text().await.unwrap_or_default();
                let _ = sender
                    .send(Err(Error::new(
                        ErrorCode::BackendRejected,
                        format!("the event stream refused the subscription: {status} {body}"),
                    )))
                    .await;
                return;
            }
            Ok(_) | Err(_) => failures += 1,
        }
        if sender.is_closed() {
            return;
        }
        let delay = Duration::from_millis(100u64.saturating_mul(1 << failures.min(6)))
            .min(Duration::from_secs(5));
        tokio::time::sleep(delay).await;
    }
}

fn is_refusal(status: u16) -> bool {
    matches!(status, 400 | 401 | 403 | 404 | 405)
}

/// Recently handed-over ids.
#[derive(Default)]
struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// `false` for an id already handed over (an id-less event always passes).
    fn insert(&mut self, id: &str) -> bool {
        if id.is_empty() {
            return true;
        }
        if !self.set.insert(id.to_owned()) {
            return false;
        }
        self.order.push_back(id.to_owned());
        if self.order.len() > REMEMBERED_IDS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

/// The Server-Sent Events parser (HTML Living Standard, "event stream interpretation"): lines
/// of `field: value`, dispatched at a blank line; `data` lines joined by newlines; comments
/// (`:`) and `retry` ignored.
#[derive(Default)]
struct Parser {
    pending: Vec<u8>,
    id: String,
    kind: String,
    data: Vec<String>,
}

impl Parser {
    fn push(&mut self, bytes: &[u8]) -> Vec<ReceivedEvent> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(ReceivedEvent {
                        id: self.id.clone(),
                        kind: if self.kind.is_empty() {
                            "message".to_owned()
                        } else {
                            std::mem::take(&mut self.kind)
                        },
                        data: self.data.join("\n"),
                    });
                }
                self.data.clear();
                self.kind.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "id" if !value.contains('\0') => self.id = value.to_owned(),
                "event" => self.kind = value.to_owned(),
                "data" => self.data.push(value.to_owned()),
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_parse_the_same() {
        let text = ": comment\nid: 1\nevent: job.enqueued\ndata: {\"a\":1}\n\nid: 2\nevent: job.failed\ndata: x\ndata: y\n\n";
        for cut in 0..text.len() {
            let mut parser = Parser::default();
            let mut events = parser.push(&text.as_bytes()[..cut]);
            events.extend(parser.push(&text.as_bytes()[cut..]));
            assert_eq!(events.len(), 2, "cut at {cut}");
            assert_eq!(events[0].kind, "job.enqueued");
            assert_eq!(events[0].data, "{\"a\":1}");
            assert_eq!(events[1].id, "2");
            assert_eq!(events[1].data, "x\ny");
        }
    }

    #[test]
    fn a_repeated_id_is_dropped() {
        let mut seen = Seen::default();
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.insert(""));
        assert!(seen.insert(""));
    }

    #[test]
    fn the_request_carries_the_filters() {
        let subscription = EventSubscription::from_json(
            r#"{"url": "http://h:1/v1/events/stream", "types": ["job.*", "ojs.relay.paused"], "queues": ["email"], "since": "2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        let first = subscription.request_url(true);
        assert!(
            first.contains("types=job.*%2Cojs.relay.paused")
                || first.contains("types=job.%2A%2Cojs.relay.paused"),
            "{first}"
        );
        assert!(first.contains("queues=email"));
        assert!(first.contains("since="));
        assert!(!subscription.request_url(false).contains("since="));
        for bad in [
            r#"{"url": "ftp://h"}"#,
            r#"{"url": "x"}"#,
            r#"{"url": "http://h", "typo": 1}"#,
        ] {
            assert_eq!(
                EventSubscription::from_json(bad).unwrap_err().code,
                ErrorCode::InvalidConfig,
                "{bad}"
            );
        }
    }
}

#[cfg(test)]
mod option_tests {
    use super::*;

    #[test]
    fn a_bad_option_is_named() {
        let field = |text: &str| {
            EventSubscription::from_json(text)
                .err()
                .and_then(|e| e.field)
        };
        assert_eq!(
            field(r#"{"url": "http://x/v1/events/stream", "types": "job.*"}"#).as_deref(),
            Some("types")
        );
        assert_eq!(
            field(r#"{"url": "http://x/v1/events/stream", "tipes": ["job.*"]}"#).as_deref(),
            Some("tipes")
        );
        assert_eq!(
            field(r#"{"url": "http://x/v1/events/stream", "since": 5}"#).as_deref(),
            Some("since")
        );
        assert_eq!(field(r#"{"url": null}"#).as_deref(), Some("url"));
        assert!(
            EventSubscription::from_json(
                r#"{"url": "http://x/v1/events/stream", "types": null, "tenant": null}"#
            )
            .is_ok(),
            "null is not given"
        );
    }
}

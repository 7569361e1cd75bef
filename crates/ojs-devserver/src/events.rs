//! The event stream a backend serves (RFC-0005): `GET /v1/events/stream`, Server-Sent Events
//! carrying CloudEvents 1.0 envelopes.
//!
//! - Every event is kept in memory while the process lives, the newest [`HISTORY_LIMIT`] of
//!   them (tier 2, at-least-once: replay from `Last-Event-ID` or `since`); `POST /_dev/reset`
//!   clears the history.
//! - Events are published while the state lock is held by the change that makes them, so the
//!   order of the history (and of every stream) is the order of the changes: per job causal.
//! - A subscription registers and reads the history under the hub's lock, so no event falls
//!   between the replay and the live part, and none comes twice.
//! - Each subscriber has a bounded buffer ([`SUBSCRIBER_BUFFER`] frames). Publishing never
//!   waits: a subscriber whose buffer is full is cut off; its stream sends what it had, one
//!   final `ojs.stream.overflow` frame (without an SSE `id`, so the client's `Last-Event-ID`
//!   stays at the last real event), and ends. The client reconnects and replays.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::timefmt::{format_ms, now_us};
use crate::validate::format_job_id;

/// `source` of every event the devserver emits.
pub(crate) const SOURCE: &str = "/ojs/backend/devserver";
/// How many events are kept for replay (the oldest go first).
pub const HISTORY_LIMIT: usize = 100_000;
/// How many frames one subscriber may fall behind before it is cut off.
pub const SUBSCRIBER_BUFFER: usize = 8_192;

/// One published event: what the filters read and what its SSE frame is made of. The frame is
/// written once, when a subscriber or a replay first needs it: a drain with nobody listening
/// keeps a history of 100,000 events, and formatting each one as it happened was a quarter of
/// the server's work.
pub(crate) struct Event {
    id: uuid::Uuid,
    time_us: u64,
    kind: &'static str,
    queue: String,
    job_type: Arc<str>,
    job_id: u128,
    state: &'static str,
    extra: Map<String, Value>,
    frame: OnceLock<Bytes>,
}

impl Event {
    fn frame(&self) -> Bytes {
        self.frame.get_or_init(|| self.render()).clone()
    }

    fn render(&self) -> Bytes {
        let job_id = format_job_id(self.job_id);
        let mut data = Map::with_capacity(4 + self.extra.len());
        data.insert("job_id".into(), Value::String(job_id.clone()));
        data.insert("type".into(), Value::String(self.job_type.to_string()));
        data.insert("queue".into(), Value::String(self.queue.clone()));
        data.insert("state".into(), Value::String(self.state.to_owned()));
        data.extend(self.extra.clone());
        let envelope = json!({
            "specversion": "1.0",
            "id": self.id.to_string(),
            "type": self.kind,
            "source": SOURCE,
            "time": format_ms(self.time_us),
            "subject": job_id,
            "datacontenttype": "application/json",
            "data": data,
        });
        Bytes::from(format!(
            "id: {}\nevent: {}\ndata: {envelope}\n\n",
            self.id, self.kind
        ))
    }
}

/// A job event about to be published.
pub(crate) struct JobEvent<'a> {
    pub kind: &'static str,
    pub job_id: u128,
    pub job_type: &'a Arc<str>,
    pub queue: &'a str,
    pub state: &'static str,
    /// Fields beyond `job_id`, `type`, `queue` and `state`.
    pub extra: Map<String, Value>,
}

/// A subscriber's filter (RFC §4): event types (exact, or a prefix when the pattern ends in
/// `*`), queues and job types (exact). An empty list matches everything.
#[derive(Debug, Default, Clone)]
pub(crate) struct Filter {
    types: Vec<String>,
    queues: Vec<String>,
    job_types: Vec<String>,
}

impl Filter {
    fn matches(&self, event: &Event) -> bool {
        let type_ok = self.types.is_empty()
            || self
                .types
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => event.kind.starts_with(prefix),
                    None => pattern == event.kind,
                });
        type_ok
            && (self.queues.is_empty() || self.queues.contains(&event.queue))
            && (self.job_types.is_empty() || self.job_types.iter().any(|t| **t == *event.job_type))
    }
}

/// Where a replay starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReplayFrom {
    /// The events after this id (`Last-Event-ID`); an id no longer (or never) kept replays
    /// everything kept.
    AfterId(String),
    /// The events at or after this instant (`since`, microseconds since the Unix epoch).
    Since(i64),
}

/// What the query string of `GET /v1/events/stream` asks for.
pub(crate) struct StreamQuery {
    pub filter: Filter,
    /// The raw `since` value, if given.
    pub since: Option<String>,
}

/// Parses `types`, `queues`, `job_types` (comma-separated) and `since`; other keys are
/// ignored. Values are percent-decoded (`+` is a space).
pub(crate) fn parse_query(query: Option<&str>) -> StreamQuery {
    let mut filter = Filter::default();
    let mut since = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        let list = || -> Vec<String> {
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        match percent_decode(key).as_str() {
            "types" => filter.types.extend(list()),
            "queues" => filter.queues.extend(list()),
            "job_types" => filter.job_types.extend(list()),
            "since" => since = Some(value.clone()),
            _ => {}
        }
    }
    StreamQuery { filter, since }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Subscriber {
    filter: Filter,
    sender: mpsc::Sender<Bytes>,
    overflowed: Arc<AtomicBool>,
}

struct Inner {
    history: VecDeque<Arc<Event>>,
    subscribers: Vec<Subscriber>,
}

/// The devserver's event bus: the replay history and the live subscribers.
pub(crate) struct EventHub {
    inner: Mutex<Inner>,
    history_limit: usize,
    buffer: usize,
    /// Event ids are UUIDv7s whose random part is this hub's random draw plus a count: unique
    /// without a system call per event.
    id_random: [u8; 2],
    id_count: AtomicU64,
}

impl EventHub {
    pub fn new() -> EventHub {
        // A UUIDv7's last 10 bytes are random (but for the version and variant bits).
        let seed = uuid::Uuid::now_v7().into_bytes();
        EventHub {
            inner: Mutex::new(Inner {
                history: VecDeque::new(),
                subscribers: Vec::new(),
            }),
            history_limit: HISTORY_LIMIT,
            buffer: SUBSCRIBER_BUFFER,
            id_random: [seed[6], seed[7]],
            id_count: AtomicU64::new(u64::from_be_bytes(seed[8..].try_into().expect("8 bytes"))),
        }
    }

    fn next_id(&self, time_us: u64) -> uuid::Uuid {
        let count = self.id_count.fetch_add(1, Ordering::Relaxed);
        let mut random = [0u8; 10];
        random[..2].copy_from_slice(&self.id_random);
        random[2..].copy_from_slice(&count.to_be_bytes());
        uuid::Builder::from_unix_timestamp_millis(time_us / 1000, &random).into_uuid()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes one job event: keeps it for replay and hands it to every matching subscriber
    /// without waiting (a full subscriber is cut off).
    pub fn publish(&self, event: JobEvent<'_>) {
        let time_us = now_us();
        let event = Arc::new(Event {
            id: self.next_id(time_us),
            time_us,
            kind: event.kind,
            queue: event.queue.to_owned(),
            job_type: event.job_type.clone(),
            job_id: event.job_id,
            state: event.state,
            extra: event.extra,
            frame: OnceLock::new(),
        });
        let mut inner = self.lock();
        while inner.history.len() >= self.history_limit {
            inner.history.pop_front();
        }
        inner.history.push_back(event.clone());
        inner.subscribers.retain(|subscriber| {
            if !subscriber.filter.matches(&event) {
                return !subscriber.sender.is_closed();
            }
            match subscriber.sender.try_send(event.frame()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    subscriber.overflowed.store(true, Ordering::Release);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }

    /// A new subscription: the kept events after `from` that match, then live ones.
    pub fn subscribe(&self, filter: Filter, from: Option<&ReplayFrom>) -> EventStream {
        let (sender, receiver) = mpsc::channel(self.buffer);
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut inner = self.lock();
        let backlog: VecDeque<Bytes> = match from {
            None => VecDeque::new(),
            Some(from) => {
                let start = match from {
                    ReplayFrom::AfterId(id) => {
                        let id = uuid::Uuid::parse_str(id).ok();
                        inner
                            .history
                            .iter()
                            .rposition(|e| Some(e.id) == id)
                            .map_or(0, |at| at + 1)
                    }
                    ReplayFrom::Since(us) => inner
                        .history
                        .iter()
                        .position(|e| e.time_us as i64 >= *us)
                        .unwrap_or(inner.history.len()),
                };
                inner
                    .history
                    .iter()
                    .skip(start)
                    .filter(|e| filter.matches(e))
                    .map(|e| e.frame())
                    .collect()
            }
        };
        inner.subscribers.push(Subscriber {
            filter,
            sender,
            overflowed: overflowed.clone(),
        });
        EventStream {
            backlog,
            receiver,
            overflowed,
            ended: false,
        }
    }

    /// Ends every open stream now (each sends what it had buffered, then ends). Returns how
    /// many there were.
    pub fn drop_streams(&self) -> usize {
        let dropped = std::mem::take(&mut self.lock().subscribers);
        dropped.iter().filter(|s| !s.sender.is_closed()).count()
    }

    /// Forgets every kept event (open streams stay open).
    pub fn clear_history(&self) {
        let old = std::mem::take(&mut self.lock().history);
        drop(old);
    }

    /// Open streams and kept events.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let open = inner
            .subscribers
            .iter()
            .filter(|s| !s.sender.is_closed())
            .count();
        (open, inner.history.len())
    }
}

/// The body of one `GET /v1/events/stream` response: the replayed frames, then live ones,
/// until the hub drops the subscriber (overflow, `drop_streams`) or the server stops.
pub(crate) struct EventStream {
    backlog: VecDeque<Bytes>,
    receiver: mpsc::Receiver<Bytes>,
    overflowed: Arc<AtomicBool>,
    ended: bool,
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(frame) = self.backlog.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        match self.receiver.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(Ok(Frame::data(frame)))),
            Poll::Ready(None) => {
                self.ended = true;
                if self.overflowed.load(Ordering::Acquire) {
                    Poll::Ready(Some(Ok(Frame::data(overflow_frame()))))
                } else {
                    Poll::Ready(None)
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The last frame of a stream whose subscriber fell behind: a CloudEvents envelope like the
/// others, but without an SSE `id` line, so that a reconnecting client resumes after the last
/// job event it received.
fn overflow_frame() -> Bytes {
    let envelope = json!({
        "specversion": "1.0",
        "id": uuid::Uuid::now_v7().to_string(),
        "type": "ojs.stream.overflow",
        "source": SOURCE,
        "time": format_ms(now_us()),
        "subject": "events",
        "datacontenttype": "application/json",
        "data": {
            "buffer": SUBSCRIBER_BUFFER,
            "reason": "the subscriber fell behind by more than its buffer; reconnect with Last-Event-ID to replay",
        },
    });
    Bytes::from(format!("event: ojs.stream.overflow\ndata: {envelope}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(hub: &EventHub, kind: &'static str, queue: &str, job_type: &str) {
        hub.publish(JobEvent {
            kind,
            job_id: 1,
            job_type: &Arc::from(job_type),
            queue,
            state: "available",
            extra: Map::new(),
        });
    }

    #[test]
    fn query_lists_are_decoded_and_split() {
        let q = parse_query(Some(
            "types=job.%2A,job.failed&queues=a%2Cb&job_types=x.y&since=2026-01-01T00%3A00%3A00Z&z=1",
        ));
        assert_eq!(q.filter.types, ["job.*", "job.failed"]);
        assert_eq!(q.filter.queues, ["a", "b"]);
        assert_eq!(q.filter.job_types, ["x.y"]);
        assert_eq!(q.since.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz+b"), "%zz b");
    }

    #[test]
    fn history_is_bounded_and_replays_after_an_id() {
        let mut hub = EventHub::new();
        hub.history_limit = 3;
        for _ in 0..5 {
            event(&hub, "job.enqueued", "q", "t");
        }
        let ids: Vec<String> = hub
            .lock()
            .history
            .iter()
            .map(|e| e.id.to_string())
            .collect();
        assert_eq!(ids.len(), 3);
        let stream = hub.subscribe(
            Filter::default(),
            Some(&ReplayFrom::AfterId(ids[0].clone())),
        );
        assert_eq!(stream.backlog.len(), 2);
        let stream = hub.subscribe(Filter::default(), Some(&ReplayFrom::AfterId("gone".into())));
        assert_eq!(stream.backlog.len(), 3);
    }

    #[test]
    fn filters_match_prefixes_queues_and_job_types() {
        let hub = EventHub::new();
        event(&hub, "job.completed", "email", "email.send");
        let e = hub.lock().history[0].clone();
        let f = |t: &[&str], q: &[&str], j: &[&str]| Filter {
            types: t.iter().map(|s| s.to_string()).collect(),
            queues: q.iter().map(|s| s.to_string()).collect(),
            job_types: j.iter().map(|s| s.to_string()).collect(),
        };
        assert!(f(&[], &[], &[]).matches(&e));
        assert!(f(&["job.*"], &["email"], &["email.send"]).matches(&e));
        assert!(f(&["*"], &[], &[]).matches(&e));
        assert!(!f(&["job.failed"], &[], &[]).matches(&e));
        assert!(!f(&["job.complete"], &[], &[]).matches(&e));
        assert!(!f(&[], &["other"], &[]).matches(&e));
        assert!(!f(&[], &[], &["email"]).matches(&e));
    }

    #[tokio::test]
    async fn a_full_subscriber_is_cut_off_with_an_overflow_frame() {
        let mut hub = EventHub::new();
        hub.buffer = 2;
        let mut stream = hub.subscribe(Filter::default(), None);
        for _ in 0..3 {
            event(&hub, "job.enqueued", "q", "t");
        }
        assert_eq!(hub.counts().0, 0);
        let mut frames = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| Pin::new(&mut stream).poll_frame(cx)).await
        {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames.len(), 3);
        assert!(frames[2].starts_with(b"event: ojs.stream.overflow\n"));
    }
}

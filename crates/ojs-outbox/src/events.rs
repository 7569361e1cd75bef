//! The relay's events as CloudEvents 1.0 (RFC-0005): one event per outbox row transition the
//! relay makes, and the relay's own pauses and resumes, published on an in-process bus.
//!
//! - Job events, per job in causal order (one relay task makes them in order): `job.enqueued`
//!   (the backend accepted the job), `job.failed` (one attempt failed), `job.retrying` (with
//!   `next_attempt_at`), `job.dead_lettered` (with the reason). A retried job that dies gives
//!   `job.failed`, `job.retrying` for each retry, then `job.failed`, `job.dead_lettered`
//!   (seed 003's order).
//! - Relay and operator events, under our namespace: `ojs.relay.paused`, `ojs.relay.resumed`,
//!   `ojs.outbox.dead_replayed`, `ojs.outbox.dead_purged` (subject: the outbox table).
//!
//! Delivery (RFC §5): tier 1, best effort, always on: subscribers get events live, each through
//! a bounded buffer; a subscriber that falls behind by more than the buffer is cut off with a
//! final `ojs.stream.overflow` event (the relay never waits for a subscriber and memory stays
//! bounded). Tier 2, opt-in (`relay.event_retention`): events are also kept in memory for the
//! retention (at most `relay.event_history` of them, the oldest dropped first), and a
//! subscriber can replay from `Last-Event-ID` or `since`. In memory, not in
//! the database: a table would add writes to every delivered row, the cost the relay exists to
//! avoid (docs/benchmarks.md); the price is that a restarted relay's history starts empty.
//! Nothing is built when nobody listens and no history is kept: [`EventBus::active`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// UUIDv7: ids made by one relay sort in emission order.
    pub id: String,
    pub kind: String,
    /// `/ojs/outbox/<table>`.
    pub source: Arc<str>,
    /// The job id, or the outbox table for relay and operator events.
    pub subject: String,
    /// Unix milliseconds.
    pub time_ms: i64,
    /// The `data` of the envelope, kept as fields and written as JSON only when a subscriber
    /// formats the event (the relay's cost per event stays small: docs/benchmarks.md).
    pub data: EventData,
    /// For filtering: the job's queue, type and tenant (none for relay events).
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub tenant: Option<String>,
}

/// An event's `data`.
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    /// A job event: the job's fields and what the transition adds.
    Job {
        job_type: String,
        attempt: i32,
        /// `error` (`job.failed`), `reason` (`job.dead_lettered`).
        error: Option<String>,
        /// `job.retrying`: Unix ms of the next attempt.
        next_attempt_at_ms: Option<i64>,
        /// `job.enqueued`: whether the backend already held the job.
        deduplicated: Option<bool>,
        /// `job.unique_rejected`: the job the backend holds instead of this one.
        existing_job_id: Option<String>,
    },
    /// Relay and operator events.
    Other(Value),
}

impl Event {
    /// The envelope's `data` as JSON (what [`Event::to_json`] writes).
    pub fn data_json(&self) -> Value {
        let envelope: Value = serde_json::from_str(&self.to_json()).expect("our own JSON");
        envelope["data"].clone()
    }

    /// The CloudEvents 1.0 JSON form (structured mode), written straight from the fields
    /// (no intermediate JSON tree: this runs once per event per subscriber).
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct JobData<'a> {
            job_id: &'a str,
            #[serde(rename = "type")]
            job_type: &'a str,
            queue: Option<&'a str>,
            attempt: i32,
            #[serde(skip_serializing_if = "Option::is_none")]
            tenant_id: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            next_attempt_at: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            deduplicated: Option<bool>,
            #[serde(skip_serializing_if = "Option::is_none")]
            existing_job_id: Option<&'a str>,
        }
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Data<'a> {
            Job(JobData<'a>),
            Other(&'a Value),
        }
        #[derive(serde::Serialize)]
        struct Envelope<'a> {
            specversion: &'static str,
            id: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            source: &'a str,
            subject: &'a str,
            time: String,
            datacontenttype: &'static str,
            data: Data<'a>,
        }
        let data = match &self.data {
            EventData::Other(value) => Data::Other(value),
            EventData::Job {
                job_type,
                attempt,
                error,
                next_attempt_at_ms,
                deduplicated,
                existing_job_id,
            } => {
                let dead = self.kind == "job.dead_lettered";
                Data::Job(JobData {
                    job_id: &self.subject,
                    job_type,
                    queue: self.queue.as_deref(),
                    attempt: *attempt,
                    tenant_id: self.tenant.as_deref(),
                    error: error.as_deref().filter(|_| !dead),
                    reason: error.as_deref().filter(|_| dead),
                    next_attempt_at: next_attempt_at_ms.map(rfc3339_ms),
                    deduplicated: *deduplicated,
                    existing_job_id: existing_job_id.as_deref(),
                })
            }
        };
        serde_json::to_string(&Envelope {
            specversion: "1.0",
            id: &self.id,
            kind: &self.kind,
            source: &self.source,
            subject: &self.subject,
            time: rfc3339_ms(self.time_ms),
            datacontenttype: "application/json",
            data,
        })
        .expect("an event serializes")
    }

    /// The event as one Server-Sent Events frame (`id`, `event`, `data`, blank line).
    pub fn sse_frame(&self) -> String {
        format!(
            "id: {}\nevent: {}\ndata: {}\n\n",
            self.id,
            self.kind,
            self.to_json()
        )
    }
}

/// A subscriber's filter (RFC §4): event types (exact, or a prefix ending in `*`), queues and
/// job types (exact), and the tenant a tenant-bound subscriber is scoped to, which also hides
/// events that belong to no tenant (relay events). Empty lists match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub types: Vec<String>,
    pub queues: Vec<String>,
    pub job_types: Vec<String>,
    pub tenant: Option<String>,
}

impl Filter {
    /// From the comma-separated query parameters of `GET /v1/events/stream`.
    pub fn from_lists(
        types: Option<&str>,
        queues: Option<&str>,
        job_types: Option<&str>,
        tenant: Option<&str>,
    ) -> Filter {
        let list = |text: Option<&str>| {
            text.unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        Filter {
            types: list(types),
            queues: list(queues),
            job_types: list(job_types),
            tenant: tenant.filter(|t| !t.is_empty()).map(str::to_owned),
        }
    }

    pub fn matches(&self, event: &Event) -> bool {
        let type_ok = self.types.is_empty()
            || self
                .types
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => event.kind.starts_with(prefix),
                    None => *pattern == event.kind,
                });
        let within = |wanted: &[String], value: &Option<String>| {
            wanted.is_empty() || value.as_ref().is_some_and(|v| wanted.contains(v))
        };
        let tenant_ok = match &self.tenant {
            None => true,
            Some(tenant) => event.tenant.as_ref() == Some(tenant),
        };
        type_ok
            && within(&self.queues, &event.queue)
            && within(&self.job_types, &event.job_type)
            && tenant_ok
    }
}

/// Where replay starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayFrom {
    /// The events after this id (`Last-Event-ID`).
    AfterId(String),
    /// The events at or after this time (Unix ms, `since`).
    Since(i64),
}

/// The in-process bus of one relay.
#[derive(Debug)]
pub struct EventBus {
    source: Arc<str>,
    table: String,
    sender: broadcast::Sender<Arc<Event>>,
    history: Option<Mutex<VecDeque<Arc<Event>>>>,
    retention: Duration,
    history_limit: usize,
}

impl EventBus {
    /// `buffer`: how many events a subscriber may fall behind before it is cut off;
    /// `retention`: keep events for replay this long (tier 2), or `None` (tier 1 only), and at
    /// most `history_limit` of them.
    pub fn new(
        table: &str,
        buffer: usize,
        retention: Option<Duration>,
        history_limit: usize,
    ) -> EventBus {
        let (sender, _) = broadcast::channel(buffer.max(1));
        EventBus {
            source: Arc::from(format!("/ojs/outbox/{table}")),
            table: table.to_owned(),
            sender,
            history: retention.map(|_| Mutex::new(VecDeque::new())),
            retention: retention.unwrap_or_default(),
            history_limit: history_limit.max(1),
        }
    }

    /// Whether an event would reach anyone (a subscriber, or the replay history). The relay
    /// builds events only then, so events cost nothing when nobody listens.
    pub fn active(&self) -> bool {
        self.history.is_some() || self.sender.receiver_count() > 0
    }

    /// Whether events are kept for replay (tier 2).
    pub fn replays(&self) -> bool {
        self.history.is_some()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }

    /// The kept events after `from`, oldest first (empty without tier 2). An id no longer kept
    /// (older than the retention) replays everything kept.
    pub fn replay(&self, from: &ReplayFrom) -> Vec<Arc<Event>> {
        let Some(history) = &self.history else {
            return Vec::new();
        };
        let history = history.lock().unwrap_or_else(|p| p.into_inner());
        match from {
            ReplayFrom::AfterId(id) => match history.iter().position(|e| e.id == *id) {
                Some(at) => history.iter().skip(at + 1).cloned().collect(),
                None => history.iter().cloned().collect(),
            },
            ReplayFrom::Since(ms) => history
                .iter()
                .filter(|e| e.time_ms >= *ms)
                .cloned()
                .collect(),
        }
    }

    /// A job event (`data` is [`EventData::Job`]).
    pub fn job_event(
        &self,
        kind: &str,
        job_id: &str,
        queue: &str,
        tenant: Option<&str>,
        data: EventData,
    ) {
        let job_type = match &data {
            EventData::Job { job_type, .. } => Some(job_type.clone()),
            EventData::Other(_) => None,
        };
        self.publish(Event {
            id: crate::id::new_job_id().to_string(),
            kind: kind.to_owned(),
            source: self.source.clone(),
            subject: job_id.to_owned(),
            time_ms: now_ms(),
            data,
            queue: Some(queue.to_owned()),
            job_type,
            tenant: tenant.map(str::to_owned),
        });
    }

    /// An operator's dead-row action (`ojs.outbox.dead_replayed` / `dead_purged`), with its
    /// tenant and count; nothing when nobody listens.
    pub fn operator_event(&self, kind: &str, tenant: Option<&str>, count: u64) {
        if self.active() {
            self.relay_event(
                kind,
                tenant,
                serde_json::json!({"tenant": tenant, "count": count}),
            );
        }
    }

    /// A relay or operator event (subject: the outbox table). `tenant`: the tenant an
    /// operator command was scoped to, if any.
    pub fn relay_event(&self, kind: &str, tenant: Option<&str>, data: Value) {
        self.publish(Event {
            id: crate::id::new_job_id().to_string(),
            kind: kind.to_owned(),
            source: self.source.clone(),
            subject: self.table.clone(),
            time_ms: now_ms(),
            data: EventData::Other(data),
            queue: None,
            job_type: None,
            tenant: tenant.map(str::to_owned),
        });
    }

    fn publish(&self, event: Event) {
        let event = Arc::new(event);
        if let Some(history) = &self.history {
            let mut history = history.lock().unwrap_or_else(|p| p.into_inner());
            let oldest = event.time_ms - self.retention.as_millis() as i64;
            while history.front().is_some_and(|e| e.time_ms < oldest)
                || history.len() >= self.history_limit
            {
                history.pop_front();
            }
            history.push_back(event.clone());
        }
        // No subscriber is no error.
        let _ = self.sender.send(event);
    }

    /// The event that ends a stream whose subscriber fell `missed` events behind.
    pub fn overflow_event(&self, missed: u64) -> Event {
        overflow(&self.source, &self.table, missed)
    }
}

fn overflow(source: &Arc<str>, table: &str, missed: u64) -> Event {
    Event {
        id: crate::id::new_job_id().to_string(),
        kind: "ojs.stream.overflow".to_owned(),
        source: source.clone(),
        subject: table.to_owned(),
        time_ms: now_ms(),
        data: EventData::Other(json!({
            "missed": missed,
            "reason": "the subscriber fell behind by more than its buffer; reconnect with Last-Event-ID (replay needs relay.event_retention)",
        })),
        queue: None,
        job_type: None,
        tenant: None,
    }
}

/// One subscriber's stream: the replayed events first (tier 2), then live ones, filtered, as
/// SSE frames; after it fell behind, one `ojs.stream.overflow` frame and the end. What every
/// server of `GET /v1/events/stream` (the relay's, each framework's mount) sends.
pub struct Subscription {
    /// Names the stream's own last event; not the bus (the stream ends when the relay does).
    source: Arc<str>,
    table: String,
    live: broadcast::Receiver<Arc<Event>>,
    filter: Filter,
    backlog: VecDeque<Arc<Event>>,
    /// Ids already sent from the backlog, skipped when they also arrive live.
    replayed: std::collections::HashSet<String>,
    ended: bool,
}

impl Subscription {
    /// Subscribes before reading the history, so no event falls between the two (one may
    /// come twice: consumers deduplicate by id, RFC §5).
    pub fn new(bus: Arc<EventBus>, filter: Filter, from: Option<&ReplayFrom>) -> Subscription {
        let live = bus.subscribe();
        let backlog: VecDeque<Arc<Event>> = from
            .map(|from| bus.replay(from))
            .unwrap_or_default()
            .into_iter()
            .filter(|event| filter.matches(event))
            .collect();
        let replayed = backlog.iter().map(|event| event.id.clone()).collect();
        Subscription {
            source: bus.source.clone(),
            table: bus.table.clone(),
            live,
            filter,
            backlog,
            replayed,
            ended: false,
        }
    }

    /// The next frame, waiting for one; `None` once the stream has ended.
    pub async fn next_frame(&mut self) -> Option<String> {
        if let Some(event) = self.backlog.pop_front() {
            return Some(event.sse_frame());
        }
        if self.ended {
            return None;
        }
        loop {
            match self.live.recv().await {
                Ok(event) => {
                    if self.replayed.remove(&event.id) || !self.filter.matches(&event) {
                        continue;
                    }
                    return Some(event.sse_frame());
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    self.ended = true;
                    // No `id:` line: the client's Last-Event-ID stays on the last event it got,
                    // so its resume replays what it missed.
                    let last = overflow(&self.source, &self.table, missed);
                    return Some(format!(
                        "event: {}\ndata: {}\n\n",
                        last.kind,
                        last.to_json()
                    ));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.ended = true;
                    return None;
                }
            }
        }
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-11-25T10:30:00.123Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        time.year(),
        time.month() as u8,
        time.day(),
        time.hour(),
        time.minute(),
        time.second(),
        time.millisecond()
    )
}

/// An RFC 3339 time as Unix ms (`since`).
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(bus: &EventBus, kind: &str, queue: &str, tenant: Option<&str>) {
        let data = EventData::Job {
            job_type: "email.send".into(),
            attempt: 1,
            error: None,
            next_attempt_at_ms: None,
            deduplicated: None,
            existing_job_id: None,
        };
        bus.job_event(kind, "j1", queue, tenant, data);
    }

    #[test]
    fn the_envelope_is_cloudevents_1_0() {
        let bus = EventBus::new("ojs_outbox", 8, Some(Duration::from_secs(60)), 100);
        job(&bus, "job.enqueued", "email", Some("acme"));
        let event = bus.replay(&ReplayFrom::Since(0)).remove(0);
        let value: Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(value["specversion"], "1.0");
        assert_eq!(value["type"], "job.enqueued");
        assert_eq!(value["source"], "/ojs/outbox/ojs_outbox");
        assert_eq!(value["subject"], "j1");
        assert_eq!(value["data"]["queue"], "email");
        assert_eq!(value["data"]["tenant_id"], "acme");
        assert!(value["time"].as_str().unwrap().ends_with('Z'));
        let frame = event.sse_frame();
        assert!(frame.starts_with(&format!("id: {}\nevent: job.enqueued\ndata: {{", event.id)));
        assert!(frame.ends_with("}\n\n"));
    }

    #[test]
    fn filters_match_type_prefixes_queues_job_types_and_tenants() {
        let bus = EventBus::new("t", 8, Some(Duration::from_secs(60)), 100);
        job(&bus, "job.enqueued", "email", Some("acme"));
        bus.relay_event("ojs.relay.paused", None, json!({}));
        let events = bus.replay(&ReplayFrom::Since(0));
        let (enqueued, paused) = (&events[0], &events[1]);
        let f = |types: &str, queues: &str, tenant: Option<&str>| {
            Filter::from_lists(Some(types), Some(queues), None, tenant)
        };
        assert!(f("job.*", "", None).matches(enqueued));
        assert!(!f("job.*", "", None).matches(paused));
        assert!(f("job.enqueued,job.failed", "email", None).matches(enqueued));
        assert!(!f("job.failed", "", None).matches(enqueued));
        assert!(!f("", "reports", None).matches(enqueued));
        assert!(f("", "", Some("acme")).matches(enqueued));
        assert!(!f("", "", Some("other")).matches(enqueued));
        assert!(
            !f("", "", Some("acme")).matches(paused),
            "relay events belong to no tenant"
        );
        assert!(Filter::default().matches(paused));
    }

    #[test]
    fn replay_from_an_id_or_a_time_and_only_within_the_retention() {
        let bus = EventBus::new("t", 8, Some(Duration::from_secs(3600)), 100);
        for kind in ["job.failed", "job.retrying", "job.enqueued"] {
            job(&bus, kind, "q", None);
        }
        let all = bus.replay(&ReplayFrom::Since(0));
        assert_eq!(all.len(), 3);
        let after_first = bus.replay(&ReplayFrom::AfterId(all[0].id.clone()));
        let kinds: Vec<&str> = after_first.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["job.retrying", "job.enqueued"]);
        assert_eq!(bus.replay(&ReplayFrom::AfterId("gone".into())).len(), 3);
        let capped = EventBus::new("t", 8, Some(Duration::from_secs(3600)), 2);
        for kind in ["a", "b", "c"] {
            job(&capped, kind, "q", None);
        }
        let kept: Vec<String> = capped
            .replay(&ReplayFrom::Since(0))
            .iter()
            .map(|e| e.kind.clone())
            .collect();
        assert_eq!(kept, ["b", "c"], "the oldest goes beyond the limit");
        let tier1 = EventBus::new("t", 8, None, 100);
        job(&tier1, "job.enqueued", "q", None);
        assert!(tier1.replay(&ReplayFrom::Since(0)).is_empty());
        assert!(!tier1.active(), "tier 1 without subscribers builds nothing");
        let _subscriber = tier1.subscribe();
        assert!(tier1.active());
    }

    #[test]
    fn times_round_trip() {
        let ms = 1_764_000_000_123;
        assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms));
    }
}

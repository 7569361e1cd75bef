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
//! Delivery (RFC §5). With `relay.event_retention` (default `PT1H`, RFC-0005's default) the
//! events are kept in the table's event log (`<table>_events`, [`EventLog`]): each settlement
//! appends its round's events, as one row, in its own transaction (`Store::settle`), and
//! relay and operator events append a row of their own. Every subscriber, in any process,
//! reads the log from a cursor: it sees the events of every relay of the table, each once, in
//! commit order, and replays from `Last-Event-ID` or `since` within the retention, across
//! relay restarts (tier 2); the relay prunes older rows. With `event_retention: null` the
//! events stay in the process that made them, live only (tier 1): subscribers get them through
//! a bounded buffer, and one that falls behind by more than the buffer is cut off with a final
//! `ojs.stream.overflow` event; nothing is built when nobody listens ([`EventBus::active`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::store::{LoggedEvents, Store};

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// UUIDv7: ids made by one relay sort in emission order. Empty in an event made for the
    /// log until it is read back from there (its id is then its place in the log).
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

/// The events of one outbox table as one process sees them: its live bus (tier 1), or the
/// table's event log (tier 2, `log`).
#[derive(Debug)]
pub struct EventBus {
    source: Arc<str>,
    table: String,
    sender: broadcast::Sender<Arc<Event>>,
    log: Option<EventLog>,
}

/// The table's event log (`<table>_events`) and how long it keeps events.
#[derive(Debug, Clone)]
pub struct EventLog {
    pub store: Store,
    pub retention: Duration,
}

/// How often a subscriber of the log looks for new rows once it has read them all.
const LOG_POLL: Duration = Duration::from_millis(100);
/// Rows a subscriber of the log reads at once.
const LOG_PAGE: usize = 100;

impl EventBus {
    /// `buffer`: how many events a subscriber may fall behind before it is cut off (tier 1);
    /// `log`: the table's event log, which then carries every event instead (tier 2).
    pub fn new(table: &str, buffer: usize, log: Option<EventLog>) -> EventBus {
        let (sender, _) = broadcast::channel(buffer.max(1));
        EventBus {
            source: Arc::from(format!("/ojs/outbox/{table}")),
            table: table.to_owned(),
            sender,
            log,
        }
    }

    /// Whether an event would reach anyone (a subscriber, or the log). The relay builds events
    /// only then, so live-only events cost nothing when nobody listens.
    pub fn active(&self) -> bool {
        self.log.is_some() || self.sender.receiver_count() > 0
    }

    /// Whether events go to the table's event log (tier 2).
    pub fn replays(&self) -> bool {
        self.log.is_some()
    }

    /// The table's event log, when events go there.
    pub fn log(&self) -> Option<&EventLog> {
        self.log.as_ref()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }

    /// A new event's id: none for the log, where an event's id is its place ([`log_event_id`],
    /// given as it is read), a UUIDv7 for live subscribers.
    fn new_id(&self) -> String {
        match self.log {
            Some(_) => String::new(),
            None => crate::id::new_job_id().to_string(),
        }
    }

    /// A job event, built (not published): `Relay` logs or publishes it.
    pub fn make_job_event(
        &self,
        kind: &str,
        job_id: &str,
        queue: &str,
        tenant: Option<&str>,
        data: EventData,
    ) -> Event {
        let job_type = match &data {
            EventData::Job { job_type, .. } => Some(job_type.clone()),
            EventData::Other(_) => None,
        };
        Event {
            id: self.new_id(),
            kind: kind.to_owned(),
            source: self.source.clone(),
            subject: job_id.to_owned(),
            time_ms: now_ms(),
            data,
            queue: Some(queue.to_owned()),
            job_type,
            tenant: tenant.map(str::to_owned),
        }
    }

    /// A relay or operator event, built (not published).
    pub fn make_relay_event(&self, kind: &str, tenant: Option<&str>, data: Value) -> Event {
        Event {
            id: self.new_id(),
            kind: kind.to_owned(),
            source: self.source.clone(),
            subject: self.table.clone(),
            time_ms: now_ms(),
            data: EventData::Other(data),
            queue: None,
            job_type: None,
            tenant: tenant.map(str::to_owned),
        }
    }

    /// Sends an event to this process's live subscribers (tier 1; no subscriber is no error).
    pub fn send_live(&self, event: Event) {
        let _ = self.sender.send(Arc::new(event));
    }

    /// Publishes events made here: appended to the log as one row (tier 2), or sent live.
    pub async fn publish_all(&self, events: Vec<Event>) -> crate::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        match &self.log {
            Some(log) => log.store.append_events(&logged(&events)).await,
            None => {
                for event in events {
                    self.send_live(event);
                }
                Ok(())
            }
        }
    }

    /// An operator's dead-row action (`ojs.outbox.dead_replayed` / `dead_purged`), with its
    /// tenant and count; nothing when nobody listens.
    pub async fn operator_event(&self, kind: &str, tenant: Option<&str>, count: u64) {
        if self.active() {
            let event = self.make_relay_event(
                kind,
                tenant,
                serde_json::json!({"tenant": tenant, "count": count}),
            );
            if let Err(error) = self.publish_all(vec![event]).await {
                tracing::warn!(%error, "outbox: the operator's event was not logged");
            }
        }
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

/// One subscriber's stream, filtered, as SSE frames. From the event log (tier 2): the events
/// after `Last-Event-ID` or from `since` first, then each new row as it commits, for as long
/// as the subscriber stays. Live only (tier 1): the events from now on; after it fell behind,
/// one `ojs.stream.overflow` frame and the end. What every server of `GET /v1/events/stream`
/// (the relay's, each framework's mount) sends.
pub struct Subscription {
    /// Names the stream's own last event; not the bus (the stream ends when the relay does).
    source: Arc<str>,
    table: String,
    filter: Filter,
    from: Option<ReplayFrom>,
    /// When it subscribed (Unix ms): a live stream of the log starts at the rows written since.
    subscribed_ms: i64,
    feed: Feed,
    ended: bool,
}

enum Feed {
    Live(broadcast::Receiver<Arc<Event>>),
    Log(Box<LogFeed>),
}

/// A subscriber's place in the event log.
struct LogFeed {
    store: Store,
    /// The `seq` of the last row read; `None` until the start is found (first `next_frame`).
    cursor: Option<i64>,
    read: VecDeque<Event>,
    /// Replay after an event of the log: the rest of its row is read, from this index on.
    from_index: Option<(i64, u32)>,
}

impl Subscription {
    pub fn new(bus: Arc<EventBus>, filter: Filter, from: Option<&ReplayFrom>) -> Subscription {
        let feed = match &bus.log {
            Some(log) => Feed::Log(Box::new(LogFeed {
                store: log.store.clone(),
                cursor: None,
                read: VecDeque::new(),
                from_index: None,
            })),
            None => Feed::Live(bus.subscribe()),
        };
        Subscription {
            source: bus.source.clone(),
            table: bus.table.clone(),
            filter,
            from: from.cloned(),
            subscribed_ms: now_ms(),
            feed,
            ended: false,
        }
    }

    /// The next frame, waiting for one; `None` once the stream has ended.
    pub async fn next_frame(&mut self) -> Option<String> {
        if self.ended {
            return None;
        }
        match &mut self.feed {
            Feed::Live(live) => loop {
                match live.recv().await {
                    Ok(event) => {
                        if self.filter.matches(&event) {
                            return Some(event.sse_frame());
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        self.ended = true;
                        // No `id:` line: the client's Last-Event-ID stays on the last event it
                        // got, so its resume replays what it missed (with the event log).
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
            },
            Feed::Log(feed) => loop {
                let LogFeed {
                    store,
                    cursor,
                    read,
                    from_index,
                } = &mut **feed;
                while let Some(event) = read.pop_front() {
                    if let Some(ReplayFrom::Since(ms)) = &self.from
                        && event.time_ms < *ms
                    {
                        continue;
                    }
                    if self.filter.matches(&event) {
                        return Some(event.sse_frame());
                    }
                }
                let at = match *cursor {
                    Some(at) => at,
                    None => {
                        let start = match &self.from {
                            None => self.subscribed_ms,
                            Some(ReplayFrom::Since(ms)) => *ms,
                            Some(ReplayFrom::AfterId(id)) => match log_position(id) {
                                // An event of the log: its row again, after it.
                                Some((seq, index)) => {
                                    *from_index = Some((seq, index + 1));
                                    *cursor = Some(seq - 1);
                                    continue;
                                }
                                // Another id (a live-only stream's): from its time.
                                None => crate::id::staged_at_ms(id).unwrap_or(0),
                            },
                        };
                        match store.events_cursor_at(start).await {
                            Ok(at) => {
                                *cursor = Some(at);
                                at
                            }
                            Err(error) => {
                                tracing::debug!(%error, "events: the event log cannot be read");
                                tokio::time::sleep(LOG_POLL).await;
                                continue;
                            }
                        }
                    }
                };
                match store.events_after(at, LOG_PAGE).await {
                    Ok(rows) if rows.is_empty() => tokio::time::sleep(LOG_POLL).await,
                    Ok(rows) => {
                        for (seq, time_ms, json) in rows {
                            *cursor = Some(seq);
                            let skip = match from_index.take() {
                                Some((first, index)) if first == seq => index as usize,
                                _ => 0,
                            };
                            read.extend(
                                from_logged(&json, seq, time_ms, &self.source)
                                    .into_iter()
                                    .skip(skip),
                            );
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, "events: the event log cannot be read");
                        tokio::time::sleep(LOG_POLL).await;
                    }
                }
            },
        }
    }
}

/// The marker in an event id made from a log position (`log_event_id`): ten fixed bits, so
/// that an id made otherwise (a live-only stream's, random) is taken for one once in 1,024.
const LOG_ID_MARK: u64 = 0b10_1101_0110;

/// An event's id in the log: a UUIDv7 of its row's time whose other bits are its position,
/// the row's `seq` (40 bits) and its index in the row (24 bits), in that order, so that ids
/// sort as the log does. Every reader makes the same id, and `Last-Event-ID` names the exact
/// place to resume.
fn log_event_id(time_ms: i64, seq: i64, index: usize) -> String {
    let seq = seq as u64 & 0xff_ffff_ffff;
    let rand_a = (seq >> 28) as u16; // the 12 high bits
    let rand_b = (LOG_ID_MARK << 52) | ((seq & 0x0fff_ffff) << 24) | (index as u64 & 0xff_ffff);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&(time_ms as u64).to_be_bytes()[2..]);
    bytes[6..8].copy_from_slice(&(0x7000 | rand_a).to_be_bytes());
    bytes[8..].copy_from_slice(&((0b10 << 62) | rand_b).to_be_bytes());
    uuid::Uuid::from_bytes(bytes).to_string()
}

/// The (`seq`, index) of an id [`log_event_id`] made; `None` for any other id.
fn log_position(id: &str) -> Option<(i64, u32)> {
    let bytes = uuid::Uuid::parse_str(id).ok()?.into_bytes();
    let rand_a = u64::from(u16::from_be_bytes([bytes[6], bytes[7]]) & 0x0fff);
    let rand_b = u64::from_be_bytes(bytes[8..].try_into().ok()?) & !(0b11 << 62);
    if rand_b >> 52 != LOG_ID_MARK {
        return None;
    }
    let seq = rand_a << 28 | (rand_b >> 24 & 0x0fff_ffff);
    Some((seq as i64, (rand_b & 0xff_ffff) as u32))
}

/// Events as one row of the log: a JSON array with one compact array per event, or per run of
/// job events that differ only in their job (its id and time are the row's: [`log_event_id`]).
/// A job event: `[type, job id, queue, job type, tenant, attempt, error, next attempt ms,
/// deduplicated, existing job id]`, trailing nulls left out, and the job id a list of ids for
/// a run (a round's 500 `job.enqueued` of one queue and type are one record: 19.6 KB of text
/// instead of 50.5 KB to write and for every subscriber to read, though lz4 stores either in
/// about 18 KB, docs/benchmarks.md#events); another: `[type, subject, data, tenant]`.
pub fn logged(events: &[Event]) -> LoggedEvents {
    let mut records: Vec<Logged<'_>> = Vec::new();
    let mut rest = events;
    while let Some(first) = rest.first() {
        let run = match first.data {
            EventData::Job { .. } => rest.iter().take_while(|e| same_but_job(first, e)).count(),
            EventData::Other(_) => 1,
        };
        records.push(Logged(&rest[..run]));
        rest = &rest[run..];
    }
    LoggedEvents {
        time_ms: now_ms(),
        json: serde_json::to_string(&records).expect("events serialize"),
    }
}

/// Whether two job events differ only in their job (`subject`), so that one record of the log
/// carries both.
fn same_but_job(a: &Event, b: &Event) -> bool {
    a.kind == b.kind && a.queue == b.queue && a.tenant == b.tenant && a.data == b.data
}

/// One record of a row of the log ([`logged`]): one event, or a run of job events that differ
/// only in their job, written straight from the fields.
struct Logged<'a>(&'a [Event]);

/// The job ids of a run: one string for one event (as rows written before runs were), a list
/// for more.
struct Subjects<'a>(&'a [Event]);

impl serde::Serialize for Subjects<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [one] => serializer.serialize_str(&one.subject),
            many => serializer.collect_seq(many.iter().map(|e| e.subject.as_str())),
        }
    }
}

impl serde::Serialize for Logged<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let event = &self.0[0];
        match &event.data {
            EventData::Job {
                job_type,
                attempt,
                error,
                next_attempt_at_ms,
                deduplicated,
                existing_job_id,
            } => {
                // Trailing nulls left out.
                let len = if existing_job_id.is_some() {
                    10
                } else if deduplicated.is_some() {
                    9
                } else if next_attempt_at_ms.is_some() {
                    8
                } else if error.is_some() {
                    7
                } else {
                    6
                };
                let mut seq = serializer.serialize_seq(Some(len))?;
                seq.serialize_element(&event.kind)?;
                seq.serialize_element(&Subjects(self.0))?;
                seq.serialize_element(&event.queue)?;
                seq.serialize_element(job_type)?;
                seq.serialize_element(&event.tenant)?;
                seq.serialize_element(attempt)?;
                if len > 6 {
                    seq.serialize_element(error)?;
                }
                if len > 7 {
                    seq.serialize_element(next_attempt_at_ms)?;
                }
                if len > 8 {
                    seq.serialize_element(deduplicated)?;
                }
                if len > 9 {
                    seq.serialize_element(existing_job_id)?;
                }
                seq.end()
            }
            EventData::Other(data) => {
                let len = if event.tenant.is_some() { 4 } else { 3 };
                let mut seq = serializer.serialize_seq(Some(len))?;
                seq.serialize_element(&event.kind)?;
                seq.serialize_element(&event.subject)?;
                seq.serialize_element(data)?;
                if len > 3 {
                    seq.serialize_element(&event.tenant)?;
                }
                seq.end()
            }
        }
    }
}

/// One event of a row of the log, read from its array (`logged`); trailing elements left out
/// are `None`.
#[derive(serde::Deserialize)]
struct Record {
    kind: String,
    subject: Subject,
    /// A job event's queue (a string), or another event's data (an object).
    third: Value,
    #[serde(default)]
    fourth: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    attempt: Option<i32>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    next_attempt_at_ms: Option<i64>,
    #[serde(default)]
    deduplicated: Option<bool>,
    #[serde(default)]
    existing_job_id: Option<String>,
}

/// A record's subject: one event's, or the job ids of a run ([`logged`]).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Subject {
    One(String),
    Run(Vec<String>),
}

/// The events of one row of the log (none when the row is not ours to read).
fn from_logged(json: &str, seq: i64, time_ms: i64, source: &Arc<str>) -> Vec<Event> {
    let records: Vec<Record> = serde_json::from_str(json).unwrap_or_default();
    let mut events: Vec<Event> = Vec::new();
    for r in records {
        let subjects = match r.subject {
            Subject::One(subject) => vec![subject],
            Subject::Run(subjects) => subjects,
        };
        let (data, queue, job_type, tenant) = match r.third {
            data @ Value::Object(_) => (EventData::Other(data), None, None, r.fourth),
            queue => {
                let queue = match queue {
                    Value::String(queue) => Some(queue),
                    _ => None,
                };
                (
                    EventData::Job {
                        job_type: r.fourth.clone().unwrap_or_default(),
                        attempt: r.attempt.unwrap_or(0),
                        error: r.error,
                        next_attempt_at_ms: r.next_attempt_at_ms,
                        deduplicated: r.deduplicated,
                        existing_job_id: r.existing_job_id,
                    },
                    queue,
                    r.fourth,
                    r.tenant,
                )
            }
        };
        // The fields are the record's: each event but the last of a run takes copies.
        let mut subjects = subjects.into_iter();
        let Some(last) = subjects.next_back() else {
            continue;
        };
        for subject in subjects {
            events.push(Event {
                id: log_event_id(time_ms, seq, events.len()),
                kind: r.kind.clone(),
                source: source.clone(),
                subject,
                time_ms,
                data: data.clone(),
                queue: queue.clone(),
                job_type: job_type.clone(),
                tenant: tenant.clone(),
            });
        }
        events.push(Event {
            id: log_event_id(time_ms, seq, events.len()),
            kind: r.kind,
            source: source.clone(),
            subject: last,
            time_ms,
            data,
            queue,
            job_type,
            tenant,
        });
    }
    events
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

    fn job(bus: &EventBus, kind: &str, queue: &str, tenant: Option<&str>) -> Event {
        let data = EventData::Job {
            job_type: "email.send".into(),
            attempt: 1,
            error: None,
            next_attempt_at_ms: None,
            deduplicated: None,
            existing_job_id: None,
        };
        bus.make_job_event(kind, "j1", queue, tenant, data)
    }

    #[test]
    fn the_envelope_is_cloudevents_1_0() {
        let bus = EventBus::new("ojs_outbox", 8, None);
        let event = job(&bus, "job.enqueued", "email", Some("acme"));
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
    fn an_event_log_row_gives_back_the_same_events() {
        let bus = EventBus::new("t", 8, None);
        let mut retried = job(&bus, "job.retrying", "q", None);
        if let EventData::Job {
            next_attempt_at_ms,
            error,
            ..
        } = &mut retried.data
        {
            *next_attempt_at_ms = Some(1_764_000_000_000);
            *error = Some("it's \"quoted\"".into());
        }
        let mut second = job(&bus, "job.enqueued", "email", Some("acme"));
        second.subject = "j2".into();
        let mut third = second.clone();
        third.subject = "j3".into();
        let events = vec![
            job(&bus, "job.enqueued", "email", Some("acme")),
            second,
            third,
            retried,
            bus.make_relay_event("ojs.relay.paused", None, json!({"reason": "down"})),
        ];
        let row = logged(&events);
        // The three `job.enqueued` that differ only in their job are one record.
        let records: Vec<Value> = serde_json::from_str(&row.json).unwrap();
        assert_eq!(records.len(), 3, "{}", row.json);
        assert_eq!(records[0][1], json!(["j1", "j2", "j3"]));
        assert_eq!(records[1][1], "j1");
        let back = from_logged(&row.json, 41, row.time_ms, &bus.source);
        for (index, (back, made)) in back.iter().zip(&events).enumerate() {
            // A log event's id and time are its row's.
            assert_eq!(log_position(&back.id), Some((41, index as u32)));
            assert_eq!(back.time_ms, row.time_ms);
            let made = Event {
                id: back.id.clone(),
                time_ms: back.time_ms,
                ..made.clone()
            };
            assert_eq!(*back, made);
        }
        assert_eq!(back.len(), 5);
        // A row written before runs (one record per event) reads as it did.
        let before = r#"[["job.enqueued","j1","email","email.send","acme",1],["job.enqueued","j2","email","email.send","acme",1]]"#;
        let read = from_logged(before, 7, row.time_ms, &bus.source);
        assert_eq!(
            read.iter()
                .map(|e| (e.subject.as_str(), log_position(&e.id).unwrap()))
                .collect::<Vec<_>>(),
            [("j1", (7, 0)), ("j2", (7, 1))]
        );
        assert_eq!(read[1].data, back[1].data);
        assert_eq!(
            log_position(&events[0].id),
            None,
            "a random id is no position"
        );
        let far = log_event_id(1_764_000_000_000, (1 << 39) + 7, 5000);
        assert_eq!(log_position(&far), Some(((1 << 39) + 7, 5000)));
        assert_eq!(uuid::Uuid::parse_str(&far).unwrap().get_version_num(), 7);
        // Ids sort as the log does: by row, then by place in the row.
        let ms = 1_764_000_000_000;
        let mut ids = [
            log_event_id(ms, 2, 0),
            log_event_id(ms, 1, 3),
            log_event_id(ms, 1 << 30, 0),
            log_event_id(ms, 1, 0),
        ];
        ids.sort();
        assert_eq!(
            ids.iter()
                .map(|id| log_position(id).unwrap())
                .collect::<Vec<_>>(),
            [(1, 0), (1, 3), (2, 0), (1 << 30, 0)]
        );
    }

    #[test]
    fn filters_match_type_prefixes_queues_job_types_and_tenants() {
        let bus = EventBus::new("t", 8, None);
        let enqueued = job(&bus, "job.enqueued", "email", Some("acme"));
        let paused = bus.make_relay_event("ojs.relay.paused", None, json!({}));
        let f = |types: &str, queues: &str, tenant: Option<&str>| {
            Filter::from_lists(Some(types), Some(queues), None, tenant)
        };
        assert!(f("job.*", "", None).matches(&enqueued));
        assert!(!f("job.*", "", None).matches(&paused));
        assert!(f("job.enqueued,job.failed", "email", None).matches(&enqueued));
        assert!(!f("job.failed", "", None).matches(&enqueued));
        assert!(!f("", "reports", None).matches(&enqueued));
        assert!(f("", "", Some("acme")).matches(&enqueued));
        assert!(!f("", "", Some("other")).matches(&enqueued));
        assert!(
            !f("", "", Some("acme")).matches(&paused),
            "relay events belong to no tenant"
        );
        assert!(Filter::default().matches(&paused));
    }

    #[test]
    fn live_only_builds_nothing_without_subscribers() {
        let tier1 = EventBus::new("t", 8, None);
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

//! The event stream across the FFI line (issue 15): what a framework's mount serves (the
//! in-process relay's frames, [`RelayFrames`]) and what an SDK's event client reads (any OJS
//! event stream, [`EventFeed`]). Both block the calling host thread for at most a timeout, so a
//! binding can poll them from a thread (Python, Ruby) or a worker (Node) without callbacks.

use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use crate::Bridge;
use ojs_outbox::event_client::{EventClient, EventSubscription};
use ojs_outbox::events::{Filter, ReplayFrom, Subscription, parse_rfc3339_ms};
use ojs_outbox::{Error, ErrorCode, Result};
use serde::Deserialize;

/// What a mount asks for, from its request (JSON): the query parameters of
/// `GET /v1/events/stream`, the `Last-Event-ID` header, and the tenant the caller is scoped to
/// (the framework's authorization decides that; it wins over a `tenant` parameter).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamRequest {
    #[serde(default)]
    pub types: Option<String>,
    #[serde(default)]
    pub queues: Option<String>,
    #[serde(default)]
    pub job_types: Option<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub last_event_id: Option<String>,
}

/// The next thing a stream has: a frame to write, nothing yet (write a keep-alive comment if
/// you like), or the end (close the response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Frame(String),
    Idle,
    End,
}

impl Next {
    /// The FFI form: the frame, `""` when idle, `None` at the end.
    pub fn into_option(self) -> Option<String> {
        match self {
            Next::Frame(frame) => Some(frame),
            Next::Idle => Some(String::new()),
            Next::End => None,
        }
    }
}

/// One subscriber of the in-process relay's events, as SSE frames.
pub struct RelayFrames {
    pub(crate) subscription: Mutex<Subscription>,
    /// The process's runtime, kept alive while the stream is (a wait on a runtime the adapter's
    /// `close` dropped would panic).
    pub(crate) runtime: Arc<crate::runtime::Running>,
    /// Served through `Bridge::surface`: the keep-alive comment first and after each quiet
    /// interval (`None`: the host writes its own).
    keep_alive: Option<Mutex<KeepAlive>>,
}

struct KeepAlive {
    every: Duration,
    /// When the last frame or comment was handed out; `None`: nothing yet.
    last: Option<std::time::Instant>,
}

impl RelayFrames {
    pub(crate) fn open(
        bus: std::sync::Arc<ojs_outbox::events::EventBus>,
        request: &StreamRequest,
        runtime: Arc<crate::runtime::Running>,
    ) -> Result<RelayFrames> {
        let filter = Filter::from_lists(
            request.types.as_deref(),
            request.queues.as_deref(),
            request.job_types.as_deref(),
            request.tenant.as_deref(),
        );
        let from = match (&request.last_event_id, &request.since) {
            (Some(id), _) if !id.is_empty() => Some(ReplayFrom::AfterId(id.clone())),
            (_, Some(since)) => Some(ReplayFrom::Since(parse_rfc3339_ms(since).ok_or_else(
                || {
                    ojs_outbox::Error::field(
                        ojs_outbox::ErrorCode::InvalidConfig,
                        "since",
                        format!("{since:?} is not an RFC 3339 time"),
                    )
                },
            )?)),
            _ => None,
        };
        Ok(RelayFrames::with_filter(bus, filter, from, runtime, None))
    }

    pub(crate) fn with_filter(
        bus: std::sync::Arc<ojs_outbox::events::EventBus>,
        filter: Filter,
        from: Option<ReplayFrom>,
        runtime: Arc<crate::runtime::Running>,
        keep_alive: Option<Duration>,
    ) -> RelayFrames {
        RelayFrames {
            subscription: Mutex::new(Subscription::new(bus, filter, from.as_ref())),
            runtime,
            keep_alive: keep_alive.map(|every| Mutex::new(KeepAlive { every, last: None })),
        }
    }

    /// Waits up to `timeout_ms` for the next frame (with a keep-alive: the comment first, and
    /// after each quiet interval).
    pub fn next(&self, timeout_ms: u64) -> Next {
        let Some(keep_alive) = &self.keep_alive else {
            return self.wait(timeout_ms);
        };
        let now = std::time::Instant::now();
        let due = {
            let state = keep_alive.lock().unwrap_or_else(|p| p.into_inner());
            match state.last {
                None => Duration::ZERO,
                Some(last) => (last + state.every).saturating_duration_since(now),
            }
        };
        let next = if due.is_zero() {
            Next::Frame(ojs_outbox::surface::KEEP_ALIVE_FRAME.to_owned())
        } else {
            let wait = u64::try_from(due.as_millis()).unwrap_or(u64::MAX).max(1);
            match self.wait(timeout_ms.min(wait)) {
                Next::Idle if std::time::Instant::now() >= now + due => {
                    Next::Frame(ojs_outbox::surface::KEEP_ALIVE_FRAME.to_owned())
                }
                other => other,
            }
        };
        if matches!(next, Next::Frame(_)) {
            let mut state = keep_alive.lock().unwrap_or_else(|p| p.into_inner());
            state.last = Some(std::time::Instant::now());
        }
        next
    }

    fn wait(&self, timeout_ms: u64) -> Next {
        let mut subscription = self.subscription.lock().unwrap_or_else(|p| p.into_inner());
        // The timer belongs to the runtime: build it inside.
        let wait = async {
            tokio::time::timeout(Duration::from_millis(timeout_ms), subscription.next_frame()).await
        };
        match self.runtime.runtime.block_on(wait) {
            Ok(Some(frame)) => Next::Frame(frame),
            Ok(None) => Next::End,
            Err(_) => Next::Idle,
        }
    }
}

/// An SDK's subscription to an OJS event stream (a backend's or a relay's): reconnects and
/// resumes by itself (`event_client.rs`).
pub struct EventFeed {
    pub(crate) client: Mutex<EventClient>,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl EventFeed {
    pub(crate) fn open(options_json: &str, runtime: tokio::runtime::Handle) -> Result<EventFeed> {
        let subscription = EventSubscription::from_json(options_json)?;
        let client = {
            let _entered = runtime.enter();
            EventClient::start(subscription)
        };
        Ok(EventFeed {
            client: Mutex::new(client),
            runtime,
        })
    }

    /// Waits up to `timeout_ms` for the next event: its CloudEvents JSON text; `""` when none
    /// came in time; `None` once closed. A refusal by the server is an error, and final.
    pub fn next(&self, timeout_ms: u64) -> Result<Option<String>> {
        let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
        let wait =
            async { tokio::time::timeout(Duration::from_millis(timeout_ms), client.next()).await };
        match self.runtime.block_on(wait) {
            Ok(Some(Ok(event))) => Ok(Some(event.data)),
            Ok(Some(Err(error))) => Err(error),
            Ok(None) => Ok(None),
            Err(_) => Ok(Some(String::new())),
        }
    }

    pub fn close(&self) {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .close();
    }
}

impl Bridge {
    /// A subscriber of the table's events, as SSE frames (what a framework's
    /// `/v1/events/stream` mount serves); `request_json` is an `events::StreamRequest`. With
    /// the event log (`relay.event_retention`, the default) any process serves every relay's
    /// events, whether a relay runs here or not; live only, it fails with `RELAY_SHUT_DOWN`
    /// when no relay runs here.
    pub fn relay_events(&self, request_json: &str) -> Result<RelayFrames> {
        let request: StreamRequest = serde_json::from_str(request_json)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "request", e.to_string()))?;
        let (bus, runtime) = self.event_bus()?;
        RelayFrames::open(bus, &request, runtime)
    }

    /// The table's event bus and the runtime its subscriptions wait on (see `relay_events`).
    pub(crate) fn event_bus(
        &self,
    ) -> Result<(
        Arc<ojs_outbox::events::EventBus>,
        Arc<crate::runtime::Running>,
    )> {
        let live_only = || {
            Error::new(
                ErrorCode::RelayShutDown,
                "no relay runs in this process, and events are live only (relay.event_retention is null): they stream from the process that runs the relay",
            )
        };
        let running = if self.config.relay.event_retention.is_some() {
            self.running()?
        } else {
            self.running_here().ok_or_else(live_only)?
        };
        let bus = running.outbox.events().ok_or_else(live_only)?;
        Ok((bus, running))
    }

    /// An SDK's event client (`event_client::EventSubscription` as JSON: `url` of any OJS
    /// event stream, `token`, filters, `since`, `last_event_id`); reconnects and resumes itself.
    /// Without `url`: the configured backend's stream, `<ojs_url>/v1/events/stream`.
    pub fn subscribe_events(&self, options_json: &str) -> Result<EventFeed> {
        let mut options: serde_json::Value = serde_json::from_str(options_json)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "subscription", e.to_string()))?;
        if let Some(map) = options.as_object_mut()
            && map.get("url").is_none_or(serde_json::Value::is_null)
        {
            let base = self.config.ojs_url.trim_end_matches('/');
            map.insert("url".into(), format!("{base}/v1/events/stream").into());
        }
        self.with_http(|runtime, _| EventFeed::open(&options.to_string(), runtime.handle().clone()))
    }
}

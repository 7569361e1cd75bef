//! The event surface of issue 15 for the gem: the HTTP surface a mount serves
//! (`ojs_ruby_bridge_surface`: `OJS::EventsApp` hands it each request, the core's
//! `ojs_bridge::Bridge::surface` decides the answer, its SSE frames included), the in-process
//! relay's SSE frames, its Prometheus text and readiness (`OJS.metrics_text`, `OJS.readiness`),
//! and an SDK's event client of any OJS stream (`OJS.subscribe_events`). Every rule (paths,
//! who may read what, tenant scoping, filters, replay, framing, keep-alive, reconnect and
//! `Last-Event-ID` resume, the readiness verdict) is the bridge's; this module converts handles
//! and text.
//!
//! The calls that wait (a frame, an event, a database or backend round trip) are C functions
//! bound with the ffi gem's `blocking: true`, so the GVL is released while they wait and other
//! Ruby threads (a server's) keep running. They follow `hot.rs`'s rules: uniffi handles borrowed
//! for the call, uniffi's `RustCallStatus` for errors and panics; their answers are uniffi's own
//! lowered values (a `RustBuffer` the Ruby side consumes with the generated code: a `String`,
//! an `Option<String>`, a [`SurfaceAnswer`] record), and `ojs_ruby_bridge_subscribe_events`
//! answers a uniffi handle of an `EventFeed`, which Ruby wraps with the generated class
//! (`EventFeed.uniffi_lift`). Not uniffi's async functions: those use ffi's callback dispatcher
//! thread, which a forked server worker does not have (ffi #1114, docs/rails.md).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use uniffi::{Lower, RustBuffer, RustCallError, RustCallStatus};

use crate::hot::{borrow, lower, text};
use crate::{Bridge, NativeError, NativeResult, UniFfiTag};

/// A stream handle that `close` empties at once, also while another thread waits in `next`
/// (that call holds its own reference and returns within its timeout).
struct Slot<T>(Mutex<Option<Arc<T>>>);

impl<T> Slot<T> {
    fn new(value: T) -> Slot<T> {
        Slot(Mutex::new(Some(Arc::new(value))))
    }

    fn current(&self) -> Option<Arc<T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops this handle's reference. Never waits.
    fn close(&self) {
        let value = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(value);
    }
}

/// A subscriber of this process's relay events, as SSE frames (`ojs_bridge::events::RelayFrames`).
#[derive(uniffi::Object)]
pub struct RelayFrames {
    inner: Slot<ojs_bridge::events::RelayFrames>,
}

#[uniffi::export]
impl RelayFrames {
    /// Ends the subscription (the next `next` answers the end). Never waits.
    pub fn close(&self) {
        self.inner.close();
    }
}

/// An SDK's subscription to an OJS event stream (`ojs_bridge::events::EventFeed`): reconnects
/// and resumes in the core.
#[derive(uniffi::Object)]
pub struct EventFeed {
    inner: Slot<ojs_bridge::events::EventFeed>,
}

#[uniffi::export]
impl EventFeed {
    /// Stops the client (its reader task ends with the last reference). Never waits.
    pub fn close(&self) {
        self.inner.close();
    }
}

#[uniffi::export]
impl Bridge {
    /// A subscriber of this process's relay events (`Bridge::relay_events`; `request_json` is
    /// an `events::StreamRequest`: `types`, `queues`, `job_types`, `tenant`, `since`,
    /// `last_event_id`). No I/O; fails with RELAY_SHUT_DOWN when no relay runs here.
    pub fn relay_events(&self, request_json: String) -> NativeResult<Arc<RelayFrames>> {
        let frames = self.inner.relay_events(&request_json)?;
        Ok(Arc::new(RelayFrames {
            inner: Slot::new(frames),
        }))
    }
}

/// One header of a [`SurfaceAnswer`], as the core spells it (`Content-Type`).
#[derive(Debug, uniffi::Record)]
pub struct SurfaceHeader {
    pub name: String,
    pub value: String,
}

/// What a mount writes for one request (`ojs_bridge::surface::SurfaceAnswer`): the status, the
/// headers (`Content-Type` always), then the body, or, with `stream`, each frame `next` gives
/// (a keep-alive comment first, and after each quiet interval).
#[derive(uniffi::Record)]
pub struct SurfaceAnswer {
    pub status: u16,
    pub headers: Vec<SurfaceHeader>,
    pub body: String,
    pub stream: Option<Arc<RelayFrames>>,
}

impl From<ojs_bridge::surface::SurfaceAnswer> for SurfaceAnswer {
    fn from(answer: ojs_bridge::surface::SurfaceAnswer) -> SurfaceAnswer {
        SurfaceAnswer {
            status: answer.status,
            headers: (answer.headers.into_iter())
                .map(|(name, value)| SurfaceHeader { name, value })
                .collect(),
            body: answer.body,
            stream: answer.stream.map(|frames| {
                Arc::new(RelayFrames {
                    inner: Slot::new(frames),
                })
            }),
        }
    }
}

/// Whether `path` (under the mount) answers every caller (`Bridge::surface_is_open`): the mount
/// asks the app's `authorize` only for the other paths. No I/O.
#[uniffi::export]
pub fn surface_is_open(path: String) -> bool {
    ojs_bridge::Bridge::surface_is_open(&path)
}

/// Lowers an answer the uniffi way (what the generated Ruby consumes).
pub(crate) fn lowered<T: Lower<UniFfiTag>>(value: T) -> T::FfiType {
    <T as Lower<UniFfiTag>>::lower(value)
}

/// `RelayFrames::next`: waits up to `timeout_ms` for the next frame. The answer is a lowered
/// `Option<String>`: the SSE frame text, `""` when none came in time, nil at the end (the relay
/// stopped, the subscriber was cut off, or `close` was called). Bound with `blocking: true`.
///
/// # Safety
/// `frames` is a live `RelayFrames` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_frames_next(
    frames: u64,
    timeout_ms: u64,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let frames = unsafe { borrow::<RelayFrames>(frames) };
            let next = match frames.inner.current() {
                Some(inner) => inner.next(timeout_ms).into_option(),
                None => None,
            };
            Ok(lowered(next))
        }),
    )
}

/// `EventFeed::next`: waits up to `timeout_ms` for the next event. The answer is a lowered
/// `Option<String>`: the event's CloudEvents JSON text, `""` when none came in time, nil once
/// closed; a refusal by the server is the core's error (final). Bound with `blocking: true`.
///
/// # Safety
/// `feed` is a live `EventFeed` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_event_feed_next(
    feed: u64,
    timeout_ms: u64,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let feed = unsafe { borrow::<EventFeed>(feed) };
            let next = match feed.inner.current() {
                Some(inner) => inner
                    .next(timeout_ms)
                    .map_err(|error| RustCallError::Error(lower(error.into())))?,
                None => None,
            };
            Ok(lowered(next))
        }),
    )
}

/// `Bridge::subscribe_events`: starts an event client (`options_json`: `url` (optional: the
/// configured backend's stream), `token`, `types`, `queues`, `job_types` (lists), `tenant`,
/// `since`, `last_event_id`). Answers the uniffi handle of a new `EventFeed`. Bound with
/// `blocking: true`: without a relay in this process the bridge starts a runtime of its own
/// first.
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `options` null or `options_len` readable bytes;
/// `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_subscribe_events(
    bridge: u64,
    options: *const u8,
    options_len: usize,
    status: &mut RustCallStatus,
) -> u64 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            let work = || -> Result<u64, NativeError> {
                // SAFETY (both): the caller's contract.
                let bridge = unsafe { borrow::<Bridge>(bridge) };
                let options = unsafe { text(options, options_len, "subscription")? };
                let feed = bridge.inner.subscribe_events(options.unwrap_or("{}"))?;
                let feed = Arc::new(EventFeed {
                    inner: Slot::new(feed),
                });
                Ok(lowered(feed).as_raw())
            };
            work().map_err(|error| RustCallError::Error(lower(error)))
        }),
    )
}

/// `Bridge::surface`: serves one request of a mount (`request_json`: `{"method", "path"
/// (under the mount), "query", "last_event_id"?, "access" (the app's authorize decision:
/// `true`, `false`/`null`, `{"tenant"}` or a tenant id), "access_field"?, "keep_alive_ms"?,
/// "body"?}`). The answer is a lowered [`SurfaceAnswer`]; an `access` that is no decision is the
/// core's `INVALID_CONFIG` naming `access_field`. Bound with `blocking: true` (`/readyz` is a
/// database and a backend round trip, `/metrics` reads the table's counts).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `request` null or `request_len` readable bytes;
/// `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_surface(
    bridge: u64,
    request: *const u8,
    request_len: usize,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            let work = || -> Result<RustBuffer, NativeError> {
                // SAFETY (both): the caller's contract.
                let bridge = unsafe { borrow::<Bridge>(bridge) };
                let request = unsafe { text(request, request_len, "config")? };
                let answer = bridge.inner.surface(request.unwrap_or("{}"))?;
                Ok(lowered(SurfaceAnswer::from(answer)))
            };
            work().map_err(|error| RustCallError::Error(lower(error)))
        }),
    )
}

/// `Bridge::metrics_text`: the Prometheus exposition of this process's relay, a lowered
/// `Option<String>` (nil when no relay runs here). Bound with `blocking: true` (it reads the
/// table's counts).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_metrics_text(
    bridge: u64,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let bridge = unsafe { borrow::<Bridge>(bridge) };
            Ok(lowered(bridge.inner.metrics_text()))
        }),
    )
}

/// `Bridge::readiness_json`: `{"ready", "database", "backend"}` as a lowered `String`. Bound
/// with `blocking: true` (a database and a backend round trip).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_readiness_json(
    bridge: u64,
    status: &mut RustCallStatus,
) -> RustBuffer {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let bridge = unsafe { borrow::<Bridge>(bridge) };
            bridge
                .inner
                .readiness_json()
                .map(lowered)
                .map_err(|error| RustCallError::Error(lower(error.into())))
        }),
    )
}

//! The event surface of issue 15 for the gem: the HTTP surface a mount serves
//! (`ojs_ruby_bridge_surface`: `OJS::EventsApp` hands it each request, the core's
//! `ojs_bridge::Bridge::surface` decides the answer, its SSE frames included), the in-process
//! relay's SSE frames, and an SDK's event client of any OJS stream (`OJS.subscribe_events`).
//! Every rule (paths, who may read what, tenant scoping, filters, replay, framing, keep-alive,
//! reconnect and `Last-Event-ID` resume) is the bridge's; this module converts handles and
//! text by the protocol of `lib.rs`.
//!
//! The calls that wait (a frame, an event, a database or backend round trip) are bound with
//! `blocking: true`: the GVL is released while they wait, so other Ruby threads (a server's)
//! keep running. A `close` from another thread ends a wait within its timeout.

use std::sync::{Arc, Mutex};

use crate::facade::Bridge;
use crate::{Answer, OjsRubyOut, borrow, call, free, into_handle, text};

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
pub struct RelayFrames(Slot<ojs_bridge::events::RelayFrames>);

/// An SDK's subscription to an OJS event stream (`ojs_bridge::events::EventFeed`): reconnects
/// and resumes in the core.
pub struct EventFeed(Slot<ojs_bridge::events::EventFeed>);

/// A subscriber of this process's relay events (`Bridge::relay_events`; `request` an
/// `events::StreamRequest` as JSON: `types`, `queues`, `job_types`, `tenant`, `since`,
/// `last_event_id`). No I/O; fails with RELAY_SHUT_DOWN when no relay runs here. Answers a new
/// `RelayFrames`.
///
/// # Safety
/// `bridge` a live `Bridge`; `request` null or `request_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_relay_events(
    bridge: *const Bridge,
    request: *const u8,
    request_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let request = text(request, request_len, "config")?.unwrap_or("{}");
            let frames = borrow(bridge).inner.relay_events(request)?;
            Ok(into_handle(RelayFrames(Slot::new(frames))))
        })
    }
}

/// `RelayFrames::next`: waits up to `timeout_ms` for the next frame: the SSE frame text, `""`
/// when none came in time, none (nil) at the end (the relay stopped, the subscriber was cut off,
/// or `close` was called). Bound with `blocking: true`.
///
/// # Safety
/// `frames` a live `RelayFrames`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_frames_next(
    frames: *const RelayFrames,
    timeout_ms: u64,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let current = borrow(frames).0.current();
            Ok(current.and_then(|inner| inner.next(timeout_ms).into_option()))
        })
    }
}

/// Ends the subscription (the next `next` answers the end). Never waits.
///
/// # Safety
/// `frames` a live `RelayFrames`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_frames_close(
    frames: *const RelayFrames,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            borrow(frames).0.close();
            Ok(())
        })
    }
}

/// Frees a `RelayFrames` (Ruby's finalizer).
///
/// # Safety
/// `frames` null or a `RelayFrames` of this library, not freed yet, borrowed by no call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_frames_free(frames: *mut RelayFrames) {
    unsafe { free(frames) }
}

/// `Bridge::subscribe_events`: starts an event client (`options` JSON: `url` (optional: the
/// configured backend's stream), `token`, `types`, `queues`, `job_types` (lists), `tenant`,
/// `since`, `last_event_id`). Answers a new `EventFeed`. Bound with `blocking: true`: without
/// a relay in this process the bridge starts a runtime of its own first.
///
/// # Safety
/// `bridge` a live `Bridge`; `options` null or `options_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_subscribe_events(
    bridge: *const Bridge,
    options: *const u8,
    options_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let options = text(options, options_len, "subscription")?.unwrap_or("{}");
            let feed = borrow(bridge).inner.subscribe_events(options)?;
            Ok(into_handle(EventFeed(Slot::new(feed))))
        })
    }
}

/// `EventFeed::next`: waits up to `timeout_ms` for the next event: its CloudEvents JSON text,
/// `""` when none came in time, none (nil) once closed; a refusal by the server is the core's
/// error (final). Bound with `blocking: true`.
///
/// # Safety
/// `feed` a live `EventFeed`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_event_feed_next(
    feed: *const EventFeed,
    timeout_ms: u64,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || match borrow(feed).0.current() {
            Some(inner) => inner.next(timeout_ms),
            None => Ok(None),
        })
    }
}

/// Stops the client (its reader task ends with the last reference). Never waits.
///
/// # Safety
/// `feed` a live `EventFeed`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_event_feed_close(
    feed: *const EventFeed,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            borrow(feed).0.close();
            Ok(())
        })
    }
}

/// Frees an `EventFeed` (Ruby's finalizer).
///
/// # Safety
/// `feed` null or an `EventFeed` of this library, not freed yet, borrowed by no call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_event_feed_free(feed: *mut EventFeed) {
    unsafe { free(feed) }
}

/// Whether `path` (under the mount) answers every caller (`Bridge::surface_is_open`): the mount
/// asks the app's `authorize` only for the other paths. No I/O. The flag is the `value`.
///
/// # Safety
/// `path` null or `path_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_surface_is_open(
    path: *const u8,
    path_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let path = text(path, path_len, "config")?.unwrap_or_default();
            Ok(ojs_bridge::Bridge::surface_is_open(path))
        })
    }
}

/// `Bridge::surface`: serves one request of a mount (`request` JSON: `{"method", "path"
/// (under the mount), "query", "last_event_id"?, "access" (the app's authorize decision:
/// `true`, `false`/`null`, `{"tenant"}` or a tenant id), "access_field"?, "keep_alive_ms"?,
/// "body"?}`). The answer: the text `{"status", "headers": [[name, value], ...], "body"}` and,
/// for a stream, a new `RelayFrames` as the `value` (0: none). An `access` that is no decision
/// is the core's `INVALID_CONFIG` naming `access_field`. Bound with `blocking: true`
/// (`/readyz` is a database and a backend round trip, `/metrics` reads the table's counts).
///
/// # Safety
/// `bridge` a live `Bridge`; `request` null or `request_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_surface(
    bridge: *const Bridge,
    request: *const u8,
    request_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let request = text(request, request_len, "config")?.unwrap_or("{}");
            let answer = borrow(bridge).inner.surface(request)?;
            let head = serde_json::json!({
                "status": answer.status,
                "headers": answer.headers,
                "body": answer.body,
            });
            let stream =
                (answer.stream).map_or(0, |frames| into_handle(RelayFrames(Slot::new(frames))));
            Ok(Answer::new(Some(head.to_string()), stream))
        })
    }
}

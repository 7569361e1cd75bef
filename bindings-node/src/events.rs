//! The event surface of issue 15 for JavaScript: the in-process relay's SSE frames
//! (`ojs_bridge::events::RelayFrames`, what `ojs.router()` serves) and an event client of any
//! OJS stream (`ojs_bridge::events::EventFeed`, what `ojs.subscribeEvents` iterates).
//!
//! Every wait (`next(timeoutMs)`) blocks up to its timeout, so it runs off the JavaScript
//! thread. Not on libuv's thread pool, unlike the other blocking calls: a stream waits almost
//! all its life, and each open stream would hold one of the pool's four threads (file system,
//! DNS, crypto and every other `AsyncTask` of the process would queue behind the streams). Each
//! stream has a thread of its own instead (`Waiter`), which runs its waits one after another
//! and settles each wait's promise on the JavaScript thread. `close()` ends that thread after
//! the wait in progress and drops the core's handle (the subscription leaves the bus).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use napi::Env;
use napi::bindgen_prelude::{Object, ToNapiValue};
use napi_derive::napi;
use ojs_bridge::ErrorCode;
use ojs_bridge::events::{EventFeed, RelayFrames};

use crate::error::to_js;

pub(crate) type Job = Box<dyn FnOnce() + Send>;
/// What settles a wait's promise, on the JavaScript thread.
type Resolver<T> = Box<dyn FnOnce(Env) -> napi::Result<Option<T>>>;

/// A thread of one stream, running its waits in order. Closed: later waits resolve at once
/// with the end (`null`). Also the thread of a worker's waits and of its stop (`worker.rs`).
pub(crate) struct Waiter {
    jobs: Mutex<Option<Sender<Job>>>,
    /// What the thread serves, for the message of a panic (`the event stream`, `the worker`).
    what: &'static str,
}

impl Waiter {
    pub(crate) fn new(name: &str, what: &'static str) -> napi::Result<Waiter> {
        let (sender, receiver) = channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for job in receiver {
                    job();
                }
            })
            .map_err(|e| {
                napi::Error::from_reason(format!("cannot start the thread of {what}: {e}"))
            })?;
        Ok(Waiter {
            jobs: Mutex::new(Some(sender)),
            what,
        })
    }

    /// Runs `wait` on the stream's thread; the promise settles with its result (`None`, the
    /// end, once closed). A panic in the core rejects the promise instead of losing it.
    pub(crate) fn run<'env, T>(
        &self,
        env: &'env Env,
        wait: impl FnOnce() -> ojs_bridge::Result<Option<T>> + Send + 'static,
    ) -> napi::Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
    {
        let (deferred, promise) = env.create_deferred::<Option<T>, Resolver<T>>()?;
        let sender = self
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let Some(sender) = sender else {
            // Closed: the end, without waiting.
            deferred.resolve(Box::new(|_| Ok(None)));
            return Ok(promise);
        };
        let what = self.what;
        let job: Job = Box::new(move || {
            match catch_unwind(AssertUnwindSafe(wait)) {
                Ok(Ok(value)) => deferred.resolve(Box::new(move |_| Ok(value))),
                Ok(Err(error)) => deferred.reject(to_js(error)),
                Err(_) => deferred.reject(to_js(ojs_bridge::Error::new(
                    ErrorCode::RelayShutDown,
                    format!("{what} failed inside the core (a panic)"),
                ))),
            };
        });
        if let Err(unsent) = sender.send(job) {
            // The thread is gone (it cannot be, but a promise is never left unsettled).
            std::thread::spawn(unsent.0);
        }
        Ok(promise)
    }

    /// No more waits: the thread ends after the waits already queued, then runs `last`.
    pub(crate) fn close(&self, last: Option<Job>) {
        let sender = self
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let (Some(sender), Some(last)) = (sender, last) {
            let _ = sender.send(last);
        }
    }
}

/// One subscriber of this process's relay events, as SSE frames (`Bridge::relay_events`).
#[napi]
pub struct NativeRelayFrames {
    frames: Mutex<Option<Arc<RelayFrames>>>,
    waiter: Waiter,
}

impl NativeRelayFrames {
    pub fn new(frames: RelayFrames) -> napi::Result<Self> {
        Ok(NativeRelayFrames {
            frames: Mutex::new(Some(Arc::new(frames))),
            waiter: Waiter::new("ojs-relay-sse", "the event stream")?,
        })
    }
}

#[napi]
impl NativeRelayFrames {
    /// Waits up to `timeoutMs` for the next frame: its SSE text, `""` when none came in time,
    /// `null` at the end (the relay stopped, or `close()` was called).
    #[napi(ts_return_type = "Promise<string | null>")]
    pub fn next<'env>(&self, env: &'env Env, timeout_ms: u32) -> napi::Result<Object<'env>> {
        let frames = self
            .frames
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        self.waiter.run(env, move || {
            Ok(match frames {
                Some(frames) => frames.next(u64::from(timeout_ms)).into_option(),
                None => None,
            })
        })
    }

    /// Ends the subscription: the wait in progress (if any) is the last one, then the core's
    /// handle is dropped. Idempotent.
    #[napi]
    pub fn close(&self) {
        self.frames
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        self.waiter.close(None);
    }
}

/// An event client of an OJS event stream (`Bridge::subscribe_events`); reconnects and
/// resumes in the core.
#[napi]
pub struct NativeEventFeed {
    feed: Mutex<Option<Arc<EventFeed>>>,
    waiter: Waiter,
}

impl NativeEventFeed {
    pub fn new(feed: EventFeed) -> napi::Result<Self> {
        Ok(NativeEventFeed {
            feed: Mutex::new(Some(Arc::new(feed))),
            waiter: Waiter::new("ojs-event-feed", "the event feed")?,
        })
    }
}

#[napi]
impl NativeEventFeed {
    /// Waits up to `timeoutMs` for the next event: its CloudEvents JSON text, `""` when none
    /// came in time, `null` once closed. A refusal by the server rejects (and is final).
    #[napi(ts_return_type = "Promise<string | null>")]
    pub fn next<'env>(&self, env: &'env Env, timeout_ms: u32) -> napi::Result<Object<'env>> {
        let feed = self
            .feed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        self.waiter.run(env, move || match feed {
            Some(feed) => feed.next(u64::from(timeout_ms)),
            None => Ok(None),
        })
    }

    /// Closes the feed (its connection ends, once the wait in progress is over) and drops the
    /// core's handle. Idempotent; never blocks.
    #[napi]
    pub fn close(&self) {
        let feed = self
            .feed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        // The core's close waits for the wait in progress (it holds the client): on the
        // stream's thread, after it, never on the JavaScript thread.
        self.waiter
            .close(feed.map(|feed| Box::new(move || feed.close()) as Job));
    }
}

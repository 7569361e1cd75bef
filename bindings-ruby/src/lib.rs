//! The native library of the `ojs-adapter-rails` gem: the core's binding surface
//! (`ojs_bridge::Bridge`) as plain C functions, bound in `lib/ojs/native.rb` with the `ffi`
//! gem's `attach_function`. It converts values and nothing else: every rule lives in the core.
//!
//! One FFI protocol, for every function of this library (`ojs_ruby_*`):
//! - **text in** as `(pointer, length)` pairs (`buffer_in` on the Ruby side: the String's own
//!   bytes, no copy); a null pointer is "none" (Ruby's nil). Text that is not UTF-8 is the
//!   core's error for the part it is (`ojs_bridge::unencodable`). Lists and records cross as
//!   JSON text, id lists as `encode_ids` text, one job's staging answer as
//!   `StagedJob::encode`: each in the bridge's one encoding;
//! - **objects** (`Bridge`, `Stager`, `RelayFrames`, `EventFeed`, `Worker`) as opaque pointers
//!   (`Box::into_raw`), one `ojs_ruby_<object>_free` function each, which Ruby's
//!   `FFI::AutoPointer` calls once the Ruby object is collected; a call borrows the object for
//!   its duration (the Ruby caller holds it);
//! - **answers and errors** through one out-parameter, the last argument, [`OjsRubyOut`] (Ruby
//!   keeps one per thread): a text (the answer, the error or the panic message) and a number
//!   (`value`: a count, a flag, a new object's pointer). A text of at most [`INLINE`] bytes is
//!   copied into the out-parameter itself (`inline`: one job's staging answer, an id, a frame);
//!   a longer one is handed over Rust-owned (`text`), and Ruby frees it with [`ojs_ruby_free`]
//!   once copied (measured: a Rust-owned text for every answer cost the per-job call a pointer
//!   object and a second FFI call, about 8% of the call, docs/rails.md, "Performance"). The
//!   return value is the call's status ([`DONE`]; [`FAILED`]: the text is the core's
//!   `Error::to_json`, decoded by `OJS::Error.from_json`; [`PANICKED`]: the text is the panic's
//!   message, raised as `OJS::Native::InternalError`). A panic never crosses the line
//!   (`catch_unwind`);
//! - **waits** (a relay start, a database or backend round trip, the next frame, event or job,
//!   a worker's or relay's stop) are bound with `blocking: true`: the GVL is released while
//!   they run, and they never call Ruby (docs/toolchain.md, rule 2).
//!
//! Why one protocol and plain C (issue 28, item 7, measured: docs/rails.md, "Performance"):
//! uniffi's Ruby lowers a string byte by byte, which cost more per job than the INSERT it
//! prepares, so the per-job calls were C functions beside uniffi's; now everything is.
//!
//! `lib/ojs/native.rb` declares every signature again for the ffi gem;
//! `test/native_signature_test.rb` parses both sides and fails when they differ.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ojs_bridge::Error;

mod error;
mod events;
mod facade;
mod worker;

/// The status of a call that completed; its answer is in the [`OjsRubyOut`].
pub const DONE: i32 = 0;
/// The status of a call that failed: the out-parameter's text is the core's `Error::to_json`.
pub const FAILED: i32 = 1;
/// The status of a call that panicked: the out-parameter's text is the panic's message.
pub const PANICKED: i32 = 2;

/// The most bytes of a text [`OjsRubyOut`] holds itself.
pub const INLINE: usize = 4096;

/// `len` of an [`OjsRubyOut`] without a text (Ruby's nil).
pub const NO_TEXT: usize = usize::MAX;

/// The out-parameter of every call (its last argument; Ruby keeps one per thread). Written by
/// every call, whatever its status.
#[repr(C)]
pub struct OjsRubyOut {
    /// The text's length in bytes (the answer, the error JSON or the panic message, UTF-8);
    /// [`NO_TEXT`] when there is none.
    pub len: usize,
    /// A text longer than [`INLINE`]: Rust-owned, to be freed with [`ojs_ruby_free`]`(text,
    /// len)`; else null.
    pub text: *mut u8,
    /// A number answer: a count, a flag (0 or 1), or a new object's pointer (0: none).
    pub value: u64,
    /// A text of at most [`INLINE`] bytes: its first `len` bytes.
    pub inline: [u8; INLINE],
}

/// What a call answers: an optional text and a number.
#[derive(Default)]
pub(crate) struct Answer {
    text: Option<String>,
    value: u64,
}

impl Answer {
    pub(crate) fn new(text: Option<String>, value: u64) -> Answer {
        Answer { text, value }
    }
}

impl From<()> for Answer {
    fn from((): ()) -> Answer {
        Answer::default()
    }
}

impl From<String> for Answer {
    fn from(text: String) -> Answer {
        Answer::new(Some(text), 0)
    }
}

impl From<Option<String>> for Answer {
    fn from(text: Option<String>) -> Answer {
        Answer::new(text, 0)
    }
}

impl From<bool> for Answer {
    fn from(flag: bool) -> Answer {
        Answer::new(None, u64::from(flag))
    }
}

impl From<u64> for Answer {
    fn from(value: u64) -> Answer {
        Answer::new(None, value)
    }
}

/// Runs a call's body by the protocol: its answer, its error or its panic into `out`; returns
/// the status.
///
/// # Safety
/// `out` is null or points to a writable [`OjsRubyOut`].
pub(crate) unsafe fn call<A: Into<Answer>>(
    out: *mut OjsRubyOut,
    body: impl FnOnce() -> Result<A, Error>,
) -> i32 {
    let (status, answer) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(answer)) => (DONE, answer.into()),
        Ok(Err(error)) => (FAILED, Answer::from(error.to_json())),
        Err(panic) => {
            let message = (panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic in the native library".to_owned());
            (PANICKED, Answer::from(message))
        }
    };
    // SAFETY: the caller's contract; a null `out` (a bug on the Ruby side) loses the answer.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return status;
    };
    out.value = answer.value;
    match answer.text {
        Some(text) if text.len() <= INLINE => {
            out.inline[..text.len()].copy_from_slice(text.as_bytes());
            out.len = text.len();
            out.text = std::ptr::null_mut();
        }
        Some(text) => {
            out.len = text.len();
            out.text = Box::into_raw(text.into_boxed_str()).cast::<u8>();
        }
        None => {
            out.len = NO_TEXT;
            out.text = std::ptr::null_mut();
        }
    }
    status
}

/// Frees a Rust-owned text an [`OjsRubyOut`] handed over (`text`, `len` as written there).
/// Null: nothing.
///
/// # Safety
/// `text` is null or a text of this library's out-parameter, not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_free(text: *mut u8, len: usize) {
    if !text.is_null() {
        // SAFETY: the caller's contract: `Box<str>::into_raw` of `len` bytes in `call`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(text, len)) });
    }
}

/// `(pointer, length)` as text; a null pointer is `None`. Not UTF-8: the core's error for
/// `part` (`args`, `options`, `config`, ...).
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes that stay valid for the call.
pub(crate) unsafe fn text<'a>(
    ptr: *const u8,
    len: usize,
    part: &str,
) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ojs_bridge::unencodable(part, part, "is not valid UTF-8 text"))
}

/// A JSON array of strings (a list crossing as text).
pub(crate) fn strings(json: Option<&str>, part: &str) -> Result<Vec<String>, Error> {
    serde_json::from_str(json.unwrap_or("[]"))
        .map_err(|_| ojs_bridge::unencodable(part, part, "is not a JSON array of strings"))
}

/// A new object for Ruby: its pointer, which `ojs_ruby_<object>_free` takes back.
pub(crate) fn into_handle<T>(object: T) -> u64 {
    Box::into_raw(Box::new(object)) as u64
}

/// The object behind a pointer Ruby holds, for the duration of a call.
///
/// # Safety
/// `ptr` is null or a live pointer of [`into_handle`] for a `T`, whose Ruby owner outlives the
/// call.
pub(crate) unsafe fn borrow<'a, T>(ptr: *const T) -> &'a T {
    // SAFETY: the caller's contract; null (a bug on the Ruby side) panics, reported as such.
    unsafe { ptr.as_ref() }.expect("a live native object")
}

/// Drops an object of [`into_handle`] (its `*_free` function); a panic in its drop is
/// swallowed (it runs in Ruby's finalizer).
///
/// # Safety
/// `ptr` is null or a pointer of [`into_handle`] for a `T`, not freed yet and borrowed by no
/// call.
pub(crate) unsafe fn free<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: the caller's contract.
        let object = unsafe { Box::from_raw(ptr) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(object)));
    }
}

/// One record of a log feed (the relay's or a worker's) as JSON: `level` ("info", "warning",
/// "error"), `message`, `job_id` (or null), `table`.
pub(crate) fn log_records_json(records: Vec<ojs_bridge::LogRecord>) -> String {
    let records: Vec<serde_json::Value> = (records.into_iter())
        .map(|record| {
            serde_json::json!({
                "level": record.level,
                "message": record.message,
                "job_id": record.job_id,
                "table": record.table,
            })
        })
        .collect();
    serde_json::Value::Array(records).to_string()
}

/// Turns the relay's log feed on for this process (`ojs_bridge::enable_log_feed`). Idempotent.
///
/// # Safety
/// `out` as [`call`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_enable_log_feed(out: *mut OjsRubyOut) -> i32 {
    unsafe {
        call(out, || {
            ojs_bridge::enable_log_feed();
            Ok(())
        })
    }
}

/// The relay log records queued since the last call, oldest first, as a JSON array of
/// [`log_records_json`]'s objects. Cheap (a short lock on the core's queue, no I/O):
/// `OJS::RelayLog`'s thread calls it every 250 ms.
///
/// # Safety
/// `out` as [`call`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_drain_log_feed(out: *mut OjsRubyOut) -> i32 {
    unsafe { call(out, || Ok(log_records_json(ojs_bridge::drain_log_feed()))) }
}

/// The workspace version this library was built from (`[workspace.package] version`).
///
/// # Safety
/// `out` as [`call`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_version(out: *mut OjsRubyOut) -> i32 {
    unsafe { call(out, || Ok(env!("CARGO_PKG_VERSION").to_owned())) }
}

/// A panic, reported as one: the test of the panic channel (`native_signature_test.rb`).
///
/// # Safety
/// `out` as [`call`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_panic_for_test(out: *mut OjsRubyOut) -> i32 {
    unsafe {
        call(out, || -> Result<(), Error> {
            panic!("a panic asked for by a test")
        })
    }
}

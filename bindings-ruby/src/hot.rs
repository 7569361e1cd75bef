//! The calls made once per job or per commit, as plain C functions of the same library as the
//! uniffi scaffolding, bound in `lib/ojs/native.rb` with the `ffi` gem's `attach_function` (the
//! gem uniffi's Ruby bindings load): staging one job (`enqueue_after_commit`), staging a bulk
//! (`enqueue_bulk`), the relay's start once per process (`ensure_relay`) and the after-commit
//! wake-up.
//!
//! Why not uniffi's generated Ruby for these: it lowers every string argument in Ruby (an Array
//! of byte Integers, a RustBuffer allocated and grown by further FFI calls): measured, a
//! one-job `stage_job` through it costs more than the INSERT it prepares (docs/rails.md,
//! "Performance"). Here Ruby strings go in as `(pointer, length)` pairs and the answer is
//! written into a buffer the caller owns. Everything else is the uniffi side's:
//! - handles: the uniffi handles of `Bridge` and `Stager` (the `Arc` pointer uniffi hands Ruby),
//!   borrowed for the call (the Ruby object holding it is alive during the call);
//! - errors and panics: uniffi's `RustCallStatus` (last argument) through `uniffi::rust_call`:
//!   an error is `NativeError` (the `Error::to_json` text), a panic uniffi's unexpected-error
//!   status with its message; Ruby reads both with the uniffi side's code;
//! - answers: the core's encodings, `StagedJob::encode` and `Staged::to_json`; id lists as
//!   `encode_ids` text.
//!
//! Answer protocol of the staging functions: they return the answer's length in bytes; when
//! it is at most `out_capacity` the answer was written to `out`, else nothing was written and
//! the caller calls again with a buffer that large (a new call: new job ids). On an error
//! (status code non-zero) the return value is 0 and means nothing.
//!
//! `lib/ojs/native.rb` declares these signatures again for the ffi gem;
//! `test/native_signature_test.rb` parses both files and fails when they differ.

use std::panic::AssertUnwindSafe;

use uniffi::{LowerError, RustCallError, RustCallStatus};

use crate::{Bridge, NativeError, Stager, UniFfiTag};

/// The object behind a uniffi handle, for the duration of a call.
///
/// # Safety
/// `handle` is the live uniffi handle of a `T` (uniffi's `Handle::from_arc`: the `Arc`'s
/// pointer), owned by a Ruby object that outlives the call.
pub(crate) unsafe fn borrow<'a, T>(handle: u64) -> &'a T {
    // SAFETY: the caller's contract: a pointer from `Arc::into_raw`, still counted.
    unsafe { &*uniffi::Handle::from_raw_unchecked(handle).as_pointer::<T>() }
}

/// The error's uniffi form (what uniffi's own scaffolding writes into the status).
pub(crate) fn lower(error: NativeError) -> uniffi::RustBuffer {
    <NativeError as LowerError<UniFfiTag>>::lower_error(error)
}

/// `(ptr, len)` as text; a null pointer is `None`.
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes that stay valid for the call.
pub(crate) unsafe fn text<'a>(
    ptr: *const u8,
    len: usize,
    part: &str,
) -> Result<Option<&'a str>, NativeError> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ojs_bridge::unencodable(part, part, "is not valid UTF-8 text").into())
}

/// Runs `work` by uniffi's rules (a panic or an error set `status`) and writes its answer
/// into `out` by the protocol of this module.
///
/// # Safety
/// `out` points to `out_capacity` writable bytes; `status` to a zeroed `RustCallStatus`.
unsafe fn answer(
    out: *mut u8,
    out_capacity: usize,
    status: &mut RustCallStatus,
    work: impl FnOnce() -> Result<String, NativeError>,
) -> u64 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            let text = work().map_err(|error| RustCallError::Error(lower(error)))?;
            if text.len() <= out_capacity {
                // SAFETY: `out` has `out_capacity >= text.len()` writable bytes (caller's
                // contract), and cannot overlap a String we just built.
                unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, text.len()) };
            }
            Ok(text.len() as u64)
        }),
    )
}

/// One job (`Bridge::stage_job`): the answer is `StagedJob::encode(with_sql != 0)`, the
/// INSERT's text first when asked, then its parameters, NUL-separated; for a job with an
/// ordering key or a unique key, a NUL and then its `Staged::to_json` (run as a bulk of one).
///
/// # Safety
/// `stager` is a live `Stager` handle; every `(pointer, length)` pair is null or `length`
/// readable bytes; `out` is `out_capacity` writable bytes not overlapping them; `status` a
/// zeroed `RustCallStatus`. All stay valid during the call.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ojs_ruby_bridge_stage_job(
    stager: u64,
    job_type: *const u8,
    job_type_len: usize,
    args: *const u8,
    args_len: usize,
    options: *const u8,
    options_len: usize,
    meta: *const u8,
    meta_len: usize,
    context: *const u8,
    context_len: usize,
    with_sql: i8,
    out: *mut u8,
    out_capacity: usize,
    status: &mut RustCallStatus,
) -> u64 {
    let work = || {
        // SAFETY (all): the caller's contract.
        let stager = unsafe { borrow::<Stager>(stager) };
        let job_type = unsafe { text(job_type, job_type_len, "type")? };
        let args = unsafe { text(args, args_len, "args")? };
        let options = unsafe { text(options, options_len, "options")? };
        let meta = unsafe { text(meta, meta_len, "meta")? };
        let context = unsafe { text(context, context_len, "context")? };
        let staged = stager.bridge.stage_job(
            &stager.dialect,
            &stager.placeholder,
            job_type.unwrap_or_default(),
            args.unwrap_or("null"),
            options,
            meta,
            context,
        )?;
        Ok(staged.encode(with_sql != 0))
    };
    // SAFETY: the caller's contract on `out` and `status`.
    unsafe { answer(out, out_capacity, status, work) }
}

/// Several jobs (`Bridge::stage`, `jobs_json` a JSON array): the answer is `Staged::to_json`.
///
/// # Safety
/// As `ojs_ruby_bridge_stage_job`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_stage(
    stager: u64,
    jobs_json: *const u8,
    jobs_json_len: usize,
    context: *const u8,
    context_len: usize,
    out: *mut u8,
    out_capacity: usize,
    status: &mut RustCallStatus,
) -> u64 {
    let work = || {
        // SAFETY (all): the caller's contract.
        let stager = unsafe { borrow::<Stager>(stager) };
        let jobs = unsafe { text(jobs_json, jobs_json_len, "args")? };
        let context = unsafe { text(context, context_len, "context")? };
        let staged = stager.bridge.stage(
            &stager.dialect,
            &stager.placeholder,
            jobs.unwrap_or("null"),
            context,
        )?;
        Ok(staged.to_json())
    };
    // SAFETY: the caller's contract on `out` and `status`.
    unsafe { answer(out, out_capacity, status, work) }
}

/// `Bridge::ensure_relay`: starts this process's relay once, and again in a forked child; one
/// atomic load when it runs. Bound with `blocking: true` (the GVL is released: a start opens
/// the relay's database connection). Returns 1; 0 when it failed (see `status`).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_ensure_relay(
    bridge: u64,
    status: &mut RustCallStatus,
) -> i8 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            let bridge = unsafe { borrow::<Bridge>(bridge) };
            bridge
                .inner
                .ensure_relay()
                .map(|()| 1)
                .map_err(|error| RustCallError::Error(lower(error.into())))
        }),
    )
}

/// The after-commit wake-up (`Bridge::notify_committed`) for job ids as `encode_ids` text.
/// Never blocks. Returns 1; 0 when it failed (see `status`).
///
/// # Safety
/// `bridge` is a live `Bridge` handle; `job_ids` null or `job_ids_len` readable bytes;
/// `status` a zeroed `RustCallStatus`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_notify_committed(
    bridge: u64,
    job_ids: *const u8,
    job_ids_len: usize,
    status: &mut RustCallStatus,
) -> i8 {
    uniffi::rust_call(
        status,
        AssertUnwindSafe(|| {
            // SAFETY (both): the caller's contract.
            let bridge = unsafe { borrow::<Bridge>(bridge) };
            let ids = unsafe { text(job_ids, job_ids_len, "args") }
                .map_err(|error| RustCallError::Error(lower(error)))?;
            bridge
                .inner
                .notify_committed(ojs_bridge::decode_ids(ids.unwrap_or_default()));
            Ok(1)
        }),
    )
}

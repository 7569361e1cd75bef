//! The calls made once per job or per commit, as plain C entry points exported from the same
//! library as the uniffi scaffolding and called from Ruby through the `ffi` gem's
//! `attach_function` (the gem uniffi's Ruby bindings already load): staging one job
//! (`enqueue_after_commit`), staging a bulk (`enqueue_bulk`), and the after-commit wake-up.
//!
//! Why not uniffi for these: its Ruby side lowers every string argument in Ruby (an Array of
//! byte Integers, a RustBuffer allocated and grown by further FFI calls) and lifts the result
//! the same way. Measured on the per-job path: about 28 µs for `stage` (one job) against about
//! 1 µs here, where Ruby strings are passed as pointers and the answer is written into a buffer
//! the caller owns (docs/rails.md, "Performance"). Everything else stays uniffi.
//!
//! Protocol of the two staging functions: the caller passes `out`/`out_capacity`, a buffer it
//! owns.
//! - return `n >= 0`: success, `n` bytes written to `out`;
//! - return `n < 0` with `-n <= out_capacity`: the core refused the call; `out` holds `-n` bytes
//!   of JSON `{"code", "field", "message", "retryable"}`;
//! - return `n < 0` with `-n > out_capacity`: nothing written, the answer needs `-n` bytes: the
//!   caller grows its buffer and calls again (a new call: new job ids);
//! - return `i64::MIN`: the native code panicked (a bug), nothing written.
//!
//! Strings are `(pointer, length)` pairs of UTF-8 bytes; a null pointer means "none". Adapters
//! and stagers are named by ids from a registry (a stale id is an error, never a dangling
//! pointer). The caller holds the GVL (a plain `attach_function` does): nothing here blocks,
//! and nothing calls back into Ruby.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use ojs_bridge::Bridge;
use ojs_outbox::{Error, ErrorCode};

/// An adapter with the dialect and placeholder style of one host connection kind.
struct Stager {
    adapter: Arc<Bridge>,
    dialect: String,
    placeholder: String,
}

#[derive(Default)]
struct Registry {
    adapters: HashMap<u64, Arc<Bridge>>,
    stagers: HashMap<u64, Arc<Stager>>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Registers an adapter for `ojs_ruby_notify_committed`; returns its id (never 0).
pub(crate) fn register_adapter(adapter: &Arc<Bridge>) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    registry().adapters.insert(id, Arc::clone(adapter));
    id
}

/// Registers a stager for the staging functions; returns its id (never 0).
pub(crate) fn register_stager(adapter: &Arc<Bridge>, dialect: String, placeholder: String) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let stager = Stager {
        adapter: Arc::clone(adapter),
        dialect,
        placeholder,
    };
    registry().stagers.insert(id, Arc::new(stager));
    id
}

/// Forgets an adapter and its stagers (when its `NativeAdapter` is dropped).
pub(crate) fn unregister(adapter_id: u64, stager_ids: &[u64]) {
    let mut registry = registry();
    registry.adapters.remove(&adapter_id);
    for id in stager_ids {
        registry.stagers.remove(id);
    }
}

fn stager(id: u64) -> Result<Arc<Stager>, Error> {
    registry().stagers.get(&id).cloned().ok_or_else(|| {
        Error::new(
            ErrorCode::InvalidConfig,
            format!("stager {id} is not registered (its adapter was dropped)"),
        )
    })
}

/// `(ptr, len)` as text; a null pointer is `None`. Invalid UTF-8 is refused with `code`.
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes that stay valid for the call.
unsafe fn text<'a>(
    ptr: *const u8,
    len: usize,
    code: ErrorCode,
    field: &str,
) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Error::field(code, field, "is not valid UTF-8 text"))
}

fn error_json(error: &Error) -> Vec<u8> {
    serde_json::json!({
        "code": error.code.as_str(),
        "field": error.field,
        "message": error.message,
        "retryable": error.code.retryable(),
    })
    .to_string()
    .into_bytes()
}

/// Writes the answer of `work` into `out` by the protocol of this module.
///
/// # Safety
/// `out` points to `out_capacity` writable bytes.
unsafe fn answer(
    out: *mut u8,
    out_capacity: usize,
    work: impl FnOnce() -> Result<Vec<u8>, Error>,
) -> i64 {
    let (bytes, failed) = match catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(bytes)) => (bytes, false),
        Ok(Err(error)) => (error_json(&error), true),
        Err(_) => return i64::MIN,
    };
    let Ok(len) = i64::try_from(bytes.len()) else {
        return i64::MIN;
    };
    if bytes.len() > out_capacity {
        return -len;
    }
    // SAFETY: `out` has `out_capacity >= bytes.len()` writable bytes (caller's contract), and
    // cannot overlap a Vec we just built.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
    if failed { -len } else { len }
}

fn push_field(out: &mut Vec<u8>, lengths: &mut [i32; 7], slot: usize, value: Option<&str>) {
    match value {
        None => lengths[slot] = -1,
        Some(value) => {
            // Every field is below the core's 1 MiB wire limit, far below i32::MAX.
            lengths[slot] = i32::try_from(value.len()).unwrap_or(i32::MAX);
            out.extend_from_slice(value.as_bytes());
        }
    }
}

/// A length in the answer of `ojs_ruby_stage_job`: this parameter is exactly the caller's
/// argument (`job_type`, `job_args`), so its bytes are not sent back.
const ECHO: i32 = -2;

/// One job (`Adapter::stage_job`). On success `out` holds 7 native-endian `i32` lengths, then
/// the bytes they measure, in this order: the INSERT's SQL (only when `with_sql` is non-zero,
/// else length -1), then its 6 parameters `job_id, job_type, job_args, job_options, job_meta,
/// tenant_id` (length -1: SQL NULL; `ECHO` (-2): the same text as the argument).
///
/// An answer of exactly 36 bytes (a full one has at least the 28-byte header and the 36-byte
/// id) is the job id alone: the usual job, without `with_sql`, whose type and args are the
/// caller's texts, options and meta `{}` and tenant NULL. Reading one string instead of seven
/// is a third of the call's cost in Ruby.
///
/// # Safety
/// Every `(pointer, length)` pair is null or `length` readable bytes; `out` is
/// `out_capacity` writable bytes not overlapping them. All stay valid during the call.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ojs_ruby_stage_job(
    stager_id: u64,
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
    with_sql: i32,
    out: *mut u8,
    out_capacity: usize,
) -> i64 {
    let work = || {
        let stager = stager(stager_id)?;
        // SAFETY (all four): the caller's contract.
        let job_type = unsafe { text(job_type, job_type_len, ErrorCode::InvalidJobType, "type")? };
        let args = unsafe { text(args, args_len, ErrorCode::InvalidArgs, "args")? };
        let options = unsafe { text(options, options_len, ErrorCode::InvalidOptions, "options")? };
        let meta = unsafe { text(meta, meta_len, ErrorCode::InvalidMeta, "meta")? };
        let context = unsafe { text(context, context_len, ErrorCode::InvalidMeta, "context")? };
        let staged = stager.adapter.stage_job(
            &stager.dialect,
            &stager.placeholder,
            job_type.unwrap_or_default(),
            args.unwrap_or("null"),
            options,
            meta,
            context,
        )?;
        let [
            job_id,
            staged_type,
            staged_args,
            staged_options,
            staged_meta,
            tenant,
        ] = &staged.params;
        if with_sql == 0
            && staged_type.as_deref() == job_type
            && staged_args.as_deref() == args
            && staged_options.as_deref() == Some("{}")
            && staged_meta.as_deref() == Some("{}")
            && tenant.is_none()
        {
            // The usual job: its id is all the caller does not already know (ID_ONLY).
            return Ok(job_id.clone().unwrap_or_default().into_bytes());
        }
        let mut lengths = [0i32; 7];
        let mut bytes = Vec::with_capacity(
            28 + staged.sql.len()
                + staged
                    .params
                    .iter()
                    .flatten()
                    .map(String::len)
                    .sum::<usize>(),
        );
        bytes.resize(28, 0);
        push_field(
            &mut bytes,
            &mut lengths,
            0,
            (with_sql != 0).then_some(&*staged.sql),
        );
        for (index, param) in staged.params.iter().enumerate() {
            let echoed = match index {
                1 => job_type,
                2 => args,
                _ => None,
            };
            if echoed.is_some() && param.as_deref() == echoed {
                lengths[index + 1] = ECHO; // the caller's own text: not copied back
            } else {
                push_field(&mut bytes, &mut lengths, index + 1, param.as_deref());
            }
        }
        for (index, length) in lengths.iter().enumerate() {
            bytes[index * 4..index * 4 + 4].copy_from_slice(&length.to_ne_bytes());
        }
        Ok(bytes)
    };
    // SAFETY: the caller's contract on `out`.
    unsafe { answer(out, out_capacity, work) }
}

/// Several jobs (`Adapter::stage`, `jobs_json` a JSON array). On success `out` holds JSON
/// `{"job_ids": [...], "statements": [{"sql": "...", "params": [text or null, ...]}]}`.
///
/// # Safety
/// As `ojs_ruby_stage_job`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_stage(
    stager_id: u64,
    jobs_json: *const u8,
    jobs_json_len: usize,
    context: *const u8,
    context_len: usize,
    out: *mut u8,
    out_capacity: usize,
) -> i64 {
    let work = || {
        let stager = stager(stager_id)?;
        // SAFETY (both): the caller's contract.
        let jobs = unsafe { text(jobs_json, jobs_json_len, ErrorCode::InvalidArgs, "jobs")? };
        let context = unsafe { text(context, context_len, ErrorCode::InvalidMeta, "context")? };
        let staged = stager.adapter.stage(
            &stager.dialect,
            &stager.placeholder,
            jobs.unwrap_or("null"),
            context,
        )?;
        Ok(staged.to_json().into_bytes())
    };
    // SAFETY: the caller's contract on `out`.
    unsafe { answer(out, out_capacity, work) }
}

/// The after-commit wake-up (`Adapter::notify_committed`) for job ids joined by `\n`. Returns 0,
/// or -1 when the adapter id is unknown or the ids are not UTF-8 (nothing woken: the poller
/// still finds the rows). Never blocks.
///
/// # Safety
/// `job_ids` is null or `job_ids_len` readable bytes, valid during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_notify_committed(
    adapter_id: u64,
    job_ids: *const u8,
    job_ids_len: usize,
) -> i32 {
    let work = || {
        let Some(adapter) = registry().adapters.get(&adapter_id).cloned() else {
            return -1;
        };
        // SAFETY: the caller's contract.
        let Ok(Some(ids)) =
            (unsafe { text(job_ids, job_ids_len, ErrorCode::InvalidArgs, "job_ids") })
        else {
            return -1;
        };
        adapter.notify_committed(
            ids.split('\n')
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .collect(),
        );
        0
    };
    catch_unwind(AssertUnwindSafe(work)).unwrap_or(-1)
}

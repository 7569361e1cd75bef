//! The core's errors for the gem: its list of codes (what the gem's exception classes are
//! checked against) and the errors Ruby asks the core to word (a driver's failure, a value with
//! no JSON form, a misspelled option). Every error itself crosses as `Error::to_json` text
//! through the out-parameter (`lib.rs`), decoded by `OJS::Error.from_json`.

use crate::{OjsRubyOut, call, strings, text};

/// The core's error codes with their family and retryable flag (`error::codes_json`).
///
/// # Safety
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_error_codes_json(out: *mut OjsRubyOut) -> i32 {
    unsafe { call(out, || Ok(ojs_bridge::codes_json())) }
}

/// The core's code for a database error raised by ActiveRecord's driver while staging (pg's
/// SQLSTATE when there is one, and the driver's message): `OUTBOX_TABLE_MISSING` for a missing
/// table, else `DATABASE`.
///
/// # Safety
/// Each `(pointer, length)` pair null or that many readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_database_error_code(
    sqlstate: *const u8,
    sqlstate_len: usize,
    message: *const u8,
    message_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let sqlstate = text(sqlstate, sqlstate_len, "config")?;
            let message = text(message, message_len, "config")?.unwrap_or_default();
            Ok(ojs_bridge::database_error_code(sqlstate, message)
                .as_str()
                .to_owned())
        })
    }
}

/// The error (as `Error::to_json` text) for a value Ruby cannot turn into JSON: `part` is
/// `args`, `options`, `meta`, `context` or `type`, `path` where the value is.
///
/// # Safety
/// Each `(pointer, length)` pair null or that many readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_unencodable(
    part: *const u8,
    part_len: usize,
    path: *const u8,
    path_len: usize,
    why: *const u8,
    why_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let part = text(part, part_len, "config")?.unwrap_or_default();
            let path = text(path, path_len, "config")?.unwrap_or_default();
            let why = text(why, why_len, "config")?.unwrap_or_default();
            Ok(ojs_bridge::unencodable(part, path, why).to_json())
        })
    }
}

/// The error (as `Error::to_json` text) for a setting `key` that is none of `accepted` (a JSON
/// array of the gem's names), naming the accepted spelling when `key` is a near miss of one.
///
/// # Safety
/// Each `(pointer, length)` pair null or that many readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_unknown_option_error(
    key: *const u8,
    key_len: usize,
    accepted: *const u8,
    accepted_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let key = text(key, key_len, "config")?.unwrap_or_default();
            let accepted = strings(text(accepted, accepted_len, "config")?, "config")?;
            Ok(ojs_bridge::unknown_option_error(key, &accepted).to_json())
        })
    }
}

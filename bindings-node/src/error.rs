//! Core errors crossing into JavaScript: the error's message is its one encoding,
//! `Error::to_json` (`{"code", "field", "message", "retryable", "family"}`), which
//! `lib/errors.js` decodes into the class of its code (docs/errors.md).

use napi_derive::napi;

pub fn to_js(error: ojs_bridge::Error) -> napi::Error {
    napi::Error::from_reason(error.to_json())
}

/// Every code of the core with its family and retryable flag (`error::codes_json`), so
/// JavaScript never restates the list.
#[napi]
pub fn codes_json() -> String {
    ojs_bridge::codes_json()
}

/// The core's code for a database error raised by the host driver (knex's pg or
/// better-sqlite3): from the PostgreSQL SQLSTATE when there is one, and the message.
#[napi]
pub fn database_error_code(sqlstate: Option<String>, message: String) -> String {
    ojs_bridge::database_error_code(sqlstate.as_deref(), &message)
        .as_str()
        .to_owned()
}

/// The error (as `Error::to_json`) for a value JSON cannot hold, found by JavaScript at `path`
/// in `part` (`args`, `options`, `meta`, `context`, `type`, ...): the core decides its code.
#[napi]
pub fn unencodable(part: String, path: String, why: String) -> String {
    ojs_bridge::unencodable(&part, &path, &why).to_json()
}

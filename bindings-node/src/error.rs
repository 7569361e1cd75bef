//! Core errors crossing into JavaScript. A napi error carries only a message, so the core's
//! `Error` travels as JSON after a fixed prefix; `lib/errors.js` turns it into the `OJSError`
//! subclass of its code.

use napi_derive::napi;
use ojs_outbox::ErrorCode;

/// The prefix `lib/errors.js` recognises before the JSON of a core error.
const PREFIX: &str = "OJS_CORE_ERROR ";

pub fn to_js(error: ojs_outbox::Error) -> napi::Error {
    let payload = serde_json::json!({
        "code": error.code.as_str(),
        "field": error.field,
        "message": error.message,
        "retryable": error.code.retryable(),
    });
    napi::Error::from_reason(format!("{PREFIX}{payload}"))
}

/// One stable error code and whether retrying the same call may succeed.
#[napi(object)]
pub struct NativeErrorCode {
    pub code: String,
    pub retryable: bool,
}

/// Every code of the core (`ErrorCode::ALL`), so JavaScript never restates the list or the
/// retryable flags.
#[napi]
pub fn error_codes() -> Vec<NativeErrorCode> {
    ErrorCode::ALL
        .iter()
        .map(|code| NativeErrorCode {
            code: code.as_str().to_owned(),
            retryable: code.retryable(),
        })
        .collect()
}

/// The core's code for a database error raised by the host driver (knex's pg or
/// better-sqlite3): from the PostgreSQL SQLSTATE when there is one, and the message.
#[napi]
pub fn database_error_code(sqlstate: Option<String>, message: String) -> String {
    ojs_bridge::database_error_code(sqlstate.as_deref(), &message)
        .as_str()
        .to_owned()
}

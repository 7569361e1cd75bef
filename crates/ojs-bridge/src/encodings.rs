//! The small encodings at the FFI line that are not a call of their own: id lists, the
//! error of a value a binding cannot encode, the error code of a host driver's failure.

use ojs_outbox::{Error, ErrorCode};

/// An id list's one encoding across the FFI line: the ids joined by `\n` (empty: no ids).
pub fn encode_ids(job_ids: &[String]) -> String {
    job_ids.join("\n")
}

/// The ids of an [`encode_ids`] text.
pub fn decode_ids(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The error for a value a binding cannot turn into JSON (a `Set`, `NaN`, a Python object): the
/// code of the part it is in (`args` → `INVALID_ARGS`, `options` → `INVALID_OPTIONS`, `meta` and
/// `context` → `INVALID_META`, `type` → `INVALID_JOB_TYPE`), the part as the field, and the
/// value's path (`args[0].tags`, `jobs[1].options.priority`) at the start of the message.
pub fn unencodable(part: &str, path: &str, why: &str) -> Error {
    let code = match part {
        "type" => ErrorCode::InvalidJobType,
        "options" => ErrorCode::InvalidOptions,
        "meta" | "context" => ErrorCode::InvalidMeta,
        _ => ErrorCode::InvalidArgs,
    };
    Error {
        code,
        field: Some(part.to_owned()),
        message: format!("{path}: {why}"),
        existing_job_id: None,
    }
}

/// The code of a database error raised by a host driver (Django, knex, ActiveRecord), from its
/// SQLSTATE (PostgreSQL) and message: the same rule the core applies to its own statements.
pub fn database_error_code(sqlstate: Option<&str>, message: &str) -> ErrorCode {
    ojs_outbox::error::database_error_code(sqlstate, message)
}

//! Validation of one job object, by the rules of the OJS HTTP binding and its JSON schema.
//!
//! Pure functions, no state: the request body is parsed into borrowed raw JSON pieces, each
//! piece is checked, and the checked pieces are kept as raw text (the store keeps them that
//! way too, which is both faithful and compact).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Largest accepted request body, as the reference servers have it.
pub(crate) const MAX_BODY_BYTES: usize = 1_048_576;
pub(crate) const MAX_TYPE_BYTES: usize = 255;
pub(crate) const MAX_QUEUE_BYTES: usize = 128;

/// One job object as sent, every field still raw. `null` reads as absent.
#[derive(Deserialize)]
pub(crate) struct JobIn<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "type")]
    pub job_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub args: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub meta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub options: Option<&'a RawValue>,
}

/// The fields of `options` the backend checks; the rest is kept as sent.
#[derive(Deserialize)]
struct OptionsIn<'a> {
    #[serde(borrow, default)]
    queue: Option<&'a RawValue>,
    #[serde(borrow, default)]
    priority: Option<&'a RawValue>,
}

/// A job that passed validation, still borrowing the request body.
pub(crate) struct ValidJob<'a> {
    /// `None`: the client sent no id, the server generates one.
    pub id: Option<u128>,
    pub job_type: Cow<'a, str>,
    pub args: &'a str,
    pub meta: Option<&'a str>,
    pub options: Option<&'a str>,
    /// `options.queue`; `None` means `default`.
    pub queue: Option<Cow<'a, str>>,
}

/// The id a request carried, as far as it could be read.
pub(crate) enum CarriedId<'a> {
    None,
    /// A well-formed UUIDv7.
    Valid(u128),
    /// A string that is not a valid id (still counted as a delivery of that string).
    Malformed(Cow<'a, str>),
}

/// Why a job was refused: the field and a human reason.
pub(crate) struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

fn field_error(field: &'static str, reason: impl Into<String>) -> FieldError {
    FieldError {
        field,
        reason: reason.into(),
    }
}

/// Reads a raw JSON value as a string, borrowing when it has no escapes.
pub(crate) fn raw_str<'a>(raw: &'a RawValue) -> Option<Cow<'a, str>> {
    if let Ok(s) = serde_json::from_str::<&'a str>(raw.get()) {
        return Some(Cow::Borrowed(s));
    }
    serde_json::from_str::<String>(raw.get())
        .ok()
        .map(Cow::Owned)
}

pub(crate) fn carried_id<'a>(job: &JobIn<'a>) -> CarriedId<'a> {
    match job.id.and_then(raw_str) {
        None => CarriedId::None,
        Some(text) => match parse_job_id(&text) {
            Some(id) => CarriedId::Valid(id),
            None => CarriedId::Malformed(text),
        },
    }
}

/// The job's type if it is a string (valid or not), for fault matching.
pub(crate) fn carried_type<'a>(job: &JobIn<'a>) -> Option<Cow<'a, str>> {
    job.job_type.and_then(raw_str)
}

/// Checks one job; the first failing field wins, in the order type, args, id, meta, options.
pub(crate) fn validate_job<'a>(job: &JobIn<'a>) -> Result<ValidJob<'a>, FieldError> {
    let job_type = match job.job_type {
        None => return Err(field_error("type", "is required")),
        Some(raw) => raw_str(raw).ok_or_else(|| field_error("type", "must be a string"))?,
    };
    if !is_valid_type(&job_type) {
        return Err(field_error(
            "type",
            format!(
                "must match ^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$ and be at most {MAX_TYPE_BYTES} bytes"
            ),
        ));
    }

    let args = match job.args {
        None => return Err(field_error("args", "is required")),
        Some(raw) if raw.get().starts_with('[') => raw.get(),
        Some(_) => return Err(field_error("args", "must be a JSON array")),
    };

    let id = match job.id {
        None => None,
        Some(raw) => {
            let parsed = raw_str(raw).and_then(|text| parse_job_id(&text));
            Some(parsed.ok_or_else(|| {
                field_error(
                    "id",
                    "must be a lowercase UUIDv7 (^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$)",
                )
            })?)
        }
    };

    let meta = match job.meta {
        None => None,
        Some(raw) if raw.get().starts_with('{') => Some(raw.get()),
        Some(_) => return Err(field_error("meta", "must be a JSON object")),
    };

    let (options, queue) = match job.options {
        None => (None, None),
        Some(raw) if raw.get().starts_with('{') => (Some(raw.get()), check_options(raw)?),
        Some(_) => return Err(field_error("options", "must be a JSON object")),
    };

    Ok(ValidJob {
        id,
        job_type,
        args,
        meta,
        options,
        queue,
    })
}

/// Checks `options.queue` and `options.priority`; returns the queue if one was given.
fn check_options<'a>(raw: &'a RawValue) -> Result<Option<Cow<'a, str>>, FieldError> {
    let options: OptionsIn<'a> = serde_json::from_str(raw.get())
        .map_err(|e| field_error("options", format!("is not a valid options object: {e}")))?;
    let queue = match options.queue {
        None => None,
        Some(raw) => {
            let queue = raw_str(raw)
                .filter(|q| is_valid_queue(q))
                .ok_or_else(|| {
                    field_error(
                        "options.queue",
                        format!(
                            "must be a string matching ^[a-z0-9][a-z0-9\\-.]*$, at most {MAX_QUEUE_BYTES} bytes"
                        ),
                    )
                })?;
            Some(queue)
        }
    };
    if let Some(raw) = options.priority {
        match serde_json::from_str::<i64>(raw.get()) {
            Ok(priority) if (-100..=100).contains(&priority) => {}
            _ => {
                return Err(field_error(
                    "options.priority",
                    "must be an integer within -100..=100",
                ));
            }
        }
    }
    Ok(queue)
}

/// The queue named by a stored (already validated) options object.
pub(crate) fn queue_of(options: &str) -> Option<String> {
    let options: OptionsIn<'_> = serde_json::from_str(options).ok()?;
    options.queue.and_then(raw_str).map(Cow::into_owned)
}

/// `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`, at most 255 bytes.
pub(crate) fn is_valid_type(job_type: &str) -> bool {
    !job_type.is_empty()
        && job_type.len() <= MAX_TYPE_BYTES
        && job_type.split('.').all(|segment| {
            let bytes = segment.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_lowercase()
                && bytes[1..]
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
        })
}

/// `^[a-z0-9][a-z0-9\-.]*$`, at most 128 bytes.
pub(crate) fn is_valid_queue(queue: &str) -> bool {
    let bytes = queue.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_QUEUE_BYTES
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
}

/// Parses `^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$` into its
/// 128-bit value. Lowercase only, so the value formats back to the same text.
pub(crate) fn parse_job_id(text: &str) -> Option<u128> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || bytes[14] != b'7' || !matches!(bytes[19], b'8' | b'9' | b'a' | b'b') {
        return None;
    }
    let mut value: u128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b != b'-' {
                return None;
            }
            continue;
        }
        let nibble = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        value = (value << 4) | u128::from(nibble);
    }
    Some(value)
}

/// Formats a 128-bit id as a lowercase hyphenated UUID.
pub(crate) fn format_job_id(id: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for nibble_index in 0..32 {
        if matches!(nibble_index, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        let shift = 124 - 4 * nibble_index;
        out.push(HEX[((id >> shift) & 0xf) as usize] as char);
    }
    out
}

/// Whether a `Content-Type` is one the binding accepts (parameters allowed).
pub(crate) fn is_json_content_type(value: Option<&str>) -> bool {
    let Some(value) = value else { return false };
    let media_type = value.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/openjobspec+json")
        || media_type.eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_the_schema_pattern() {
        for ok in ["email", "email.welcome", "a1_b.c_2", "x"] {
            assert!(is_valid_type(ok), "{ok}");
        }
        for bad in [
            "",
            "Email",
            "email-welcome",
            "1abc",
            "a..b",
            "a.",
            ".a",
            "a.B",
        ] {
            assert!(!is_valid_type(bad), "{bad}");
        }
        assert!(is_valid_type(&"a".repeat(255)));
        assert!(!is_valid_type(&"a".repeat(256)));
    }

    #[test]
    fn queues_follow_the_schema_pattern() {
        for ok in ["default", "0", "email-high.v2"] {
            assert!(is_valid_queue(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "Email", "a_b", "a b"] {
            assert!(!is_valid_queue(bad), "{bad}");
        }
        assert!(is_valid_queue(&"q".repeat(128)));
        assert!(!is_valid_queue(&"q".repeat(129)));
    }

    #[test]
    fn ids_round_trip_and_reject_non_v7() {
        let text = "0194fb3e-1c2d-7a4b-8c9d-0123456789ab";
        let id = parse_job_id(text).expect("valid");
        assert_eq!(format_job_id(id), text);
        assert_eq!(uuid::Uuid::from_u128(id).to_string(), text);
        for bad in [
            "0194FB3E-1c2d-7a4b-8c9d-0123456789ab",
            "0194fb3e-1c2d-4a4b-8c9d-0123456789ab",
            "0194fb3e-1c2d-7a4b-cc9d-0123456789ab",
            "0194fb3e1c2d-7a4b-8c9d-0123456789ab0",
            "0194fb3e-1c2d-7a4b-8c9d-0123456789a",
        ] {
            assert!(parse_job_id(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn content_types() {
        assert!(is_json_content_type(Some("application/json")));
        assert!(is_json_content_type(Some(
            "Application/OpenJobSpec+JSON; charset=utf-8"
        )));
        assert!(!is_json_content_type(Some("text/plain")));
        assert!(!is_json_content_type(None));
    }
}

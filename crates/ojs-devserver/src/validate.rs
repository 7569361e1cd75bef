//! Validation of one job object, by the rules of the OJS HTTP binding, its JSON schemas and the
//! reference servers (rule by rule in docs/ojs-compat.md): the same rules as the adapter's core
//! (`ojs-outbox`, `job.rs`), written again here because the devserver does not depend on it.
//!
//! Pure functions, no state: the request body is parsed into borrowed raw JSON pieces, each
//! piece is checked, and the checked pieces are kept as raw text (the store keeps them that
//! way too, which is both faithful and compact).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::timefmt::parse_rfc3339_us;
use crate::unique::{self, Claim};

/// Largest accepted request body, as the reference servers have it.
pub(crate) const MAX_BODY_BYTES: usize = 1_048_576;
pub(crate) const MAX_TYPE_BYTES: usize = 255;
pub(crate) const MAX_QUEUE_BYTES: usize = 128;

/// Top-level request attributes the devserver reads itself, or writes itself in the returned
/// envelope (system-managed attributes and the ones derived from `options`). A client value
/// under one of these names is not kept as an extra attribute: the spec (`ojs-core.md` §5.3)
/// says client values for system-managed attributes MUST be ignored, and the binding puts queue,
/// priority, schedule, retry and unique policy inside `options`.
const ENVELOPE_NAMES: [&str; 26] = [
    "id",
    "type",
    "args",
    "meta",
    "options",
    "state",
    "queue",
    "priority",
    "attempt",
    "max_attempts",
    "timeout_ms",
    "tags",
    "scheduled_at",
    "expires_at",
    "retry",
    "unique",
    "created_at",
    "enqueued_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "error",
    "result",
    "errors",
    "worker_id",
    "retry_delay_ms",
];

/// One job object as sent, every field still raw. `null` reads as absent for the five fields
/// the devserver reads; every other member is kept in `others`, in request order (a repeated
/// name keeps its last value, as Go's decoder does).
#[derive(Default)]
pub(crate) struct JobIn<'a> {
    pub id: Option<&'a RawValue>,
    pub job_type: Option<&'a RawValue>,
    pub args: Option<&'a RawValue>,
    pub meta: Option<&'a RawValue>,
    pub options: Option<&'a RawValue>,
    pub others: Vec<(Cow<'a, str>, &'a RawValue)>,
}

/// An object key, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for JobIn<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct JobVisitor;
        impl<'de> serde::de::Visitor<'de> for JobVisitor {
            type Value = JobIn<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON job object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<JobIn<'de>, M::Error> {
                let mut job = JobIn::default();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    let slot = match key.as_ref() {
                        "id" => &mut job.id,
                        "type" => &mut job.job_type,
                        "args" => &mut job.args,
                        "meta" => &mut job.meta,
                        "options" => &mut job.options,
                        _ => {
                            let value: &'de RawValue = map.next_value()?;
                            job.others.retain(|(name, _)| *name != key);
                            job.others.push((key, value));
                            continue;
                        }
                    };
                    *slot = map.next_value::<Option<&'de RawValue>>()?;
                }
                Ok(job)
            }
        }
        deserializer.deserialize_map(JobVisitor)
    }
}

/// A job that passed validation, still borrowing the request body.
pub(crate) struct ValidJob<'a> {
    /// `None`: the client sent no id, the server generates one.
    pub id: Option<u128>,
    pub job_type: Cow<'a, str>,
    pub args: &'a str,
    pub meta: Option<&'a str>,
    pub options: Option<&'a str>,
    /// `options` parsed (`None` when absent or `{}`), for the envelope.
    pub options_map: Option<Map<String, Value>>,
    /// The preserved top-level attributes as JSON object members (`"k":v,"k2":v2`, no braces);
    /// empty when there are none.
    pub attributes: String,
    /// `options.scheduled_at`, else `options.delay_until`, as an instant (microseconds).
    pub scheduled_at_us: Option<i64>,
    /// The job's claim on a unique fingerprint (`options.unique`).
    pub unique: Option<Claim>,
}

/// The id a request carried, as far as it could be read.
pub(crate) enum CarriedId<'a> {
    None,
    /// A well-formed UUIDv7.
    Valid(u128),
    /// A string that is not a valid id (still counted as a delivery of that string).
    Malformed(Cow<'a, str>),
}

/// How a refused job is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `400 invalid_request`: a malformed or wrongly typed field (the reference servers' answer
    /// to every field error, and to a body their JSON decoder refuses).
    InvalidRequest,
    /// `422 validation_error` with `type: "validation_error"`: a retry policy that is well
    /// formed but breaks a rule (the reference servers' `validateRetryPolicy`).
    Validation,
}

/// Why a job was refused: the field, a human reason, and how to answer.
#[derive(Debug)]
pub(crate) struct FieldError {
    pub refusal: Refusal,
    pub field: &'static str,
    pub reason: String,
    /// What the rule wants (`details.expected`), for retry-policy rules.
    pub expected: Option<&'static str>,
    /// The refused value (`details.received`), for retry-policy rules.
    pub received: Option<Value>,
}

pub(crate) fn field_error(field: &'static str, reason: impl Into<String>) -> FieldError {
    FieldError {
        refusal: Refusal::InvalidRequest,
        field,
        reason: reason.into(),
        expected: None,
        received: None,
    }
}

/// A retry-policy rule broken by a well-formed value: `422 validation_error`.
fn policy_error(
    field: &'static str,
    reason: impl Into<String>,
    expected: &'static str,
    received: &Value,
) -> FieldError {
    FieldError {
        refusal: Refusal::Validation,
        field,
        reason: reason.into(),
        expected: Some(expected),
        received: Some(received.clone()),
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

/// Checks one job; the first failing field wins, in the order type, args, id, meta, options,
/// schema.
pub(crate) fn validate_job<'a>(job: &JobIn<'a>) -> Result<ValidJob<'a>, FieldError> {
    let job_type = match job.job_type {
        None => return Err(field_error("type", "is required")),
        Some(raw) => raw_str(raw).ok_or_else(|| field_error("type", "must be a string"))?,
    };
    if !is_valid_type(&job_type) {
        return Err(field_error(
            "type",
            format!(
                "must match ^[a-z][a-z0-9_-]*(\\.[a-z][a-z0-9_-]*)*$ and be at most {MAX_TYPE_BYTES} bytes"
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

    let (options, options_map) = match job.options {
        None => (None, None),
        Some(raw) if raw.get() == "{}" => (Some(raw.get()), None),
        Some(raw) if raw.get().starts_with('{') => {
            let map: Map<String, Value> = serde_json::from_str(raw.get()).map_err(|e| {
                field_error("options", format!("is not a valid options object: {e}"))
            })?;
            check_options(&map)?;
            (Some(raw.get()), Some(map))
        }
        Some(_) => return Err(field_error("options", "must be a JSON object")),
    };

    let mut attributes = String::new();
    for (name, value) in &job.others {
        if name == "schema" && !value.get().starts_with('"') {
            return Err(field_error("schema", "must be a string (a schema URI)"));
        }
        if ENVELOPE_NAMES.contains(&name.as_ref()) {
            continue;
        }
        if !attributes.is_empty() {
            attributes.push(',');
        }
        attributes.push_str(&Value::String(name.to_string()).to_string());
        attributes.push(':');
        attributes.push_str(value.get());
    }

    let (scheduled_at_us, unique) = match &options_map {
        None => (None, None),
        Some(map) => {
            let scheduled_at_us = map
                .get("scheduled_at")
                .or_else(|| map.get("delay_until"))
                .and_then(Value::as_str)
                .and_then(parse_rfc3339_us);
            let unique = match map.get("unique").and_then(Value::as_object) {
                None => None,
                Some(policy) => Some(claim_of(policy, &job_type, map, args, meta)?),
            };
            (scheduled_at_us, unique)
        }
    };

    Ok(ValidJob {
        id,
        job_type,
        args,
        meta,
        options,
        options_map,
        attributes,
        scheduled_at_us,
        unique,
    })
}

/// The claim of a job with a (validated) unique policy.
fn claim_of(
    policy: &Map<String, Value>,
    job_type: &str,
    options: &Map<String, Value>,
    args: &str,
    meta: Option<&str>,
) -> Result<Claim, FieldError> {
    let queue = options
        .get("queue")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let args: Value = serde_json::from_str(args)
        .map_err(|e| field_error("args", format!("is not valid JSON: {e}")))?;
    let meta: Option<Value> = match meta {
        None => None,
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|e| field_error("meta", format!("is not valid JSON: {e}")))?,
        ),
    };
    Ok(unique::claim(policy, job_type, queue, &args, meta.as_ref()))
}

/// The keys of `options`: the job-options schema's, `pending` (HTTP binding) and `scheduled_at`
/// (read by the reference servers as `delay_until`).
const OPTION_KEYS: [&str; 11] = [
    "queue",
    "priority",
    "timeout_ms",
    "delay_until",
    "scheduled_at",
    "expires_at",
    "retry",
    "unique",
    "tags",
    "visibility_timeout_ms",
    "pending",
];
const RETRY_KEYS: [&str; 7] = [
    "max_attempts",
    "initial_interval",
    "backoff_coefficient",
    "max_interval",
    "jitter",
    "on_exhaustion",
    "non_retryable_errors",
];
const UNIQUE_KEYS: [&str; 6] = [
    "keys",
    "args_keys",
    "meta_keys",
    "period",
    "on_conflict",
    "states",
];
const UNIQUE_DIMENSIONS: [&str; 4] = ["type", "queue", "args", "meta"];
const JOB_STATES: [&str; 8] = [
    "scheduled",
    "available",
    "pending",
    "active",
    "completed",
    "retryable",
    "cancelled",
    "discarded",
];

/// Checks every option; `queue` and `priority` first, as the reference servers do.
fn check_options(options: &Map<String, Value>) -> Result<(), FieldError> {
    if let Some(queue) = options.get("queue")
        && !queue.as_str().is_some_and(is_valid_queue)
    {
        return Err(field_error(
            "options.queue",
            format!(
                "must be a string matching ^[a-z0-9][a-z0-9\\-.]*$, at most {MAX_QUEUE_BYTES} bytes"
            ),
        ));
    }
    if let Some(priority) = options.get("priority")
        && !priority.as_i64().is_some_and(|p| (-100..=100).contains(&p))
    {
        return Err(field_error(
            "options.priority",
            "must be an integer within -100..=100",
        ));
    }
    for (key, value) in options {
        match key.as_str() {
            "queue" | "priority" => {}
            "timeout_ms" => check_integer(value, 0, "options.timeout_ms")?,
            "visibility_timeout_ms" => check_integer(value, 1000, "options.visibility_timeout_ms")?,
            "delay_until" => check_timestamp(value, "options.delay_until")?,
            "scheduled_at" => check_timestamp(value, "options.scheduled_at")?,
            "expires_at" => check_timestamp(value, "options.expires_at")?,
            "pending" if !value.is_boolean() => {
                return Err(field_error("options.pending", "must be true or false"));
            }
            "pending" => {}
            "tags" => check_string_set(value, false, "options.tags")?,
            "retry" => check_retry(value)?,
            "unique" => check_unique(value)?,
            unknown => {
                return Err(field_error(
                    "options",
                    format!(
                        "has an unknown option {unknown:?}; allowed: {}",
                        OPTION_KEYS.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_integer(value: &Value, minimum: i64, field: &'static str) -> Result<(), FieldError> {
    match value.as_i64() {
        Some(n) if n >= minimum => Ok(()),
        _ => Err(field_error(
            field,
            format!("must be an integer of at least {minimum}"),
        )),
    }
}

fn check_timestamp(value: &Value, field: &'static str) -> Result<(), FieldError> {
    if value.as_str().is_some_and(is_rfc3339) {
        Ok(())
    } else {
        Err(field_error(
            field,
            "must be an RFC 3339 timestamp such as \"2026-03-01T09:00:00Z\"",
        ))
    }
}

/// Whether `value` is an array of strings (what Go's decoder accepts for a `[]string`).
fn is_string_array(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(Value::is_string))
}

/// Whether an array of strings has an empty entry (when not allowed) or a repeated one.
fn has_empty_or_repeated(items: &[Value], allow_empty: bool) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, item)| (!allow_empty && item == "") || items[..i].contains(item))
}

/// An array of distinct strings, optionally without empty ones.
fn check_string_set(
    value: &Value,
    allow_empty: bool,
    field: &'static str,
) -> Result<(), FieldError> {
    let valid = is_string_array(value)
        && !has_empty_or_repeated(
            value.as_array().map(Vec::as_slice).unwrap_or_default(),
            allow_empty,
        );
    if valid {
        Ok(())
    } else {
        Err(field_error(
            field,
            if allow_empty {
                "must be an array of distinct strings"
            } else {
                "must be an array of distinct non-empty strings"
            },
        ))
    }
}

fn check_enum_set(value: &Value, allowed: &[&str], field: &'static str) -> Result<(), FieldError> {
    check_string_set(value, false, field)?;
    let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
    if items
        .iter()
        .all(|item| allowed.contains(&item.as_str().unwrap_or("")))
    {
        Ok(())
    } else {
        Err(field_error(
            field,
            format!("may hold only {}", allowed.join(", ")),
        ))
    }
}

fn object_with_keys<'v>(
    value: &'v Value,
    allowed: &[&str],
    field: &'static str,
    unknown_key: Refusal,
) -> Result<&'v Map<String, Value>, FieldError> {
    let map = value
        .as_object()
        .ok_or_else(|| field_error(field, "must be an object"))?;
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(FieldError {
            refusal: unknown_key,
            ..field_error(
                field,
                format!(
                    "has an unknown key {unknown:?}; allowed: {}",
                    allowed.join(", ")
                ),
            )
        }),
        None => Ok(map),
    }
}

/// The retry policy. A value of the wrong JSON type is refused as the reference servers' JSON
/// decoder refuses it (`400 invalid_request`), and so is an interval their duration parser
/// refuses; a well-typed value that breaks a rule of the policy is `422 validation_error`, as
/// their `validateRetryPolicy` answers a negative `max_attempts` or a coefficient below 1.
fn check_retry(value: &Value) -> Result<(), FieldError> {
    let retry = object_with_keys(value, &RETRY_KEYS, "options.retry", Refusal::Validation)?;
    for (key, value) in retry {
        match key.as_str() {
            "max_attempts" => {
                let Some(n) = value.as_i64() else {
                    return Err(field_error(
                        "options.retry.max_attempts",
                        "must be an integer",
                    ));
                };
                if n < 0 {
                    return Err(policy_error(
                        "options.retry.max_attempts",
                        "must not be negative",
                        ">= 0",
                        value,
                    ));
                }
            }
            "initial_interval" => check_retry_interval(value, "options.retry.initial_interval")?,
            "max_interval" => check_retry_interval(value, "options.retry.max_interval")?,
            "backoff_coefficient" => {
                let Some(c) = value.as_f64() else {
                    return Err(field_error(
                        "options.retry.backoff_coefficient",
                        "must be a number",
                    ));
                };
                if c < 1.0 {
                    return Err(policy_error(
                        "options.retry.backoff_coefficient",
                        "must be at least 1",
                        ">= 1.0",
                        value,
                    ));
                }
            }
            "jitter" if !value.is_boolean() => {
                return Err(field_error("options.retry.jitter", "must be true or false"));
            }
            "on_exhaustion" => match value.as_str() {
                None => {
                    return Err(field_error(
                        "options.retry.on_exhaustion",
                        "must be a string",
                    ));
                }
                Some("discard" | "dead_letter") => {}
                Some(_) => {
                    return Err(policy_error(
                        "options.retry.on_exhaustion",
                        "must be \"discard\" or \"dead_letter\"",
                        "discard or dead_letter",
                        value,
                    ));
                }
            },
            "non_retryable_errors" => {
                if !is_string_array(value) {
                    return Err(field_error(
                        "options.retry.non_retryable_errors",
                        "must be an array of strings",
                    ));
                }
                if has_empty_or_repeated(
                    value.as_array().map(Vec::as_slice).unwrap_or_default(),
                    false,
                ) {
                    return Err(policy_error(
                        "options.retry.non_retryable_errors",
                        "must hold distinct non-empty strings",
                        "distinct non-empty strings",
                        value,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_retry_interval(value: &Value, field: &'static str) -> Result<(), FieldError> {
    if value.as_str().is_some_and(is_retry_interval) {
        Ok(())
    } else {
        Err(field_error(
            field,
            "must be a non-zero ISO-8601 duration of hours, minutes and seconds (^PT(\\d+H)?(\\d+M)?(\\d+(\\.\\d+)?S)?$)",
        ))
    }
}

/// The unique policy: every refusal is `400 invalid_request` (`ojs-unique-jobs.md` §2.2).
fn check_unique(value: &Value) -> Result<(), FieldError> {
    let unique = object_with_keys(
        value,
        &UNIQUE_KEYS,
        "options.unique",
        Refusal::InvalidRequest,
    )?;
    for (key, value) in unique {
        match key.as_str() {
            "keys" => check_enum_set(value, &UNIQUE_DIMENSIONS, "options.unique.keys")?,
            "states" => check_enum_set(value, &JOB_STATES, "options.unique.states")?,
            "args_keys" => check_string_set(value, true, "options.unique.args_keys")?,
            "meta_keys" => {
                check_string_set(value, true, "options.unique.meta_keys")?;
                if value.as_array().is_some_and(Vec::is_empty) {
                    return Err(field_error(
                        "options.unique.meta_keys",
                        "must name at least one meta key",
                    ));
                }
            }
            "period" if !value.as_str().is_some_and(is_unique_period) => {
                return Err(field_error(
                    "options.unique.period",
                    "must be an ISO-8601 duration (P[nY][nM][nW][nD][T[nH][nM][n[.n]S]])",
                ));
            }
            "on_conflict"
                if !matches!(
                    value.as_str(),
                    Some("reject" | "ignore" | "replace" | "replace_except_schedule")
                ) =>
            {
                return Err(field_error(
                    "options.unique.on_conflict",
                    "must be reject, ignore, replace or replace_except_schedule",
                ));
            }
            _ => {}
        }
    }
    let keys_meta = unique
        .get("keys")
        .and_then(Value::as_array)
        .is_some_and(|keys| keys.iter().any(|k| k == "meta"));
    if keys_meta && !unique.contains_key("meta_keys") {
        return Err(field_error(
            "options.unique.meta_keys",
            "is required when options.unique.keys contains \"meta\"",
        ));
    }
    Ok(())
}

/// The designators of a duration after `P`, in order: `(designator, in the time part, number)`.
/// `None` unless each designator appears at most once, in ISO order, after a number of ASCII
/// digits with an optional `.digits` fraction, with at least one component and no empty `T`.
fn duration_parts(text: &str) -> Option<Vec<(u8, bool, &str)>> {
    let rest = text.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return None,
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut parts = Vec::new();
    for (part, units, in_time) in [
        (date, &b"YMWD"[..], false),
        (time.unwrap_or(""), &b"HMS"[..], true),
    ] {
        let mut allowed = units;
        let mut rest = part.as_bytes();
        while !rest.is_empty() {
            let end = rest
                .iter()
                .position(|b| !(b.is_ascii_digit() || *b == b'.'))?;
            let (number, after) = rest.split_at(end);
            let number = std::str::from_utf8(number).ok()?;
            let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(whole) || !digits(fraction) {
                return None;
            }
            let at = allowed.iter().position(|u| *u == after[0])?;
            allowed = &allowed[at + 1..];
            parts.push((after[0], in_time, number));
            rest = &after[1..];
        }
    }
    (!parts.is_empty()).then_some(parts)
}

/// `options.unique.period`, by the unique-policy schema: a fraction only on seconds.
pub(crate) fn is_unique_period(text: &str) -> bool {
    duration_parts(text).is_some_and(|parts| {
        parts
            .iter()
            .all(|(unit, in_time, number)| !number.contains('.') || (*in_time && *unit == b'S'))
    })
}

/// `options.retry.initial_interval` / `.max_interval`, as the reference servers read them:
/// `^PT(\d+H)?(\d+M)?(\d+(\.\d+)?S)?$` and not zero.
pub(crate) fn is_retry_interval(text: &str) -> bool {
    duration_parts(text).is_some_and(|parts| {
        parts
            .iter()
            .all(|(unit, in_time, number)| *in_time && (!number.contains('.') || *unit == b'S'))
            && parts
                .iter()
                .any(|(_, _, number)| number.bytes().any(|b| (b'1'..=b'9').contains(&b)))
    })
}

/// RFC 3339 `date-time`, with real calendar dates (see `timefmt::parse_rfc3339_us`).
pub(crate) fn is_rfc3339(text: &str) -> bool {
    parse_rfc3339_us(text).is_some()
}

/// `^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`, at most 255 bytes: the schema's segments plus the
/// hyphen the reference servers accept.
pub(crate) fn is_valid_type(job_type: &str) -> bool {
    !job_type.is_empty()
        && job_type.len() <= MAX_TYPE_BYTES
        && job_type.split('.').all(|segment| {
            let bytes = segment.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_lowercase()
                && bytes[1..].iter().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-'
                })
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
        for ok in [
            "email",
            "email.welcome",
            "a1_b.c_2",
            "x",
            "email-welcome",
            "batch-import_v2.run-",
        ] {
            assert!(is_valid_type(ok), "{ok}");
        }
        for bad in [
            "", "Email", "-email", "a.-b", "1abc", "a..b", "a.", ".a", "a.B",
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
    fn durations_follow_the_servers_for_retry_and_the_schema_for_unique() {
        for ok in ["PT1S", "PT0.5S", "PT1H30M45S", "PT120M", "PT0.001S"] {
            assert!(is_retry_interval(ok), "{ok}");
        }
        for bad in [
            "P1D", "P1W", "P1Y", "P1M", "PT0S", "PT0H0M0S", "PT1.5M", "PT5S1M", "PT", "P", "pt1s",
            "PT1S ", "PT.5S", "PT-5S",
        ] {
            assert!(!is_retry_interval(bad), "{bad}");
        }
        for ok in ["P1Y", "P1M", "P1Y2M3W4DT5H6M7.5S", "P1D", "PT0S"] {
            assert!(is_unique_period(ok), "{ok}");
        }
        for bad in [
            "P", "PT", "P1DT", "PT1.5M", "P1.5D", "P1D1Y", "PT5S1M", "P1H",
        ] {
            assert!(!is_unique_period(bad), "{bad}");
        }
    }

    #[test]
    fn timestamps_are_rfc3339() {
        for ok in [
            "2026-03-01T09:00:00Z",
            "2026-03-01t09:00:00.123456z",
            "2024-02-29T23:59:59+01:00",
            "2026-03-01T09:00:00-05:30",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "tomorrow",
            "+PT5S",
            "2026-03-01",
            "2026-03-01T09:00:00",
            "2025-02-29T09:00:00Z",
            "2026-13-01T09:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T09:00:00.Z",
            "2026-03-01T09:00:00+0100",
            "2026-03-01 09:00:00Z",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
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

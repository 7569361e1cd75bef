//! Job preparation: the pure domain step between a framework call and an outbox row.
//! Validates type, queue, args, options and meta by the OJS rules, merges the request context
//! into meta, assigns the UUIDv7 job id and refuses anything whose wire form exceeds 1 MiB.
//! No I/O: every binding calls this before it writes the row through the host connection.

use serde_json::{Map, Value};

use crate::duration;
use crate::error::{Error, ErrorCode, Result};

/// Backends refuse request bodies over 1 MiB, so a job whose wire form is larger can never be
/// delivered: it is refused at staging time.
pub const MAX_WIRE_BYTES: usize = 1024 * 1024;
const MAX_TYPE_BYTES: usize = 255;
const MAX_QUEUE_BYTES: usize = 128;
/// The keys of `options`: those of the job-options schema, `pending` (HTTP binding §9.1) and
/// `scheduled_at`, which the reference servers read as `delay_until` (docs/ojs-compat.md).
/// `ordering_key` is this outbox's own option (docs/relay.md#ordering): the outbox consumes it
/// and never sends it. The keys of `options` (spec spelling).
pub const OPTION_KEYS: [&str; 12] = [
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
    "ordering_key",
];
/// The longest `options.ordering_key`, in bytes.
pub const MAX_ORDERING_KEY_BYTES: usize = 255;
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
/// `options.visibility_timeout_ms` minimum (job-options schema).
const MIN_VISIBILITY_TIMEOUT_MS: i64 = 1000;

/// A job as the application asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub job_type: String,
    pub args: Value,
    pub options: Option<Value>,
    pub meta: Option<Value>,
}

impl NewJob {
    pub fn new(job_type: impl Into<String>, args: Value) -> Self {
        NewJob {
            job_type: job_type.into(),
            args,
            options: None,
            meta: None,
        }
    }

    pub fn with_options(mut self, options: Value) -> Self {
        self.options = Some(options);
        self
    }

    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Builds a job from JSON texts, the form every binding hands over the FFI line.
    /// `None` or `"null"` options/meta mean "unset".
    pub fn from_json(
        job_type: &str,
        args_json: &str,
        options_json: Option<&str>,
        meta_json: Option<&str>,
    ) -> Result<Self> {
        let args = serde_json::from_str(args_json).map_err(|e| {
            Error::field(
                ErrorCode::InvalidArgs,
                "args",
                format!("not valid JSON: {e}"),
            )
        })?;
        let parse_optional = |text: Option<&str>, code, field: &str| -> Result<Option<Value>> {
            match text {
                None => Ok(None),
                Some(text) => match serde_json::from_str::<Value>(text) {
                    Ok(Value::Null) => Ok(None),
                    Ok(value) => Ok(Some(value)),
                    Err(e) => Err(Error::field(code, field, format!("not valid JSON: {e}"))),
                },
            }
        };
        Ok(NewJob {
            job_type: job_type.to_owned(),
            args,
            options: parse_optional(options_json, ErrorCode::InvalidOptions, "options")?,
            meta: parse_optional(meta_json, ErrorCode::InvalidMeta, "meta")?,
        })
    }
}

/// Request context captured by a framework middleware (FA-R001). It lands in the job's `meta`
/// under the keys the spec names; explicit `meta` given by the caller wins over it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestContext {
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub user_id: Option<String>,
    pub tenant_id: Option<String>,
    pub locale: Option<String>,
}

/// The HTTP request headers a request context is read from, lowercase; a middleware passes
/// these (and only these) to [`RequestContext::from_headers`].
pub const CONTEXT_HEADERS: [&str; 5] = [
    "traceparent",
    "tracestate",
    "x-request-id",
    "x-ojs-tenant",
    "accept-language",
];

impl RequestContext {
    /// The context as JSON: the keys of this struct, optionally `"headers"`, an object of HTTP
    /// request headers (any case) read by [`RequestContext::from_headers`], and optionally
    /// `"span"`, the trace context of the app's current OpenTelemetry span as the binding's
    /// OpenTelemetry API wrote it (`{"traceparent": ..., "tracestate": ...}`). A key given
    /// explicitly wins over what the span or the headers give, and the span wins over the
    /// request's trace headers: a job continues the span that staged it. `traceparent` and
    /// `tracestate` come as a pair from the first of the three that has a `traceparent`.
    /// `X-OJS-Tenant` counts only when `trust_tenant_header` (the app's
    /// `adapter.trust_tenant_header`): a client sends it.
    pub fn from_json(text: &str, trust_tenant_header: bool) -> Result<Self> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct SpanContext {
            #[serde(default)]
            traceparent: Option<String>,
            #[serde(default)]
            tracestate: Option<String>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Sources {
            #[serde(flatten)]
            explicit: RequestContext,
            #[serde(default)]
            headers: Option<std::collections::BTreeMap<String, String>>,
            #[serde(default)]
            span: Option<SpanContext>,
        }
        let invalid =
            |e: serde_json::Error| Error::field(ErrorCode::InvalidMeta, "context", e.to_string());
        if !text.contains("\"headers\"") && !text.contains("\"span\"") {
            return serde_json::from_str(text).map_err(invalid);
        }
        let parsed: Sources = serde_json::from_str(text).map_err(invalid)?;
        let headers: Vec<(&str, &str)> = parsed
            .headers
            .iter()
            .flatten()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let read = RequestContext::from_headers(&headers, trust_tenant_header);
        let explicit = parsed.explicit;
        let present = |value: Option<String>| value.filter(|v| !v.is_empty());
        let span = parsed.span.map(|span| RequestContext {
            traceparent: present(span.traceparent),
            tracestate: present(span.tracestate),
            ..RequestContext::default()
        });
        // A tracestate belongs to its traceparent's trace, and means nothing without one.
        let (traceparent, tracestate) = [Some(&explicit), span.as_ref(), Some(&read)]
            .into_iter()
            .flatten()
            .find(|source| source.traceparent.as_ref().is_some_and(|t| !t.is_empty()))
            .map(|source| {
                (
                    source.traceparent.clone(),
                    present(source.tracestate.clone()),
                )
            })
            .unwrap_or_default();
        Ok(RequestContext {
            request_id: present(explicit.request_id).or(read.request_id),
            traceparent,
            tracestate,
            user_id: present(explicit.user_id).or(read.user_id),
            tenant_id: present(explicit.tenant_id).or(read.tenant_id),
            locale: present(explicit.locale).or(read.locale),
        })
    }

    /// The context an HTTP request carries ([`CONTEXT_HEADERS`]; names in any case, values
    /// trimmed, empty ones absent): `traceparent`, `tracestate`, `X-Request-Id` as the request
    /// id, `X-OJS-Tenant` as the tenant only when `trust_tenant_header` (any client can send
    /// it), and the first language tag of `Accept-Language` (not `*`) as the locale. The user
    /// and, by default, the tenant are the framework's to add from its own resolvers.
    pub fn from_headers(headers: &[(&str, &str)], trust_tenant_header: bool) -> RequestContext {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, v)| n.eq_ignore_ascii_case(name) && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_owned())
        };
        let locale = get("accept-language").and_then(|header| {
            let tag = header.split(',').next()?.split(';').next()?.trim();
            (!tag.is_empty() && tag != "*").then(|| tag.to_owned())
        });
        RequestContext {
            request_id: get("x-request-id"),
            traceparent: get("traceparent"),
            tracestate: get("tracestate"),
            user_id: None,
            tenant_id: if trust_tenant_header {
                get("x-ojs-tenant")
            } else {
                None
            },
            locale,
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == RequestContext::default()
    }

    /// The meta entries this context contributes, in the spec's key names. A traceparent that
    /// is not W3C-shaped is dropped, as W3C Trace Context asks of receivers.
    pub fn meta_entries(&self) -> Vec<(&'static str, String)> {
        let mut entries = Vec::new();
        let mut push = |key: &'static str, value: &Option<String>| {
            if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
                entries.push((key, value.clone()));
            }
        };
        if self.traceparent.as_deref().is_some_and(is_traceparent) {
            push("traceparent", &self.traceparent);
            push("tracestate", &self.tracestate);
        }
        push("ojs.context.request_id", &self.request_id);
        push("ojs.context.user_id", &self.user_id);
        push("tenant_id", &self.tenant_id);
        push("ojs.context.locale", &self.locale);
        entries
    }
}

fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

/// A validated job, ready to become an outbox row: every column value is final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedJob {
    /// UUIDv7, lowercase; sent as the job's `id`, so re-sends are idempotent.
    pub job_id: String,
    pub job_type: String,
    pub args_json: String,
    pub options_json: String,
    pub meta_json: String,
    pub tenant_id: Option<String>,
    /// `options.ordering_key`, taken out of the options: jobs with the same key reach the
    /// backend one at a time, in the order their transactions committed.
    pub order_key: Option<String>,
    /// The job's claim on its unique key among the jobs the outbox still holds.
    pub unique: Option<UniqueHold>,
}

/// What the outbox does with a job whose `options.unique` key matches a job it still holds
/// (pending or failed): the policy's `on_conflict`, decided inside the staging transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The enqueue call fails with `DUPLICATE`; nothing is staged.
    Reject,
    /// The enqueue call returns the held job's id; nothing is staged.
    Ignore,
    /// The new job takes the held job's row: the held job is never sent.
    Replace,
    /// The held job keeps its id and options (its schedule) and takes the new args and meta.
    ReplaceExceptSchedule,
}

impl OnConflict {
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Reject => "reject",
            OnConflict::Ignore => "ignore",
            OnConflict::Replace => "replace",
            OnConflict::ReplaceExceptSchedule => "replace_except_schedule",
        }
    }

    pub fn parse(text: &str) -> Option<OnConflict> {
        Some(match text {
            "reject" => OnConflict::Reject,
            "ignore" => OnConflict::Ignore,
            "replace" => OnConflict::Replace,
            "replace_except_schedule" => OnConflict::ReplaceExceptSchedule,
            _ => return None,
        })
    }
}

/// A job's unique key (`ojs_fingerprint`, lowercase hex, computed on the plaintext args before
/// any encryption: seed 003) and its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueHold {
    pub key: String,
    pub on_conflict: OnConflict,
}

/// The states a job the outbox holds will have at the backend: a policy whose `states` names
/// none of them does not concern the held jobs.
const HELD_STATES: [&str; 3] = ["available", "scheduled", "pending"];

impl PreparedJob {
    /// The length of `wire_json()`, without building it.
    pub fn wire_len(&self) -> usize {
        WIRE_FRAME_BYTES
            + self.job_id.len()
            + self.job_type.len()
            + self.args_json.len()
            + self.options_json.len()
            + self.meta_json.len()
    }

    /// The job as the backend receives it (`POST /ojs/v1/jobs` body, or one batch element).
    pub fn wire_json(&self) -> String {
        wire_json(
            &self.job_id,
            &self.job_type,
            &self.args_json,
            &self.options_json,
            &self.meta_json,
        )
    }
}

/// The bytes `wire_json` adds around its five parts.
const WIRE_FRAME_BYTES: usize = r#"{"id":"","type":"","args":,"options":,"meta":}"#.len();

/// Assembles the wire form from column texts without re-parsing them.
pub fn wire_json(
    job_id: &str,
    job_type: &str,
    args_json: &str,
    options_json: &str,
    meta_json: &str,
) -> String {
    let mut out = String::with_capacity(
        64 + job_type.len() + args_json.len() + options_json.len() + meta_json.len(),
    );
    out.push_str("{\"id\":\"");
    out.push_str(job_id);
    out.push_str("\",\"type\":\"");
    out.push_str(job_type); // validated: [a-z0-9_.-] only, nothing to escape
    out.push_str("\",\"args\":");
    out.push_str(args_json);
    out.push_str(",\"options\":");
    out.push_str(options_json);
    out.push_str(",\"meta\":");
    out.push_str(meta_json);
    out.push('}');
    out
}

/// Validates a job and turns it into a row. The entry point of every enqueue path that holds
/// the job as JSON values; `prepare_json` is the same rule for JSON texts.
pub fn prepare(job: NewJob, context: Option<&RequestContext>) -> Result<PreparedJob> {
    validate_type(&job.job_type)?;
    if !job.args.is_array() {
        return Err(args_not_array(&job.args));
    }
    let options = object_or_none(job.options, ErrorCode::InvalidOptions, "options")?;
    let meta = object_or_none(job.meta, ErrorCode::InvalidMeta, "meta")?;
    finish(job.job_type, job.args.to_string(), options, meta, context)
}

/// `prepare` for a job handed over as JSON texts, the per-job hot path of the bindings: the
/// args text is checked, not rebuilt, and absent options and meta are never parsed. `None` or
/// `"null"` options/meta mean "unset".
pub fn prepare_json(
    job_type: &str,
    args_json: &str,
    options_json: Option<&str>,
    meta_json: Option<&str>,
    context: Option<&RequestContext>,
) -> Result<PreparedJob> {
    prepare_texts(
        job_type,
        args_json.trim(),
        options_json,
        meta_json,
        context,
        false,
    )
}

/// `prepare_json`. `args_delimited`: the args text is already known to be one well-formed JSON
/// value (an element the caller's JSON parser delimited), so it is not parsed a second time.
pub fn prepare_texts(
    job_type: &str,
    args_text: &str,
    options_json: Option<&str>,
    meta_json: Option<&str>,
    context: Option<&RequestContext>,
    args_delimited: bool,
) -> Result<PreparedJob> {
    validate_type(job_type)?;
    if !args_delimited && serde_json::from_str::<serde::de::IgnoredAny>(args_text).is_err() {
        // The full parse names the position of the syntax error.
        NewJob::from_json(job_type, args_text, None, None)?;
    }
    if !args_text.starts_with('[') {
        let args: Value = serde_json::from_str(args_text).unwrap_or(Value::Null);
        return Err(args_not_array(&args));
    }
    let parse = |text: Option<&str>, code, field: &str| -> Result<Option<Value>> {
        match text.map(str::trim) {
            None | Some("null") => Ok(None),
            Some(text) => serde_json::from_str(text)
                .map(Some)
                .map_err(|e| Error::field(code, field, format!("not valid JSON: {e}"))),
        }
    };
    let options = parse(options_json, ErrorCode::InvalidOptions, "options")?;
    let meta = parse(meta_json, ErrorCode::InvalidMeta, "meta")?;
    let options = object_or_none(options, ErrorCode::InvalidOptions, "options")?;
    let meta = object_or_none(meta, ErrorCode::InvalidMeta, "meta")?;
    finish(
        job_type.to_owned(),
        args_text.to_owned(),
        options,
        meta,
        context,
    )
}

fn args_not_array(args: &Value) -> Error {
    Error::field(
        ErrorCode::InvalidArgs,
        "args",
        format!("must be a JSON array, got {}", json_kind(args)),
    )
}

/// `None` (or JSON null) stays unset; anything but an object is refused.
fn object_or_none(
    value: Option<Value>,
    code: ErrorCode,
    field: &str,
) -> Result<Option<Map<String, Value>>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(Error::field(
            code,
            field,
            format!("must be an object, got {}", json_kind(&other)),
        )),
    }
}

/// The steps shared by both entry points, from a valid type and args text on.
fn finish(
    job_type: String,
    args_json: String,
    options: Option<Map<String, Value>>,
    meta: Option<Map<String, Value>>,
    context: Option<&RequestContext>,
) -> Result<PreparedJob> {
    // With tracing on, the job's `create` span is made below: it needs the queue and the id.
    let traced = crate::otel::enabled();
    let mut queue = None;
    let (options_json, order_key, unique_policy) = match options {
        None => ("{}".to_owned(), None, None),
        Some(mut options) => {
            if traced {
                queue = options
                    .get("queue")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            validate_options(&options)?;
            let order_key = match options.remove("ordering_key") {
                Some(Value::String(key)) => Some(key),
                _ => None,
            };
            let unique = options
                .get("unique")
                .and_then(Value::as_object)
                .filter(|policy| concerns_held_jobs(policy))
                .cloned();
            (Value::Object(options).to_string(), order_key, unique)
        }
    };
    let entries = context
        .map(RequestContext::meta_entries)
        .unwrap_or_default();
    let job_id = crate::id::new_job_id().to_string();
    let (meta_json, tenant_id) = match meta {
        None if entries.is_empty() && !traced => ("{}".to_owned(), None),
        meta => {
            let mut meta = meta.unwrap_or_default();
            for (key, value) in entries {
                meta.entry(key).or_insert(Value::String(value));
            }
            if traced {
                let queue = queue.as_deref().unwrap_or("default");
                trace_creation(&job_id, &job_type, queue, &mut meta);
            }
            let tenant_id = match meta.get("tenant_id") {
                None | Some(Value::Null) => None,
                // A NUL cannot be stored in a PostgreSQL text column, and the staged row's
                // fields cross to the bindings NUL-separated.
                Some(Value::String(tenant)) if tenant.contains('\0') => {
                    return Err(Error::field(
                        ErrorCode::InvalidMeta,
                        "meta.tenant_id",
                        "must not contain a NUL character",
                    ));
                }
                Some(Value::String(tenant)) => Some(tenant.clone()),
                Some(other) => {
                    return Err(Error::field(
                        ErrorCode::InvalidMeta,
                        "meta.tenant_id",
                        format!("must be a string, got {}", json_kind(other)),
                    ));
                }
            };
            (Value::Object(meta).to_string(), tenant_id)
        }
    };
    // Seed 003's chain: the unique key is computed here, on the plaintext args and the merged
    // meta, before any encryption (`codec::Codec::seal`) replaces the args.
    let unique = unique_policy.map(|policy| {
        unique_hold(
            &policy,
            &job_type,
            &options_json,
            &args_json,
            &meta_json,
            tenant_id.as_deref(),
        )
    });
    let prepared = PreparedJob {
        job_id,
        job_type,
        args_json,
        options_json,
        meta_json,
        tenant_id,
        order_key,
        unique,
    };
    let wire_bytes = prepared.wire_len();
    if wire_bytes > MAX_WIRE_BYTES {
        return Err(Error::field(
            ErrorCode::PayloadTooLarge,
            "args",
            format!(
                "the job's wire form is {wire_bytes} bytes; OJS backends accept at most {MAX_WIRE_BYTES}"
            ),
        ));
    }
    Ok(prepared)
}

/// The job's `create` span (`otel::create`), a child of the trace context its meta carries
/// (the application's request); the span's own context replaces it in the meta, so that the
/// relay's `send` span and the worker's `process` span link to the job's creation.
fn trace_creation(job_id: &str, job_type: &str, queue: &str, meta: &mut Map<String, Value>) {
    let text = |key: &str| meta.get(key).and_then(Value::as_str);
    let Some((traceparent, tracestate)) = crate::otel::create(
        job_id,
        job_type,
        queue,
        text("traceparent"),
        text("tracestate"),
    ) else {
        return;
    };
    meta.insert("traceparent".into(), Value::String(traceparent));
    match tracestate {
        Some(tracestate) => meta.insert("tracestate".into(), Value::String(tracestate)),
        None => meta.remove("tracestate"),
    };
}

/// Whether a (validated) unique policy concerns the jobs the outbox holds: its `states`
/// (default: every non-terminal state) name a state those jobs will have at the backend.
fn concerns_held_jobs(policy: &Map<String, Value>) -> bool {
    match policy.get("states").and_then(Value::as_array) {
        None => true,
        Some(states) => states
            .iter()
            .any(|state| state.as_str().is_some_and(|s| HELD_STATES.contains(&s))),
    }
}

/// The unique key of a job whose texts are valid JSON (validated above), with the policy's
/// `on_conflict` (default `reject`, as the spec has it): the fingerprint's hex, followed by
/// `:<tenant>` for a job of a tenant.
fn unique_hold(
    policy: &Map<String, Value>,
    job_type: &str,
    options_json: &str,
    args_json: &str,
    meta_json: &str,
    tenant: Option<&str>,
) -> UniqueHold {
    let options: Value = serde_json::from_str(options_json).unwrap_or(Value::Null);
    let queue = options
        .get("queue")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let args: Value = serde_json::from_str(args_json).unwrap_or(Value::Null);
    let meta: Option<Value> = serde_json::from_str(meta_json).ok();
    let fingerprint = ojs_fingerprint::fingerprint(policy, job_type, queue, &args, meta.as_ref());
    let key = ojs_fingerprint::hex(&fingerprint);
    UniqueHold {
        // Tenants never meet in the outbox (seed 003): one tenant's job neither rejects,
        // reveals nor replaces another's.
        key: match tenant {
            Some(tenant) => format!("{key}:{tenant}"),
            None => key,
        },
        on_conflict: policy
            .get("on_conflict")
            .and_then(Value::as_str)
            .and_then(OnConflict::parse)
            .unwrap_or(OnConflict::Reject),
    }
}

/// `^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`, at most 255 bytes: the schema's segments plus the
/// hyphen both reference servers accept (docs/ojs-compat.md).
pub fn validate_type(job_type: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::field(
            ErrorCode::InvalidJobType,
            "type",
            format!("{job_type:?} {why}"),
        ))
    };
    if job_type.is_empty() {
        return fail("is empty");
    }
    if job_type.len() > MAX_TYPE_BYTES {
        return fail("is longer than 255 bytes");
    }
    for segment in job_type.split('.') {
        let mut bytes = segment.bytes();
        match bytes.next() {
            Some(b'a'..=b'z') => {}
            _ => {
                return fail(
                    "must be dot-separated segments that each start with a lowercase letter (e.g. \"email.welcome\")",
                );
            }
        }
        if !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
            return fail("may contain only lowercase letters, digits, '_', '-' and '.'");
        }
    }
    Ok(())
}

/// `^[a-z0-9][a-z0-9\-.]*$`, at most 128 bytes.
pub fn validate_queue(queue: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::field(
            ErrorCode::InvalidQueue,
            "options.queue",
            format!("{queue:?} {why}"),
        ))
    };
    if queue.len() > MAX_QUEUE_BYTES {
        return fail("is longer than 128 bytes");
    }
    let mut bytes = queue.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit() => {}
        _ => return fail("must start with a lowercase letter or digit"),
    }
    if !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.') {
        return fail("may contain only lowercase letters, digits, '-' and '.'");
    }
    Ok(())
}

fn invalid_option(field: &str, why: String) -> Error {
    Error::field(ErrorCode::InvalidOptions, format!("options.{field}"), why)
}

fn validate_options(options: &Map<String, Value>) -> Result<()> {
    for (key, value) in options {
        match key.as_str() {
            "queue" => match value {
                Value::String(queue) => validate_queue(queue)?,
                other => {
                    return Err(Error::field(
                        ErrorCode::InvalidQueue,
                        "options.queue",
                        format!("must be a string, got {}", json_kind(other)),
                    ));
                }
            },
            "priority" => match value.as_i64() {
                Some(p) if (-100..=100).contains(&p) => {}
                _ => {
                    return Err(invalid_option(
                        key,
                        format!("must be an integer from -100 to 100, got {value}"),
                    ));
                }
            },
            // 0 means no timeout (job-options schema).
            "timeout_ms" => check_integer_at_least(key, value, 0)?,
            "visibility_timeout_ms" => {
                check_integer_at_least(key, value, MIN_VISIBILITY_TIMEOUT_MS)?
            }
            "delay_until" | "scheduled_at" | "expires_at" => check_timestamp(key, value)?,
            "pending" if !value.is_boolean() => {
                return Err(invalid_option(
                    key,
                    format!("must be true or false, got {value}"),
                ));
            }
            "pending" => {}
            "retry" => check_retry(value)?,
            "unique" => check_unique(value)?,
            "ordering_key" => match value {
                Value::String(key)
                    if !key.is_empty()
                        && key.len() <= MAX_ORDERING_KEY_BYTES
                        && !key.contains('\0') => {}
                other => {
                    return Err(invalid_option(
                        key,
                        format!(
                            "must be a non-empty string of at most {MAX_ORDERING_KEY_BYTES} bytes without NUL, got {}",
                            json_kind(other)
                        ),
                    ));
                }
            },
            "tags" => check_string_set(key, value, false)?,
            unknown => {
                return Err(invalid_option(
                    unknown,
                    format!("unknown option; allowed: {}", OPTION_KEYS.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

/// An integer from `minimum` up to the largest 64-bit signed integer (the servers decode
/// these into Go `int`).
fn check_integer_at_least(field: &str, value: &Value, minimum: i64) -> Result<()> {
    match value.as_i64() {
        Some(n) if n >= minimum => Ok(()),
        _ => Err(invalid_option(
            field,
            format!("must be an integer of at least {minimum}, got {value}"),
        )),
    }
}

/// RFC 3339 `date-time` as the schema's `format` has it: `T` (or `t`) between date and time,
/// which the `time` crate does not insist on; no leap second, which Go's RFC 3339 parser in the
/// reference servers refuses (they would then start the job at once).
fn check_timestamp(field: &str, value: &Value) -> Result<()> {
    let text = value.as_str().unwrap_or("");
    let shaped = matches!(text.as_bytes().get(10), Some(b'T' | b't'))
        && text.get(17..19).is_some_and(|second| second != "60");
    match time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        Ok(_) if shaped => Ok(()),
        _ => Err(invalid_option(
            field,
            format!("must be an RFC 3339 timestamp such as \"2026-03-01T09:00:00Z\", got {value}"),
        )),
    }
}

fn duration_text<'a>(field: &str, value: &'a Value) -> Result<&'a str> {
    value.as_str().ok_or_else(|| {
        invalid_option(
            field,
            format!("must be an ISO-8601 duration string, got {value}"),
        )
    })
}

/// An array of distinct strings; `allow_empty_strings: false` also refuses `""` entries.
fn check_string_set(field: &str, value: &Value, allow_empty_strings: bool) -> Result<()> {
    let what = if allow_empty_strings {
        "an array of distinct strings"
    } else {
        "an array of distinct non-empty strings"
    };
    let items = match value.as_array() {
        Some(items) if items.iter().all(Value::is_string) => items,
        _ => {
            return Err(invalid_option(
                field,
                format!("must be {what}, got {value}"),
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        if !allow_empty_strings && item.as_str() == Some("") {
            return Err(invalid_option(
                field,
                format!("must be {what}; entry {i} is empty"),
            ));
        }
        if items[..i].contains(item) {
            return Err(invalid_option(
                field,
                format!("must be {what}; {item} appears twice"),
            ));
        }
    }
    Ok(())
}

/// `check_string_set` whose entries must also be among `allowed`.
fn check_enum_set(field: &str, value: &Value, allowed: &[&str]) -> Result<()> {
    check_string_set(field, value, false)?;
    let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
    match items
        .iter()
        .find(|item| !allowed.contains(&item.as_str().unwrap_or("")))
    {
        Some(bad) => Err(invalid_option(
            field,
            format!("{bad} is not one of {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn object_with_keys<'a>(
    field: &str,
    value: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>> {
    let map = value.as_object().ok_or_else(|| {
        invalid_option(
            field,
            format!("must be an object, got {}", json_kind(value)),
        )
    })?;
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid_option(
            &format!("{field}.{unknown}"),
            format!("unknown key; allowed: {}", allowed.join(", ")),
        ));
    }
    Ok(map)
}

fn check_retry(value: &Value) -> Result<()> {
    let retry = object_with_keys("retry", value, &RETRY_KEYS)?;
    for (key, value) in retry {
        let field = format!("retry.{key}");
        match key.as_str() {
            "max_attempts" => check_integer_at_least(&field, value, 0)?,
            "initial_interval" | "max_interval" => {
                duration::parse_retry_interval(duration_text(&field, value)?)
                    .map_err(|why| invalid_option(&field, why))?;
            }
            "backoff_coefficient" if !value.as_f64().is_some_and(|c| c >= 1.0) => {
                return Err(invalid_option(
                    &field,
                    format!("must be a number >= 1, got {value}"),
                ));
            }
            "jitter" if !value.is_boolean() => {
                return Err(invalid_option(
                    &field,
                    format!("must be true or false, got {value}"),
                ));
            }
            "on_exhaustion" if !matches!(value.as_str(), Some("discard" | "dead_letter")) => {
                return Err(invalid_option(
                    &field,
                    format!("must be \"discard\" or \"dead_letter\", got {value}"),
                ));
            }
            "non_retryable_errors" => check_string_set(&field, value, false)?,
            _ => {}
        }
    }
    Ok(())
}

fn check_unique(value: &Value) -> Result<()> {
    let unique = object_with_keys("unique", value, &UNIQUE_KEYS)?;
    for (key, value) in unique {
        let field = format!("unique.{key}");
        match key.as_str() {
            "keys" => check_enum_set(&field, value, &UNIQUE_DIMENSIONS)?,
            "states" => check_enum_set(&field, value, &JOB_STATES)?,
            "args_keys" => check_string_set(&field, value, true)?,
            "meta_keys" => {
                check_string_set(&field, value, true)?;
                if value.as_array().is_some_and(Vec::is_empty) {
                    return Err(invalid_option(
                        &field,
                        "must name at least one meta key".to_owned(),
                    ));
                }
            }
            "period" => duration::check_unique_period(duration_text(&field, value)?)
                .map_err(|why| invalid_option(&field, why))?,
            "on_conflict"
                if !matches!(
                    value.as_str(),
                    Some("reject" | "ignore" | "replace" | "replace_except_schedule")
                ) =>
            {
                return Err(invalid_option(
                    &field,
                    format!(
                        "must be reject, ignore, replace or replace_except_schedule, got {value}"
                    ),
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
        return Err(invalid_option(
            "unique.meta_keys",
            "is required when unique.keys contains \"meta\"".to_owned(),
        ));
    }
    Ok(())
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

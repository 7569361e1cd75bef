//! Configuration: the spec §5.2 JSON structure plus the relay's own knobs. Every default lives
//! here and only here; bindings pass the user's settings through as JSON and never restate one.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::duration;
use crate::error::{Error, ErrorCode, Result};

/// Where the relay runs (spec §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMode {
    /// Inside the application process, woken by the after-commit hook (the default).
    InProcess,
    /// In a separate `ojs-relay run` process; the application only stages rows.
    External,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub ojs_url: String,
    /// `external` is the only backend type this adapter serves (the outbox pattern, §6.2).
    pub backend_type: String,
    /// The relay's own database connection (`sqlite://...` or `postgres://...`). Bindings fill it
    /// from the framework's database settings when the user leaves it out.
    pub database_url: Option<String>,
    /// Sent as `Authorization: Bearer ...` to the OJS backend.
    pub auth_token: Option<String>,
    /// Take a request's tenant from its `X-OJS-Tenant` header. Off by default: the header
    /// comes from the client, so only an app behind a gateway that sets it (and strips the
    /// client's) may trust it; otherwise the tenant comes from the app's own resolver.
    pub trust_tenant_header: bool,
    pub outbox: OutboxConfig,
    pub relay: RelayConfig,
    /// `adapter.encryption`: the key ring that encrypts new jobs' `args` and decodes fetched
    /// ones (the OJS encryption extension, `codec.rs`); `None`: args travel in plaintext.
    /// Compared by key ids and key bytes; printed by key ids only.
    pub encryption: Option<std::sync::Arc<crate::codec::Codec>>,
    /// `adapter.tracing`: OpenTelemetry spans of staging, the relay and the worker, exported
    /// over OTLP/HTTP (`otel.rs`, docs/tracing.md). `None` (the default): on only when
    /// `OTEL_TRACES_EXPORTER` names `otlp`; `OTEL_SDK_DISABLED=true` turns it off either way.
    pub tracing: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutboxConfig {
    pub enabled: bool,
    pub table_name: String,
    pub poll_interval: Duration,
    pub batch_size: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    pub mode: RelayMode,
    /// Attempts a row may consume (failures attributable to the job) before it goes `dead`.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// How long a claim is exclusive; a relay that dies holding rows loses them after this.
    pub lease: Duration,
    /// The poller leaves rows younger than this to the hot path (only while a hot path exists).
    pub skip_recent: Duration,
    /// Commits in other processes wake a relay without a hot path (a separate relay): on
    /// PostgreSQL a staging transaction of an `external`-mode process sends NOTIFY and the
    /// relay LISTENs; on SQLite the relay watches the database's files (`wake.rs`). `false`:
    /// polling only (PgBouncer in transaction pooling cannot LISTEN).
    pub notify: bool,
    /// `sent` rows older than this are pruned.
    pub retention: Duration,
    pub prune_interval: Duration,
    /// Committed job ids waiting for the hot path; when full, ids are dropped (the poller
    /// finds the rows), never an error in the application.
    pub hot_queue_capacity: usize,
    pub request_timeout: Duration,
    /// How long a graceful stop may spend sending what is already claimed.
    pub shutdown_timeout: Duration,
    /// Events a subscriber may fall behind before it is cut off (`events.rs`, tier 1).
    pub event_buffer: usize,
    /// Keep events this long in the table's event log, for every process's subscribers and
    /// for replay (`Last-Event-ID`, `since`; tier 2); `None`: live only, in the process that
    /// made them (tier 1).
    pub event_retention: Option<Duration>,
}

pub const MAX_BATCH_SIZE: usize = 1000;

/// The OJS backend (where `ojs-devserver` listens by default) that a configuration without a
/// URL gets only when its host framework runs in development mode ([`Host::development`]);
/// anywhere else a missing URL is an `INVALID_CONFIG` error.
pub const DEVELOPMENT_OJS_URL: &str = "http://localhost:8080";

/// What the host framework tells the parser about itself: the rule for a missing backend URL
/// depends on it, and the messages name the setting in the user's own spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host<'a> {
    /// The framework runs in development mode (Django `DEBUG`, Rails' development
    /// environment, `NODE_ENV=development`): a missing URL becomes [`DEVELOPMENT_OJS_URL`],
    /// with a notice ([`Loaded::notice`]) for the binding to log.
    pub development: bool,
    /// How the user sets the backend URL in this framework, e.g. `OJS_CONFIG["ojs_url"]`.
    pub url_setting: &'a str,
    /// `false` for a handle that never talks to the backend (the DDL of a migration, the
    /// relay's `migrate`/`status`/`dead`): a missing URL is then no error and
    /// [`Config::ojs_url`] stays empty, which [`crate::backend::Backend::new`] refuses.
    pub needs_backend: bool,
}

impl Host<'_> {
    /// Not in development mode, the URL required, named as the config key `adapter.ojs_url`:
    /// the rule of [`Config::from_json`] and [`Config::from_value`].
    pub const PRODUCTION: Host<'static> = Host {
        development: false,
        url_setting: "adapter.ojs_url",
        needs_backend: true,
    };
}

/// A parsed configuration and what the binding must tell the user about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    /// Set when the development default URL was taken: one line for the framework's logger
    /// (at warning level), naming the setting to set.
    pub notice: Option<String>,
}

/// The field of the errors about the backend URL.
pub const URL_FIELD: &str = "adapter.ojs_url";

/// For tests and examples: every default, with [`DEVELOPMENT_OJS_URL`] as the backend. A
/// user's configuration never starts from here without a URL: parsing requires one
/// ([`Config::load`]).
impl Default for Config {
    fn default() -> Self {
        Config {
            ojs_url: DEVELOPMENT_OJS_URL.into(),
            backend_type: "external".into(),
            database_url: None,
            auth_token: None,
            trust_tenant_header: false,
            outbox: OutboxConfig {
                enabled: true,
                table_name: "ojs_outbox".into(),
                poll_interval: Duration::from_secs(1),
                batch_size: 500,
            },
            relay: RelayConfig {
                mode: RelayMode::InProcess,
                max_attempts: 10,
                initial_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(300),
                lease: Duration::from_secs(30),
                skip_recent: Duration::from_secs(1),
                notify: true,
                retention: Duration::from_secs(24 * 3600),
                prune_interval: Duration::from_secs(60),
                hot_queue_capacity: 10_000,
                request_timeout: Duration::from_secs(10),
                shutdown_timeout: Duration::from_secs(5),
                event_buffer: 1024,
                event_retention: Some(Duration::from_secs(3600)),
            },
            encryption: None,
            tracing: None,
        }
    }
}

impl Config {
    /// The last step of seed 003's enqueue chain before the row is written: the job's args
    /// encrypted with the configured key (`adapter.encryption`), after its unique key was
    /// computed on the plaintext (`job::prepare`). Without encryption, the job as it is.
    pub fn seal(&self, mut job: crate::job::PreparedJob) -> Result<crate::job::PreparedJob> {
        if let Some(codec) = &self.encryption {
            codec.seal(&mut job)?;
        }
        Ok(job)
    }

    /// Parses the spec §5.2 structure (`{"adapter": {...}}`, or the inner object alone). Every
    /// key is optional except the backend URL (`ojs_url`, or `url`): without it this is an
    /// `INVALID_CONFIG` error ([`Host::PRODUCTION`]; [`Config::load_json`] knows development
    /// mode). Unknown keys are errors: a typo must not silently fall back to a default.
    pub fn from_json(text: &str) -> Result<Config> {
        Config::load_json(text, &Host::PRODUCTION).map(|loaded| loaded.config)
    }

    /// [`Config::from_json`] of a parsed JSON value.
    pub fn from_value(value: &Value) -> Result<Config> {
        Config::load(value, &Host::PRODUCTION).map(|loaded| loaded.config)
    }

    /// [`Config::load`] of a JSON text.
    pub fn load_json(text: &str, host: &Host) -> Result<Loaded> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::field(
                ErrorCode::InvalidConfig,
                "config",
                format!("not valid JSON: {e}"),
            )
        })?;
        Config::load(&value, host)
    }

    /// Parses the configuration for this host. A missing (or `null`) backend URL is an
    /// `INVALID_CONFIG` error naming `host.url_setting`, unless the host runs in development
    /// mode (then [`DEVELOPMENT_OJS_URL`], and a notice to log) or needs no backend (then none).
    pub fn load(value: &Value, host: &Host) -> Result<Loaded> {
        let mut config = Config::parse(value)?;
        let mut notice = None;
        if config.ojs_url.is_empty() && host.needs_backend {
            let setting = host.url_setting;
            if !host.development {
                return Err(invalid(
                    URL_FIELD,
                    &format!(
                        "no OJS backend URL is set: set {setting} to the backend's http:// or https:// base URL (only a framework in development mode falls back to {DEVELOPMENT_OJS_URL})"
                    ),
                ));
            }
            config.ojs_url = DEVELOPMENT_OJS_URL.to_owned();
            notice = Some(format!(
                "ojs: no OJS backend URL is set ({setting}); in development mode jobs go to {DEVELOPMENT_OJS_URL}. Set {setting} to choose the backend."
            ));
        }
        Ok(Loaded { config, notice })
    }

    /// Every key but the rule for a missing URL: an unset URL is left empty.
    fn parse(value: &Value) -> Result<Config> {
        let mut root = as_object(value, "config")?;
        if let Some(adapter) = root.get("adapter") {
            if root.len() != 1 {
                let other = root
                    .keys()
                    .find(|k| *k != "adapter")
                    .cloned()
                    .unwrap_or_default();
                return Err(invalid(&other, "unknown key beside \"adapter\""));
            }
            root = as_object(adapter, "adapter")?;
        }
        let mut config = Config {
            ojs_url: String::new(),
            ..Config::default()
        };
        one_spelling(root, "ojs_url", "url", "adapter")?;
        for (key, value) in root {
            match key.as_str() {
                // `url` is the spelling of the spec's framework examples (§8.1, §8.2); `null`
                // is unset (a binding's `nil` / `undefined`).
                "ojs_url" | "url" if value.is_null() => {}
                // Either spelling is the one key `adapter.ojs_url`, and errors name it so.
                "ojs_url" | "url" => config.ojs_url = url(value, URL_FIELD)?,
                "backend_type" => {
                    let kind = string(value, "adapter.backend_type")?;
                    if kind != "external" {
                        return Err(invalid(
                            "adapter.backend_type",
                            &format!(
                                "{kind:?} is not supported; this adapter relays to an external backend (\"external\")"
                            ),
                        ));
                    }
                    config.backend_type = kind;
                }
                "database_url" => {
                    config.database_url = optional_string(value, "adapter.database_url")?
                }
                "auth_token" => config.auth_token = optional_string(value, "adapter.auth_token")?,
                "trust_tenant_header" => {
                    config.trust_tenant_header = value.as_bool().ok_or_else(|| {
                        invalid(
                            "adapter.trust_tenant_header",
                            &format!("{value} is not true or false"),
                        )
                    })?
                }
                // `null` is unset: the OTEL_* variables decide (`otel::wanted`).
                "tracing" if value.is_null() => config.tracing = None,
                "tracing" => {
                    config.tracing = Some(value.as_bool().ok_or_else(|| {
                        invalid("adapter.tracing", &format!("{value} is not true or false"))
                    })?)
                }
                "outbox" => apply_outbox(&mut config.outbox, value)?,
                "relay" => apply_relay(&mut config.relay, value)?,
                // `null` is unset, as a binding's `nil` / `undefined`.
                "encryption" if value.is_null() => config.encryption = None,
                "encryption" => {
                    config.encryption =
                        Some(std::sync::Arc::new(crate::codec::Codec::from_value(value)?))
                }
                other => return Err(invalid(&format!("adapter.{other}"), "unknown key")),
            }
        }
        Ok(config)
    }
}

fn apply_outbox(outbox: &mut OutboxConfig, value: &Value) -> Result<()> {
    let section = as_object(value, "adapter.outbox")?;
    one_spelling(section, "table_name", "table", "adapter.outbox")?;
    for (key, value) in section {
        let field = format!("adapter.outbox.{key}");
        match key.as_str() {
            "enabled" => {
                outbox.enabled = value
                    .as_bool()
                    .ok_or_else(|| invalid(&field, "must be true or false"))?;
                // Without the outbox a job enqueued after commit can be lost (FA-003), and
                // this adapter offers no such mode.
                if !outbox.enabled {
                    return Err(invalid(
                        &field,
                        "false is not supported: enqueue_after_commit always goes through the outbox (FA-003)",
                    ));
                }
            }
            // `table` is the spelling of the spec's Django example (§8.2).
            "table_name" | "table" => {
                let name = string(value, &field)?;
                validate_table_name(&name).map_err(|why| invalid(&field, &why))?;
                outbox.table_name = name;
            }
            "poll_interval" => {
                outbox.poll_interval = positive_duration(value, &field, Duration::from_millis(10))?;
            }
            "batch_size" => {
                outbox.batch_size = match value.as_u64() {
                    Some(n) if (1..=MAX_BATCH_SIZE as u64).contains(&n) => n as usize,
                    _ => {
                        return Err(invalid(
                            &field,
                            &format!("must be an integer from 1 to {MAX_BATCH_SIZE}, got {value}"),
                        ));
                    }
                }
            }
            _ => return Err(invalid(&field, "unknown key")),
        }
    }
    Ok(())
}

fn apply_relay(relay: &mut RelayConfig, value: &Value) -> Result<()> {
    for (key, value) in as_object(value, "adapter.relay")? {
        let field = format!("adapter.relay.{key}");
        let field = field.as_str();
        match key.as_str() {
            "mode" => {
                relay.mode = match value.as_str() {
                    Some("in_process") => RelayMode::InProcess,
                    Some("external") => RelayMode::External,
                    _ => {
                        return Err(invalid(
                            field,
                            &format!("must be \"in_process\" or \"external\", got {value}"),
                        ));
                    }
                }
            }
            "max_attempts" => relay.max_attempts = integer_in(value, field, 1, 1000)? as u32,
            "hot_queue_capacity" => {
                relay.hot_queue_capacity = integer_in(value, field, 1, 10_000_000)? as usize
            }
            "initial_backoff" => {
                relay.initial_backoff = positive_duration(value, field, Duration::from_millis(1))?
            }
            "max_backoff" => {
                relay.max_backoff = positive_duration(value, field, Duration::from_millis(1))?
            }
            "lease" => relay.lease = positive_duration(value, field, Duration::from_millis(100))?,
            "skip_recent" => relay.skip_recent = duration_value(value, field)?,
            "notify" => {
                relay.notify = value
                    .as_bool()
                    .ok_or_else(|| invalid(field, &format!("must be true or false, got {value}")))?
            }
            "retention" => relay.retention = duration_value(value, field)?,
            "prune_interval" => {
                relay.prune_interval = positive_duration(value, field, Duration::from_millis(10))?
            }
            "request_timeout" => {
                relay.request_timeout = positive_duration(value, field, Duration::from_millis(10))?
            }
            "shutdown_timeout" => relay.shutdown_timeout = duration_value(value, field)?,
            "event_buffer" => relay.event_buffer = integer_in(value, field, 1, 1_000_000)? as usize,
            // RFC-0005's default retention, PT1H, is the default; `null` keeps events live only,
            // in the process that made them (tier 1).
            "event_retention" if value.is_null() => relay.event_retention = None,
            "event_retention" => {
                relay.event_retention =
                    Some(positive_duration(value, field, Duration::from_secs(1))?)
            }
            _ => return Err(invalid(field, "unknown key")),
        }
    }
    if relay.max_backoff < relay.initial_backoff {
        return Err(invalid(
            "adapter.relay.max_backoff",
            "must not be shorter than initial_backoff",
        ));
    }
    if relay.lease <= relay.request_timeout {
        return Err(invalid(
            "adapter.relay.lease",
            "must be longer than request_timeout, or a slow send could lose its lease to another relay",
        ));
    }
    Ok(())
}

/// A plain or schema-qualified SQL identifier: it is spliced into statements, so nothing else passes.
pub fn validate_table_name(name: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = name.split('.').collect();
    let ok = parts.len() <= 2
        && parts.iter().all(|p| {
            let mut bytes = p.bytes();
            matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
                && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && p.len() <= 63
        });
    if !ok {
        return Err(format!(
            "{name:?} is not a valid table name (letters, digits and '_', optionally schema-qualified)"
        ));
    }
    // Table names go into SQL unquoted, so a reserved word would fail inside a statement.
    match parts.iter().find(|p| is_reserved_word(p)) {
        Some(word) => Err(format!(
            "{name:?} is not a valid table name: {word:?} is a reserved SQL word"
        )),
        None => Ok(()),
    }
}

/// PostgreSQL's reserved key words, and SQLite's that it never accepts as a bare name.
fn is_reserved_word(word: &str) -> bool {
    const RESERVED: &[&str] = &[
        "add",
        "all",
        "alter",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "autoincrement",
        "between",
        "both",
        "by",
        "case",
        "cast",
        "check",
        "collate",
        "column",
        "commit",
        "constraint",
        "create",
        "cross",
        "current_catalog",
        "current_date",
        "current_role",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "deferrable",
        "delete",
        "desc",
        "distinct",
        "do",
        "drop",
        "else",
        "end",
        "escape",
        "except",
        "exists",
        "false",
        "fetch",
        "for",
        "foreign",
        "from",
        "full",
        "glob",
        "grant",
        "group",
        "having",
        "if",
        "in",
        "index",
        "initially",
        "inner",
        "insert",
        "intersect",
        "into",
        "is",
        "isnull",
        "join",
        "lateral",
        "leading",
        "left",
        "like",
        "limit",
        "localtime",
        "localtimestamp",
        "natural",
        "not",
        "notnull",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "outer",
        "placing",
        "primary",
        "references",
        "regexp",
        "returning",
        "right",
        "select",
        "session_user",
        "set",
        "some",
        "symmetric",
        "system_user",
        "table",
        "then",
        "to",
        "trailing",
        "transaction",
        "true",
        "union",
        "unique",
        "update",
        "user",
        "using",
        "values",
        "variadic",
        "when",
        "where",
        "window",
        "with",
    ];
    RESERVED.contains(&word.to_ascii_lowercase().as_str())
}

/// The top-level keys of the adapter object, each once, as framework options offer them:
/// `url` for the backend URL (`ojs_url` is the same key).
pub const OPTION_KEYS: &[&str] = &[
    "url",
    "backend_type",
    "database_url",
    "auth_token",
    "trust_tenant_header",
    "outbox",
    "relay",
    "encryption",
    "tracing",
];

/// A key with two spellings (the §5.2 name and the §8 examples' alias) given both ways: the
/// same value is harmless, different values are an error naming both.
fn one_spelling(section: &Map<String, Value>, key: &str, alias: &str, parent: &str) -> Result<()> {
    let given = |k: &str| section.get(k).filter(|v| !v.is_null());
    match (given(key), given(alias)) {
        (Some(a), Some(b)) if a != b => Err(invalid(
            &format!("{parent}.{key}"),
            &format!(
                "given twice with different values: as {parent}.{key} ({a}) and as {parent}.{alias} ({b}); keep one"
            ),
        )),
        _ => Ok(()),
    }
}

/// `INVALID_CONFIG` for an unknown option, with the closest of `accepted` when it is a near
/// miss: the same letters in another case or separator style, a small edit away, or one of
/// them inside it (`ojsUrl` → `url`).
pub fn unknown_option<S: AsRef<str>>(key: &str, accepted: &[S]) -> Error {
    let why = match near_miss(key, accepted) {
        Some(spelling) => format!("unknown option; did you mean {spelling:?}?"),
        None => {
            let all: Vec<&str> = accepted.iter().map(AsRef::as_ref).collect();
            format!("unknown option (accepted: {})", all.join(", "))
        }
    };
    invalid(key, &why)
}

fn near_miss<'a, S: AsRef<str>>(key: &str, accepted: &'a [S]) -> Option<&'a str> {
    fn letters(text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    }
    fn distance(a: &[char], b: &[char]) -> usize {
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let above = row[j + 1];
                row[j + 1] = (diagonal + usize::from(ca != cb))
                    .min(row[j] + 1)
                    .min(above + 1);
                diagonal = above;
            }
        }
        row[b.len()]
    }
    let wanted = letters(key);
    let scored = accepted.iter().map(|spelling| {
        let candidate = letters(spelling.as_ref());
        (distance(&wanted, &candidate), candidate, spelling.as_ref())
    });
    let best = scored
        .clone()
        .filter(|(d, candidate, _)| *d <= (candidate.len() / 3).max(1))
        .min_by_key(|(d, _, _)| *d)
        .or_else(|| {
            scored
                .filter(|(_, candidate, _)| {
                    candidate.len() >= 3
                        && wanted
                            .windows(candidate.len())
                            .any(|window| window == candidate.as_slice())
                })
                .max_by_key(|(_, candidate, _)| candidate.len())
        });
    best.map(|(_, _, spelling)| spelling)
}

fn invalid(field: &str, why: &str) -> Error {
    Error::field(ErrorCode::InvalidConfig, field, why)
}

fn as_object<'a>(value: &'a Value, field: &str) -> Result<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| invalid(field, "must be a JSON object"))
}

fn string(value: &Value, field: &str) -> Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(field, &format!("must be a string, got {value}")))
}

fn optional_string(value: &Value, field: &str) -> Result<Option<String>> {
    if value.is_null() {
        Ok(None)
    } else {
        string(value, field).map(Some)
    }
}

fn url(value: &Value, field: &str) -> Result<String> {
    let text = string(value, field)?;
    let parsed = reqwest::Url::parse(&text)
        .map_err(|e| invalid(field, &format!("{text:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid(
            field,
            &format!("{text:?} must be an http:// or https:// URL with a host"),
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// An integer from `low` to `high`, inclusive.
fn integer_in(value: &Value, field: &str, low: u64, high: u64) -> Result<u64> {
    match value.as_u64() {
        Some(n) if (low..=high).contains(&n) => Ok(n),
        _ => Err(invalid(
            field,
            &format!("must be an integer from {low} to {high}, got {value}"),
        )),
    }
}

fn duration_value(value: &Value, field: &str) -> Result<Duration> {
    let text = value.as_str().ok_or_else(|| {
        invalid(
            field,
            &format!("must be an ISO-8601 duration string such as \"PT1S\", got {value}"),
        )
    })?;
    duration::parse(text).map_err(|why| invalid(field, &why))
}

fn positive_duration(value: &Value, field: &str, minimum: Duration) -> Result<Duration> {
    let parsed = duration_value(value, field)?;
    if parsed < minimum {
        return Err(invalid(
            field,
            &format!("must be at least {}", duration::format(minimum)),
        ));
    }
    Ok(parsed)
}

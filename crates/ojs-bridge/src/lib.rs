//! The one contract at the FFI line: what the language bindings (Python, Node, Ruby) call, and
//! how each thing crosses. Everything crosses as text, integers and flat records; the core owns
//! the tokio runtime, so bindings never run async code of their own. Fork-safe: a process
//! forked after the relay started (pre-fork servers: gunicorn, Puma cluster, Node cluster) gets
//! a fresh runtime and relay on first use.
//!
//! | thing | crosses as | decoded by each binding into |
//! |---|---|---|
//! | configuration | JSON text (spec §5.2) and a [`Host`] record | — |
//! | a staged job ([`Bridge::stage_job`]) | [`StagedJob::encode`]: one text, fields NUL-separated: `[sql]`, `job_id`, `type`, `args`, `options`, `meta`, `[tenant]` | the INSERT's parameters |
//! | staged jobs ([`Bridge::stage`]) | [`Staged::to_json`]: `{"job_ids", "statements": [{"sql", "params"}], "needs_savepoint"}` | statements to run, in a savepoint when told |
//! | staged jobs, INSERT texts kept ([`Bridge::stage`] then [`Staged::encode`]) | one text, NUL-separated: `needs_savepoint`, the ids, per statement its text's key in [`KeptTexts`], the text when not held yet, the parameters | the same (Node) |
//! | an error | [`Error::to_json`](ojs_outbox::Error::to_json): `{"code", "field", "message", "retryable", "family"}` | the class for `code` (docs/errors.md) |
//! | an id list | [`encode_ids`]: the ids joined by `\n` | a list of strings |
//! | the request context | JSON text: its keys, or `{"headers": {...}}` of [`context_header_names`] | — |
//! | savepoint bookkeeping | a [`Ledger`] per host transaction, for hosts without a savepoint-aware hook | — |
//! | an operator command | [`Bridge::admin`]: JSON in, a [`Report`] (stdout, stderr, exit code) out | printed as it is |
//! | relay log records | [`drain_log_feed`]: flat [`LogRecord`]s | the framework's logger |
//! | relay events (a mount) | [`Bridge::relay_events`] → [`events::RelayFrames`]: SSE frame text per `next` | written to the response as it is |
//! | an event client (an SDK) | [`Bridge::subscribe_events`] → [`events::EventFeed`]: CloudEvents JSON text per `next` | the language's iterator |

//!
//! The modules mirror the core: `staging` (jobs into statements), `runtime` (this process's
//! runtime and relay), `admin` (operator reads and commands), `surface` (a mount's one call),
//! `events` (streams), `worker` (the worker loop), `log` (relay log records), `encodings` (the
//! small encodings), `relay_command` (the relay CLI), `db_url`, `js_options`, `staged_text`.

mod admin;
pub mod db_url;
mod encodings;
pub mod events;
pub mod js_options;
mod log;
pub mod relay_command;
mod runtime;
mod staged_text;
mod staging;
pub mod surface;
pub mod worker;

pub use encodings::{database_error_code, decode_ids, encode_ids, unencodable};
pub use log::{LogRecord, drain_log_feed, enable_log_feed};
pub use ojs_outbox::admin::Report;
pub use ojs_outbox::error::codes_json;
pub use ojs_outbox::{Error, ErrorCode, ErrorFamily, Host, Result};
pub use relay_command::{RelayCommand, Started, relay_command, relay_exit_code};
pub use runtime::arm_stop_signals;
pub use staged_text::{KEPT_TEXTS, KeptTexts};
pub use staging::{Staged, StagedJob};

use std::sync::{Arc, Mutex, OnceLock};

use ojs_outbox::config::{Config, RelayMode};
use ojs_outbox::job::RequestContext;
use runtime::{Client, Running};

/// The savepoint bookkeeping of one host transaction, for a binding whose host library has no
/// savepoint-aware after-commit hook: record staged ids, savepoints, releases and rollbacks in
/// it, and at the outermost commit hand it to [`Bridge::committed`].
pub use ojs_outbox::ledger::Ledger;

/// One configured adapter per application (a Django settings module, an Express app, a Rails app).
pub struct Bridge {
    config: Config,
    notice: Option<String>,
    running: Mutex<Option<Arc<Running>>>,
    client: Mutex<Option<Arc<Client>>>,
    /// The single-row staging INSERT per (dialect, placeholder style), built on first use.
    insert_one: [OnceLock<Arc<str>>; 9],
    /// Job options may also come in the JavaScript spelling (`js_options.rs`).
    js_options: bool,
    /// `id::fork_generation() + 1` of the process whose relay `ensure_relay` started; 0: none.
    relay_started: std::sync::atomic::AtomicU64,
}

impl Bridge {
    /// Parses the spec §5.2 configuration, not in development mode (a missing backend URL is
    /// an error naming `adapter.ojs_url`); no I/O.
    pub fn new(config_json: &str) -> Result<Bridge> {
        Bridge::for_host(config_json, &Host::PRODUCTION)
    }

    /// Parses the configuration as `host` runs: the binding says whether its framework is in
    /// development mode, how its users spell the URL setting, and whether this handle talks to
    /// the backend at all (see [`Host`]). No I/O.
    pub fn for_host(config_json: &str, host: &Host) -> Result<Bridge> {
        let loaded = Config::load_json(config_json, host)?;
        if host.needs_backend {
            // One span provider per process, for staging, the relay and the worker
            // (docs/tracing.md); nothing at all when tracing is off (the default).
            ojs_outbox::otel::install_if_wanted(loaded.config.tracing)?;
        }
        Ok(Bridge {
            config: loaded.config,
            notice: loaded.notice,
            running: Mutex::new(None),
            client: Mutex::new(None),
            insert_one: Default::default(),
            js_options: false,
            relay_started: Default::default(),
        })
    }

    /// Job options may also be spelled the JavaScript way: camelCase keys and durations in
    /// milliseconds (`js_options.rs`). They are respelled into the spec's form before
    /// validation, so the job on the wire is the same; errors name the caller's spelling.
    pub fn accept_js_options(mut self) -> Bridge {
        self.js_options = true;
        self
    }

    /// The line the binding logs once, at warning level, through the framework's logger when
    /// this adapter was built: set when the development default URL was taken.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn table_name(&self) -> &str {
        &self.config.outbox.table_name
    }

    /// Whether a request's `X-OJS-Tenant` header may decide its jobs' tenant
    /// (`adapter.trust_tenant_header`, off by default).
    pub fn trust_tenant_header(&self) -> bool {
        self.config.trust_tenant_header
    }

    /// The request context the core reads from a context JSON (its keys, or `{"headers"}`),
    /// as JSON with the core's keys (`null` for absent ones), under this app's header trust:
    /// what a binding shows as the request's context (Express `req.ojs.context`).
    pub fn request_context_json(&self, context_json: &str) -> Result<String> {
        let context = RequestContext::from_json(context_json, self.trust_tenant_header())?;
        Ok(serde_json::to_string(&context).expect("a context serializes"))
    }

    /// Whether the relay runs in this process (`in_process`) or elsewhere (`external`).
    pub fn relay_in_process(&self) -> bool {
        self.config.relay.mode == RelayMode::InProcess
    }
}

/// The top-level keys of the adapter configuration as a framework's options offer them, each
/// once: the backend URL as `url` (the spelling of the spec's framework examples). A binding
/// whose options are these keys in its own case style (Express: camelCase) accepts exactly
/// those, besides its own.
pub fn option_keys() -> Vec<String> {
    ojs_outbox::config::OPTION_KEYS
        .iter()
        .map(|key| (*key).to_owned())
        .collect()
}

/// The relay's database URL from a framework's connection settings (`db_url::ConnectionParts`
/// as JSON): one rule for every binding.
pub fn database_url_from_parts(parts_json: &str) -> Result<String> {
    crate::db_url::from_parts(&crate::db_url::ConnectionParts::from_json(parts_json)?)
}

/// The HTTP request headers a middleware reads for the request context, lowercase; it passes
/// them as `{"headers": {...}}` in the context JSON (`RequestContext::from_json`).
pub fn context_header_names() -> Vec<String> {
    ojs_outbox::job::CONTEXT_HEADERS
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

/// The `INVALID_CONFIG` error for an option `key` that is none of `accepted` (the binding's
/// spellings), naming the accepted spelling when `key` is a near miss of one.
pub fn unknown_option_error(key: &str, accepted: &[String]) -> Error {
    ojs_outbox::config::unknown_option(key, accepted)
}

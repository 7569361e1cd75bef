//! Builds the `ojs_outbox::Config` of one invocation: the config file (or the library's
//! defaults; the backend URL has none), then the flags and environment variables over it. Every value a flag carries is
//! checked by the library's own parser, so the rules (URL schemes, batch size range, duration
//! minimums) live in one place and the messages match the config file's.

use std::path::Path;
use std::sync::Arc;

use ojs_outbox::codec::Codec;
use ojs_outbox::{Config, Error, ErrorCode, Host, Result};
use serde_json::{Value, json};

use crate::cli::{Cli, RunArgs};

/// The settings of one invocation: the library config plus the database URL it must have.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub database_url: String,
    /// Set when the development default URL was taken (a framework in development mode):
    /// the line to log once, at warning level.
    pub notice: Option<String>,
}

impl Settings {
    pub fn table(&self) -> &str {
        &self.config.outbox.table_name
    }
}

/// How `ojs-relay run` users set the backend URL, named when none is set.
pub const URL_SETTING: &str = "--ojs-url URL or OJS_URL (or adapter.ojs_url in the --config file)";

/// Where the settings of an invocation start, before the `--config` file, the environment and
/// the flags: the library's defaults (the `ojs-relay` binary), or a framework's own settings
/// (Django's `OJS_CONFIG` with the alias's database, a Rails app's `OJS.configure`).
#[derive(Debug, Clone, Default)]
pub struct Base {
    /// The framework's configuration in the spec §5.2 shape; `None`: the library's defaults.
    pub config: Option<Value>,
    /// The framework runs in development mode: a missing backend URL takes the development
    /// default, with a notice (`config::Host::development`).
    pub development: bool,
    /// How the framework's users set the backend URL besides `--ojs-url` and `OJS_URL`
    /// (e.g. `OJS_CONFIG["url"]`); `None`: the `--config` file's `adapter.ojs_url`.
    pub url_setting: Option<String>,
}

/// Builds the settings from the global options and, for `run`, its options, over the library's
/// defaults. Only `run` needs the backend URL: without one from a flag, `OJS_URL` or the config
/// file it fails; the CLI has no development mode, so there is no fallback.
pub fn build(cli: &Cli, run: Option<&RunArgs>) -> Result<Settings> {
    build_over(&Base::default(), cli, run)
}

/// [`build`] over `base`: the framework's settings, then the `--config` file (merged over them,
/// object by object), then environment variables and flags.
pub fn build_over(base: &Base, cli: &Cli, run: Option<&RunArgs>) -> Result<Settings> {
    // The flags first, each through the library's parser, so their errors name them.
    let mut flag_url = None;
    let mut batch_size = None;
    let mut poll_interval = None;
    if let Some(run) = run {
        if let Some(url) = &run.ojs_url {
            // Named as the user set it: the flag, or the environment variable.
            flag_url = Some(checked(run.ojs_url_source(), json!({ "ojs_url": url }))?.ojs_url);
        }
        if let Some(n) = run.batch_size {
            batch_size = Some(
                checked("--batch-size", json!({ "outbox": { "batch_size": n } }))?
                    .outbox
                    .batch_size,
            );
        }
        if let Some(interval) = &run.poll_interval {
            poll_interval = Some(
                checked(
                    "--poll-interval",
                    json!({ "outbox": { "poll_interval": interval } }),
                )?
                .outbox
                .poll_interval,
            );
        }
    }
    let url_setting = match &base.url_setting {
        Some(framework) => format!("--ojs-url URL or OJS_URL (or {framework})"),
        None => URL_SETTING.to_owned(),
    };
    let host = Host {
        development: base.development,
        url_setting: &url_setting,
        // `run` with --ojs-url (or OJS_URL) takes the URL from there, over the file's.
        needs_backend: run.is_some() && flag_url.is_none(),
    };
    let loaded = match (&base.config, &cli.config) {
        (None, Some(path)) => read_config_file(path, &host)?,
        (None, None) => Config::load(&json!({}), &host)?,
        (Some(framework), None) => Config::load(framework, &host)?,
        (Some(framework), Some(path)) => {
            let mut merged = adapter_of(framework.clone());
            merge(&mut merged, adapter_of(read_json_file(path)?));
            Config::load(&json!({ "adapter": merged }), &host).map_err(|e| {
                Error::new(
                    e.code,
                    format!(
                        "the settings with {} over them: {}",
                        path.display(),
                        e.message
                    ),
                )
            })?
        }
    };
    let notice = loaded.notice;
    let mut config = loaded.config;
    if let Some(url) = flag_url {
        config.ojs_url = url;
    }
    if let Some(n) = batch_size {
        config.outbox.batch_size = n;
    }
    if let Some(interval) = poll_interval {
        config.outbox.poll_interval = interval;
    }
    if let Some(run) = run {
        config.encryption = encryption(run, config.encryption.take())?;
    }
    if let Some(url) = &cli.database_url {
        config.database_url = Some(url.clone());
    }
    if let Some(table) = &cli.table {
        ojs_outbox::config::validate_table_name(table)
            .map_err(|why| Error::field(ErrorCode::InvalidConfig, "--table", why))?;
        config.outbox.table_name = table.clone();
    }
    let database_url = config.database_url.clone().filter(|url| !url.trim().is_empty()).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidConfig,
            "database_url",
            "no database given: pass --database-url URL, set OJS_DATABASE_URL, or set adapter.database_url in the --config file",
        )
    })?;
    Ok(Settings {
        config,
        database_url,
        notice,
    })
}

/// The environment variable holding the key ring of `run`: `ID=BASE64,ID=BASE64`. Environment
/// only: a flag's value shows in the process list.
pub const ENCRYPTION_KEYS_ENV: &str = "OJS_ENCRYPTION_KEYS";

/// `run`'s key ring: `OJS_ENCRYPTION_KEYS` with `--encryption-key-id` (or
/// `OJS_ENCRYPTION_KEY_ID`) replaces the configuration's `adapter.encryption`; the key id alone
/// picks another current key of the configuration's ring.
fn encryption(run: &RunArgs, configured: Option<Arc<Codec>>) -> Result<Option<Arc<Codec>>> {
    let list = std::env::var(ENCRYPTION_KEYS_ENV)
        .ok()
        .filter(|list| !list.trim().is_empty());
    let key_id = run.encryption_key_id.as_deref().filter(|id| !id.is_empty());
    let source = run.encryption_key_id_source();
    match (list, key_id, configured) {
        (Some(list), Some(key_id), _) => Ok(Some(Arc::new(Codec::from_key_list(
            key_id,
            &list,
            source,
            ENCRYPTION_KEYS_ENV,
        )?))),
        (Some(_), None, _) => Err(Error::field(
            ErrorCode::InvalidConfig,
            ENCRYPTION_KEYS_ENV,
            "is set, but no key is named for new jobs: set --encryption-key-id ID or OJS_ENCRYPTION_KEY_ID",
        )),
        (None, Some(key_id), Some(ring)) => Ok(Some(Arc::new(ring.with_key_id(key_id, source)?))),
        (None, Some(_), None) => Err(Error::field(
            ErrorCode::InvalidConfig,
            source,
            "names a key, but no keys are configured: set OJS_ENCRYPTION_KEYS=ID=BASE64,... or adapter.encryption in the --config file",
        )),
        (None, None, configured) => Ok(configured),
    }
}

fn read_config_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "--config",
            format!("cannot read {}: {e}", path.display()),
        )
    })
}

fn read_config_file(path: &Path, host: &Host) -> Result<ojs_outbox::config::Loaded> {
    Config::load_json(&read_config_text(path)?, host)
        .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
}

fn read_json_file(path: &Path) -> Result<Value> {
    serde_json::from_str(&read_config_text(path)?).map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "--config",
            format!("{}: not valid JSON: {e}", path.display()),
        )
    })
}

/// The adapter object of a configuration (`{"adapter": {...}}` or the inner object), with the
/// backend URL spelled `ojs_url` (either spelling is the one setting), for [`merge`].
fn adapter_of(value: Value) -> Value {
    let mut adapter = match value {
        Value::Object(mut root) if root.len() == 1 && root.contains_key("adapter") => {
            root.remove("adapter").unwrap_or(Value::Null)
        }
        other => other,
    };
    if let Value::Object(object) = &mut adapter
        && let Some(url) = object.remove("url")
    {
        object.entry("ojs_url").or_insert(url);
    }
    adapter
}

/// `overlay` over `base`: objects key by key, anything else replaced.
fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (slot, value) => *slot = value,
    }
}

/// Runs one flag's value through the library's config parser (as a one-key config, which
/// needs no backend URL) and returns the parsed config, from which the caller takes that one
/// field.
fn checked(flag: &str, fragment: Value) -> Result<Config> {
    let host = Host {
        needs_backend: false,
        ..Host::PRODUCTION
    };
    Config::load(&fragment, &host)
        .map(|loaded| loaded.config)
        .map_err(|e| {
            let why = match &e.field {
                Some(field) => e
                    .message
                    .strip_prefix(&format!("{field}: "))
                    .unwrap_or(&e.message)
                    .to_owned(),
                None => e.message.clone(),
            };
            Error::field(e.code, flag, why)
        })
}

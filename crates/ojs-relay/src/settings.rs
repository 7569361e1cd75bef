//! Builds the `ojs_outbox::Config` of one invocation: the config file (or the library's
//! defaults; the backend URL has none), then the flags and environment variables over it. Every value a flag carries is
//! checked by the library's own parser, so the rules (URL schemes, batch size range, duration
//! minimums) live in one place and the messages match the config file's.

use std::path::Path;

use ojs_outbox::{Config, Error, ErrorCode, Host, Result};
use serde_json::{Value, json};

use crate::cli::{Cli, RunArgs};

/// The settings of one invocation: the library config plus the database URL it must have.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub database_url: String,
}

impl Settings {
    pub fn table(&self) -> &str {
        &self.config.outbox.table_name
    }
}

/// How `ojs-relay run` users set the backend URL, named when none is set.
pub const URL_SETTING: &str = "--ojs-url URL or OJS_URL (or adapter.ojs_url in the --config file)";

/// Builds the settings from the global options and, for `run`, its options. Only `run` needs
/// the backend URL: without one from a flag, `OJS_URL` or the config file it fails; the CLI has
/// no development mode, so there is no fallback.
pub fn build(cli: &Cli, run: Option<&RunArgs>) -> Result<Settings> {
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
    let host = Host {
        development: false,
        url_setting: URL_SETTING,
        // `run` with --ojs-url (or OJS_URL) takes the URL from there, over the file's.
        needs_backend: run.is_some() && flag_url.is_none(),
    };
    let mut config = match &cli.config {
        Some(path) => read_config_file(path, &host)?,
        None => Config::load(&json!({}), &host)?.config,
    };
    if let Some(url) = flag_url {
        config.ojs_url = url;
    }
    if let Some(n) = batch_size {
        config.outbox.batch_size = n;
    }
    if let Some(interval) = poll_interval {
        config.outbox.poll_interval = interval;
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
    })
}

fn read_config_file(path: &Path, host: &Host) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "--config",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    Config::load_json(&text, host)
        .map(|loaded| loaded.config)
        .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
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

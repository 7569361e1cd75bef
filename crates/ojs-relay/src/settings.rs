//! Builds the `ojs_outbox::Config` of one invocation: the config file (or the library's
//! defaults), then the flags and environment variables over it. Every value a flag carries is
//! checked by the library's own parser, so the rules (URL schemes, batch size range, duration
//! minimums) live in one place and the messages match the config file's.

use std::path::Path;

use ojs_outbox::{Config, Error, ErrorCode, Result};
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

/// Builds the settings from the global options and, for `run`, its options.
pub fn build(cli: &Cli, run: Option<&RunArgs>) -> Result<Settings> {
    let mut config = match &cli.config {
        Some(path) => read_config_file(path)?,
        None => Config::default(),
    };
    if let Some(url) = &cli.database_url {
        config.database_url = Some(url.clone());
    }
    if let Some(table) = &cli.table {
        ojs_outbox::config::validate_table_name(table)
            .map_err(|why| Error::field(ErrorCode::InvalidConfig, "--table", why))?;
        config.outbox.table_name = table.clone();
    }
    if let Some(run) = run {
        if let Some(url) = &run.ojs_url {
            config.ojs_url = checked("--ojs-url", json!({ "ojs_url": url }))?.ojs_url;
        }
        if let Some(n) = run.batch_size {
            config.outbox.batch_size =
                checked("--batch-size", json!({ "outbox": { "batch_size": n } }))?
                    .outbox
                    .batch_size;
        }
        if let Some(interval) = &run.poll_interval {
            config.outbox.poll_interval = checked(
                "--poll-interval",
                json!({ "outbox": { "poll_interval": interval } }),
            )?
            .outbox
            .poll_interval;
        }
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

fn read_config_file(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "--config",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    Config::from_json(&text)
        .map_err(|e| Error::new(e.code, format!("{}: {}", path.display(), e.message)))
}

/// Runs one flag's value through the library's config parser (as a one-key config) and
/// returns the parsed config, from which the caller takes that one field.
fn checked(flag: &str, fragment: Value) -> Result<Config> {
    Config::from_value(&fragment).map_err(|e| {
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

/// The URL without its password, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
        assert_eq!(redact("sqlite:x.db"), "sqlite:x.db");
    }
}

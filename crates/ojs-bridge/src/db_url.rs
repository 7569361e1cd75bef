//! The relay's database URL, built from the connection settings of the host framework (Django
//! `DATABASES`, ActiveRecord's `database.yml`, knex's `connection`): the relay opens its own
//! connection to the application's database, and every binding derives it by this one rule.

use serde::Deserialize;

use ojs_outbox::error::{Error, ErrorCode, Result};

/// A framework's connection settings, as plain text. Absent PostgreSQL parts are taken from
/// the `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD` and `PGDATABASE` variables, as libpq and the
/// Node, Python and Ruby drivers do, so the relay reaches the database the application does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionParts {
    /// The framework's name for the database kind: `postgresql`, `postgres`, `pg`, `postgis`,
    /// `mysql`, `mysql2`, `mariadb`, `trilogy`, `sqlite`, `sqlite3`, `better-sqlite3`, or a
    /// Django `ENGINE` path ending in one of them.
    pub engine: String,
    /// A URL the framework already has: used as it is (SQLite made absolute).
    pub url: Option<String>,
    /// PostgreSQL: the database name; SQLite: the file (relative to `base_dir`).
    pub database: Option<String>,
    pub host: Option<String>,
    /// Text or number.
    pub port: Option<serde_json::Value>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub sslmode: Option<String>,
    /// The directory a relative SQLite file is relative to (the project root, or the cwd).
    pub base_dir: Option<String>,
    /// How the user sets the URL themselves, named in errors (e.g. `config.database_url`).
    pub setting: Option<String>,
}

impl ConnectionParts {
    pub fn from_json(text: &str) -> Result<ConnectionParts> {
        serde_json::from_str(text).map_err(|e| {
            Error::field(
                ErrorCode::InvalidDatabaseUrl,
                "database_url",
                format!("connection settings: {e}"),
            )
        })
    }
}

/// The URL for sqlx: `sqlite:///absolute/file`, `postgres://user:password@host:port/db?...` or
/// `mysql://user:password@host:port/db`.
pub fn from_parts(parts: &ConnectionParts) -> Result<String> {
    let setting = parts
        .setting
        .as_deref()
        .unwrap_or("the relay's database_url");
    let refuse = |why: String| {
        Error::field(
            ErrorCode::InvalidDatabaseUrl,
            "database_url",
            format!("{why}; set {setting} yourself"),
        )
    };
    let engine = parts.engine.to_ascii_lowercase();
    let kind = engine.rsplit(['.', '/']).next().unwrap_or("");
    if kind.contains("sqlite") {
        let file = match (&parts.url, &parts.database) {
            (Some(url), _) if !url.is_empty() => url
                .trim_start_matches("sqlite:")
                .trim_start_matches("//")
                .to_owned(),
            (_, Some(database)) => database.clone(),
            _ => String::new(),
        };
        let file = file.strip_prefix("file:").unwrap_or(&file);
        let file = file.split('?').next().unwrap_or("");
        if file.is_empty() || file.starts_with(":memory:") || engine_memory(parts) {
            return Err(refuse(
                "an in-memory SQLite database cannot be shared with the relay's own connection; use a database file".to_owned(),
            ));
        }
        let path = std::path::Path::new(file);
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            let base = match &parts.base_dir {
                Some(dir) => std::path::PathBuf::from(dir),
                None => std::env::current_dir()
                    .map_err(|e| refuse(format!("no current directory: {e}")))?,
            };
            base.join(path)
        };
        return Ok(format!("sqlite://{}", absolute.display()));
    }
    if kind.starts_with("mysql") || kind.starts_with("mariadb") || kind == "trilogy" {
        return Ok(mysql_url(parts));
    }
    if !(kind.starts_with("postg") || kind == "pg") {
        return Err(refuse(format!(
            "cannot derive the relay's database URL from the database kind {:?} (PostgreSQL, MySQL/MariaDB and SQLite are supported)",
            parts.engine
        )));
    }
    if let Some(url) = parts.url.as_deref().filter(|u| !u.is_empty()) {
        return Ok(url.to_owned());
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let given = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
    let user = given(&parts.user).or_else(|| env("PGUSER"));
    let password = given(&parts.password).or_else(|| env("PGPASSWORD"));
    let mut host = given(&parts.host)
        .or_else(|| env("PGHOST"))
        .unwrap_or_else(|| "localhost".to_owned());
    let port = match &parts.port {
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => env("PGPORT"),
    };
    let database = given(&parts.database).or_else(|| env("PGDATABASE"));
    let mut query = Vec::new();
    if host.starts_with('/') {
        query.push(format!("host={}", encode(&host, "/")));
        host = "localhost".to_owned();
    }
    if let Some(mode) = given(&parts.sslmode) {
        query.push(format!("sslmode={}", encode(&mode, "")));
    }
    let credentials = match (user, password) {
        (Some(user), Some(password)) => format!("{}:{}@", encode(&user, ""), encode(&password, "")),
        (Some(user), None) => format!("{}@", encode(&user, "")),
        (None, _) => String::new(),
    };
    let port = port.map(|p| format!(":{p}")).unwrap_or_default();
    let database = database.map(|d| encode(&d, "")).unwrap_or_default();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    Ok(format!(
        "postgres://{credentials}{host}{port}/{database}{query}"
    ))
}

/// `mysql://user:password@host:port/db`, a Unix socket as `?socket=`. MySQL's drivers read no
/// environment variable for these, so neither does this.
fn mysql_url(parts: &ConnectionParts) -> String {
    if let Some(url) = parts.url.as_deref().filter(|u| !u.is_empty()) {
        return url.to_owned();
    }
    let given = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
    let mut host = given(&parts.host).unwrap_or_else(|| "localhost".to_owned());
    let mut query = String::new();
    if host.starts_with('/') {
        query = format!("?socket={}", encode(&host, "/"));
        host = "localhost".to_owned();
    }
    let credentials = match (given(&parts.user), given(&parts.password)) {
        (Some(user), Some(password)) => format!("{}:{}@", encode(&user, ""), encode(&password, "")),
        (Some(user), None) => format!("{}@", encode(&user, "")),
        (None, _) => String::new(),
    };
    let port = match &parts.port {
        Some(serde_json::Value::Number(n)) => format!(":{n}"),
        Some(serde_json::Value::String(s)) if !s.is_empty() => format!(":{s}"),
        _ => String::new(),
    };
    let database = given(&parts.database)
        .map(|d| encode(&d, ""))
        .unwrap_or_default();
    format!("mysql://{credentials}{host}{port}/{database}{query}")
}

fn engine_memory(parts: &ConnectionParts) -> bool {
    [&parts.url, &parts.database]
        .into_iter()
        .flatten()
        .any(|text| text.contains("mode=memory"))
}

/// Percent-encoding of everything but unreserved characters and `keep`.
fn encode(text: &str, keep: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        let c = byte as char;
        if c.is_ascii_alphanumeric() || "-._~".contains(c) || keep.contains(c) {
            out.push(c);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

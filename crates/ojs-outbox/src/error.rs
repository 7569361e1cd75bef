//! One error model for the whole product. Every binding maps `ErrorCode` to its own exception
//! hierarchy; the code strings are stable and documented in `docs/errors.md`.

use std::fmt;

/// Stable error codes. Each says what the caller should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The job type breaks the OJS naming rule. Fix the call.
    InvalidJobType,
    /// `options.queue` breaks the OJS queue rule. Fix the call.
    InvalidQueue,
    /// `args` is not a JSON array (or not JSON at all). Fix the call.
    InvalidArgs,
    /// An option is unknown, of the wrong type or out of range. Fix the call.
    InvalidOptions,
    /// `meta` or the request context is not a JSON object of the expected shape. Fix the call.
    InvalidMeta,
    /// The job's wire form exceeds 1 MiB; no OJS backend would accept it. Store the payload elsewhere.
    PayloadTooLarge,
    /// The configuration is invalid; the message names the field. Fix the settings.
    InvalidConfig,
    /// The database URL cannot be used. Fix the URL.
    InvalidDatabaseUrl,
    /// The outbox table does not exist. Run the migration (`ojs-relay migrate`).
    OutboxTableMissing,
    /// A database operation failed. Usually transient; the app's transaction decides.
    Database,
    /// The OJS backend could not be reached or answered 5xx. Retry later.
    BackendUnavailable,
    /// The OJS backend refused the job (4xx); the message carries its error code.
    BackendRejected,
    /// The operation needs an open transaction and there is none.
    NoTransaction,
    /// The relay has been shut down; start a new one.
    RelayShutDown,
    /// `options.unique` (`on_conflict` `reject`): a job with the same unique key is staged and
    /// not yet sent. The message and `existing_job_id` name it. Handle it or enqueue without.
    Duplicate,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::InvalidJobType,
        ErrorCode::InvalidQueue,
        ErrorCode::InvalidArgs,
        ErrorCode::InvalidOptions,
        ErrorCode::InvalidMeta,
        ErrorCode::PayloadTooLarge,
        ErrorCode::InvalidConfig,
        ErrorCode::InvalidDatabaseUrl,
        ErrorCode::OutboxTableMissing,
        ErrorCode::Database,
        ErrorCode::BackendUnavailable,
        ErrorCode::BackendRejected,
        ErrorCode::NoTransaction,
        ErrorCode::RelayShutDown,
        ErrorCode::Duplicate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJobType => "INVALID_JOB_TYPE",
            ErrorCode::InvalidQueue => "INVALID_QUEUE",
            ErrorCode::InvalidArgs => "INVALID_ARGS",
            ErrorCode::InvalidOptions => "INVALID_OPTIONS",
            ErrorCode::InvalidMeta => "INVALID_META",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::InvalidDatabaseUrl => "INVALID_DATABASE_URL",
            ErrorCode::OutboxTableMissing => "OUTBOX_TABLE_MISSING",
            ErrorCode::Database => "DATABASE",
            ErrorCode::BackendUnavailable => "BACKEND_UNAVAILABLE",
            ErrorCode::BackendRejected => "BACKEND_REJECTED",
            ErrorCode::NoTransaction => "NO_TRANSACTION",
            ErrorCode::RelayShutDown => "RELAY_SHUT_DOWN",
            ErrorCode::Duplicate => "DUPLICATE",
        }
    }

    /// Whether retrying the same call unchanged may succeed.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCode::Database | ErrorCode::BackendUnavailable)
    }

    /// The class family a binding raises this code as (docs/errors.md, *Classes*): every
    /// binding has one class per family and one per code below it, so the same code is the
    /// same class in every language.
    pub fn family(self) -> ErrorFamily {
        match self {
            ErrorCode::InvalidJobType
            | ErrorCode::InvalidQueue
            | ErrorCode::InvalidArgs
            | ErrorCode::InvalidOptions
            | ErrorCode::InvalidMeta
            | ErrorCode::PayloadTooLarge => ErrorFamily::Validation,
            ErrorCode::InvalidConfig | ErrorCode::InvalidDatabaseUrl => ErrorFamily::Configuration,
            ErrorCode::OutboxTableMissing | ErrorCode::Database => ErrorFamily::Database,
            ErrorCode::BackendUnavailable | ErrorCode::BackendRejected => ErrorFamily::Backend,
            ErrorCode::NoTransaction => ErrorFamily::Transaction,
            ErrorCode::RelayShutDown => ErrorFamily::Relay,
            ErrorCode::Duplicate => ErrorFamily::Duplicate,
        }
    }

    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| code.as_str() == text)
    }
}

/// The class families of docs/errors.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorFamily {
    /// The job or its context is invalid (`ValidationError`).
    Validation,
    /// The settings are invalid (`ConfigurationError`).
    Configuration,
    /// The database failed or lacks the outbox table (`DatabaseError`).
    Database,
    /// The OJS backend failed or refused (`BackendError`).
    Backend,
    /// There is no open transaction (`NoTransaction`, a family of one code).
    Transaction,
    /// The relay was shut down (`RelayShutDown`, a family of one code).
    Relay,
    /// A unique job conflicts with one the outbox holds (`DuplicateJob`, a family of one code).
    Duplicate,
}

impl ErrorFamily {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorFamily::Validation => "validation",
            ErrorFamily::Configuration => "configuration",
            ErrorFamily::Database => "database",
            ErrorFamily::Backend => "backend",
            ErrorFamily::Transaction => "transaction",
            ErrorFamily::Relay => "relay",
            ErrorFamily::Duplicate => "duplicate",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error with a stable code, the field it concerns (when there is one) and a message that
/// names that field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub field: Option<String>,
    pub message: String,
    /// `DUPLICATE`: the id of the job that holds the unique key.
    pub existing_job_id: Option<String>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            field: None,
            message: message.into(),
            existing_job_id: None,
        }
    }

    pub fn field(code: ErrorCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let message = format!("{field}: {}", message.into());
        Error {
            code,
            field: Some(field),
            message,
            existing_job_id: None,
        }
    }

    /// A failed outbox statement. A missing table becomes `OUTBOX_TABLE_MISSING`, which says
    /// what to run (see `database_error_code`).
    pub fn database(err: sqlx::Error) -> Self {
        let code = match &err {
            sqlx::Error::Database(db) => database_error_code(db.code().as_deref(), db.message()),
            _ => ErrorCode::Database,
        };
        // The server's own words and SQLSTATE, without sqlx's wrapping or PostgreSQL's
        // position in its own source code ("at line 1188"), which name nothing of the user's.
        let text = match &err {
            sqlx::Error::Database(db) => match db.code() {
                Some(state) => format!("{} (SQLSTATE {state})", db.message()),
                None => db.message().to_owned(),
            },
            _ => err.to_string(),
        };
        if code == ErrorCode::OutboxTableMissing {
            return Error::new(
                code,
                format!("the outbox table does not exist (run `ojs-relay migrate`): {text}"),
            );
        }
        Error::new(code, text)
    }
}

/// PostgreSQL SQLSTATE 42P01 (undefined table, any message language), MySQL's 42S02 (or,
/// from a driver that gives no SQLSTATE, its "Table '...' doesn't exist") or SQLite's "no such
/// table" mean a missing outbox table; anything else is `DATABASE`.
pub fn database_error_code(sqlstate: Option<&str>, message: &str) -> ErrorCode {
    if matches!(sqlstate, Some("42P01" | "42S02"))
        || message.starts_with("no such table")
        || (message.starts_with("Table '") && message.ends_with("' doesn't exist"))
    {
        ErrorCode::OutboxTableMissing
    } else {
        ErrorCode::Database
    }
}

impl Error {
    /// The error's one encoding across the FFI line: `{"code", "field", "message",
    /// "retryable", "family"}` (`field` null when there is none). Every binding decodes this
    /// text into its class for `code` (docs/errors.md).
    pub fn to_json(&self) -> String {
        let mut json = serde_json::json!({
            "code": self.code.as_str(),
            "field": self.field,
            "message": self.message,
            "retryable": self.code.retryable(),
            "family": self.code.family().as_str(),
        });
        if let Some(id) = &self.existing_job_id {
            json["existing_job_id"] = serde_json::Value::String(id.clone());
        }
        json.to_string()
    }
}

/// Every code with its family and whether it is retryable, as JSON
/// `[{"code", "family", "retryable"}]`: what a binding's tests check its classes against.
pub fn codes_json() -> String {
    let codes: Vec<serde_json::Value> = ErrorCode::ALL
        .iter()
        .map(|code| {
            serde_json::json!({
                "code": code.as_str(),
                "family": code.family().as_str(),
                "retryable": code.retryable(),
            })
        })
        .collect();
    serde_json::Value::Array(codes).to_string()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Error::database(err)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoding_carries_code_field_message_retryable_and_family() {
        let error = Error::field(ErrorCode::InvalidQueue, "options.queue", "bad");
        let value: serde_json::Value = serde_json::from_str(&error.to_json()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"code": "INVALID_QUEUE", "field": "options.queue",
                "message": "options.queue: bad", "retryable": false, "family": "validation"})
        );
        let value: serde_json::Value =
            serde_json::from_str(&Error::new(ErrorCode::Database, "x").to_json()).unwrap();
        assert_eq!(value["field"], serde_json::Value::Null);
        assert_eq!(value["retryable"], true);
    }

    #[test]
    fn every_code_parses_back_and_has_a_family() {
        let listed: Vec<serde_json::Value> = serde_json::from_str(&codes_json()).unwrap();
        assert_eq!(listed.len(), ErrorCode::ALL.len());
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(
            ErrorCode::OutboxTableMissing.family(),
            ErrorFamily::Database
        );
    }
}

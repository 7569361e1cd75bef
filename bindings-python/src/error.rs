//! The core's `Error` crossing into Python: one exception type whose args are
//! `(code, field, message, retryable)`, all taken from the core (`docs/errors.md`).

use ojs_outbox::{Error, ErrorCode};
use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::pyfunction;

create_exception!(
    _native,
    NativeError,
    PyException,
    "A core error: args are (code, field, message, retryable)."
);

pub fn to_py(error: Error) -> PyErr {
    NativeError::new_err((
        error.code.as_str(),
        error.field,
        error.message,
        error.code.retryable(),
    ))
}

/// Every code with its retryable flag, so the Python layer names its classes without restating
/// which codes are retryable.
pub fn all_codes() -> Vec<(&'static str, bool)> {
    ErrorCode::ALL
        .iter()
        .map(|code| (code.as_str(), code.retryable()))
        .collect()
}

/// The core's code for a failure of Django's own cursor, from the driver's SQLSTATE
/// (PostgreSQL) and message: a missing outbox table is `OUTBOX_TABLE_MISSING`, as in the core.
#[pyfunction]
#[pyo3(signature = (sqlstate, message))]
pub fn database_error_code(sqlstate: Option<&str>, message: &str) -> &'static str {
    ojs_bridge::database_error_code(sqlstate, message).as_str()
}

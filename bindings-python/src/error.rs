//! The core's `Error` crossing into Python in its one encoding (`Error::to_json`): one
//! exception type, `NativeError`, whose only argument is that JSON text. The Python package
//! decodes it into the class of its code (`errors.py`, docs/errors.md).

use ojs_bridge::Error;
use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::pyfunction;

create_exception!(
    _native,
    NativeError,
    PyException,
    "A core error: args[0] is its JSON text {\"code\", \"field\", \"message\", \"retryable\", \"family\", \"existing_job_id\"?}."
);

pub fn to_py(error: Error) -> PyErr {
    NativeError::new_err(error.to_json())
}

/// Every code with its family and retryable flag, as JSON (`error::codes_json`): what the
/// package's tests check its classes against.
#[pyfunction]
pub fn codes_json() -> String {
    ojs_bridge::codes_json()
}

/// The error, as JSON text, for a failure of Django's own cursor: its code from the driver's
/// SQLSTATE (PostgreSQL) and message by the core's rule (a missing outbox table is
/// `OUTBOX_TABLE_MISSING`, anything else `DATABASE`), with `message`.
#[pyfunction]
#[pyo3(signature = (sqlstate, driver_message, message))]
pub fn database_error(sqlstate: Option<&str>, driver_message: &str, message: String) -> String {
    let code = ojs_bridge::database_error_code(sqlstate, driver_message);
    Error::new(code, message).to_json()
}

/// The error, as JSON text, for a value that cannot become JSON: the code of its `part` is the
/// core's (`bridge::unencodable`); `path` is where the value is, `why` what is wrong with it.
#[pyfunction]
pub fn unencodable(part: &str, path: &str, why: &str) -> String {
    ojs_bridge::unencodable(part, path, why).to_json()
}

/// The error, as JSON text, for a setting or option `key` that is none of `accepted`: the
/// core's `INVALID_CONFIG`, naming the accepted spelling when `key` is a near miss of one
/// (`bridge::unknown_option_error`).
#[pyfunction]
pub fn unknown_option(key: &str, accepted: Vec<String>) -> String {
    ojs_bridge::unknown_option_error(key, &accepted).to_json()
}

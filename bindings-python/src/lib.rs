//! `ojs_adapter_django._native`: the core's bridge (`ojs_bridge::Bridge`) as a Python
//! extension module. This crate only converts types: text, integers and flat tuples cross, each
//! in the bridge's one encoding (`crates/ojs-bridge`, its crate doc), and the core's `Error` as
//! one exception (`NativeError`) carrying `Error::to_json`. The Python package decodes them.
//! Every call that may wait on the database, the backend or the relay releases the GIL.

mod error;
mod events;
mod facade;
mod worker;

use pyo3::prelude::*;

/// The relay's database URL from Django's connection settings (`db_url::ConnectionParts` as
/// JSON), by the core's one rule.
#[pyfunction]
fn database_url_from_parts(parts_json: &str) -> PyResult<String> {
    ojs_bridge::database_url_from_parts(parts_json).map_err(error::to_py)
}

/// The HTTP request headers the middleware passes as `{"headers": {...}}`, lowercase.
#[pyfunction]
fn context_header_names() -> Vec<String> {
    ojs_bridge::context_header_names()
}

/// From now on SIGINT and SIGTERM stop `Bridge.run_relay_until_signal` gracefully (also when
/// they arrive before it runs) instead of killing the process; `manage.py ojs_relay` calls it
/// first thing. Process-wide and idempotent; a handler installed before (Python's SIGINT
/// handler) still runs.
#[pyfunction]
fn arm_stop_signals() -> PyResult<()> {
    ojs_bridge::arm_stop_signals().map_err(error::to_py)
}

/// Turns the relay's log feed on for this process (`bridge::enable_log_feed`): from now on the
/// relay queues its pause, resume, dead-letter, refusal and failure records for
/// `drain_log_feed`. Idempotent.
#[pyfunction]
fn enable_log_feed() {
    ojs_bridge::enable_log_feed();
}

/// The relay log records queued since the last call, oldest first, as
/// `(level, message, job_id or None, table)` tuples (`level`: "info", "warning" or "error").
/// Never blocks on I/O.
#[pyfunction]
fn drain_log_feed() -> Vec<(String, String, Option<String>, String)> {
    ojs_bridge::drain_log_feed()
        .into_iter()
        .map(|record| (record.level, record.message, record.job_id, record.table))
        .collect()
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<facade::Bridge>()?;
    module.add_class::<facade::RelayCommand>()?;
    module.add_function(wrap_pyfunction!(facade::relay_exit_code, module)?)?;
    module.add_class::<events::RelayFrames>()?;
    module.add_class::<events::EventFeed>()?;
    module.add_class::<worker::Worker>()?;
    module.add("NativeError", module.py().get_type::<error::NativeError>())?;
    module.add_function(wrap_pyfunction!(error::codes_json, module)?)?;
    module.add_function(wrap_pyfunction!(error::database_error, module)?)?;
    module.add_function(wrap_pyfunction!(error::unencodable, module)?)?;
    module.add_function(wrap_pyfunction!(error::unknown_option, module)?)?;
    module.add_function(wrap_pyfunction!(database_url_from_parts, module)?)?;
    module.add_function(wrap_pyfunction!(context_header_names, module)?)?;
    module.add_function(wrap_pyfunction!(arm_stop_signals, module)?)?;
    module.add_function(wrap_pyfunction!(enable_log_feed, module)?)?;
    module.add_function(wrap_pyfunction!(drain_log_feed, module)?)?;
    Ok(())
}

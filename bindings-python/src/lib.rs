//! `ojs_adapter_django._native`: the core's bridge (`ojs_bridge::Bridge`) as a Python
//! extension module. This crate only converts types: strings and lists in, strings, lists and
//! tuples out, and the core's `Error` as one exception (`NativeError`) carrying its code, field,
//! message and retryable flag. The Python package maps codes to its `OJSError` classes.
//! Every call that may wait on the database, the backend or the relay releases the GIL.

mod adapter;
mod error;

use pyo3::prelude::*;

/// From now on SIGINT and SIGTERM stop `Adapter.run_relay_until_signal` gracefully (also when
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
    module.add_class::<adapter::Adapter>()?;
    module.add("NativeError", module.py().get_type::<error::NativeError>())?;
    module.add("ERROR_CODES", error::all_codes())?;
    module.add_function(wrap_pyfunction!(error::database_error_code, module)?)?;
    module.add_function(wrap_pyfunction!(arm_stop_signals, module)?)?;
    module.add_function(wrap_pyfunction!(enable_log_feed, module)?)?;
    module.add_function(wrap_pyfunction!(drain_log_feed, module)?)?;
    Ok(())
}

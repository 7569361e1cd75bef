//! `ojs_adapter_django._native`: the core's bridge (`ojs_outbox::bridge::Adapter`) as a Python
//! extension module. This crate only converts types: strings and lists in, strings, lists and
//! tuples out, and the core's `Error` as one exception (`NativeError`) carrying its code, field,
//! message and retryable flag. The Python package maps codes to its `OJSError` classes.
//! Every call that may wait on the database, the backend or the relay releases the GIL.

mod adapter;
mod error;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<adapter::Adapter>()?;
    module.add("NativeError", module.py().get_type::<error::NativeError>())?;
    module.add("ERROR_CODES", error::all_codes())?;
    module.add_function(wrap_pyfunction!(error::database_error_code, module)?)?;
    Ok(())
}

//! The event stream across the FFI line (issue 15): `RelayFrames` (the in-process relay's
//! events as SSE frames, what the Django mount serves) and `EventFeed` (an SDK's client of any
//! OJS event stream). Both wait in the core for at most a timeout with the GIL released, so a
//! Python thread (or an asyncio executor thread) can poll them; nothing calls back into Python.

use ojs_bridge::events;
use pyo3::prelude::*;

use crate::error::to_py;

/// One subscriber of this process's relay events (`Bridge.relay_events`).
#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct RelayFrames {
    pub(crate) inner: events::RelayFrames,
}

#[pymethods]
impl RelayFrames {
    /// Waits up to `timeout_ms` for the next SSE frame: its text, `""` when none came in time,
    /// `None` at the end (the relay stopped, or the subscriber was cut off after its overflow
    /// event).
    fn next(&self, py: Python<'_>, timeout_ms: u64) -> Option<String> {
        py.detach(|| self.inner.next(timeout_ms).into_option())
    }
}

/// An SDK's subscription to an OJS event stream (`Bridge.subscribe_events`): reconnects and
/// resumes from the last event by itself, in the core.
#[pyclass(frozen, module = "ojs_adapter_django._native")]
pub struct EventFeed {
    pub(crate) inner: events::EventFeed,
}

#[pymethods]
impl EventFeed {
    /// Waits up to `timeout_ms` for the next event: its CloudEvents JSON text, `""` when none
    /// came in time, `None` once closed. A refusal by the server raises `NativeError`.
    fn next(&self, py: Python<'_>, timeout_ms: u64) -> PyResult<Option<String>> {
        py.detach(|| self.inner.next(timeout_ms)).map_err(to_py)
    }

    /// Ends the subscription: its connection is closed and `next` answers `None` from now on.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close())
    }
}

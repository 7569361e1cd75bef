//! The devserver's shared state: the jobs and their indexes (`store.rs`), the event hub, the
//! start time. Every request handler (`http.rs`, `worker_api.rs`, `worker.rs`) takes it.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::events::EventHub;
use crate::store::State;

/// Shared server state. Lock order: `state`, then the event hub's lock (events are published
/// while the change that makes them holds `state`).
pub(crate) struct App {
    state: Mutex<State>,
    pub events: EventHub,
    pub(crate) started: Instant,
}

impl App {
    pub fn new(batch_enqueue: bool) -> App {
        App {
            state: Mutex::new(State::new(batch_enqueue)),
            events: EventHub::new(),
            started: Instant::now(),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Back to the start configuration (and no kept events); the old jobs are freed outside
    /// the lock. Open event streams stay open.
    pub fn reset(&self) {
        let old = {
            let mut state = self.state();
            let fresh = state.fresh();
            self.events.clear_history();
            std::mem::replace(&mut *state, fresh)
        };
        drop(old);
    }

    pub fn received_json(&self) -> Vec<u8> {
        let state = self.state();
        let mut out = Vec::with_capacity(256 + state.stats().jobs as usize * 200);
        state.write_received(&mut out);
        out
    }
}

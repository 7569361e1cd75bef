//! Pausing while the backend cannot take jobs: how long (backoff, `Retry-After`, the one-row
//! probe of an outage), what is logged and evented once per pause, and the resume.

use std::time::Duration;

use tokio::time::Instant;

use super::{Engine, OUTAGE_PROBE_MAX, seconds};
use crate::backoff;
use crate::classify::Outcome;
use crate::log_feed::Level;

/// What paused the relay, as logged: an outage (no answer, 502..504, backpressure) or a
/// refusal of the relay itself (401/403/404/405).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trouble {
    Outage,
    Refused,
}

impl Engine {
    pub(super) fn backend_ok(&mut self) {
        if self.announced.take().is_some() {
            let paused = self
                .paused_since
                .take()
                .map_or(Duration::ZERO, |since| since.elapsed());
            self.log(
                Level::Info,
                None,
                format!(
                    "outbox relay: the OJS backend accepts jobs again; resuming after {} paused",
                    seconds(paused)
                ),
            );
            self.relay_event(
                "ojs.relay.resumed",
                serde_json::json!({"paused_ms": paused.as_millis() as u64}),
            );
        }
        self.consecutive_pauses = 0;
        self.probe = false;
        self.counters.state.lock().expect("metrics lock").healthy = Some(true);
    }

    pub(super) fn record_error(&self, error: String, backend_unhealthy: bool) {
        let mut state = self.counters.state.lock().expect("metrics lock");
        if backend_unhealthy {
            state.healthy = Some(false);
        }
        state.last_error = Some(error);
    }

    /// Stops sending for a while: the backend cannot take anything now. No attempt is consumed.
    /// An outage or backpressure pause never grows past [`OUTAGE_PROBE_MAX`] (or the backend's
    /// `Retry-After`, taken as given), and what follows it is a one-row probe, so the relay
    /// resumes within about a second of the backend's recovery however long the outage lasted.
    pub(super) fn pause_for(&mut self, outcome: &Outcome) {
        self.consecutive_pauses += 1;
        let relay = &self.config.relay;
        let backoff = backoff::jittered(
            self.consecutive_pauses,
            relay.initial_backoff,
            relay.max_backoff,
        );
        let probe_every = backoff::jittered(
            self.consecutive_pauses,
            relay.initial_backoff.min(OUTAGE_PROBE_MAX),
            relay.max_backoff.min(OUTAGE_PROBE_MAX),
        );
        let (delay, reason, trouble) = match outcome {
            Outcome::Unavailable {
                reason,
                retry_after,
            } => {
                self.probe = true;
                (retry_after.unwrap_or(probe_every), reason, Trouble::Outage)
            }
            Outcome::Backpressure {
                reason,
                retry_after,
            } => {
                self.probe = true;
                (*retry_after, reason, Trouble::Outage)
            }
            // A refusal (credentials, URL) needs a person: back off fully, loudly.
            Outcome::Misconfigured { reason } => (backoff, reason, Trouble::Refused),
            _ => (backoff, &String::new(), Trouble::Outage),
        };
        // Once per pause: the probes that follow are not news until one is answered (or the
        // trouble changes kind: an outage that turns into a refusal needs a person).
        if self.announced == Some(trouble) {
            tracing::debug!(%reason, delay_ms = delay.as_millis() as u64, "outbox relay: still paused");
        } else {
            self.announced = Some(trouble);
            self.paused_since.get_or_insert_with(Instant::now);
            let message = match trouble {
                Trouble::Outage => format!(
                    "outbox relay: pausing: the OJS backend cannot take jobs now ({reason}); rows stay pending and are sent once it answers (next try in {})",
                    seconds(delay)
                ),
                Trouble::Refused => format!(
                    "outbox relay: the OJS backend refuses this relay ({reason}); check ojs_url and auth_token; pausing, rows stay pending (next try in {})",
                    seconds(delay)
                ),
            };
            let level = match trouble {
                Trouble::Outage => Level::Warning,
                Trouble::Refused => Level::Error,
            };
            self.log(level, None, message);
            self.relay_event(
                "ojs.relay.paused",
                serde_json::json!({
                    "reason": reason,
                    "refused": trouble == Trouble::Refused,
                    "retry_in_ms": delay.as_millis() as u64,
                }),
            );
        }
        self.record_error(reason.clone(), true);
        self.pause(delay);
    }

    pub(super) fn pause(&mut self, delay: Duration) {
        let until = Instant::now() + delay;
        self.pause_until = Some(self.pause_until.map_or(until, |current| current.max(until)));
    }
}

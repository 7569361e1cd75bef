//! What the relay tells: a settled round's counters, its jobs' events (CloudEvents, in causal
//! order per row), the staging-to-delivery lag and one error record per dead letter; and the
//! relay's own events (paused, resumed), kept for the event log until no settlement runs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Engine;
use super::send::top_level_string;
use crate::events::{Event, now_ms};
use crate::log_feed::Level;
use crate::store::{ClaimedRow, RowStatus, Settlement};

impl Engine {
    pub(super) fn count_settled(&self, settlements: &[Settlement]) {
        let count = |wanted: fn(&Settlement) -> bool| {
            settlements.iter().filter(|s| wanted(s)).count() as u64
        };
        let counters = &self.counters;
        let rejected = count(|s| s.rejected.is_some());
        counters
            .unique_rejected
            .fetch_add(rejected, Ordering::Relaxed);
        counters.sent.fetch_add(
            count(|s| s.status == Some(RowStatus::Sent)) - rejected,
            Ordering::Relaxed,
        );
        counters.dead.fetch_add(
            count(|s| s.status == Some(RowStatus::Dead)),
            Ordering::Relaxed,
        );
        // A failed attempt, or a deferral (no status change, a retry time).
        let retried = count(|s| {
            s.status == Some(RowStatus::Failed) || (s.status.is_none() && s.retry_in.is_some())
        });
        counters.retried.fetch_add(retried, Ordering::Relaxed);
    }

    /// The job events of one settled claim, per row in causal order: `job.enqueued`;
    /// `job.failed` then `job.retrying`; (`job.failed` when an attempt was used, then)
    /// `job.dead_lettered`. Releases and deferrals (no attempt, no decision) make none.
    /// The events of a round's settlements, in order.
    pub(super) fn job_events(&self, settled: &[(&ClaimedRow, &Settlement)]) -> Vec<Event> {
        use crate::events::EventData;
        let mut events = Vec::new();
        for (row, settlement) in settled {
            // The number of the attempt this outcome belongs to (a 2xx uses none).
            let sent = settlement.status == Some(RowStatus::Sent);
            let attempt = row.attempts + i32::from(settlement.consumed_attempt || sent);
            let queue = top_level_string(&row.options_json, "queue");
            let queue = queue.as_deref().unwrap_or("default");
            let tenant = top_level_string(&row.meta_json, "tenant_id");
            let existing_job_id = settlement
                .rejected
                .as_ref()
                .and_then(|r| r.existing_job_id.clone());
            let mut event =
                |kind: &str, error: Option<String>, next: Option<i64>, dedupe: Option<bool>| {
                    let data = EventData::Job {
                        job_type: row.job_type.clone(),
                        attempt,
                        error,
                        next_attempt_at_ms: next,
                        deduplicated: dedupe,
                        existing_job_id: existing_job_id.clone(),
                    };
                    events.push(self.events.make_job_event(
                        kind,
                        &row.job_id,
                        queue,
                        tenant.as_deref(),
                        data,
                    ))
                };
            let error = settlement.error.clone();
            if settlement.rejected.is_some() {
                // Not `job.enqueued`: this job id was not created.
                event("job.unique_rejected", error, None, None);
                continue;
            }
            match settlement.status {
                Some(RowStatus::Sent) => event("job.enqueued", None, None, Some(error.is_some())),
                Some(RowStatus::Failed) => {
                    event("job.failed", error, None, None);
                    let next =
                        now_ms() + settlement.retry_in.unwrap_or_default().as_millis() as i64;
                    event("job.retrying", None, Some(next), None);
                }
                Some(RowStatus::Dead) => {
                    if settlement.consumed_attempt {
                        event("job.failed", error.clone(), None, None);
                    }
                    event("job.dead_lettered", error, None, None);
                }
                _ => {}
            }
        }
        events
    }

    /// A relay event (`ojs.relay.paused`, `resumed`): sent live at once, or for the log kept
    /// until the next settlement (which writes it ahead of its jobs' events, in order) or until
    /// the relay is idle.
    pub(super) fn relay_event(&mut self, kind: &str, data: serde_json::Value) {
        if !self.events.active() {
            return;
        }
        let event = self.events.make_relay_event(kind, None, data);
        if self.events.log().is_some() {
            self.relay_events.push(event);
        } else {
            self.events.send_live(event);
        }
    }

    /// Writes the relay events kept for the log, once no settlement is running.
    pub(super) async fn flush_relay_events(&mut self) {
        if self.relay_events.is_empty() || self.settling.is_some() {
            return;
        }
        if self.event_log_failed {
            self.relay_events.clear();
            return;
        }
        let events = std::mem::take(&mut self.relay_events);
        if let Err(error) = self.events.publish_all(events).await {
            tracing::debug!(%error, "outbox relay: relay events were not logged");
        }
    }

    /// Staging to delivery, per row the backend accepted (the job id's UUIDv7 time).
    pub(super) fn record_lag(&self, settled: &[(&ClaimedRow, &Settlement)]) {
        let now = now_ms();
        for (row, settlement) in settled {
            if settlement.status != Some(RowStatus::Sent) || settlement.rejected.is_some() {
                continue;
            }
            if let Some(staged) = crate::id::staged_at_ms(&row.job_id) {
                let ms = (now - staged).max(0) as u64;
                self.counters.delivery_lag.record(Duration::from_millis(ms));
            }
        }
    }

    /// One error record per row this claim made `dead`, with its job id, type and reason.
    pub(super) fn log_dead_letters(&self, settled: &[(&ClaimedRow, &Settlement)]) {
        for (row, settlement) in settled {
            if settlement.status != Some(RowStatus::Dead) {
                continue;
            }
            let reason = settlement.error.as_deref().unwrap_or("no reason given");
            self.log(
                Level::Error,
                Some(&row.job_id),
                format!(
                    "outbox relay: job {} ({}) is dead and will not be sent again: {reason}; it stays in table {} until replayed or purged (dead replay / dead purge)",
                    row.job_id, row.job_type, self.config.outbox.table_name
                ),
            );
        }
    }
}

//! What a relay counts and times, as plain data: the histograms it records into and the
//! snapshots it hands out (`Relay::metrics`, `Relay::histograms`). The relay writes them,
//! `prometheus.rs` renders them; neither knows the other's insides.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// Upper bounds of the histogram buckets, in seconds: 1 ms to 60 s.
pub const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0,
];

/// A histogram of durations, recorded with a few relaxed atomic additions.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is `+Inf`.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// A copy of a histogram's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub counts: Vec<u64>,
    pub sum_micros: u64,
}

impl Histogram {
    pub fn record(&self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(duration.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
}

/// Where a relay's time goes, per round phase and per job (`prometheus.rs` exposes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histograms {
    /// Staging (the job id's time) to the backend's acceptance, per delivered job.
    pub delivery_lag: HistogramSnapshot,
    /// One request to the backend (a job or a batch).
    pub send_duration: HistogramSnapshot,
    /// One claim statement (hot path or poller).
    pub claim_duration: HistogramSnapshot,
    /// One settle statement.
    pub settle_duration: HistogramSnapshot,
}

/// A snapshot of the relay's metrics. `pending` and `oldest_pending_age_ms` are refreshed from
/// the table every few seconds; the rest are exact counts since the relay started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metrics {
    pub pending: i64,
    pub in_flight: i64,
    pub sent: u64,
    pub retried: u64,
    pub dead: u64,
    pub deduplicated: u64,
    /// Jobs the backend refused because its unique policy (`on_conflict: reject`) found
    /// another job with the same key: settled `sent`, but this job id was not created.
    pub unique_rejected: u64,
    /// Committed job ids the hot queue took (`notify_committed`).
    pub hot_enqueued: u64,
    /// Committed job ids a full hot queue dropped (the poller sends their rows).
    pub hot_dropped: u64,
    /// Ids waiting in the hot queue now (at most `relay.hot_queue_capacity`).
    pub hot_queue_depth: i64,
    pub oldest_pending_age_ms: i64,
    /// `None` until the relay has heard from the backend.
    pub backend_healthy: Option<bool>,
    pub last_error: Option<String>,
}

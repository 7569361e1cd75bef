//! The relay's metrics in the OpenMetrics text format, written by the Prometheus project's
//! `prometheus-client` crate: counters, gauges and four histograms, named by Prometheus
//! conventions (`ojs_` prefix, base units, `_total` counters, `_seconds` durations), labelled
//! by outbox table. The figures of the table (`ojs_outbox_*`) are read from it and are the same
//! on every surface; the relay's own (`ojs_relay_*`) also carry `relay="<id>"`, so that the
//! relays of a table can be summed. The figures are snapshots (the relay's atomics, the
//! table's counts read at scrape time), so each exposition registers constant metrics in a
//! registry of its own. The core writes the text once; `ojs-relay run --listen` and each
//! framework's mount only serve it (`surface.rs`).

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};

use crate::relay_metrics::{BUCKETS, HistogramSnapshot, Histograms, Metrics};
use crate::store::OutboxStatus;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What one exposition shows about one relay.
pub struct Sample<'a> {
    pub table: &'a str,
    /// The relay's id (`ojs_relay_*` figures are labelled with it).
    pub relay: &'a str,
    pub metrics: &'a Metrics,
    pub histograms: &'a Histograms,
    /// Counts read from the table just now (readable only with a database).
    pub status: Option<&'a OutboxStatus>,
}

/// The exposition text ([`CONTENT_TYPE`]).
pub fn exposition(sample: &Sample<'_>) -> String {
    let mut registry = Registry::default();
    let table = registry.sub_registry_with_label(("table".into(), sample.table.to_owned().into()));
    let m = sample.metrics;
    let (pending, oldest_ms) = match sample.status {
        Some(s) => (s.pending + s.failed, s.oldest_pending_age_ms),
        None => (m.pending, m.oldest_pending_age_ms),
    };
    table_families(table, pending, oldest_ms, sample.status);
    let relay = table.sub_registry_with_label(("relay".into(), sample.relay.to_owned().into()));
    for (name, help, value) in [
        (
            "ojs_relay_jobs_sent",
            "Jobs the backend accepted (including deduplicated ones)",
            m.sent,
        ),
        (
            "ojs_relay_jobs_deduplicated",
            "Jobs the backend already held (unique policy or an earlier attempt)",
            m.deduplicated,
        ),
        (
            "ojs_relay_jobs_unique_rejected",
            "Jobs not created: the backend's unique policy (on_conflict: reject) holds another job with the same key",
            m.unique_rejected,
        ),
        (
            "ojs_relay_job_retries",
            "Failed attempts and deferrals that will be tried again",
            m.retried,
        ),
        (
            "ojs_relay_jobs_dead",
            "Jobs dead-lettered (refused for good, or out of attempts)",
            m.dead,
        ),
        (
            "ojs_relay_wakeups_queued",
            "Committed job ids the hot queue took (the relay claims those rows at once)",
            m.hot_enqueued,
        ),
        (
            "ojs_relay_wakeups_dropped",
            "Committed job ids dropped by a full hot queue (the poller sends those rows)",
            m.hot_dropped,
        ),
    ] {
        relay.register(name, help, ConstCounter::new(value));
    }
    relay.register(
        "ojs_relay_jobs_in_flight",
        "Rows this relay has claimed and not settled",
        ConstGauge::new(m.in_flight),
    );
    relay.register(
        "ojs_relay_wakeups_waiting",
        "Committed job ids in the hot queue, not yet taken by the relay (at most relay.hot_queue_capacity)",
        ConstGauge::new(m.hot_queue_depth),
    );
    let backend_up = match m.backend_healthy {
        Some(true) => 1,
        Some(false) => 0,
        None => -1,
    };
    relay.register(
        "ojs_relay_backend_up",
        "1 when the last answer of the OJS backend was usable, 0 when not, -1 before any",
        ConstGauge::new(backend_up),
    );
    let h = sample.histograms;
    for (name, help, snapshot) in [
        (
            "ojs_relay_delivery_lag",
            "Time from staging (just before COMMIT) to the backend accepting the job",
            &h.delivery_lag,
        ),
        (
            "ojs_relay_send_duration",
            "Duration of one request to the OJS backend (one job or one batch)",
            &h.send_duration,
        ),
        (
            "ojs_relay_claim_duration",
            "Duration of one claim statement (rows leased for sending)",
            &h.claim_duration,
        ),
        (
            "ojs_relay_settle_duration",
            "Duration of one settle statement (outcomes recorded, leases cleared)",
            &h.settle_duration,
        ),
    ] {
        relay.register_with_unit(name, help, Unit::Seconds, Snapshot(snapshot.clone()));
    }
    encode(&registry)
}

/// The exposition of a process with no relay: the table's figures alone, read just now.
pub fn table_exposition(table: &str, status: &OutboxStatus) -> String {
    let mut registry = Registry::default();
    let labelled = registry.sub_registry_with_label(("table".into(), table.to_owned().into()));
    let pending = status.pending + status.failed;
    table_families(
        labelled,
        pending,
        status.oldest_pending_age_ms,
        Some(status),
    );
    encode(&registry)
}

fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
    out
}

/// The table's figures (`ojs_outbox_*`): the same on every surface.
fn table_families(
    registry: &mut Registry,
    pending: i64,
    oldest_ms: i64,
    status: Option<&OutboxStatus>,
) {
    registry.register(
        "ojs_outbox_backlog_jobs",
        "Rows waiting to be sent (pending and failed)",
        ConstGauge::new(pending),
    );
    registry.register_with_unit(
        "ojs_outbox_oldest_pending_age",
        "Age of the oldest row waiting to be sent",
        Unit::Seconds,
        ConstGauge::new(oldest_ms.max(0) as f64 / 1000.0),
    );
    let Some(s) = status else {
        return;
    };
    let rows = Family::<Vec<(String, String)>, Gauge>::default();
    for (name, count) in [
        ("pending", s.pending),
        ("failed", s.failed),
        ("sent", s.sent),
        ("dead", s.dead),
    ] {
        rows.get_or_create(&vec![("status".into(), name.into())])
            .set(count);
    }
    registry.register("ojs_outbox_rows", "Outbox rows by status", rows);
    registry.register(
        "ojs_outbox_held_by_dead_jobs",
        "Rows waiting behind a dead row of their ordering key (replay or purge the dead row)",
        ConstGauge::new(s.held_by_dead),
    );
}

/// A histogram snapshot as a metric (the relay records into its own atomics; this only
/// encodes what was read).
#[derive(Debug)]
struct Snapshot(HistogramSnapshot);

impl EncodeMetric for Snapshot {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counts = &self.0.counts;
        let mut buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .enumerate()
            .map(|(i, bound)| (*bound, counts.get(i).copied().unwrap_or(0)))
            .collect();
        buckets.push((
            f64::INFINITY,
            counts.get(BUCKETS.len()).copied().unwrap_or(0),
        ));
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.0.sum_micros as f64 / 1_000_000.0;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::staged_at_ms;
    use crate::relay_metrics::Histogram;
    use std::time::Duration;

    #[test]
    fn buckets_are_cumulative_and_the_count_is_the_inf_bucket() {
        let h = Histogram::default();
        h.record(Duration::from_micros(500));
        h.record(Duration::from_millis(7));
        h.record(Duration::from_secs(120));
        let histograms = Histograms {
            delivery_lag: h.snapshot(),
            ..Histograms::default()
        };
        let text = exposition(&Sample {
            table: "t",
            relay: "r1",
            metrics: &Metrics::default(),
            histograms: &histograms,
            status: None,
        });
        assert!(text.contains(
            "ojs_relay_delivery_lag_seconds_bucket{table=\"t\",relay=\"r1\",le=\"0.001\"} 1\n"
        ));
        assert!(text.contains(
            "ojs_relay_delivery_lag_seconds_bucket{table=\"t\",relay=\"r1\",le=\"0.01\"} 2\n"
        ));
        assert!(text.contains(
            "ojs_relay_delivery_lag_seconds_bucket{table=\"t\",relay=\"r1\",le=\"+Inf\"} 3\n"
        ));
        assert!(
            text.contains("ojs_relay_delivery_lag_seconds_count{table=\"t\",relay=\"r1\"} 3\n")
        );
        assert!(text.contains("ojs_relay_backend_up{table=\"t\",relay=\"r1\"} -1\n"));
        assert!(
            text.contains("# TYPE ojs_relay_jobs_sent counter\n"),
            "{text}"
        );
        assert!(text.contains("ojs_relay_jobs_sent_total{table=\"t\",relay=\"r1\"} 0\n"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn the_tables_figures_stand_alone_and_labels_are_escaped() {
        let status = OutboxStatus {
            pending: 2,
            failed: 1,
            sent: 7,
            dead: 1,
            held_by_dead: 3,
            oldest_pending_age_ms: 1500,
            ..OutboxStatus::default()
        };
        let text = table_exposition("a\"b", &status);
        assert!(
            text.contains("ojs_outbox_backlog_jobs{table=\"a\\\"b\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("ojs_outbox_rows{table=\"a\\\"b\",status=\"sent\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("ojs_outbox_oldest_pending_age_seconds{table=\"a\\\"b\"} 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains("ojs_outbox_held_by_dead_jobs{table=\"a\\\"b\"} 3\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_job_id_carries_its_staging_time() {
        let before = crate::events::now_ms();
        let id = crate::id::new_job_id().to_string();
        let at = staged_at_ms(&id).unwrap();
        assert!((before..=before + 1000).contains(&at), "{at} vs {before}");
    }
}

//! The relay's metrics in the Prometheus text exposition format (version 0.0.4): counters,
//! gauges and two histograms, named by Prometheus conventions (`ojs_` prefix, base units,
//! `_total` counters, `_seconds` durations), labelled by outbox table. The figures of the table
//! (`ojs_outbox_*`) are read from it and are the same on every surface; the relay's own
//! (`ojs_relay_*`) also carry `relay="<id>"`, so that the relays of a table can be summed.
//! The core writes the text once; `ojs-relay run --listen` and each framework's mount only
//! serve it.

use std::fmt::Write;

use crate::relay_metrics::{BUCKETS, HistogramSnapshot, Histograms, Metrics};
use crate::store::OutboxStatus;

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

/// The exposition text (`Content-Type: text/plain; version=0.0.4`).
pub fn exposition(sample: &Sample<'_>) -> String {
    let mut out = String::new();
    let table = escape(sample.table);
    let relay = format!("{table}\",relay=\"{}", escape(sample.relay));
    let m = sample.metrics;
    // `ojs_relay_*`: this relay's; `ojs_outbox_*`: the table's.
    let mut family = |name: &str, kind: &str, help: &str, lines: &[(String, String)]| {
        write_family(&mut out, &relay, name, kind, help, lines)
    };
    let one = |value: String| vec![(String::new(), value)];
    family(
        "ojs_relay_jobs_sent_total",
        "counter",
        "Jobs the backend accepted (including deduplicated ones).",
        &one(m.sent.to_string()),
    );
    family(
        "ojs_relay_jobs_deduplicated_total",
        "counter",
        "Jobs the backend already held (unique policy or an earlier attempt).",
        &one(m.deduplicated.to_string()),
    );
    family(
        "ojs_relay_jobs_unique_rejected_total",
        "counter",
        "Jobs not created: the backend's unique policy (on_conflict: reject) holds another job with the same key.",
        &one(m.unique_rejected.to_string()),
    );
    family(
        "ojs_relay_job_retries_total",
        "counter",
        "Failed attempts and deferrals that will be tried again.",
        &one(m.retried.to_string()),
    );
    family(
        "ojs_relay_jobs_dead_total",
        "counter",
        "Jobs dead-lettered (refused for good, or out of attempts).",
        &one(m.dead.to_string()),
    );
    family(
        "ojs_relay_wakeups_dropped_total",
        "counter",
        "Committed job ids dropped by a full hot queue (the poller sends those rows).",
        &one(m.hot_dropped.to_string()),
    );
    family(
        "ojs_relay_jobs_in_flight",
        "gauge",
        "Rows this relay has claimed and not settled.",
        &one(m.in_flight.to_string()),
    );
    family(
        "ojs_relay_backend_up",
        "gauge",
        "1 when the last answer of the OJS backend was usable, 0 when not, -1 before any.",
        &one(match m.backend_healthy {
            Some(true) => "1".into(),
            Some(false) => "0".into(),
            None => "-1".into(),
        }),
    );
    let (pending, oldest_ms) = match sample.status {
        Some(s) => (s.pending + s.failed, s.oldest_pending_age_ms),
        None => (m.pending, m.oldest_pending_age_ms),
    };
    table_families(&mut out, &table, pending, oldest_ms, sample.status);
    let h = sample.histograms;
    for (name, help, snapshot) in [
        (
            "ojs_relay_delivery_lag_seconds",
            "Time from staging (just before COMMIT) to the backend accepting the job.",
            &h.delivery_lag,
        ),
        (
            "ojs_relay_send_duration_seconds",
            "Duration of one request to the OJS backend (one job or one batch).",
            &h.send_duration,
        ),
        (
            "ojs_relay_claim_duration_seconds",
            "Duration of one claim statement (rows leased for sending).",
            &h.claim_duration,
        ),
        (
            "ojs_relay_settle_duration_seconds",
            "Duration of one settle statement (outcomes recorded, leases cleared).",
            &h.settle_duration,
        ),
    ] {
        histogram(&mut out, &relay, name, help, snapshot);
    }
    out
}

/// The exposition of a process with no relay: the table's figures alone, read just now.
pub fn table_exposition(table: &str, status: &OutboxStatus) -> String {
    let mut out = String::new();
    table_families(
        &mut out,
        &escape(table),
        status.pending + status.failed,
        status.oldest_pending_age_ms,
        Some(status),
    );
    out
}

/// The table's figures (`ojs_outbox_*`): the same on every surface.
fn table_families(
    out: &mut String,
    table: &str,
    pending: i64,
    oldest_ms: i64,
    status: Option<&OutboxStatus>,
) {
    let one = |value: String| vec![(String::new(), value)];
    write_family(
        out,
        table,
        "ojs_outbox_backlog_jobs",
        "gauge",
        "Rows waiting to be sent (pending and failed).",
        &one(pending.to_string()),
    );
    write_family(
        out,
        table,
        "ojs_outbox_oldest_pending_age_seconds",
        "gauge",
        "Age of the oldest row waiting to be sent.",
        &one(seconds(oldest_ms.max(0) as u64 * 1000)),
    );
    if let Some(s) = status {
        write_family(
            out,
            table,
            "ojs_outbox_rows",
            "gauge",
            "Outbox rows by status.",
            &[
                (",status=\"pending\"".into(), s.pending.to_string()),
                (",status=\"failed\"".into(), s.failed.to_string()),
                (",status=\"sent\"".into(), s.sent.to_string()),
                (",status=\"dead\"".into(), s.dead.to_string()),
            ],
        );
        write_family(
            out,
            table,
            "ojs_outbox_held_by_dead_jobs",
            "gauge",
            "Rows waiting behind a dead row of their ordering key (replay or purge the dead row).",
            &one(s.held_by_dead.to_string()),
        );
    }
}

/// One metric family: its `# HELP` and `# TYPE` lines and a sample per line, labelled
/// `table="<labels>"` and what each line adds.
fn write_family(
    out: &mut String,
    labels: &str,
    name: &str,
    kind: &str,
    help: &str,
    lines: &[(String, String)],
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (more, value) in lines {
        let _ = writeln!(out, "{name}{{table=\"{labels}\"{more}}} {value}");
    }
}

fn histogram(out: &mut String, table: &str, name: &str, help: &str, h: &HistogramSnapshot) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (i, bound) in BUCKETS.iter().enumerate() {
        cumulative += h.counts.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{name}_bucket{{table=\"{table}\",le=\"{bound}\"}} {cumulative}"
        );
    }
    cumulative += h.counts.get(BUCKETS.len()).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "{name}_bucket{{table=\"{table}\",le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(
        out,
        "{name}_sum{{table=\"{table}\"}} {}",
        seconds(h.sum_micros)
    );
    let _ = writeln!(out, "{name}_count{{table=\"{table}\"}} {cumulative}");
}

fn seconds(micros: u64) -> String {
    format!("{}", micros as f64 / 1_000_000.0)
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
    }

    #[test]
    fn a_job_id_carries_its_staging_time() {
        let before = crate::events::now_ms();
        let id = crate::id::new_job_id().to_string();
        let at = staged_at_ms(&id).unwrap();
        assert!((before..=before + 1000).contains(&at), "{at} vs {before}");
    }
}

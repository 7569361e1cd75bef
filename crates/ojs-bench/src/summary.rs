//! `summary`: the targets of issues 31 and 16 as one table, from the JSON lines of one
//! `scripts/bench.sh` run (each run writes its own file). The drain's rows are the drain's own
//! verdicts; the others are judged here from the latency, faults and memory records. A target
//! whose benchmark did not run (`--quick` skips memory) says so. Missing a target is a
//! finding, not a failure: the exit status is 0 whenever the file can be read.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use crate::common::*;
use crate::latency::APP_P99_RATIO;

#[derive(Debug, Args)]
pub struct SummaryArgs {
    /// The JSON lines of one run (scripts/bench.sh: target/bench/<stamp>/results.jsonl).
    pub results: PathBuf,
    /// The busy-machine soak's results (`OJS_SOAK_BUSY=2 scripts/soak.sh`:
    /// target/soak/<stamp>/results.jsonl), for target 5.
    #[arg(long)]
    pub soak: Option<PathBuf>,
}

/// Issue 16's numbers for the hot path and the relay's memory; issue 31's for faults.
const HOT_RATE: f64 = 2000.0;
const HOT_P50_MS: f64 = 1.0;
const HOT_P99_MS: f64 = 5.0;
const RSS_MIB: f64 = 16.0;
/// Issue 31, target 6: a batch's faults cost O(N) job bodies, i.e. a bound per row that does
/// not grow with N (each refused row of the mix goes alone for its verdict: about 3 per row).
const BODIES_PER_ROW: f64 = 4.0;
/// Issue 31, target 5: beside busy loops, at most this share of ids dropped by the hot queue.
const BUSY_DROPPED_SHARE: f64 = 0.05;

pub fn run(args: SummaryArgs) -> BoxResult<()> {
    let text = std::fs::read_to_string(&args.results)
        .map_err(|e| err(format!("{}: {e}", args.results.display())))?;
    let mut records = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<Value>, _>>()?;
    if let Some(soak) = &args.soak {
        let text =
            std::fs::read_to_string(soak).map_err(|e| err(format!("{}: {e}", soak.display())))?;
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let mut record: Value = serde_json::from_str(line)?;
            record["bench"] = "soak".into();
            records.push(record);
        }
    }
    let rows = target_rows(&records);
    print_table(
        &format!(
            "targets of issues 31 and 16, one run ({}; ratio = ours / reference)",
            args.results.display()
        ),
        &["target", "ours", "reference", "ratio", "want", "met?"],
        &rows,
    );
    Ok(())
}

fn target_rows(records: &[Value]) -> Vec<Vec<String>> {
    let of = |bench: &'static str| records.iter().filter(move |r| r["bench"] == bench);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let drain_target = |prefix: &str, label: &str| -> Vec<String> {
        match of("drain_targets").find(|r| text(&r["target"]).starts_with(prefix)) {
            Some(r) => vec![
                format!("{label}: {}", text(&r["target"])),
                text(&r["ours"]),
                text(&r["reference"]),
                format!("{:.2}", r["ratio"].as_f64().unwrap_or(f64::NAN)),
                text(&r["want"]),
                verdict(r["met"].as_bool()),
            ],
            None => not_run(&format!("{label}: {prefix}"), "drain"),
        }
    };
    rows.push(drain_target("drain at the default settings", "31.1"));
    rows.push(drain_target("drain vs SQL floor, batch 500", "31.2"));

    let postgres_hot = of("latency")
        .find(|r| r["database"] == "PostgreSQL" && r["offered_rate"].as_f64() == Some(HOT_RATE));
    rows.push(match postgres_hot.filter(|r| r["peer_latency_ms"]["p50"].is_number()) {
        Some(r) => {
            let ours = r["separate_relay_latency_ms"]["p50"].as_f64().unwrap_or(f64::NAN);
            let theirs = r["peer_latency_ms"]["p50"].as_f64().unwrap_or(f64::NAN);
            vec![
                format!("31.3: separate relay commit -> delivered p50 vs graphile-worker add -> start p50, {HOT_RATE} /s"),
                format!("{ours:.2} ms"),
                format!("{theirs:.2} ms"),
                format!("{:.2}", ours / theirs),
                "<= 1.00".to_owned(),
                verdict(Some(ours <= theirs)),
            ]
        }
        None => not_run("31.3: separate relay p50 vs graphile-worker", "latency --rate 2000 --peer-latency graphile"),
    });
    for (database, rate) in [("PostgreSQL", HOT_RATE), ("SQLite", 500.0)] {
        let record = of("latency").find(|r| {
            r["database"] == database
                && r["offered_rate"].as_f64() == Some(rate)
                && r["transaction_p99_ratio_with_relay"].is_number()
        });
        let target = format!(
            "31.4: {database} application p99, relay running vs not (alternating turns), {rate:.0} commits/s"
        );
        rows.push(match record {
            Some(r) => {
                let ratio = r["transaction_p99_ratio_with_relay"]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                vec![
                    target,
                    format!("{} ms", r["transaction_p99_ms_with_relay"]),
                    format!("{} ms, no relay", r["transaction_p99_ms_without_relay"]),
                    format!("{ratio:.2}"),
                    format!("<= {APP_P99_RATIO:.2}"),
                    verdict(Some(ratio <= APP_P99_RATIO)),
                ]
            }
            None => not_run(&target, "latency"),
        });
    }
    let soaks: Vec<&Value> = of("soak").collect();
    if soaks.is_empty() {
        rows.push(not_run(
            "31.5: hot_dropped on a busy machine",
            "OJS_SOAK_BUSY=2 scripts/soak.sh",
        ));
    }
    for r in soaks {
        let share = r["hot_dropped_share"].as_f64().unwrap_or(f64::NAN);
        rows.push(vec![
            format!(
                "31.5: hot_dropped beside busy loops, {} ({:.0} tx/s, SQLite)",
                text(&r["binding"]),
                r["offered_tps"].as_f64().unwrap_or(f64::NAN)
            ),
            format!(
                "{:.2}% of {} jobs; commit -> received p99 {} ms; other CPU {} of {} s",
                100.0 * share,
                r["jobs_committed"],
                r["commit_to_received"]["p99_ms"],
                r["cpu_s"]["other"],
                r["cpu_s"]["machine_capacity"]
            ),
            "-".to_owned(),
            "-".to_owned(),
            format!("<= {:.0}%", 100.0 * BUSY_DROPPED_SHARE),
            verdict(Some(share <= BUSY_DROPPED_SHARE)),
        ]);
    }
    let faults: Vec<&Value> = of("faults").collect();
    if faults.is_empty() {
        rows.push(not_run("31.6: fault cost", "faults"));
    }
    for r in faults {
        let bodies = r["bodies_per_row"].as_f64().unwrap_or(f64::NAN);
        rows.push(vec![
            format!("31.6: fault cost, {} ({} rows, {} refused)", text(&r["scenario"]), r["rows"], r["refused_rows"]),
            format!(
                "{bodies:.2} bodies/row; {} batch + {} single requests, {} GETs; a row sent at most {}x",
                r["batch_requests"], r["single_requests"], r["get_requests"], r["most_sends_of_a_row"]
            ),
            // Before the relay's split.rs (docs/benchmarks.md, Fault cost).
            match r["scenario"].as_str() {
                Some("lost answer") => "before: 501.5 bodies/row",
                Some("mix") => "before: 19.6 bodies/row",
                _ => "-",
            }
            .to_owned(),
            "-".to_owned(),
            format!("<= {BODIES_PER_ROW} bodies/row"),
            verdict(Some(bodies <= BODIES_PER_ROW)),
        ]);
    }
    rows.push(capacity(records));

    // Issue 16's, still held.
    rows.push(drain_target("writes per delivered row, batch 500", "16"));
    match postgres_hot {
        Some(r) => {
            for (name, limit) in [("p50", HOT_P50_MS), ("p99", HOT_P99_MS)] {
                let ours = r["latency_ms"][name].as_f64().unwrap_or(f64::NAN);
                let floor = r["floor_ms"][name].as_f64();
                rows.push(vec![
                    format!("16: PostgreSQL commit -> delivered {name}, in process, {HOT_RATE} commits/s"),
                    format!("{ours:.2} ms"),
                    floor.map_or("-".to_owned(), |f| format!("{f:.2} ms, floor")),
                    floor.map_or("-".to_owned(), |f| format!("{:.2}", ours / f)),
                    format!("<= {limit} ms"),
                    verdict(Some(ours <= limit)),
                ]);
            }
        }
        None => rows.push(not_run(
            "16: PostgreSQL commit -> delivered, 2000 commits/s",
            "latency --rate 2000",
        )),
    }
    rows.push(match of("memory").next() {
        Some(r) => {
            let mib = r["peak_rss_mib"].as_f64().unwrap_or(f64::NAN);
            vec![
                format!("16: relay RSS, {}-row backlog", r["rows"]),
                format!("{mib:.1} MiB"),
                "-".to_owned(),
                "-".to_owned(),
                format!("<= {RSS_MIB} MiB"),
                verdict(Some(mib <= RSS_MIB)),
            ]
        }
        None => not_run(
            "16: relay RSS, 1M-row backlog",
            "memory (skipped by --quick)",
        ),
    });
    rows
}

/// Issue 31, target 7: CPU per 1,000 jobs of the default-settings drain (the capacity model of
/// docs/benchmarks.md) and the scale-out curve of the first drain (a drain fails outright when
/// the devserver got a row twice, so a recorded curve is also the duplicate check).
fn capacity(records: &[Value]) -> Vec<String> {
    let default_batch = ojs_outbox::Config::default().outbox.batch_size;
    let drains: Vec<&Value> = records
        .iter()
        .filter(|r| r["bench"] == "drain" && r["relay"] == "ojs_relay" && r["peer"].is_null())
        .collect();
    // The scale-out runs at the drain's largest batch size: the curve is at that one.
    let curve_batch = drains
        .iter()
        .find(|r| r["relays"].as_u64().is_some_and(|n| n > 1))
        .map_or(serde_json::json!(default_batch), |r| {
            r["batch_size"].clone()
        });
    let mut curve: Vec<(u64, f64)> = Vec::new();
    for r in &drains {
        if r["batch_size"] != curve_batch {
            continue;
        }
        if let Some(relays) = r["relays"]
            .as_u64()
            .filter(|n| !curve.iter().any(|(m, _)| m == n))
        {
            curve.push((relays, r["jobs_per_s"].as_f64().unwrap_or(f64::NAN)));
        }
    }
    let Some(main) = drains
        .iter()
        .find(|r| r["batch_size"] == default_batch && r["relays"] == 1)
    else {
        return not_run(
            "31.7: CPU per 1,000 jobs and scale-out",
            "drain --relays 1,2,4",
        );
    };
    let per_1k = |key: &str| {
        main["cpu"][key].as_f64().unwrap_or(f64::NAN) * 1e6
            / main["rows"].as_f64().unwrap_or(f64::NAN)
    };
    vec![
        format!(
            "31.7: capacity, batch {default_batch}: CPU ms per 1,000 jobs (relay / devserver / PostgreSQL); scale-out"
        ),
        format!(
            "{:.1} / {:.1} / {:.1} ms; scale-out at batch {curve_batch}: {} jobs/s",
            per_1k("relay_cpu_s"),
            per_1k("devserver_cpu_s"),
            per_1k("postgres_cpu_s"),
            curve
                .iter()
                .map(|(n, rate)| format!("{n} relay(s): {rate:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "-".to_owned(),
        "-".to_owned(),
        "recorded, 0 sent twice".to_owned(),
        if curve.len() > 1 {
            "recorded"
        } else {
            "1 relay only"
        }
        .to_owned(),
    ]
}

fn text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

fn verdict(met: Option<bool>) -> String {
    match met {
        Some(true) => "met".to_owned(),
        Some(false) => "NOT MET".to_owned(),
        None => "?".to_owned(),
    }
}

fn not_run(target: &str, bench: &str) -> Vec<String> {
    vec![
        target.to_owned(),
        format!("not in this run: {bench}"),
        "-".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
        "not run".to_owned(),
    ]
}

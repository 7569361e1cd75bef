//! `summary`: issue 16's targets as one table, from the JSON lines of one `scripts/bench.sh` run
//! (each run writes its own file). The drain's rows are the drain's own verdicts; the others
//! are judged here from the latency and memory records. A target whose benchmark did not run
//! (`--quick` skips memory) says so. Missing a target is a finding, not a failure: the exit
//! status is 0 whenever the file can be read.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use crate::common::*;

#[derive(Debug, Args)]
pub struct SummaryArgs {
    /// The JSON lines of one run (scripts/bench.sh: target/bench/<stamp>/results.jsonl).
    pub results: PathBuf,
}

/// Issue 16's numbers for the hot path and the relay's memory.
const SQLITE_APP_P99_RATIO: f64 = 1.5;
const HOT_RATE: f64 = 2000.0;
const HOT_P50_MS: f64 = 1.0;
const HOT_P99_MS: f64 = 5.0;
const RSS_MIB: f64 = 16.0;

pub fn run(args: SummaryArgs) -> BoxResult<()> {
    let text = std::fs::read_to_string(&args.results)
        .map_err(|e| err(format!("{}: {e}", args.results.display())))?;
    let records = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<Vec<Value>, _>>()?;
    let rows = target_rows(&records);
    print_table(
        &format!(
            "issue 16 targets, one run ({}; ratio = ours / reference)",
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

    // The drain's verdicts, each target once (a later drain of the run repeats some).
    for record in of("drain_targets") {
        let target = text(&record["target"]);
        if rows.iter().any(|row| row[0] == target) {
            continue;
        }
        // Issue 16 sets the floor target at batch 500 and asks for pg-boss only as context.
        let context = (target.starts_with("drain vs SQL floor") && !target.contains("batch 500,"))
            || target.contains("pg-boss");
        rows.push(vec![
            target,
            text(&record["ours"]),
            text(&record["reference"]),
            format!("{:.2}", record["ratio"].as_f64().unwrap_or(f64::NAN)),
            text(&record["want"]),
            if context {
                "(context)".to_owned()
            } else {
                verdict(record["met"].as_bool())
            },
        ]);
    }
    if rows.is_empty() {
        rows.push(not_run(
            "drain vs SQL floor, writes per row, peers",
            "drain",
        ));
    }

    let sqlite = of("latency")
        .find(|r| r["database"] == "SQLite" && r["transaction_p99_ratio_with_relay"].is_number());
    rows.push(match sqlite {
        Some(r) => {
            let ratio = r["transaction_p99_ratio_with_relay"]
                .as_f64()
                .unwrap_or(f64::NAN);
            vec![
                format!(
                    "SQLite application p99 while the relay runs, {:.0} commits/s",
                    r["offered_rate"].as_f64().unwrap_or(f64::NAN)
                ),
                format!("{} ms", r["commit_ms"]["p99"]),
                format!("{} ms, no relay", r["transaction_p99_ms_without_relay"]),
                format!("{ratio:.2}"),
                format!("<= {SQLITE_APP_P99_RATIO:.2}"),
                verdict(Some(ratio <= SQLITE_APP_P99_RATIO)),
            ]
        }
        None => not_run(
            "SQLite application p99 while the relay runs",
            "latency (SQLite)",
        ),
    });

    let hot = of("latency")
        .find(|r| r["database"] == "PostgreSQL" && r["offered_rate"].as_f64() == Some(HOT_RATE));
    match hot {
        Some(r) => {
            for (name, limit) in [("p50", HOT_P50_MS), ("p99", HOT_P99_MS)] {
                let ours = r["latency_ms"][name].as_f64().unwrap_or(f64::NAN);
                let floor = r["floor_ms"][name].as_f64();
                rows.push(vec![
                    format!("PostgreSQL commit -> delivered {name}, {HOT_RATE} commits/s"),
                    format!("{ours:.2} ms"),
                    floor.map_or("-".to_owned(), |f| format!("{f:.2} ms, floor")),
                    floor.map_or("-".to_owned(), |f| format!("{:.2}", ours / f)),
                    format!("<= {limit} ms"),
                    verdict(Some(ours <= limit)),
                ]);
            }
        }
        None => rows.push(not_run(
            "PostgreSQL commit -> delivered, 2000 commits/s",
            "latency --rate 2000",
        )),
    }

    rows.push(match of("memory").next() {
        Some(r) => {
            let mib = r["peak_rss_mib"].as_f64().unwrap_or(f64::NAN);
            vec![
                format!("relay RSS, {}-row backlog", r["rows"]),
                format!("{mib:.1} MiB"),
                "-".to_owned(),
                "-".to_owned(),
                format!("<= {RSS_MIB} MiB"),
                verdict(Some(mib <= RSS_MIB)),
            ]
        }
        None => not_run("relay RSS, 1M-row backlog", "memory (skipped by --quick)"),
    });

    // Scale-out: the first drain's batch-500 runs per relay count. A drain fails outright when
    // the devserver got a row twice, so a recorded curve is also the duplicate check.
    let mut curve: Vec<(u64, f64)> = Vec::new();
    for r in of("drain") {
        let relays = r["relays"].as_u64();
        if r["relay"] != "ojs_relay" || r["batch_size"] != 500 || r["peer"].is_string() {
            continue;
        }
        if let Some(relays) = relays.filter(|n| !curve.iter().any(|(m, _)| m == n)) {
            curve.push((relays, r["jobs_per_s"].as_f64().unwrap_or(f64::NAN)));
        }
    }
    rows.push(if curve.len() > 1 {
        vec![
            "scale-out, batch 500, one table".to_owned(),
            curve
                .iter()
                .map(|(n, rate)| format!("{n}: {rate:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
                + " jobs/s",
            "-".to_owned(),
            "-".to_owned(),
            "curve, 0 sent twice".to_owned(),
            "recorded".to_owned(),
        ]
    } else {
        not_run("scale-out", "drain --relays 1,2,4")
    });
    rows
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

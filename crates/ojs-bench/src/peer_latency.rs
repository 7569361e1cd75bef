//! A peer's latency at a fixed offered rate, for comparison with `latency`'s separate relay
//! (commit -> delivered): graphile-worker's add -> handler start with its worker in another
//! process, woken by LISTEN/NOTIFY (`peers/graphile_latency.js`, which prints one
//! `{"event":"latency"}` line).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{BoxResult, err, terminate};

pub struct PeerLatency {
    /// "graphile-worker 0.17.3 (add -> handler start, worker in another process)".
    pub label: String,
    /// `{"p50", "p90", "p99", "max"}` in ms over the measured jobs.
    pub latency_ms: Value,
    /// The script's whole latency line (settings, add_ms, achieved_add_rate, CPU, ...).
    pub record: Value,
}

/// Runs `node <peer_scripts>/graphile_latency.js` at `rate` adds/s for `warmup_seconds` (not
/// counted) then `seconds`, on the database of `database_url` (its `graphile_worker` schema is
/// dropped and re-created), with the peers installed in `peers_dir` (peers/install.sh).
pub async fn graphile_add_to_start(
    database_url: &str,
    peers_dir: &Path,
    peer_scripts: &Path,
    rate: f64,
    seconds: f64,
    warmup_seconds: f64,
) -> BoxResult<PeerLatency> {
    const SCRIPT: &str = "graphile_latency.js";
    let peers_dir = std::fs::canonicalize(peers_dir).map_err(|e| {
        err(format!(
            "peers dir {}: {e} (run crates/ojs-bench/peers/install.sh)",
            peers_dir.display()
        ))
    })?;
    let mut child = Command::new("node")
        .arg(peer_scripts.join(SCRIPT))
        .env("DATABASE_URL", database_url)
        .env("RATE", rate.to_string())
        .env("SECONDS", seconds.to_string())
        .env("WARMUP_SECONDS", warmup_seconds.to_string())
        .env("OJS_BENCH_PEERS_DIR", &peers_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot start node {SCRIPT}: {e}")))?;
    let pid = child.id();
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    // Shown as it comes (the script names itself in each line), kept for the error.
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("  {line}");
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let run = tokio::task::spawn_blocking(move || -> BoxResult<_> {
        let mut latency = None;
        for line in stdout.lines().map_while(Result::ok) {
            match serde_json::from_str::<Value>(&line) {
                Ok(value) if value["event"] == "latency" => latency = Some(value),
                _ => println!("  graphile-worker: {line}"),
            }
        }
        Ok((latency, child.wait()?))
    });
    // The script has its own deadlines (worker ready 60 s, every job started 120 s after the
    // last add); this one only guards against a hang outside them.
    let limit = Duration::from_secs_f64(warmup_seconds + seconds + 300.0);
    let (latency, status) = match tokio::time::timeout(limit, run).await {
        Ok(joined) => joined??,
        Err(_) => {
            terminate(pid);
            return Err(err(format!(
                "{SCRIPT}: no exit after {} s",
                limit.as_secs()
            )));
        }
    };
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        return Err(err(format!("{SCRIPT} exited with {status}: {stderr}")));
    }
    let record =
        latency.ok_or_else(|| err(format!("{SCRIPT} printed no latency line: {stderr}")))?;
    Ok(PeerLatency {
        label: format!(
            "graphile-worker {} (add -> handler start, worker in another process)",
            record["version"].as_str().unwrap_or("?")
        ),
        latency_ms: record["latency_ms"].clone(),
        record,
    })
}

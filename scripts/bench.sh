#!/usr/bin/env bash
# Runs the relay benchmarks (crates/ojs-bench) against a throwaway PostgreSQL with fsync on, and
# ends with one table of every target of issue 31 (and those of issue 16 still held), met or not.
#
#   scripts/bench.sh            drain + latency (PostgreSQL and SQLite) + faults + memory (1M rows)
#                               + the soak of each binding beside two busy loops (scripts/soak.sh)
#   scripts/bench.sh --quick    the same without the memory benchmark and the soak
#
# Raw output goes to target/bench/<UTC timestamp>/ (one .txt per benchmark, results.jsonl with
# one JSON object per measurement, machine.txt); target/bench/latest points at the last run.
# docs/benchmarks.md is written by hand from such a run.
# The first drain also runs the SQL floor and the peers (graphile-worker, pg-boss, pinned in
# crates/ojs-bench/peers/package.json; crates/ojs-bench/peers/install.sh installs them into
# target/bench-peers/ when the pinned versions are not there) and prints its issue-16 targets.
# It also drains with 2 and 4 relays on one table at the default batch size (scale-out; the
# delivery check proves no row went out twice). The latency run at 2,000 commits/s measures its
# floor (one PostgreSQL round trip and one devserver request), a separate relay process, and
# graphile-worker's add -> handler start with its worker in another process, at the same rate;
# each latency run also alternates turns with and without the relay for the application's p99.
# At the end `ojs-bench summary` prints the targets of the run in one table (summary.txt).
# Environment: OJS_BENCH_PG_PORT (default 55433, distinct from the tests' 55432);
# OJS_BENCH_QUIET_WAIT (default 60): seconds to wait, before each benchmark, for the machine
# to be quiet (other processes busy < 20% of one core over 2 s); past that it runs anyway and
# says so. Every result records the CPU other processes took during it (`other_cpu_s`).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done
port=${OJS_BENCH_PG_PORT:-55433}
quiet_wait=${OJS_BENCH_QUIET_WAIT:-60}

. scripts/lib/quiet.sh

cargo build --release -p ojs-bench -p ojs-devserver -p ojs-relay
# The relay binary as shipped (Cargo.toml's dist profile, fat LTO) for the memory benchmark.
[ "$quick" = 1 ] || cargo build --profile dist -p ojs-relay
peers_dir=$(crates/ojs-bench/peers/install.sh)
bin=target/release/ojs-bench

stamp=$(date -u +%Y%m%dT%H%M%SZ)
raw="target/bench/$stamp"
mkdir -p "$raw"
out="$raw/results.jsonl"

tmp=$(mktemp -d /tmp/ojs-bench.XXXXXX)
chmod 755 "$tmp" # the cluster runs as `postgres` when we are root: it must reach its directory
cleanup() {
  scripts/pg.sh stop "$tmp/pg" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
url=$(scripts/pg.sh start "$tmp/pg" "$port" on)

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/bench.sh $*"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "memory: $(free -m | awk '/^Mem:/ {print $2 " MiB"}')"
  echo "kernel: $(uname -r)"
  echo "postgres: $("$pg_bin/postgres" --version) (fsync=on, synchronous_commit=on, port $port)"
  echo "rustc: $(rustc --version)"
  echo "node: $(node --version) (peers in $peers_dir: $(cd "$peers_dir" && node -p 'const d=require("./package.json").dependencies; Object.keys(d).map(n=>n+" "+require(n+"/package.json").version).join(", ")'))"
  echo "loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$raw/machine.txt"

started=$(date +%s)
wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
"$bin" drain --database-url "$url" --rows 100000 --relays 1,2,4 \
  --peers graphile,pgboss --peers-dir "$peers_dir" --out "$out" | tee "$raw/drain.txt"
wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
# What events cost the drain (docs/events.md): off / one live subscriber / with replay history.
"$bin" drain --database-url "$url" --rows 50000 --batch-sizes 500 --sync-off-variant false --floor false \
  --baseline-rows 1000 --event-modes off,live,retained --event-rounds 3 --out "$out" | tee "$raw/drain-events.txt"
wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
"$bin" latency --database-url "$url" --rate 500 --seconds 20 --out "$out" | tee "$raw/latency-postgres.txt"
wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
# Issues 16 and 31: the hot path at 2,000 commits/s offered, the application's p99 with and
# without the relay in alternating turns, a separate relay, and graphile-worker at that rate.
"$bin" latency --database-url "$url" --rate 2000 --seconds 20 --baseline-seconds 20 --turns 4 \
  --separate-seconds 20 --peer-latency graphile --peers-dir "$peers_dir" --out "$out" | tee "$raw/latency-postgres-2000.txt"
wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
"$bin" latency --database-url "sqlite://$tmp/latency.db" --rate 500 --seconds 20 --baseline-seconds 20 --turns 4 \
  --out "$out" | tee "$raw/latency-sqlite.txt"
# Issue 31, item 6: what one batch of 1,000 costs the backend under faults (counts, not times).
"$bin" faults --database-url "$url" --rows 1000 --out "$out" | tee "$raw/faults.txt"
if [ "$quick" = 0 ]; then
  wait_quiet "$quiet_wait" "$raw/machine.txt" bench.sh
  "$bin" memory --database-url "$url" --rows 1000000 --relay-bin target/dist/ojs-relay --out "$out" | tee "$raw/memory.txt"
fi
soak_args=()
if [ "$quick" = 0 ]; then
  # Issue 31, target 5: the hot path of each binding on a busy machine (two busy loops).
  OJS_SOAK_BUSY=2 scripts/soak.sh 2>&1 | tee "$raw/soak-busy.txt" || echo "bench.sh: the soak failed (see soak-busy.txt)"
  soak_dir=$(sed -n 's/^soak.sh: done: //p' "$raw/soak-busy.txt" | tail -n 1)
  [ -n "$soak_dir" ] && soak_args=(--soak "$soak_dir/results.jsonl")
fi
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw/machine.txt"
echo
"$bin" summary "$out" "${soak_args[@]}" | tee "$raw/summary.txt"
echo "elsewhere: the staging ratios (bindings-python/bench.sh, bindings-node/bench.sh,"
echo "bindings-ruby/bench.sh) and the hot path on a quiet machine (scripts/soak.sh)"
echo "benchmarks took $(( $(date +%s) - started ))s; raw output in $raw" | tee -a "$raw/machine.txt"
ln -sfn "$stamp" target/bench/latest

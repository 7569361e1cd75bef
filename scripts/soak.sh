#!/usr/bin/env bash
# Hot path under sustained load (issue 16): `hot_dropped` <= 1% of committed jobs while an app
# commits about 1,500 transactions/s (one in 50 a bulk of 100 jobs, the others one job) on a
# SQLite file through each binding, release builds, the real framework and the real
# ojs-devserver, the default relay configuration (in-process relay).
#
#   scripts/soak.sh                      # django, express, rails in turn, then a summary table
#   scripts/soak.sh django rails         # some of them
#
# Builds first, all in release mode, with each binding's own scripts: ojs-devserver
# (cargo build --release), the Django wheel (bindings-python/build-wheel.sh with
# OJS_WHEEL_PROFILE=release, into the venv target/py-bench-venv as bindings-python/bench.sh
# does), the Express package (bindings-node/pack.sh: release addon, installed into
# target/node-pkg/app, where bench/soak.js runs as bindings-node/bench.sh runs bench.js) and the
# Rails gem (bindings-ruby/build.sh release, its GEM_HOME as bindings-ruby/bench.sh sets it).
# Debian packages come from scripts/install.sh (the build scripts call it). No PostgreSQL.
#
# Then, per binding: waits up to OJS_SOAK_QUIET_WAIT seconds (default 120) for the machine to
# be quiet (other processes < 20% of one core over 2 s, as scripts/bench.sh), runs
# bindings-*/bench/soak.* and keeps its output. Each program prints its numbers, the CPU other
# processes took during its load (`other`) and the load average, and one `SOAK_JSON` line.
# Settings passed through to the programs: OJS_SOAK_SECONDS (60), OJS_SOAK_TPS (1500),
# OJS_SOAK_BULK_EVERY (50), OJS_SOAK_BULK_SIZE (100), OJS_SOAK_CHECKPOINT_S (5),
# OJS_SOAK_DRAIN_TIMEOUT_S (600), OJS_SOAK_VERIFY_IDS (1); for diagnosis only, OJS_SOAK_CONFIG
# (adapter settings as JSON, e.g. '{"relay": {"hot_queue_capacity": 100000}}') and
# OJS_SOAK_APP_SYNCHRONOUS (PRAGMA synchronous of the app's connection); the summary names them.
# OJS_SOAK_BUSY=N runs N busy loops beside each program (a busy machine, issue 31's target 5:
# hot_dropped <= 5%), without waiting for quiet first.
#
# Output: target/soak/<UTC timestamp>/ (machine.txt, <binding>.txt, results.jsonl,
# summary.txt). Exit status 1 when a program failed or a committed job was not delivered;
# a missed 1% target is reported (met / NOT met), not an error.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

bindings=("$@")
[ ${#bindings[@]} -gt 0 ] || bindings=(django express rails)
for b in "${bindings[@]}"; do
  case "$b" in
    django|express|rails) ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown binding $b (django, express, rails)" >&2; exit 2 ;;
  esac
done
quiet_wait=${OJS_SOAK_QUIET_WAIT:-120}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$repo/target/soak/$stamp"
mkdir -p "$out"
say() { echo "soak.sh: $*"; }

# --- builds (release) -------------------------------------------------------------------------
wants() { local b; for b in "${bindings[@]}"; do [ "$b" = "$1" ] && return 0; done; return 1; }
scripts/install.sh
say "cargo build --release -p ojs-devserver"
cargo build --quiet --release -p ojs-devserver
export OJS_DEVSERVER_BIN="$repo/target/release/ojs-devserver"
if wants django; then
  say "the Django wheel (release) and target/py-bench-venv"
  wheel=$(OJS_WHEEL_PROFILE=release bindings-python/build-wheel.sh)
  venv="$repo/target/py-bench-venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip show -q django >/dev/null 2>&1 || "$venv/bin/python" -m pip install -q "django==5.2.*" "psycopg[binary]"
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
fi
if wants express; then
  say "the Express package (bindings-node/pack.sh: release addon)"
  bindings-node/pack.sh
  cp bindings-node/bench/soak.js target/node-pkg/app/soak.js
fi
if wants rails; then
  say "the Rails gem (bindings-ruby/build.sh release)"
  gem_home=$(bindings-ruby/build.sh release | tail -1)
fi

{
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "sqlite (system): $(python3 -c 'import sqlite3; print(sqlite3.sqlite_version)' 2>/dev/null || echo '?')"
  echo "settings: OJS_SOAK_SECONDS=${OJS_SOAK_SECONDS:-60} OJS_SOAK_TPS=${OJS_SOAK_TPS:-1500} OJS_SOAK_BULK_EVERY=${OJS_SOAK_BULK_EVERY:-50} OJS_SOAK_BULK_SIZE=${OJS_SOAK_BULK_SIZE:-100}"
  echo "loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/machine.txt"

# --- a quiet machine ------------------------------------------------------------------------
. scripts/lib/quiet.sh

# --- the runs ---------------------------------------------------------------------------------
failed=()
busy=${OJS_SOAK_BUSY:-0}
busy_pids=()
stop_busy() { [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true; busy_pids=(); }
trap stop_busy EXIT
for b in "${bindings[@]}"; do
  if [ "$busy" -gt 0 ]; then
    for _ in $(seq "$busy"); do (while :; do :; done) & busy_pids+=($!); done
    say "$b: $busy busy loops beside it (OJS_SOAK_BUSY)" | tee -a "$out/machine.txt"
  else
    wait_quiet "$quiet_wait" "$out/machine.txt" soak.sh
  fi
  say "$b: running (output in $out/$b.txt)"
  set +e
  case "$b" in
    django) "$venv/bin/python" bindings-python/bench/soak.py ;;
    express) (cd target/node-pkg/app && unset OJS_PACKAGE NODE_PATH && exec node soak.js) ;;
    rails) GEM_HOME="$gem_home" GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')" ruby bindings-ruby/bench/soak.rb ;;
  esac 2>&1 | tee "$out/$b.txt"
  rc=${PIPESTATUS[0]}
  set -e
  stop_busy
  [ "$rc" -eq 0 ] || failed+=("$b (exit $rc)")
  grep '^SOAK_JSON ' "$out/$b.txt" | sed 's/^SOAK_JSON //' >> "$out/results.jsonl" || true
done
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"

# --- the summary ------------------------------------------------------------------------------
python3 - "$out/results.jsonl" "$busy" <<'PY' | tee "$out/summary.txt"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
busy = int(sys.argv[2])
print()
if busy:
    print(f"Hot path on a busy machine ({busy} busy loops; issue 31: hot_dropped <= 5% of committed jobs), SQLite, release builds")
    for r in rows:
        r["met"] = r["hot_dropped_share"] <= 0.05
else:
    print("Hot path under sustained load (issue 16): hot_dropped <= 1% of committed jobs, SQLite, release builds")
head = ("binding", "tx", "jobs", "tx/s", "offered", "hot_dropped", "share", "max pending", "delivered",
        "c->r p99 ms", "app+relay CPU s", "other CPU s", "load avg", "target")
fmt = "{:<8} {:>6} {:>7} {:>7} {:>7} {:>11} {:>7} {:>11} {:>16} {:>11} {:>15} {:>11} {:>15} {:>7}"
print(fmt.format(*head))
for r in rows:
    dropped = r.get("dropped_total", r["hot_dropped"])
    cpu = r["cpu_s"]
    own = cpu["app_process"] + cpu.get("relay_host", 0)
    print(fmt.format(
        r["binding"], r["tx_committed"], r["jobs_committed"], r["achieved_tps"], r["offered_tps"],
        dropped if dropped == r["hot_dropped"] else f"{r['hot_dropped']}+{dropped - r['hot_dropped']}",
        f"{100 * r['hot_dropped_share']:.2f}%", r["max_pending_rows"],
        f"{r['delivered']}/{r['jobs_committed']}" + ("" if r["delivered_equals_committed"] else " LOST"),
        r.get("commit_to_received", {}).get("p99_ms", "-"), round(own, 1),
        f"{cpu['other']}/{cpu['machine_capacity']}",
        " ".join(str(v) for v in r["loadavg_before"]), "met" if r["met"] else "NOT met"))
    if r.get("extra_config"):
        print(f"         ^ with relay settings {json.dumps(r['extra_config'])} (not the default)")
print("app connection synchronous: " + ", ".join(f"{r['binding']} {r.get('app_synchronous')}" for r in rows))
print("(express: hot_dropped = the relay host's + wake-ups dropped in the app process; other CPU s: the"
      " CPU of every other process during the load / the machine's capacity in that time)")
PY
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "done: $out"

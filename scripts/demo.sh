#!/usr/bin/env bash
# The main job on the embedded default (SQLite + the dev backend): jobs staged in committed and
# rolled-back transactions, and the backend receiving only the committed ones, first through
# the Rust core directly, then through each framework's example signup app, whose worker then runs
# the committed job and prints its handler's line.
#   scripts/demo.sh                 everything
#   scripts/demo.sh rust|django|express|rails
# Installs and builds print one line each; their full output goes to target/logs/ and is shown
# only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
case "$which" in all|rust|django|express|rails) ;; *) echo "usage: $0 [rust|django|express|rails]" >&2; exit 2 ;; esac
run() { [ "$which" = all ] || [ "$which" = "$1" ]; }

logs=target/logs
mkdir -p "$logs"
# One line for a step; its output goes to a log, shown (the end of it) only if the step fails.
quietly() {
  local what=$1 log="$logs/$2" started=$SECONDS
  shift 2
  printf '%s ... ' "$what"
  if "$@" >"$log" 2>&1; then
    echo "done ($((SECONDS - started)) s)"
  else
    echo "FAILED"
    tail -n 40 "$log" >&2
    echo "demo: the step above failed; full log: $log" >&2
    exit 1
  fi
}
# A part of the story: what it prints is the story; its build chatter (stderr) goes to a log.
part() {
  local title=$1 log="$logs/demo-$2.log"
  shift 2
  printf '\n=== %s ===\n' "$title"
  if ! "$@" 2>"$log"; then
    tail -n 40 "$log" >&2
    echo "demo: $title failed; full log: $log" >&2
    exit 1
  fi
}

if [ ! -x target/debug/ojs-devserver ]; then
  echo "First run on this machine: installing packages and building the core and three adapters"
  echo "takes about 10 minutes on 2 cores; later runs take about 2 minutes."
fi
quietly "installing Debian packages (scripts/install.sh)" install.log scripts/install.sh
quietly "building the core, the devserver and the Rust demo" build-core.log \
  cargo build --locked -p ojs-devserver -p ojs-outbox --example demo
if run django; then quietly "building the Django adapter (wheel)" build-django.log bindings-python/build-wheel.sh; fi
if run express; then quietly "building the Express adapter (npm package)" build-express.log bindings-node/pack.sh; fi
if run rails; then quietly "building the Rails adapter (gem)" build-rails.log bindings-ruby/build.sh debug; fi

if run rust; then part "Rust core (crates/ojs-outbox/examples/demo.rs)" rust cargo run --locked --quiet -p ojs-outbox --example demo; fi
if run django; then part "Django (bindings-python/example)" django bindings-python/demo.sh; fi
if run express; then part "Express + knex (bindings-node/example)" express env OJS_DEMO_SKIP_BUILD=1 bindings-node/demo.sh; fi
if run rails; then part "Rails (bindings-ruby/example)" rails bindings-ruby/demo.sh; fi
printf '\ndemo: every part passed\n'

#!/usr/bin/env bash
# The main job on the embedded default (SQLite + the dev backend): jobs staged in committed and
# rolled-back transactions, and the backend receiving only the committed ones, first through
# the Rust core directly, then through each framework's example signup app.
#   scripts/demo.sh                 everything
#   scripts/demo.sh rust|django|express|rails
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
cargo build --locked --quiet -p ojs-devserver

which=${1:-all}
run() { [ "$which" = all ] || [ "$which" = "$1" ]; }
if run rust; then
  printf '\n=== Rust core (crates/ojs-outbox/examples/demo.rs) ===\n'
  cargo run --locked --quiet -p ojs-outbox --example demo
fi
if run django; then
  printf '\n=== Django (bindings-python/example) ===\n'
  bindings-python/demo.sh
fi
if run express; then
  printf '\n=== Express + knex (bindings-node/example) ===\n'
  bindings-node/demo.sh
fi
if run rails; then
  printf '\n=== Rails (bindings-ruby/example) ===\n'
  bindings-ruby/demo.sh
fi

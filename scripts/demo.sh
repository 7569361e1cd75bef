#!/usr/bin/env bash
# The main job on the embedded default (SQLite + the dev backend): stages jobs in committed and
# rolled-back transactions and shows the backend receiving only the committed ones.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
cargo run --locked --quiet -p ojs-outbox --example demo

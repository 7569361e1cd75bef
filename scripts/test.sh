#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and integration tests, the conformance suite on
# SQLite and on a throwaway PostgreSQL cluster (started here on a free port, stopped on exit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh

tmp=$(mktemp -d)
cleanup() { scripts/pg.sh stop "$tmp/pg"; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OJS_TEST_DATABASE_URL=$(scripts/pg.sh start "$tmp/pg" "$port")
export OJS_TEST_DATABASE_URL
echo "test: PostgreSQL at $OJS_TEST_DATABASE_URL"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
cat target/conformance-matrix.txt

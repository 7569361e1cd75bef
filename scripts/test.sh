#!/usr/bin/env bash
# Runs every test: formatting, lints, the Rust unit and integration tests (the relay crash
# test, the reference conformance matrix), then the three framework adapters, each built,
# packaged, installed and tested against a throwaway PostgreSQL cluster and a throwaway MariaDB
# server (started here on free ports, stopped on exit), SQLite files and the dev backend: Django 5.2 and 6.x, Express + knex,
# Rails (ActiveRecord 6.1 here, 7.2 in a Debian 13 root). Ends with the joined conformance matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh

tmp=$(mktemp -d)
cleanup() { scripts/pg.sh stop "$tmp/pg"; scripts/mariadb.sh stop "$tmp/mariadb"; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
OJS_TEST_DATABASE_URL=$(scripts/pg.sh start "$tmp/pg" "$(free_port)")
export OJS_TEST_DATABASE_URL
echo "test: PostgreSQL at $OJS_TEST_DATABASE_URL"
OJS_TEST_MYSQL_URL=$(scripts/mariadb.sh start "$tmp/mariadb" "$(free_port)")
export OJS_TEST_MYSQL_URL
echo "test: MariaDB at $OJS_TEST_MYSQL_URL"
rm -rf target/matrix

# Each step's header says how long the run has taken so far (CI should stay under 45 minutes).
step() { printf '\n=== %s (at %d min %02d s) ===\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
step "rust: fmt, clippy, tests"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

step "django adapter (bindings-python)"
bindings-python/test.sh
step "express adapter (bindings-node)"
bindings-node/test.sh
step "rails adapter on ActiveRecord 6.1 (bindings-ruby)"
bindings-ruby/test.sh
step "rails adapter on ActiveRecord 7.2 (a Debian 13 root, scripts/trixie-root.sh)"
bindings-ruby/test-rails72.sh

step "conformance matrix"
OJS_MATRIX_RUNNERS="rust django-5.2 django-6.1 express rails-6.1 rails-7.2" scripts/matrix.sh
step "done"

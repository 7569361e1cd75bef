#!/usr/bin/env bash
# Installs what the demo and the tests need, idempotently, in one place: every Debian package is
# checked by its package state (dpkg-query) and installed only when missing. The binding scripts
# call this instead of keeping lists of their own.
#   scripts/install.sh           install what is missing (quiet; apt's output goes to a log)
#   scripts/install.sh --list    print the Debian packages this project installs, one a line
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # A throwaway PostgreSQL cluster for the tests (server binaries; the package's own cluster
  # is stopped below).
  postgresql
  # The core links the system SQLite, the same library Python's sqlite3 and Ruby's sqlite3 gem
  # load: two SQLite copies in one process do not share POSIX lock bookkeeping and can corrupt
  # a database file both open. Its Rust bindings are generated at build time with libclang.
  pkg-config libsqlite3-dev libclang-dev
  # Python virtualenvs for the Django adapter; curl for the demos.
  python3-venv curl
  # better-sqlite3 (Express tests) compiles from source with node-gyp.
  g++ make
  # The Rails adapter on ActiveRecord 6.1 (Debian 12). RubyGems is not reachable: Ruby
  # libraries come from Debian packages.
  ruby ruby-dev ruby-ffi ruby-activerecord ruby-activejob ruby-railties ruby-sqlite3 ruby-pg
  ruby-minitest ruby-rack rake
  # The Debian 13 root in which the Rails adapter is tested on ActiveRecord 7.2
  # (scripts/trixie-root.sh).
  debootstrap
  # A throwaway MariaDB server for the third dialect's tests (scripts/mariadb.sh; the package's
  # own server is stopped below), and the Rails adapter's MySQL driver.
  mariadb-server ruby-mysql2
  # Django's MySQL driver (mysqlclient, pip) builds against the MariaDB client library.
  libmariadb-dev
  # The dashboard's browser test drives Debian's headless Chromium with playwright-core (npm).
  chromium
)

if [ "${1:-}" = --list ]; then printf '%s\n' "${packages[@]}"; exit 0; fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

# Node.js and npm come with this machine kind (a newer build than Debian 12's). Where they are
# missing, Debian's nodejs and npm are the fallback.
installed nodejs || packages+=(nodejs npm)

missing=()
for package in "${packages[@]}"; do installed "$package" || missing+=("$package"); done
if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p target
  log=target/install.log
  echo "install: apt-get install ${missing[*]} (log: $log)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "install: apt-get failed (full log: $log)" >&2
    exit 1
  fi
  for package in "${missing[@]}"; do
    installed "$package" || { echo "install: $package is still not installed (log: $log)" >&2; exit 1; }
  done
  # The Debian package starts a cluster of its own; the tests use throwaway ones.
  if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | while read -r v n; do
      pg_ctlcluster "$v" "$n" stop >/dev/null 2>&1 || true
    done
  fi
  if printf '%s\n' "${missing[@]}" | grep -qx mariadb-server; then
    service mariadb stop >/dev/null 2>&1 || true
  fi
fi

command -v cargo >/dev/null 2>&1 || { echo "install: cargo not found; this machine kind ships Rust via rustup" >&2; exit 1; }
if command -v rustup >/dev/null 2>&1; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component" >/dev/null
  done
fi

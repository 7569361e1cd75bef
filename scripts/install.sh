#!/usr/bin/env bash
# Installs what the demo and the tests need, idempotently: nothing is done twice.
# Debian packages: PostgreSQL server binaries (tests start a throwaway cluster), the system
# SQLite with its headers, libclang.
# Rust: the toolchain on the machine (rustup) with rustfmt and clippy.
set -euo pipefail

need_apt=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# The core links the system SQLite, the same library Python's sqlite3 and Ruby's sqlite3 gem
# load: two SQLite copies in one process do not share POSIX lock bookkeeping and can corrupt a
# database file both open. Its bindings are generated at build time with libclang.
[ -f /usr/include/sqlite3.h ] || need_apt+=(libsqlite3-dev)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # The Debian package starts a cluster of its own; the tests use throwaway ones.
  command -v pg_ctlcluster >/dev/null 2>&1 && { pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | while read -r v n; do pg_ctlcluster "$v" "$n" stop || true; done; }
fi

command -v cargo >/dev/null 2>&1 || { echo "install: cargo not found; this machine kind ships Rust via rustup" >&2; exit 1; }
if command -v rustup >/dev/null 2>&1; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
  done
fi

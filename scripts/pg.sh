#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on its own port, for tests and benchmarks.
#   scripts/pg.sh start DIR PORT [fsync]   -> prints the database URL
#   scripts/pg.sh stop DIR
# Runs the server as the `postgres` user when we are root (initdb refuses root).
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?data directory}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "PostgreSQL server binaries not found (scripts/install.sh installs them)" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    port=${3:?port}; fsync=${4:-off}
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres:postgres "$dir"
      chmod o+x "$(dirname "$dir")"   # mktemp -d makes 0700 parents the server could not enter
    fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$dir" -A trust -U postgres --no-sync -E UTF8 >"$dir.initdb.log" 2>&1 \
        || { cat "$dir.initdb.log" >&2; exit 1; }
    fi
    as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=$fsync -c synchronous_commit=$([ "$fsync" = on ] && echo on || echo off) -c max_connections=200" \
      start >/dev/null
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -f "$dir/PG_VERSION" ] && as_pg "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  *) echo "usage: $0 start DIR PORT [fsync] | stop DIR" >&2; exit 2 ;;
esac

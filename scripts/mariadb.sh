#!/usr/bin/env bash
# A throwaway MariaDB server on its own port, for tests and benchmarks (scripts/pg.sh's twin).
#   scripts/mariadb.sh start DIR PORT [fsync]   -> prints the database URL
#   scripts/mariadb.sh stop DIR
# The server reads no configuration file of the machine's (--no-defaults): what the tests rely
# on is on its command line. It runs as the `mysql` user when we are root.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?data directory}
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] \
  || { echo "MariaDB server not found (scripts/install.sh installs it)" >&2; exit 1; }
as_db() { if [ "$(id -u)" = 0 ]; then runuser -u mysql -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    port=${3:?port}; fsync=${4:-off}
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown mysql:mysql "$dir"
      chmod o+x "$(dirname "$dir")"   # mktemp -d makes 0700 parents the server could not enter
    fi
    if [ ! -d "$dir/mysql" ]; then
      as_db mariadb-install-db --no-defaults --datadir="$dir" --auth-root-authentication-method=normal \
        --skip-test-db >"$dir.install.log" 2>&1 || { cat "$dir.install.log" >&2; exit 1; }
    fi
    flush=$([ "$fsync" = on ] && echo 1 || echo 2)
    as_db /usr/sbin/mariadbd --no-defaults --datadir="$dir" --port="$port" --bind-address=127.0.0.1 \
      --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/server.log" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
      --innodb-flush-log-at-trx-commit="$flush" --max-connections=300 \
      --innodb-buffer-pool-size=256M --skip-name-resolve >/dev/null 2>&1 &
    for _ in $(seq 1 600); do
      if mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -uroot ping >/dev/null 2>&1; then
        mariadb --no-defaults --socket="$dir/mysqld.sock" -uroot -e \
          "CREATE DATABASE IF NOT EXISTS ojs_test; CREATE USER IF NOT EXISTS 'ojs'@'127.0.0.1'; GRANT ALL ON *.* TO 'ojs'@'127.0.0.1';"
        echo "mysql://ojs@127.0.0.1:$port/ojs_test"
        exit 0
      fi
      kill -0 $! 2>/dev/null || { cat "$dir/server.log" >&2; exit 1; }
      sleep 0.1
    done
    echo "MariaDB did not answer within 60 s ($dir/server.log)" >&2; exit 1
    ;;
  stop)
    if [ -f "$dir/mysqld.pid" ]; then
      pid=$(cat "$dir/mysqld.pid")
      kill "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    ;;
  *) echo "usage: $0 start DIR PORT [fsync] | stop DIR" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Builds the native library and the gem ojs-adapter-rails, installs THAT gem into a fresh
# GEM_HOME under target/ruby-gems/, and runs the minitest suite against the installed gem:
# the conformance cases on SQLite, PostgreSQL and MariaDB (matrix in
# target/matrix/rails-6.1.tsv), bad input, savepoints, request context, threads, ActiveJob, and
# the Rails app (generator, migration, rake tasks). Needs OJS_TEST_DATABASE_URL (a PostgreSQL
# server) and OJS_TEST_MYSQL_URL (a MariaDB server, reached through ActiveRecord's mysql2
# adapter; scripts/mariadb.sh starts one); the tests create and use the database ojs_rb_61 on
# each. The last line is minitest's summary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -z ${OJS_TEST_DATABASE_URL:-} ]]; then
  echo "test.sh: OJS_TEST_DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:55432/postgres)" >&2
  exit 2
fi
if [[ -z ${OJS_TEST_MYSQL_URL:-} ]]; then
  echo "test.sh: OJS_TEST_MYSQL_URL is required (a MariaDB server, e.g. mysql://ojs@127.0.0.1:33073/ojs_test; scripts/mariadb.sh)" >&2
  exit 2
fi

# Puma, the server test/events_server_test.rb runs OJS::EventsApp's stream under (a Debian
# package, checked by its package state; scripts/install.sh installs the rest).
if [ "$(dpkg-query -W -f='${Status}' puma 2>/dev/null)" != "install ok installed" ]; then
  mkdir -p "$here/../target"
  echo "test.sh: apt-get install puma (log: target/install-puma.log)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends puma; } \
    >"$here/../target/install-puma.log" 2>&1 || { tail -n 20 "$here/../target/install-puma.log" >&2; exit 1; }
fi

gem_home=$("$here/build.sh" debug | tail -1)
export GEM_HOME="$gem_home"
GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')"
export GEM_PATH OJS_REQUIRE_INSTALLED_GEM=1

cd "$here"
# -Itest only: the gem itself must come from GEM_HOME (test_helper checks it).
exec ruby -Itest -e 'Dir["test/*_test.rb"].sort.each { |file| require File.expand_path(file) }' "$@"

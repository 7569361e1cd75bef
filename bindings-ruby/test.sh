#!/usr/bin/env bash
# Builds the native library and the gem ojs-adapter-rails, installs THAT gem into a fresh
# GEM_HOME under target/ruby-gems/, and runs the minitest suite against the installed gem:
# the conformance cases on SQLite and PostgreSQL (matrix in target/ruby-conformance-matrix.txt),
# bad input, savepoints, request context, threads, ActiveJob, and the Rails app (generator,
# migration, rake tasks). Needs OJS_TEST_DATABASE_URL (a PostgreSQL server; the tests create
# and use the database ojs_rb on it). The last line is minitest's summary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -z ${OJS_TEST_DATABASE_URL:-} ]]; then
  echo "test.sh: OJS_TEST_DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:55432/postgres)" >&2
  exit 2
fi

gem_home=$("$here/build.sh" debug | tail -1)
export GEM_HOME="$gem_home"
GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')"
export GEM_PATH OJS_REQUIRE_INSTALLED_GEM=1

cd "$here"
# -Itest only: the gem itself must come from GEM_HOME (test_helper checks it).
exec ruby -Itest -e 'Dir["test/*_test.rb"].sort.each { |file| require File.expand_path(file) }' "$@"

#!/usr/bin/env bash
# Enqueue cost on the application's side, with the release build of the gem: per job
# OJS.enqueue_after_commit vs a raw INSERT of the same row on the same connection, and a bulk of
# 1,000 vs 1,000 single calls, on SQLite and PostgreSQL (OJS_BENCH_DATABASE_URL, else
# OJS_TEST_DATABASE_URL; keep fsync on for numbers that mean something). Results also in
# target/ruby-bench.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ -z ${OJS_BENCH_DATABASE_URL:-${OJS_TEST_DATABASE_URL:-}} ]]; then
  echo "bench.sh: set OJS_BENCH_DATABASE_URL or OJS_TEST_DATABASE_URL (PostgreSQL)" >&2
  exit 2
fi
gem_home=$("$here/build.sh" release | tail -1)
export GEM_HOME="$gem_home"
GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')"
export GEM_PATH
exec ruby "$here/bench/enqueue_bench.rb"

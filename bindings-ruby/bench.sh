#!/usr/bin/env bash
# Enqueue cost on the application's side (bench/enqueue_bench.rb), issue 16's two staging
# ratios, with the release build of the gem, on SQLite and PostgreSQL (OJS_BENCH_DATABASE_URL,
# else OJS_TEST_DATABASE_URL): per job, OJS.enqueue_after_commit vs a raw parameterized INSERT of
# the same row on the same connection (target <= 1.10x), and OJS.enqueue_bulk of 1,000 vs ONE
# raw multi-row INSERT of the same 1,000 rows (the core's bulk statement, same columns and
# literals, exec_query with binds) on the same connection (target <= 1.25x per job). Variants
# interleaved, rotating order, medians of OJS_BENCH_ROUNDS (15). Results also in
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

#!/usr/bin/env bash
# Staging benchmark of ojs-adapter-express (bench/bench.js) against the package installed by
# pack.sh in target/node-pkg/app (built here when missing, or always with OJS_BENCH_BUILD=1):
# issue 16's two same-run ratios through knex (SQLite, PostgreSQL), pg, Kysely (SQLite,
# PostgreSQL) and Drizzle (PostgreSQL), each with its target and met / NOT met:
#   single: enqueueAfterCommit vs a raw parameterized INSERT of the same row (target <= 1.10x);
#   bulk: enqueueBulk of 1,000 jobs vs ONE raw multi-row INSERT of the same 1,000 rows, per job
#   (target <= 1.25x; bench.js says exactly what that INSERT is).
# OJS_BENCH_LIBS="knex pg kysely" picks libraries; OJS_BENCH_ROUNDS (7), OJS_BENCH_JOBS (2000
# single jobs a side per round), OJS_BENCH_BULK_PAIRS (15 bulk pairs per round) size the run.
# Needs OJS_TEST_DATABASE_URL. For meaningful PostgreSQL numbers keep fsync on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
app="$repo/target/node-pkg/app"
: "${OJS_TEST_DATABASE_URL:?set OJS_TEST_DATABASE_URL to a PostgreSQL URL}"
if [ "${OJS_BENCH_BUILD:-0}" = 1 ] || [ ! -f "$app/node_modules/ojs-adapter-express/ojs_native.node" ]; then
  "$here/pack.sh"
fi
cp "$here/bench/bench.js" "$app/bench.js"
cd "$app"
unset OJS_PACKAGE NODE_PATH
exec node bench.js

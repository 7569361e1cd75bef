#!/usr/bin/env bash
# Staging benchmark of ojs-adapter-express (bench/bench.js) against the package installed by
# pack.sh in target/node-pkg/app (built here when missing, or always with OJS_BENCH_BUILD=1):
# the per-job ratio and the bulk speed-up through knex (SQLite, PostgreSQL), pg, Kysely (SQLite,
# PostgreSQL) and Drizzle (PostgreSQL); OJS_BENCH_LIBS="knex pg kysely" picks some.
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

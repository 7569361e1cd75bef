#!/usr/bin/env bash
# Builds the addon (release) and the npm package, installs THAT package into a fresh place
# under target/node-pkg/, and runs the tests (node --test) against the installed package:
# the conformance matrix on SQLite, PostgreSQL and MariaDB through each transaction library (knex: column
# `express`; pg, Kysely, Drizzle, Prisma, Sequelize, TypeORM: `express-pg`, `express-kysely`,
# `express-drizzle`, `express-prisma`, `express-sequelize`, `express-typeorm`), the
# providers against the real libraries (pinned in package.json's devDependencies), the
# docs/express.md examples, bad input, values JSON cannot hold, the
# type-first call without a transaction, bounded wake-ups, the knex migration, staged rows, the
# Express middleware, events (ojs.router over HTTP, /metrics, subscribeEvents), the event loop, signals,
# the worker (ojs.worker, the ojs-worker bin), knex on MariaDB (mariadb.test.js). Needs
# OJS_TEST_DATABASE_URL (postgres://...) and OJS_TEST_MYSQL_URL (mysql://... of a MariaDB server
# whose user may create tables); scripts/test.sh sets both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
: "${OJS_TEST_DATABASE_URL:?set OJS_TEST_DATABASE_URL to a PostgreSQL URL (scripts/test.sh starts one)}"
: "${OJS_TEST_MYSQL_URL:?set OJS_TEST_MYSQL_URL to a MariaDB URL, mysql://... (scripts/test.sh starts one)}"
"$here/pack.sh"
app="$repo/target/node-pkg/app"
cd "$app"
rm -rf test
cp -r "$here/test" "$app/test"

unset OJS_PACKAGE NODE_PATH
export OJS_REPO_ROOT="$repo" OJS_DEVSERVER_BIN="$repo/target/debug/ojs-devserver"
exec node --test --test-concurrency=1 test/*.test.js

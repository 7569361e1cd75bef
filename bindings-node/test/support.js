'use strict';
// Shared by the tests: the package under test (the installed npm package unless
// OJS_PACKAGE points elsewhere), the repository (cases, devserver), the databases (SQLite files,
// PostgreSQL from OJS_TEST_DATABASE_URL, MariaDB from OJS_TEST_MYSQL_URL), and the
// development backend `ojs-devserver` over HTTP.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnDevserver } = require('./devserver');

const PACKAGE = process.env.OJS_PACKAGE || 'ojs-adapter-express';
const ojsPackage = require(PACKAGE);
/** The installed package's folder (its bin/ojs-relay.js is run by some tests). */
const PACKAGE_DIR = path.dirname(require.resolve(`${PACKAGE}/package.json`));
const knexLib = require('knex');

const REPO = process.env.OJS_REPO_ROOT || path.resolve(__dirname, '..', '..');
const DEVSERVER = process.env.OJS_DEVSERVER_BIN || path.join(REPO, 'target', 'debug', 'ojs-devserver');
const PG_URL = process.env.OJS_TEST_DATABASE_URL;
if (!PG_URL) throw new Error('OJS_TEST_DATABASE_URL is not set (postgres://...); scripts/test.sh or bindings-node/test.sh sets it');
const MYSQL_URL = process.env.OJS_TEST_MYSQL_URL;
if (!MYSQL_URL) throw new Error('OJS_TEST_MYSQL_URL is not set (mysql://... of a MariaDB server); scripts/test.sh sets it');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** How long a test waits for a condition: generous, so a busy machine is slow, not failing. */
const WAIT_MS = Number(process.env.OJS_TEST_WAIT_MS || 30000);

/** A fresh scratch directory for SQLite files. */
function scratchDir(name) {
  const dir = path.join(os.tmpdir(), `ojs-node-${name}-${process.pid}`);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** Starts `ojs-devserver --port 0` and resolves with {url, call, received, stop}. */
async function startDevserver() {
  const { child, url } = await spawnDevserver(DEVSERVER);
  async function call(method, route, body) {
    const response = await fetch(`${url}${route}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    try {
      return JSON.parse(text);
    } catch {
      return null;
    }
  }
  return {
    url,
    call,
    received: () => call('GET', '/_dev/received'),
    reset: () => call('POST', '/_dev/reset'),
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', resolve);
        child.kill('SIGTERM');
      }),
  };
}

/** A knex instance on a SQLite file (better-sqlite3). */
function sqliteKnex(file) {
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${file}${suffix}`, { force: true });
  return knexLib({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true });
}

/** A knex instance on the test PostgreSQL server (pg). */
function postgresKnex() {
  return knexLib({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 4 } });
}

/** A knex instance on the test MariaDB server (mysql2). */
function mysqlKnex(options = {}) {
  return knexLib({ client: 'mysql2', connection: MYSQL_URL, pool: { min: 0, max: 4 }, ...options });
}

/**
 * Drops a MariaDB outbox and its tables (event log, locks, relays) with the core's statement
 * (`dropOutboxTable`), on a connection of its own: for the other libraries' tests.
 */
async function dropMysqlOutbox(table) {
  const knex = mysqlKnex({ pool: { min: 0, max: 1 } });
  try {
    await ojsPackage.dropOutboxTable(knex, { tableName: table });
  } finally {
    await knex.destroy();
  }
}

/** Polls `check` (async, returns truthy when done) every 20 ms until `timeoutMs` (default WAIT_MS). */
async function waitFor(check, timeoutMs = WAIT_MS, what = 'a condition') {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await check();
    if (result) return result;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await sleep(20);
  }
}

module.exports = {
  ojsPackage,
  PACKAGE_DIR,
  knexLib,
  REPO,
  PG_URL,
  MYSQL_URL,
  sleep,
  WAIT_MS,
  scratchDir,
  startDevserver,
  sqliteKnex,
  postgresKnex,
  mysqlKnex,
  dropMysqlOutbox,
  waitFor,
};

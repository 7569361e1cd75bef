'use strict';
// The conformance cases through Drizzle ORM on node-postgres: ojs.transaction(db, async (tx)
// => ...) (Drizzle's transaction; a nested one is its savepoint), the `express-drizzle` column
// of the matrix. Drizzle's better-sqlite3 driver has synchronous transactions only, which a
// case's steps (awaits between begin and commit) cannot hold open: providers.test.js tests it.

const pg = require('pg');
const { sql } = require('drizzle-orm');
const { drizzle } = require('drizzle-orm/node-postgres');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL } = require('./support');

let pool = null;
let db = null;

conformance({
  column: 'express-drizzle',
  databases: ['postgres'],
  ...callbackTransactions(),
  async setup() {
    pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    db = drizzle(pool);
  },
  async teardown() {
    if (pool) await pool.end();
  },
  async open(database, sqliteFile, table) {
    await db.execute(sql`DROP TABLE IF EXISTS ${sql.identifier(table)}`);
    return { db, options: { db }, close: async () => {} };
  },
  async rows(tx, database, table, ids) {
    // Drizzle expands the array into a list of parameters: here that is what the IN wants.
    return (await tx.execute(sql`SELECT job_id::text AS job_id, status FROM ${sql.identifier(table)} WHERE job_id::text IN ${ids}`)).rows;
  },
  async count(executor, database, table) {
    return (await executor.execute(sql`SELECT COUNT(*) AS n FROM ${sql.identifier(table)}`)).rows[0].n;
  },
});

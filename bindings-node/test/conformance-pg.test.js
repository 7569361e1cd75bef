'use strict';
// The conformance cases through node-postgres (`pg`): ojs.transaction(pool, async (client) =>
// ...) on PostgreSQL (the `express-pg` column of the matrix). The runner is conformance-runner.js.

const pg = require('pg');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL } = require('./support');

let pool = null;

conformance({
  column: 'express-pg',
  databases: ['postgres'],
  ...callbackTransactions(),
  async setup() {
    pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  },
  async teardown() {
    if (pool) await pool.end();
  },
  async open(database, sqliteFile, table) {
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    return { db: pool, options: { db: pool }, close: async () => {} };
  },
  async rows(client, database, table, ids) {
    return (await client.query(`SELECT job_id::text AS job_id, status FROM ${table} WHERE job_id::text = ANY($1)`, [ids])).rows;
  },
  async count(executor, database, table) {
    return (await executor.query(`SELECT COUNT(*) AS n FROM ${table}`)).rows[0].n;
  },
});

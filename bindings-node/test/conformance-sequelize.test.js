'use strict';
// The conformance cases through Sequelize on PostgreSQL: ojs.transaction(sequelize, async (t)
// => ...) (a managed transaction; a nested one is its savepoint), the `express-sequelize`
// column of the matrix. Sequelize's SQLite dialect needs the `sqlite3` package (a native
// build of its own), not better-sqlite3: PostgreSQL only. The runner is conformance-runner.js.

const { Sequelize } = require('sequelize');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL } = require('./support');

let db = null;

conformance({
  column: 'express-sequelize',
  databases: ['postgres'],
  ...callbackTransactions(),
  async setup() {
    db = new Sequelize(PG_URL, { logging: false, pool: { max: 4 } });
  },
  async teardown() {
    if (db) await db.close();
  },
  async open(database, sqliteFile, table) {
    await db.query(`DROP TABLE IF EXISTS ${table}`);
    return { db, options: { db }, close: async () => {} };
  },
  async rows(t, database, table, ids) {
    const [rows] = await t.sequelize.query(`SELECT job_id::text AS job_id, status FROM ${table} WHERE job_id::text = ANY($1)`, { bind: [ids], transaction: t });
    return rows;
  },
  async count(executor, database, table) {
    const options = executor.sequelize ? { transaction: executor } : {};
    const [rows] = await (executor.sequelize || executor).query(`SELECT COUNT(*) AS n FROM ${table}`, options);
    return rows[0].n;
  },
});

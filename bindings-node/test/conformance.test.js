'use strict';
// The conformance cases through knex transactions (the `express` column of the matrix), on
// SQLite (better-sqlite3) and PostgreSQL (pg). The runner is conformance-runner.js.

const { conformance } = require('./conformance-runner');
const { sqliteKnex, postgresKnex } = require('./support');

let pgKnex = null;

conformance({
  column: 'express',
  databases: ['sqlite', 'postgres'],
  async setup() {
    pgKnex = postgresKnex();
  },
  async teardown() {
    if (pgKnex) await pgKnex.destroy();
  },
  async open(database, sqliteFile, table) {
    if (database === 'sqlite') {
      const knex = sqliteKnex(sqliteFile);
      return { db: knex, options: { knex }, close: () => knex.destroy() };
    }
    await pgKnex.raw(`DROP TABLE IF EXISTS ${table}`);
    return { db: pgKnex, options: { knex: pgKnex }, close: async () => {} };
  },
  begin: (ojs, knex) => knex.transaction(),
  savepoint: (ojs, trx) => trx.transaction(),
  txOf: (trx) => trx,
  async commit(ojs, trx, crashBeforeHook) {
    if (crashBeforeHook) await ojs._commitWithoutWakeup(trx);
    else await trx.commit();
    await trx.executionPromise;
  },
  rollback: (trx) => trx.rollback(),
  rows: (trx, database, table, ids) => trx(table).select('job_id', 'status').whereIn('job_id', ids),
  async count(executor, database, table) {
    const [{ n }] = await executor(table).count({ n: '*' });
    return n;
  },
});

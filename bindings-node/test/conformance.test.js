'use strict';
// The conformance cases through knex transactions (the `express` column of the matrix), on
// SQLite (better-sqlite3), PostgreSQL (pg) and MariaDB (mysql2). The runner is
// conformance-runner.js.

const { conformance } = require('./conformance-runner');
const { sqliteKnex, postgresKnex, mysqlKnex, knexLib, ojsPackage } = require('./support');

let pgKnex = null;
let myKnex = null;

/** A race's second connection waits this long for SQLite's write lock (better-sqlite3: 5 s). */
const BUSY_TIMEOUT_MS = 10000;

conformance({
  column: 'express',
  databases: ['sqlite', 'postgres', 'mariadb'],
  file: __filename,
  async setup() {
    pgKnex = postgresKnex();
    myKnex = mysqlKnex();
  },
  async teardown() {
    if (pgKnex) await pgKnex.destroy();
    if (myKnex) await myKnex.destroy();
  },
  async open(database, sqliteFile, table) {
    if (database === 'sqlite') {
      const knex = sqliteKnex(sqliteFile);
      return { db: knex, options: { knex }, close: () => knex.destroy() };
    }
    if (database === 'mariadb') {
      // The outbox, its event log, locks and relays' tables: the core's DROP.
      await ojsPackage.dropOutboxTable(myKnex, { tableName: table });
      return { db: myKnex, options: { knex: myKnex }, close: async () => {} };
    }
    await pgKnex.raw(`DROP TABLE IF EXISTS ${table}`);
    return { db: pgKnex, options: { knex: pgKnex }, close: async () => {} };
  },
  /** A race's second connection on the case's SQLite file (its own knex, in a worker thread). */
  second(sqliteFile) {
    const knex = knexLib({
      client: 'better-sqlite3',
      connection: { filename: sqliteFile },
      useNullAsDefault: true,
      pool: {
        afterCreate(connection, done) {
          connection.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
          done(null, connection);
        },
      },
    });
    return { db: knex, options: { knex }, close: () => knex.destroy() };
  },
  /** A second knex.transaction: on PostgreSQL and MariaDB another connection of the pool. */
  race: (ojs, knex, work) => knex.transaction(work),
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

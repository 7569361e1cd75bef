'use strict';
// The conformance cases through TypeORM: ojs.transaction(dataSource, async (manager) => ...)
// (its transactional EntityManager; a nested one is a savepoint on the same query runner), on
// SQLite (the better-sqlite3 driver), PostgreSQL and MariaDB (type `mariadb`, on mysql2), the
// `express-typeorm` column of the matrix. The runner is conformance-runner.js.

const fs = require('node:fs');
const { DataSource } = require('typeorm');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL, MYSQL_URL, dropMysqlOutbox } = require('./support');

let pgSource = null;
let mySource = null;

/** A race's second connection waits this long for SQLite's write lock (better-sqlite3: 5 s). */
const BUSY_TIMEOUT_MS = 10000;

const list = (database, ids) => ids.map((_, i) => (database === 'postgres' ? `$${i + 1}` : '?')).join(', ');

conformance({
  column: 'express-typeorm',
  databases: ['sqlite', 'postgres', 'mariadb'],
  file: __filename,
  ...callbackTransactions(),
  async setup() {
    pgSource = await new DataSource({ type: 'postgres', url: PG_URL, poolSize: 4 }).initialize();
    mySource = await new DataSource({ type: 'mariadb', url: MYSQL_URL, poolSize: 4 }).initialize();
  },
  async teardown() {
    if (pgSource) await pgSource.destroy();
    if (mySource) await mySource.destroy();
  },
  async open(database, sqliteFile, table) {
    if (database === 'sqlite') {
      for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${sqliteFile}${suffix}`, { force: true });
      const db = await new DataSource({ type: 'better-sqlite3', database: sqliteFile }).initialize();
      return { db, options: { db }, close: () => db.destroy() };
    }
    if (database === 'mariadb') {
      await dropMysqlOutbox(table);
      // The relay's URL from the data source's options (the provider's urlParts).
      return { db: mySource, options: { db: mySource }, close: async () => {} };
    }
    await pgSource.query(`DROP TABLE IF EXISTS ${table}`);
    return { db: pgSource, options: { db: pgSource }, close: async () => {} };
  },
  /** A race's second connection on the case's SQLite file (in a worker thread). */
  async second(sqliteFile) {
    const db = await new DataSource({ type: 'better-sqlite3', database: sqliteFile, timeout: BUSY_TIMEOUT_MS }).initialize();
    return { db, options: { db }, close: () => db.destroy() };
  },
  rows(manager, database, table, ids) {
    const id = database === 'postgres' ? 'job_id::text' : 'job_id';
    return manager.query(`SELECT ${id} AS job_id, status FROM ${table} WHERE ${id} IN (${list(database, ids)})`, ids);
  },
  async count(executor, database, table) {
    return (await executor.query(`SELECT COUNT(*) AS n FROM ${table}`))[0].n;
  },
});

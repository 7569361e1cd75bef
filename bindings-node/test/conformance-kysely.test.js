'use strict';
// The conformance cases through Kysely: ojs.transaction(db, async (trx) => ...) (a Kysely
// ControlledTransaction; savepoints nest on it) on SQLite (better-sqlite3), PostgreSQL (pg) and
// MariaDB (MysqlDialect on mysql2), the `express-kysely` column of the matrix. The runner is
// conformance-runner.js.

const fs = require('node:fs');
const pg = require('pg');
const Database = require('better-sqlite3');
const mysql = require('mysql2');
const { Kysely, PostgresDialect, SqliteDialect, MysqlDialect, CompiledQuery } = require('kysely');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL, MYSQL_URL, dropMysqlOutbox } = require('./support');

let pgDb = null;
let myDb = null;

/** A race's second connection waits this long for SQLite's write lock (better-sqlite3: 5 s). */
const BUSY_TIMEOUT_MS = 10000;

const query = async (db, sql, params = []) => (await db.executeQuery(CompiledQuery.raw(sql, params))).rows;

conformance({
  column: 'express-kysely',
  databases: ['sqlite', 'postgres', 'mariadb'],
  file: __filename,
  ...callbackTransactions(),
  async setup() {
    pgDb = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: PG_URL, max: 4 }) }) });
    myDb = new Kysely({ dialect: new MysqlDialect({ pool: mysql.createPool({ uri: MYSQL_URL, connectionLimit: 4 }) }) });
  },
  async teardown() {
    if (pgDb) await pgDb.destroy();
    if (myDb) await myDb.destroy();
  },
  async open(database, sqliteFile, table) {
    if (database === 'sqlite') {
      for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${sqliteFile}${suffix}`, { force: true });
      const db = new Kysely({ dialect: new SqliteDialect({ database: new Database(sqliteFile) }) });
      // Kysely's database settings cannot be read back: the relay's URL is given.
      return { db, options: { db, databaseUrl: `sqlite://${sqliteFile}` }, close: () => db.destroy() };
    }
    if (database === 'mariadb') {
      await dropMysqlOutbox(table);
      return { db: myDb, options: { db: myDb, databaseUrl: MYSQL_URL }, close: async () => {} };
    }
    await query(pgDb, `DROP TABLE IF EXISTS ${table}`);
    return { db: pgDb, options: { db: pgDb, databaseUrl: PG_URL }, close: async () => {} };
  },
  /** A race's second connection on the case's SQLite file (in a worker thread). */
  second(sqliteFile) {
    const db = new Kysely({ dialect: new SqliteDialect({ database: new Database(sqliteFile, { timeout: BUSY_TIMEOUT_MS }) }) });
    return { db, options: { db, databaseUrl: `sqlite://${sqliteFile}` }, close: () => db.destroy() };
  },
  rows(trx, database, table, ids) {
    if (database === 'postgres') return query(trx, `SELECT job_id::text AS job_id, status FROM ${table} WHERE job_id::text = ANY($1)`, [ids]);
    return query(trx, `SELECT job_id, status FROM ${table} WHERE job_id IN (${ids.map(() => '?').join(', ')})`, ids);
  },
  async count(executor, database, table) {
    return (await query(executor, `SELECT COUNT(*) AS n FROM ${table}`))[0].n;
  },
});

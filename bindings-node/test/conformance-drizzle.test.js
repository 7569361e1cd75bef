'use strict';
// The conformance cases through Drizzle ORM on node-postgres and on mysql2 (MariaDB):
// ojs.transaction(db, async (tx) => ...) (Drizzle's transaction; a nested one is its
// savepoint), the `express-drizzle` column of the matrix. Drizzle's better-sqlite3 driver has
// synchronous transactions only, which a case's steps (awaits between begin and commit) cannot
// hold open: providers.test.js tests it.

const pg = require('pg');
const mysql = require('mysql2');
const { sql } = require('drizzle-orm');
const { drizzle } = require('drizzle-orm/node-postgres');
const { drizzle: drizzleMysql } = require('drizzle-orm/mysql2');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL, MYSQL_URL, dropMysqlOutbox } = require('./support');

let pool = null;
let db = null;
let myPool = null;
let myDb = null;

conformance({
  column: 'express-drizzle',
  databases: ['postgres', 'mariadb'],
  ...callbackTransactions(),
  async setup() {
    pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    db = drizzle(pool);
    myPool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 4 });
    myDb = drizzleMysql(myPool);
  },
  async teardown() {
    if (pool) await pool.end();
    if (myPool) await new Promise((resolve) => myPool.end(resolve));
  },
  async open(database, sqliteFile, table) {
    if (database === 'mariadb') {
      await dropMysqlOutbox(table);
      // The relay's URL from the mysql2 pool's settings (the provider's urlParts).
      return { db: myDb, options: { db: myDb }, close: async () => {} };
    }
    await db.execute(sql`DROP TABLE IF EXISTS ${sql.identifier(table)}`);
    return { db, options: { db }, close: async () => {} };
  },
  async rows(tx, database, table, ids) {
    // Drizzle expands the array into a list of parameters: here that is what the IN wants.
    if (database === 'mariadb') return (await tx.execute(sql`SELECT job_id, status FROM ${sql.identifier(table)} WHERE job_id IN ${ids}`))[0];
    return (await tx.execute(sql`SELECT job_id::text AS job_id, status FROM ${sql.identifier(table)} WHERE job_id::text IN ${ids}`)).rows;
  },
  async count(executor, database, table) {
    if (database === 'mariadb') return (await executor.execute(sql`SELECT COUNT(*) AS n FROM ${sql.identifier(table)}`))[0][0].n;
    return (await executor.execute(sql`SELECT COUNT(*) AS n FROM ${sql.identifier(table)}`)).rows[0].n;
  },
});

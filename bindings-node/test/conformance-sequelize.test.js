'use strict';
// The conformance cases through Sequelize on PostgreSQL and on MariaDB (its `mysql` dialect, on
// mysql2): ojs.transaction(sequelize, async (t) => ...) (a managed transaction; a nested one is
// its savepoint), the `express-sequelize` column of the matrix. Sequelize's SQLite dialect
// needs the `sqlite3` package (a native build of its own), not better-sqlite3: no SQLite
// column. The runner is conformance-runner.js.

const { Sequelize } = require('sequelize');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL, MYSQL_URL, dropMysqlOutbox } = require('./support');

let pgDb = null;
let myDb = null;

conformance({
  column: 'express-sequelize',
  databases: ['postgres', 'mariadb'],
  ...callbackTransactions(),
  async setup() {
    pgDb = new Sequelize(PG_URL, { logging: false, pool: { max: 4 } });
    myDb = new Sequelize(MYSQL_URL, { dialect: 'mysql', logging: false, pool: { max: 4 } });
  },
  async teardown() {
    if (pgDb) await pgDb.close();
    if (myDb) await myDb.close();
  },
  async open(database, sqliteFile, table) {
    if (database === 'mariadb') {
      await dropMysqlOutbox(table);
      // The relay's URL from the instance's settings (the provider's urlParts).
      return { db: myDb, options: { db: myDb }, close: async () => {} };
    }
    await pgDb.query(`DROP TABLE IF EXISTS ${table}`);
    return { db: pgDb, options: { db: pgDb }, close: async () => {} };
  },
  async rows(t, database, table, ids) {
    if (database === 'mariadb') {
      const [rows] = await t.sequelize.query(`SELECT job_id, status FROM ${table} WHERE job_id IN (:ids)`, { replacements: { ids }, transaction: t });
      return rows;
    }
    const [rows] = await t.sequelize.query(`SELECT job_id::text AS job_id, status FROM ${table} WHERE job_id::text = ANY($1)`, { bind: [ids], transaction: t });
    return rows;
  },
  async count(executor, database, table) {
    const options = executor.sequelize ? { transaction: executor } : {};
    const [rows] = await (executor.sequelize || executor).query(`SELECT COUNT(*) AS n FROM ${table}`, options);
    return rows[0].n;
  },
});

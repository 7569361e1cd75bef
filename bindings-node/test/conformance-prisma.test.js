'use strict';
// The conformance cases through Prisma ORM (7, driver adapters, no engine binary):
// ojs.transaction(prisma, async (tx) => ...) (an interactive transaction; a nested one is
// Prisma's savepoint), on SQLite (@prisma/adapter-better-sqlite3), PostgreSQL
// (@prisma/adapter-pg) and MariaDB (@prisma/adapter-mariadb), the `express-prisma` column of the
// matrix. The runner is conformance-runner.js; the clients are generated offline
// (prisma-support.js).

const fs = require('node:fs');
const { conformance, callbackTransactions } = require('./conformance-runner');
const { PG_URL, MYSQL_URL, dropMysqlOutbox } = require('./support');
const { postgresPrisma, sqlitePrisma, mysqlPrisma, prismaClient } = require('./prisma-support');

let pgPrisma = null;
let myPrisma = null;

/** Interactive transactions time out after 5 s by default: a case may hold one longer. */
const TRANSACTION = { timeout: 120000, maxWait: 30000 };

/** A race's second connection waits this long for SQLite's write lock (better-sqlite3: 5 s). */
const BUSY_TIMEOUT_MS = 10000;

const list = (database, ids) => ids.map((_, i) => (database === 'postgres' ? `$${i + 1}` : '?')).join(', ');

conformance({
  column: 'express-prisma',
  databases: ['sqlite', 'postgres', 'mariadb'],
  file: __filename,
  ...callbackTransactions(TRANSACTION),
  async setup() {
    pgPrisma = postgresPrisma(PG_URL);
    myPrisma = mysqlPrisma(MYSQL_URL);
  },
  async teardown() {
    if (pgPrisma) await pgPrisma.$disconnect();
    if (myPrisma) await myPrisma.$disconnect();
  },
  async open(database, sqliteFile, table) {
    if (database === 'sqlite') {
      for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${sqliteFile}${suffix}`, { force: true });
      const db = sqlitePrisma(sqliteFile);
      // Prisma's connection settings live in its driver adapter: the relay's URL is given.
      return { db, options: { db, databaseUrl: `sqlite://${sqliteFile}` }, close: () => db.$disconnect() };
    }
    if (database === 'mariadb') {
      await dropMysqlOutbox(table);
      return { db: myPrisma, options: { db: myPrisma, databaseUrl: MYSQL_URL }, close: async () => {} };
    }
    await pgPrisma.$executeRawUnsafe(`DROP TABLE IF EXISTS ${table}`);
    return { db: pgPrisma, options: { db: pgPrisma, databaseUrl: PG_URL }, close: async () => {} };
  },
  /** A race's second connection on the case's SQLite file (in a worker thread): sqlitePrisma's, with a busy timeout. */
  second(sqliteFile) {
    const { PrismaClient } = prismaClient('sqlite', 'sqlite');
    const { PrismaBetterSqlite3 } = require('@prisma/adapter-better-sqlite3');
    const db = new PrismaClient({ adapter: new PrismaBetterSqlite3({ url: `file:${sqliteFile}`, timeout: BUSY_TIMEOUT_MS }) });
    return { db, options: { db, databaseUrl: `sqlite://${sqliteFile}` }, close: () => db.$disconnect() };
  },
  rows(tx, database, table, ids) {
    const id = database === 'postgres' ? 'job_id::text' : 'job_id';
    return tx.$queryRawUnsafe(`SELECT ${id} AS job_id, status FROM ${table} WHERE ${id} IN (${list(database, ids)})`, ...ids);
  },
  async count(executor, database, table) {
    return (await executor.$queryRawUnsafe(`SELECT COUNT(*) AS n FROM ${table}`))[0].n;
  },
});

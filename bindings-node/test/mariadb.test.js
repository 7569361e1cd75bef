'use strict';
// Express on MariaDB through knex (client mysql2): the knex helper creates the outbox with the
// core's DDL (the table, its event log and its locks table) and running it again changes
// nothing; a job enqueued inside a knex transaction is delivered after COMMIT and not before,
// a rolled-back transaction (or savepoint) leaves no row; the relay's URL comes from knex's
// connection settings (mysql://); a missing table is OUTBOX_TABLE_MISSING. The FA cases on
// MariaDB are the `mariadb` column of conformance*.test.js.
//
// Wake-ups are observed at the devserver with a 30 s poll interval: a delivery within the
// wait comes from the commit's wake-up, not from the poller.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { ojsPackage, MYSQL_URL, knexLib, mysqlKnex, startDevserver, waitFor, sleep } = require('./support');

const { createOjs, createOutboxTable, dropOutboxTable, OutboxTableMissingError } = ojsPackage;

let backend;
let knex;

before(async () => {
  backend = await startDevserver();
  knex = mysqlKnex();
});

after(async () => {
  await knex.destroy();
  await backend.stop();
});

const received = async () => new Set((await backend.received()).jobs.map((job) => job.id));

/** Whether each of the outbox's tables exists: the table, `_events`, `_locks`. */
const outboxTables = async (table) =>
  Promise.all([table, `${table}_events`, `${table}_locks`].map((name) => knex.schema.hasTable(name)));

const rowCount = async (executor, table, where = {}) => Number((await executor(table).where(where).count({ n: '*' }))[0].n);

test('MariaDB: createOutboxTable(knex) creates the outbox, its event log and locks table; again it changes nothing', async () => {
  const table = 'node_my_helper';
  await dropOutboxTable(knex, { tableName: table });
  assert.deepEqual(await outboxTables(table), [false, false, false]);
  await createOutboxTable(knex, { tableName: table });
  assert.deepEqual(await outboxTables(table), [true, true, true]);
  const columns = Object.keys(await knex(table).columnInfo()).sort();

  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
  try {
    assert.equal(ojs.dialect, 'mysql');
    const jobId = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'email.welcome', [1]));
    // Every statement is CREATE ... IF NOT EXISTS: a second run (a migration run again, or one
    // stopped half-way) keeps the table and its rows.
    await createOutboxTable(knex, { tableName: table });
    await ojs.migrate();
    assert.deepEqual(await outboxTables(table), [true, true, true]);
    assert.deepEqual(Object.keys(await knex(table).columnInfo()).sort(), columns);
    assert.equal(await rowCount(knex, table), 1);
    assert.equal(await rowCount(knex, table, { job_id: jobId }), 1);
  } finally {
    await ojs.close();
  }

  // Half a migration: only the event log there; the helper creates what is missing.
  await dropOutboxTable(knex, { tableName: table });
  await knex.schema.createTable(`${table}_events`, (t) => t.bigIncrements('seq'));
  await createOutboxTable(knex, { tableName: table });
  assert.deepEqual(await outboxTables(table), [true, true, true]);

  await dropOutboxTable(knex, { tableName: table });
  await dropOutboxTable(knex, { tableName: table });
  assert.deepEqual(await outboxTables(table), [false, false, false]);
});

test('MariaDB: a job enqueued in a knex transaction is delivered after COMMIT, not before; a rollback leaves no row', async () => {
  const table = 'node_my_commit';
  await dropOutboxTable(knex, { tableName: table });
  await createOutboxTable(knex, { tableName: table });
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table, pollInterval: 'PT30S' }, handleSignals: false });
  try {
    await ojs.ready;
    assert.equal(ojs.relayInProcess, true);

    const trx = await knex.transaction();
    const jobId = await ojs.enqueueAfterCommit(trx, 'email.welcome', [1]);
    assert.equal(await rowCount(trx, table, { job_id: jobId }), 1, 'the transaction sees its row');
    assert.equal(await rowCount(knex, table, { job_id: jobId }), 0, 'no other connection does');
    await sleep(300);
    assert.equal((await received()).has(jobId), false, 'nothing is sent before COMMIT');
    await trx.commit();
    await waitFor(async () => (await received()).has(jobId), undefined, `delivery of ${jobId}`);
    await waitFor(async () => (await ojs.outboxRows([jobId]))[jobId]?.status === 'sent', undefined, 'the row marked sent');

    const rolledBack = await knex.transaction();
    const lost = await ojs.enqueueAfterCommit(rolledBack, 'email.welcome', [2]);
    const [bulkLost] = await ojs.enqueueBulk(rolledBack, [{ type: 'email.welcome', args: [3] }]);
    assert.equal(await rowCount(rolledBack, table), 3, 'the transaction sees its two rows and the sent one');
    await rolledBack.rollback();
    assert.equal(await rowCount(knex, table, { job_id: lost }), 0);
    assert.equal(await rowCount(knex, table, { job_id: bulkLost }), 0);

    // A savepoint rolled back discards its job; the released one commits with the transaction.
    const kept = await knex.transaction(async (outer) => {
      const id = await ojs.enqueueAfterCommit(outer, 'email.welcome', [4]);
      const inner = await outer.transaction();
      await ojs.enqueueAfterCommit(inner, 'email.welcome', [5]);
      await inner.rollback();
      await outer.transaction((released) => ojs.enqueueAfterCommit(released, 'email.welcome', [6]));
      return id;
    });
    await waitFor(async () => (await backend.received()).jobs.length === 3, undefined, 'three deliveries');
    const jobs = (await backend.received()).jobs;
    assert.deepEqual(jobs.map((job) => job.args[0]).sort(), [1, 4, 6]);
    assert.ok(jobs.some((job) => job.id === kept));
    assert.equal((await received()).has(lost), false);
    assert.equal(await rowCount(knex, table), 3);
  } finally {
    await ojs.close();
    await dropOutboxTable(knex, { tableName: table });
    await backend.reset();
  }
});

test("MariaDB: the relay's URL from knex's mysql2 connection settings; the relay connects with it", async () => {
  const url = new URL(MYSQL_URL);
  const database = url.pathname.slice(1);
  const table = 'node_my_url';
  await dropOutboxTable(knex, { tableName: table });
  await createOutboxTable(knex, { tableName: table });
  const settings = [
    [{ host: url.hostname, port: Number(url.port), user: decodeURIComponent(url.username), database }, `mysql://${url.username}@${url.hostname}:${url.port}/${database}`],
    [{ host: url.hostname, port: url.port, user: 'app', password: 'p@ss word', database }, `mysql://app:p%40ss%20word@${url.hostname}:${url.port}/${database}`],
    [{ socketPath: '/run/mysqld/mysqld.sock', user: 'app', database }, `mysql://app@localhost/${database}?socket=/run/mysqld/mysqld.sock`],
    [{ uri: MYSQL_URL }, MYSQL_URL],
    [MYSQL_URL, MYSQL_URL],
  ];
  for (const [connection, expected] of settings) {
    const own = knexLib({ client: 'mysql2', connection });
    try {
      const ojs = createOjs({ url: backend.url, knex: own, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
      assert.equal(ojs.config.adapter.database_url, expected, JSON.stringify(connection));
      assert.equal(ojs.dialect, 'mysql');
      if (expected.startsWith(MYSQL_URL.slice(0, MYSQL_URL.lastIndexOf('/')))) {
        // The relay's own connection reaches the table (the core's status over that URL).
        const status = await ojs.status();
        assert.equal(status.pending, 0);
        assert.equal(status.dead, 0);
      }
      await ojs.close();
    } finally {
      await own.destroy();
    }
  }
  await dropOutboxTable(knex, { tableName: table });
});

test('MariaDB: staging into a missing table is OutboxTableMissingError, the transaction rolls back', async () => {
  const table = 'node_my_missing';
  await dropOutboxTable(knex, { tableName: table });
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
  try {
    await assert.rejects(knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'email.welcome', [1])), (error) =>
      error instanceof OutboxTableMissingError && error.code === 'OUTBOX_TABLE_MISSING' && error.cause !== undefined);
    await assert.rejects(knex.transaction((trx) => ojs.enqueueBulk(trx, [{ type: 'email.welcome', args: [1] }])), (error) =>
      error instanceof OutboxTableMissingError);
  } finally {
    await ojs.close();
  }
});

// ---- the other libraries on MariaDB: each dialect name the providers map to the core's mysql --

const mysql = require('mysql2');
const { Sequelize } = require('sequelize');
const { DataSource } = require('typeorm');
const { Kysely, MysqlDialect } = require('kysely');
const { drizzle } = require('drizzle-orm/mysql2');
const { mysqlPrisma } = require('./prisma-support');

/** Each library's database on the test server: `[name, open() -> { db, options, close }]`. */
const LIBRARIES = [
  ['Sequelize (dialect mysql)', () => {
    const db = new Sequelize(MYSQL_URL, { dialect: 'mysql', logging: false });
    return { db, options: {}, close: () => db.close() };
  }],
  ['Sequelize (dialect mariadb)', () => {
    const db = new Sequelize(MYSQL_URL.replace(/^mysql:/, 'mariadb:'), { dialect: 'mariadb', logging: false });
    return { db, options: {}, close: () => db.close() };
  }],
  ['TypeORM (type mysql)', async () => {
    const db = await new DataSource({ type: 'mysql', url: MYSQL_URL }).initialize();
    return { db, options: {}, close: () => db.destroy() };
  }],
  ['TypeORM (type mariadb)', async () => {
    const db = await new DataSource({ type: 'mariadb', url: MYSQL_URL }).initialize();
    return { db, options: {}, close: () => db.destroy() };
  }],
  ['Drizzle (mysql2 pool)', () => {
    const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 });
    return { db: drizzle(pool), options: {}, close: () => new Promise((resolve) => pool.end(resolve)) };
  }],
  ['Kysely (MysqlDialect)', () => {
    const db = new Kysely({ dialect: new MysqlDialect({ pool: mysql.createPool({ uri: MYSQL_URL, connectionLimit: 2 }) }) });
    // Kysely's settings cannot be read back: the relay's URL is given.
    return { db, options: { databaseUrl: MYSQL_URL }, close: () => db.destroy() };
  }],
  ['Prisma (@prisma/adapter-mariadb)', () => {
    const db = mysqlPrisma(MYSQL_URL);
    return { db, options: { databaseUrl: MYSQL_URL }, close: () => db.$disconnect() };
  }],
];

for (const [name, open] of LIBRARIES) {
  test(`MariaDB, ${name}: ojs.transaction commits then wakes the relay; a thrown error rolls the job back`, async () => {
    const table = 'node_my_provider';
    await dropOutboxTable(knex, { tableName: table });
    const { db, options, close } = await open();
    const ojs = createOjs({ url: backend.url, db, ...options, outbox: { tableName: table, pollInterval: 'PT30S' }, handleSignals: false });
    try {
      assert.equal(ojs.dialect, 'mysql');
      // The relay's URL: derived from the library's settings where it has them.
      if (options.databaseUrl === undefined) assert.match(ojs.config.adapter.database_url, /^mysql:\/\/ojs@127\.0\.0\.1:\d+\/ojs_test$/);
      await ojs.migrate();
      await ojs.ready;
      // A job, and one in a savepoint (a nested ojs.transaction) released into it.
      const [ids, early] = await ojs.transaction(db, async (tx) => {
        const id = await ojs.enqueueAfterCommit(tx, 'email.welcome', [name]);
        const [nested] = await ojs.transaction(tx, (inner) => ojs.enqueueBulk(inner, [{ type: 'email.welcome', args: ['nested'] }]));
        await sleep(200);
        const got = await received();
        return [[id, nested], got.has(id) || got.has(nested)];
      });
      assert.equal(early, false, 'nothing is sent before COMMIT');
      await waitFor(async () => {
        const got = await received();
        return ids.every((id) => got.has(id));
      }, undefined, `delivery of ${ids.join(', ')}`);

      let lost;
      await assert.rejects(ojs.transaction(db, async (tx) => {
        lost = await ojs.enqueueAfterCommit(tx, 'email.welcome', ['lost']);
        throw new Error('abandoned');
      }), /abandoned/);
      assert.equal(await rowCount(knex, table, { job_id: lost }), 0);
      assert.equal(await rowCount(knex, table), 2);
    } finally {
      await ojs.close();
      await close();
      await dropOutboxTable(knex, { tableName: table });
      await backend.reset();
    }
  });
}

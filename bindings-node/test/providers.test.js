'use strict';
// The transaction providers against the real libraries (pg, Kysely, Drizzle, better-sqlite3),
// each library's trap: the wake-up after the outermost COMMIT only (pg has no hook; Kysely
// nests only on a controlled transaction; Drizzle expands arrays unless bound as one
// parameter; better-sqlite3's transactions are synchronous), a library transaction opened
// without ojs.transaction refused (its commit is unseen) and left usable, bad input refused by
// the binding's typed errors naming the field with the transaction and outbox untouched, and
// createOjs({ db }). The FA cases through pg, Kysely and Drizzle are conformance-*.test.js.
//
// Wake-ups are observed at the devserver with a 30 s poll interval: a delivery within the
// wait comes from the commit's wake-up, not from the poller.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const pg = require('pg');
const Database = require('better-sqlite3');
const { Kysely, PostgresDialect, SqliteDialect, CompiledQuery } = require('kysely');
const { sql } = require('drizzle-orm');
const { drizzle: drizzlePg } = require('drizzle-orm/node-postgres');
const { drizzle: drizzleSqlite } = require('drizzle-orm/better-sqlite3');
const { ojsPackage, PG_URL, scratchDir, startDevserver, waitFor } = require('./support');

const { createOjs, providers, NoTransactionError, InvalidJobTypeError, InvalidArgsError, InvalidConfigError, InvalidDatabaseUrlError } =
  ojsPackage;

const POLL = { pollInterval: 'PT30S' };
const dir = scratchDir('providers');
let backend;
let pool;

before(async () => {
  backend = await startDevserver();
  pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
});

after(async () => {
  await pool.end();
  await backend.stop();
});

const received = async () => new Set((await backend.received()).jobs.map((job) => job.id));
const delivered = (ids) => waitFor(async () => {
  const got = await received();
  return ids.every((id) => got.has(id));
}, undefined, `delivery of ${ids.join(', ')}`);

/** An adapter on `db` with a fresh PostgreSQL outbox table `table`. */
async function pgAdapter(table, db = pool, extra = {}) {
  await pool.query(`DROP TABLE IF EXISTS ${table}`);
  const ojs = createOjs({ url: backend.url, db, outbox: { tableName: table, ...POLL }, handleSignals: false, ...extra });
  await ojs.migrate();
  await ojs.ready;
  return ojs;
}

const tableRows = async (table) => (await pool.query(`SELECT job_id::text AS id, job_type AS type FROM ${table} ORDER BY id`)).rows;

// ---- pg ------------------------------------------------------------------------------------

test('pg: ojs.transaction(pool) stages on the checked-out client; the relay is woken after COMMIT, never before', async () => {
  const ojs = await pgAdapter('node_prov_pg_commit');
  try {
    let inside;
    const id = await ojs.transaction(pool, async (client) => {
      assert.ok(client instanceof pg.Client, 'a pooled client');
      inside = await ojs.enqueueAfterCommit(client, 'email.welcome', [1]);
      // The row is visible in the transaction and nowhere else; nothing has been sent.
      assert.equal((await client.query('SELECT COUNT(*)::int AS n FROM node_prov_pg_commit')).rows[0].n, 1);
      assert.equal((await pool.query('SELECT COUNT(*)::int AS n FROM node_prov_pg_commit')).rows[0].n, 0);
      return inside;
    });
    assert.equal(id, inside);
    await delivered([id]);
    assert.deepEqual((await tableRows('node_prov_pg_commit')).map((r) => r.type), ['email.welcome']);
  } finally {
    await ojs.close();
  }
});

test('pg: a plain Client, nested savepoints (the rolled-back one discarded), then the same Client outside a transaction', async () => {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const ojs = await pgAdapter('node_prov_pg_client');
  try {
    const ids = await ojs.transaction(client, async (tx) => {
      assert.equal(tx, client);
      const outer = await ojs.enqueueAfterCommit(tx, 'a.outer', []);
      const kept = await ojs.transaction(tx, () => ojs.enqueueAfterCommit('a.kept', []));
      let dropped;
      await assert.rejects(
        ojs.transaction(tx, async () => {
          dropped = await ojs.enqueueAfterCommit(tx, 'a.dropped', []);
          throw new Error('inner failure');
        }),
        /inner failure/,
      );
      return { outer, kept, dropped };
    });
    await delivered([ids.outer, ids.kept]);
    assert.equal((await received()).has(ids.dropped), false);
    // Outside a transaction the Client writes at once and wakes the relay.
    const now = await ojs.enqueueAfterCommit(client, 'a.now', []);
    await delivered([now]);
    assert.deepEqual((await tableRows('node_prov_pg_client')).map((r) => r.type), ['a.outer', 'a.kept', 'a.now']);
  } finally {
    await ojs.close();
    await client.end();
  }
});

test("pg: a client in the application's own BEGIN is refused (its commit is unseen); its transaction goes on", async () => {
  const ojs = await pgAdapter('node_prov_pg_foreign');
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT 1');
    await assert.rejects(ojs.enqueueAfterCommit(client, 'a.b', []), (error) => error instanceof NoTransactionError && /ojs\.transaction/.test(error.message));
    assert.throws(() => ojs.transaction(client, async () => {}), NoTransactionError);
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1);
    await client.query('COMMIT');
    assert.equal((await tableRows('node_prov_pg_foreign')).length, 0);
  } finally {
    client.release(client.getTransactionStatus() === 'I' ? undefined : true);
    await ojs.close();
  }
});

test('pg: a COMMIT that fails (a deferred constraint) is a rollback: no row, the promise rejects', async () => {
  const ojs = await pgAdapter('node_prov_pg_commitfail');
  await pool.query('DROP TABLE IF EXISTS node_prov_deferred');
  await pool.query('CREATE TABLE node_prov_deferred (id int PRIMARY KEY, ref int REFERENCES node_prov_deferred (id) DEFERRABLE INITIALLY DEFERRED)');
  try {
    let id;
    await assert.rejects(
      ojs.transaction(pool, async (client) => {
        id = await ojs.enqueueAfterCommit(client, 'a.b', []);
        await client.query('INSERT INTO node_prov_deferred VALUES (1, 99)');
      }),
      (error) => error.code === '23503',
    );
    assert.deepEqual(await ojs.outboxRows([id]), {});
    assert.equal((await tableRows('node_prov_pg_commitfail')).length, 0);
  } finally {
    await ojs.close();
  }
});

test('pg: bad input is a typed error naming the field; the transaction and outbox are untouched', async () => {
  const ojs = await pgAdapter('node_prov_pg_bad');
  try {
    const good = await ojs.transaction(pool, async (client) => {
      await assert.rejects(ojs.enqueueAfterCommit(client, 'not a type!', []), (e) => e instanceof InvalidJobTypeError && e.field === 'type');
      await assert.rejects(ojs.enqueueAfterCommit(client, 'a.b', [new Set([1])]), (e) => e instanceof InvalidArgsError && e.field === 'args');
      await assert.rejects(ojs.enqueueBulk(client, [{ type: 'a.b', args: [] }, { type: 'a.b', args: 'x' }]), (e) => e instanceof InvalidArgsError);
      assert.equal((await client.query('SELECT COUNT(*)::int AS n FROM node_prov_pg_bad')).rows[0].n, 0);
      return ojs.enqueueAfterCommit(client, 'a.good', []);
    });
    await delivered([good]);
    assert.deepEqual((await tableRows('node_prov_pg_bad')).map((r) => r.id), [good]);
    assert.throws(() => ojs.transaction({}, async () => {}), (e) => e instanceof InvalidConfigError && e.field === 'db');
    await assert.rejects(ojs.enqueueBulk({ query() {} }, []), NoTransactionError);
  } finally {
    await ojs.close();
  }
});

// ---- Kysely --------------------------------------------------------------------------------

test("Kysely: db.transaction().execute()'s transaction is refused (no savepoints, commit unseen) and stays usable; the Kysely instance writes at once", async () => {
  const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: PG_URL, max: 2 }) }) });
  const ojs = await pgAdapter('node_prov_kysely', db, { databaseUrl: PG_URL });
  try {
    await db.transaction().execute(async (trx) => {
      await assert.rejects(ojs.enqueueAfterCommit(trx, 'a.b', []), NoTransactionError);
      await trx.executeQuery(CompiledQuery.raw('SELECT 1'));
    });
    const nested = await ojs.transaction(db, async (trx) => {
      assert.equal(typeof trx.savepoint, 'function', 'a controlled transaction');
      return ojs.transaction(trx, (inner) => ojs.enqueueAfterCommit(inner, 'a.nested', []));
    });
    const now = await ojs.enqueueAfterCommit(db, 'a.now', []);
    await delivered([nested, now]);
    assert.deepEqual((await tableRows('node_prov_kysely')).map((r) => r.type), ['a.nested', 'a.now']);
  } finally {
    await ojs.close();
    await db.destroy();
  }
});

test('Kysely: createOjs({ db }) cannot read its settings: InvalidDatabaseUrlError naming database_url', () => {
  const db = new Kysely({ dialect: new SqliteDialect({ database: new Database(':memory:') }) });
  assert.throws(() => createOjs({ url: backend.url, db, autoStart: false, handleSignals: false }), (e) => e instanceof InvalidDatabaseUrlError && e.field === 'database_url');
});

// ---- Drizzle -------------------------------------------------------------------------------

test('Drizzle: a parameter holding an array is bound as ONE parameter (Drizzle would expand it)', async () => {
  const db = drizzlePg(pool);
  const expanded = db.execute(sql`SELECT ${['a', 'b', 'c']} AS list`);
  await assert.rejects(expanded); // Drizzle's own template: ($1, $2, $3), a row value
  const { rows } = await providers.drizzle.execute(db, 'SELECT cardinality($1::text[]) AS n, $2::text AS t', [['a', 'b', 'c'], 'x']);
  assert.deepEqual(rows, [{ n: 3, t: 'x' }]);
});

test('Drizzle (node-postgres): ojs.transaction(db) commits, a nested one is a savepoint; a Drizzle transaction of its own is refused', async () => {
  const db = drizzlePg(pool);
  const ojs = await pgAdapter('node_prov_drizzle', db);
  try {
    await db.transaction(async (tx) => {
      await assert.rejects(ojs.enqueueAfterCommit(tx, 'a.b', []), NoTransactionError);
    });
    const ids = await ojs.transaction(db, async (tx) => {
      const outer = await ojs.enqueueAfterCommit(tx, 'd.outer', [[1, 2]]);
      await ojs.transaction(tx, async (inner) => {
        await ojs.enqueueBulk(inner, [{ type: 'd.dropped', args: [] }]);
        throw new Error('rolled back');
      }).catch(() => {});
      return [outer];
    });
    await delivered(ids);
    const job = (await backend.received()).jobs.find((j) => j.id === ids[0]);
    assert.deepEqual(job.args, [[1, 2]]);
    assert.deepEqual((await tableRows('node_prov_drizzle')).map((r) => r.type), ['d.outer']);
  } finally {
    await ojs.close();
  }
});

test('Drizzle (better-sqlite3): synchronous transactions with enqueueAfterCommitSync; an async callback is rolled back', async () => {
  const file = path.join(dir, 'drizzle.db');
  const sqlite = new Database(file);
  const db = drizzleSqlite(sqlite);
  const ojs = createOjs({ url: backend.url, db, outbox: { tableName: 'node_prov_dsq', ...POLL }, handleSignals: false });
  try {
    await ojs.migrate();
    await ojs.ready;
    const id = ojs.transaction(db, (tx) => {
      const kept = ojs.enqueueAfterCommitSync(tx, 'd.kept', [1]);
      assert.throws(() =>
        ojs.transaction(tx, (inner) => {
          ojs.enqueueBulkSync(inner, [{ type: 'd.dropped', args: [] }]);
          throw new Error('inner');
        }),
      );
      return kept;
    });
    assert.equal(typeof id, 'string');
    assert.throws(() => ojs.transaction(db, async (tx) => ojs.enqueueAfterCommitSync(tx, 'd.async', [])), TypeError);
    assert.throws(() => ojs.enqueueAfterCommitSync(drizzlePg(pool), 'a.b', []), (e) => e instanceof InvalidConfigError && e.field === 'trx');
    await delivered([id]);
    assert.deepEqual(sqlite.prepare('SELECT job_type FROM node_prov_dsq').all().map((r) => r.job_type), ['d.kept']);
  } finally {
    await ojs.close();
    sqlite.close();
  }
});

// ---- Prisma --------------------------------------------------------------------------------

test("Prisma: a $transaction of the application's own is refused and goes on; ojs.transaction's options reach Prisma; nested is its savepoint", async () => {
  const { postgresPrisma } = require('./prisma-support');
  const prisma = postgresPrisma(PG_URL);
  assert.throws(() => createOjs({ url: backend.url, db: prisma, autoStart: false, handleSignals: false }), (e) => e instanceof InvalidDatabaseUrlError && e.field === 'database_url');
  const ojs = await pgAdapter('node_prov_prisma', prisma, { databaseUrl: PG_URL });
  try {
    await prisma.$transaction(async (tx) => {
      await assert.rejects(ojs.enqueueAfterCommit(tx, 'a.b', []), NoTransactionError);
      assert.equal(await tx.$executeRawUnsafe('SELECT 1'), 1);
    });
    // Prisma's own refusal of an option shows that the options were handed over.
    await assert.rejects(ojs.transaction(prisma, async () => {}, { isolationLevel: 'NoSuchLevel' }), /isolation level/i);
    const ids = await ojs.transaction(prisma, async (tx) => {
      const outer = await ojs.enqueueAfterCommit(tx, 'p.outer', [{ n: 1 }]);
      await ojs.transaction(tx, async (inner) => {
        await ojs.enqueueAfterCommit(inner, 'p.dropped', []);
        throw new Error('rolled back');
      }).catch(() => {});
      const kept = await ojs.transaction(tx, (inner) => ojs.enqueueBulk(inner, [{ type: 'p.kept', args: [] }]));
      await assert.rejects(ojs.enqueueAfterCommit(tx, 'BAD', []), (e) => e instanceof InvalidJobTypeError && e.field === 'type');
      return [outer, ...kept];
    }, { timeout: 30000 });
    await delivered(ids);
    assert.deepEqual((await tableRows('node_prov_prisma')).map((r) => r.type), ['p.outer', 'p.kept']);
  } finally {
    await ojs.close();
    await prisma.$disconnect();
  }
});

// ---- Sequelize -----------------------------------------------------------------------------

test("Sequelize: a savepoint's afterCommit runs before the outermost COMMIT, and after a failed COMMIT; the wake-up does neither", async () => {
  const { Sequelize } = require('sequelize');
  const db = new Sequelize(PG_URL, { logging: false });
  const ojs = await pgAdapter('node_prov_sequelize', db);
  await pool.query('DROP TABLE IF EXISTS node_prov_seq_deferred');
  await pool.query('CREATE TABLE node_prov_seq_deferred (id int PRIMARY KEY, ref int REFERENCES node_prov_seq_deferred (id) DEFERRABLE INITIALLY DEFERRED)');
  try {
    const events = [];
    const id = await ojs.transaction(db, async (t) => {
      const inner = await ojs.transaction(t, async (savepoint) => {
        savepoint.afterCommit(() => events.push('afterCommit'));
        return ojs.enqueueAfterCommit(savepoint, 's.one', []);
      });
      // The savepoint's hook has run; the outermost transaction is open and nothing was sent.
      assert.deepEqual(events, ['afterCommit']);
      assert.deepEqual(await ojs.outboxRows([inner]), {});
      return inner;
    });
    await delivered([id]);
    let hook = false;
    let failed;
    await assert.rejects(
      ojs.transaction(db, async (t) => {
        t.afterCommit(() => {
          hook = true;
        });
        failed = await ojs.enqueueAfterCommit(t, 's.failed', []);
        await db.query('INSERT INTO node_prov_seq_deferred VALUES (1, 99)', { transaction: t });
      }),
      /foreign key/,
    );
    assert.equal(hook, true, "Sequelize ran afterCommit although COMMIT failed");
    assert.deepEqual(await ojs.outboxRows([failed]), {});
    await db.transaction(async (t) => {
      await assert.rejects(ojs.enqueueAfterCommit(t, 'a.b', []), NoTransactionError);
    });
    assert.deepEqual((await tableRows('node_prov_sequelize')).map((r) => r.type), ['s.one']);
  } finally {
    await ojs.close();
    await db.close();
  }
});

// ---- TypeORM -------------------------------------------------------------------------------

test("TypeORM: afterTransactionCommit runs at a savepoint's release; the wake-up waits for the outermost COMMIT", async () => {
  const { DataSource, EventSubscriber } = require('typeorm');
  const events = [];
  class Watch {
    afterTransactionCommit() {
      events.push('afterTransactionCommit');
    }
  }
  EventSubscriber()(Watch); // @EventSubscriber(), without a TypeScript compiler
  const ds = await new DataSource({ type: 'postgres', url: PG_URL, subscribers: [Watch] }).initialize();
  const ojs = await pgAdapter('node_prov_typeorm', ds);
  try {
    const id = await ojs.transaction(ds, async (manager) => {
      const inner = await ojs.transaction(manager, (nested) => ojs.enqueueAfterCommit(nested, 't.one', []));
      assert.deepEqual(events, ['afterTransactionCommit']);
      assert.deepEqual(await ojs.outboxRows([inner]), {});
      return inner;
    });
    await delivered([id]);
    assert.deepEqual(events, ['afterTransactionCommit', 'afterTransactionCommit']);
    await ds.transaction(async (manager) => {
      await assert.rejects(ojs.enqueueAfterCommit(manager, 'a.b', []), NoTransactionError);
    });
    assert.deepEqual((await tableRows('node_prov_typeorm')).map((r) => r.type), ['t.one']);
  } finally {
    await ojs.close();
    await ds.destroy();
  }
});

// ---- better-sqlite3 ------------------------------------------------------------------------

test("better-sqlite3: ojs.transaction(db, fn) wakes after COMMIT; a savepoint's failure is its own; db.transaction() of its own is refused", async () => {
  const file = path.join(dir, 'bsq.db');
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${file}${suffix}`, { force: true });
  const db = new Database(file);
  const ojs = createOjs({ url: backend.url, db, outbox: { tableName: 'node_prov_bsq', ...POLL }, handleSignals: false });
  try {
    await ojs.migrate();
    await ojs.ready;
    let dropped;
    const kept = ojs.transaction(db, () => {
      const first = ojs.enqueueAfterCommitSync(db, 's.kept', []);
      try {
        ojs.transaction(db, () => {
          dropped = ojs.enqueueAfterCommitSync('s.dropped', []);
          throw new Error('inner');
        });
      } catch {
        // the savepoint rolled back; the transaction goes on
      }
      assert.throws(() => ojs.enqueueAfterCommitSync(db, 'BAD TYPE', []), (e) => e instanceof InvalidJobTypeError && e.field === 'type');
      return first;
    });
    db.transaction(() => {
      assert.throws(() => ojs.enqueueAfterCommitSync(db, 's.foreign', []), NoTransactionError);
    })();
    const now = await ojs.enqueueAfterCommit(db, 's.now', []);
    await delivered([kept, now]);
    assert.equal((await received()).has(dropped), false);
    assert.deepEqual(db.prepare('SELECT job_type FROM node_prov_bsq ORDER BY id').all().map((r) => r.job_type), ['s.kept', 's.now']);
  } finally {
    await ojs.close();
    db.close();
  }
});

// ---- a bulk of several INSERTs (the core's needs_savepoint) --------------------------------

test('a bulk larger than one INSERT runs in a savepoint (in a transaction) or a transaction of its own, through pg, Kysely and better-sqlite3', async () => {
  const jobs = Array.from({ length: 5001 }, (_, i) => ({ type: 'bulk.row', args: [i] }));
  const ojs = await pgAdapter('node_prov_bulk', pool, { relay: 'external' });
  const kysely = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: PG_URL, max: 2 }) }) });
  const file = path.join(dir, 'bulk.db');
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${file}${suffix}`, { force: true });
  const sqlite = new Database(file);
  const local = createOjs({ url: backend.url, db: sqlite, outbox: { tableName: 'node_prov_bulk' }, relay: 'external', autoStart: false, handleSignals: false });
  try {
    const inTransaction = await ojs.transaction(pool, (client) => ojs.enqueueBulk(client, jobs));
    const alone = await ojs.enqueueBulk(pool, jobs);
    const viaKysely = await ojs.transaction(kysely, (trx) => ojs.enqueueBulk(trx, jobs));
    assert.deepEqual([inTransaction.length, alone.length, viaKysely.length], [5001, 5001, 5001]);
    assert.equal((await pool.query('SELECT COUNT(*)::int AS n FROM node_prov_bulk')).rows[0].n, 3 * 5001);
    await local.migrate();
    const syncIds = local.transaction(sqlite, () => local.enqueueBulkSync(sqlite, jobs));
    const syncAlone = local.enqueueBulkSync(sqlite, jobs);
    assert.deepEqual([syncIds.length, syncAlone.length], [5001, 5001]);
    assert.equal(sqlite.prepare('SELECT COUNT(*) AS n FROM node_prov_bulk').get().n, 2 * 5001);
  } finally {
    await ojs.close();
    await local.close();
    await kysely.destroy();
    sqlite.close();
  }
});

// ---- createOjs and the provider interface --------------------------------------------------

test('createOjs({ db }) derives the relay database URL from a pg Pool and a better-sqlite3 file; anything else is named', () => {
  const fromPool = createOjs({ url: backend.url, db: pool, autoStart: false, handleSignals: false });
  assert.match(fromPool.config.adapter.database_url, /^postgres(ql)?:\/\//);
  const file = path.join(dir, 'url.db');
  const sqlite = new Database(file);
  const fromFile = createOjs({ url: backend.url, db: sqlite, autoStart: false, handleSignals: false, relayProcess: false });
  assert.equal(fromFile.config.adapter.database_url, `sqlite://${file}`);
  sqlite.close();
  assert.throws(() => createOjs({ url: backend.url, autoStart: false }), (e) => e instanceof InvalidConfigError && e.field === 'db');
  assert.throws(() => createOjs({ url: backend.url, db: { nothing: true }, databaseUrl: PG_URL, autoStart: false }), (e) => e instanceof InvalidConfigError && e.field === 'db');
  assert.throws(() => createOjs({ url: backend.url, db: pool, providers: [{}], autoStart: false }), (e) => e instanceof InvalidConfigError && e.field === 'providers');
  return Promise.all([fromPool.close(), fromFile.close()]);
});

test("a provider of the application's own (the providers option) is used before the built-in ones", async () => {
  // A wrapper the application's code passes around, holding a pg Pool; the provider delegates
  // to the pg provider for everything but detection.
  const wrapper = { wrappedPool: pool };
  const own = {
    name: 'wrapped-pg',
    matches: (db) => db === wrapper,
    dialect: () => 'postgresql',
    placeholder: 'dollar',
    execute: (db, text, params) => providers.pg.execute(db === wrapper ? pool : db, text, params),
    begin: (db, work) => providers.pg.begin(pool, work),
    savepoint: (tx, work) => providers.pg.savepoint(tx, work),
  };
  await pool.query('DROP TABLE IF EXISTS node_prov_custom');
  const ojs = createOjs({ url: backend.url, db: wrapper, databaseUrl: PG_URL, providers: [own], outbox: { tableName: 'node_prov_custom', ...POLL }, handleSignals: false });
  try {
    await ojs.migrate();
    await ojs.ready;
    const id = await ojs.transaction(wrapper, (client) => ojs.enqueueAfterCommit(client, 'c.one', []));
    await delivered([id]);
  } finally {
    await ojs.close();
  }
});

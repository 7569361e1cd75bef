'use strict';
// The type-first calls (`enqueueAfterCommit(type, args)`, `enqueueBulk(jobs)`) cannot see a
// plain `knex.transaction(async (trx) => ...)` around them (knex keeps no ambient record of
// it). Inside one that rolls back they must fail at once with NoTransactionError
// (NO_TRANSACTION) instead of committing a row of their own (PostgreSQL: the job was sent
// although the transaction rolled back) or waiting for the one connection the transaction
// holds until knex's acquire timeout (SQLite: "Timeout acquiring a connection" after 60 s).
// The explicit forms keep working: the transactor first, the knex instance first (a
// transaction of its own), and the type-first form inside `ojs.transaction`.
//
// The devserver never receives the refused job: asserted once later sentinel jobs (staged
// after it) have arrived.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, knexLib, PG_URL, waitFor, WAIT_MS } = require('./support');

const { createOjs, NoTransactionError, OJSError } = ojsPackage;

/** knex's wait for a free connection in these tests: short, so a call that waits fails soon. */
const ACQUIRE_TIMEOUT_MS = 4000;

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

function knexFor(database, dir) {
  if (database === 'sqlite') {
    return knexLib({
      client: 'better-sqlite3',
      connection: { filename: path.join(dir, 'app.db') },
      useNullAsDefault: true,
      acquireConnectionTimeout: ACQUIRE_TIMEOUT_MS,
    });
  }
  return knexLib({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 4 }, acquireConnectionTimeout: ACQUIRE_TIMEOUT_MS });
}

/**
 * Asserts `promise` rejects with our NoTransactionError at once: settled before the event loop
 * turns once, so no query ran and no connection was waited for (not timed: a call that went to
 * the database, or to knex's pool, is still pending then, however fast the machine).
 */
async function refusedAtOnce(promise, call) {
  let outcome = null;
  promise.then(
    () => (outcome = { resolved: true }),
    (error) => (outcome = { error }),
  );
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(outcome !== null, `${call} was still pending after one turn of the event loop: it went to the database`);
  assert.ok(!outcome.resolved, `${call} resolved: it left the transaction (autocommit)`);
  const { error } = outcome;
  assert.ok(error instanceof NoTransactionError, `${call}: ${error && error.name}: ${error && error.message}`);
  assert.ok(error instanceof OJSError);
  assert.equal(error.code, 'NO_TRANSACTION');
  assert.equal(error.retryable, false);
  assert.match(error.message, /trx/, 'the message says to pass the transaction');
  assert.match(error.message, /ojs\.transaction/, 'the message names ojs.transaction');
}

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: a type-first call inside a plain knex.transaction fails at once and never leaves it`, async () => {
    await backend.reset();
    const dir = scratchDir(`no-trx-${database}`);
    const knex = knexFor(database, dir);
    const table = `node_no_trx_${database}`;
    const users = `node_no_trx_users_${database}`;
    await knex.schema.dropTableIfExists(table);
    await knex.schema.dropTableIfExists(users);
    await knex.schema.createTable(users, (tb) => tb.string('email'));
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.start();

      const rolledBack = knex.transaction(async (trx) => {
        await trx(users).insert({ email: 'ada@example.com' });
        await refusedAtOnce(ojs.enqueueAfterCommit('email.welcome', [1]), 'enqueueAfterCommit(type, args)');
        await refusedAtOnce(ojs.enqueueBulk([{ type: 'email.welcome', args: [2] }]), 'enqueueBulk(jobs)');
        // The transaction is untouched by the refusals and still usable.
        assert.equal(Number((await trx(users).count({ n: '*' }))[0].n), 1);
        throw new Error('payment declined');
      });
      await assert.rejects(rolledBack, /payment declined/);

      // Outside any transaction the type-first form is refused the same way.
      await refusedAtOnce(ojs.enqueueAfterCommit('email.welcome', [3]), 'enqueueAfterCommit(type, args) outside a transaction');

      // The explicit forms work: in ojs.transaction (type-first), the transactor first, and
      // the knex instance first (a transaction of its own, sent at once).
      const inOjsTransaction = await ojs.transaction(async (trx) => {
        await trx(users).insert({ email: 'kept@example.com' });
        return ojs.enqueueAfterCommit('kept.ambient', [1]);
      });
      const withTrx = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'kept.explicit', [2]));
      const sentinel = await ojs.enqueueAfterCommit(knex, 'sentinel.job', [3]);
      const wanted = [inOjsTransaction, withTrx, sentinel];
      const received = await waitFor(async () => {
        const r = await backend.received();
        return wanted.every((id) => r.jobs.some((job) => job.id === id)) && r;
      }, WAIT_MS, 'the explicit jobs and the sentinel at the backend');
      assert.deepEqual(received.jobs.map((job) => job.type).sort(), ['kept.ambient', 'kept.explicit', 'sentinel.job']);
      assert.ok(!received.jobs.some((job) => job.type === 'email.welcome'), 'the refused job was never sent');
      const [{ n }] = await knex(table).count({ n: '*' });
      assert.equal(Number(n), 3, 'no outbox row of the refused calls');
      assert.equal(Number((await knex(users).count({ n: '*' }))[0].n), 1, 'only the committed user');
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

'use strict';
// Bad input: every call is refused with the OJSError subclass of the core's code (and field),
// nothing is staged or sent, and the application's transaction stays usable, on SQLite and
// PostgreSQL (where a failed statement would abort the transaction).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, knexLib, waitFor, WAIT_MS } = require('./support');

const {
  createOjs, OJSError, ValidationError, InvalidJobTypeError, InvalidQueueError, InvalidArgsError,
  InvalidOptionsError, InvalidMetaError, PayloadTooLargeError, InvalidConfigError, NoTransactionError,
  OutboxTableMissingError, DatabaseError, ConfigurationError, InvalidDatabaseUrlError,
} = ojsPackage;

const circular = [];
circular.push(circular);

/** [name, call(ojs, trx), code, class, field or undefined]: one wrong part each. */
const BAD_CALLS = [
  ['type with a hyphen and capitals', (o, t) => o.enqueueAfterCommit(t, 'Email-Welcome', [1]), 'INVALID_JOB_TYPE', InvalidJobTypeError, 'type'],
  ['type that is a number', (o, t) => o.enqueueAfterCommit(t, 5, [1]), 'INVALID_JOB_TYPE', InvalidJobTypeError, 'type'],
  ['empty type', (o, t) => o.enqueueAfterCommit(t, '', [1]), 'INVALID_JOB_TYPE', InvalidJobTypeError, 'type'],
  ['args that are a string', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', 'user-1'), 'INVALID_ARGS', InvalidArgsError, 'args'],
  ['args that are an object', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', { id: 1 }), 'INVALID_ARGS', InvalidArgsError, 'args'],
  ['args missing', (o, t) => o.enqueueAfterCommit(t, 'email.welcome'), 'INVALID_ARGS', InvalidArgsError, 'args'],
  ['args holding a BigInt', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [10n]), 'INVALID_ARGS', InvalidArgsError, 'args'],
  ['circular args', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', circular), 'INVALID_ARGS', InvalidArgsError, 'args'],
  ['queue with spaces', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], { queue: 'Mail Queue' }), 'INVALID_QUEUE', InvalidQueueError, 'options.queue'],
  ['priority out of range', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], { priority: 101 }), 'INVALID_OPTIONS', InvalidOptionsError, 'options.priority'],
  ['unknown option', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], { speed: 'fast' }), 'INVALID_OPTIONS', InvalidOptionsError, 'options.speed'],
  ['options that are a string', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], 'fast'), 'INVALID_OPTIONS', InvalidOptionsError, 'options'],
  ['options holding a BigInt', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], { timeout_ms: 5n }), 'INVALID_OPTIONS', InvalidOptionsError, 'options'],
  ['retry backoff below 1', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], { retry: { backoff_coefficient: 0.5 } }), 'INVALID_OPTIONS', InvalidOptionsError, 'options.retry.backoff_coefficient'],
  ['meta that is a string', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], null, 'x'), 'INVALID_META', InvalidMetaError, 'meta'],
  ['meta tenant that is a number', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', [1], null, { tenant_id: 5 }), 'INVALID_META', InvalidMetaError, 'meta.tenant_id'],
  ['request context with an unknown key', (o, t) => o.withContext({ user: 'u1' }, () => o.enqueueAfterCommit(t, 'email.welcome', [1])), 'INVALID_META', InvalidMetaError, 'context'],
  ['payload over 1 MiB', (o, t) => o.enqueueAfterCommit(t, 'email.welcome', ['x'.repeat(1100 * 1024)]), 'PAYLOAD_TOO_LARGE', PayloadTooLargeError, 'args'],
  ['bulk with one invalid job', (o, t) => o.enqueueBulk(t, [{ type: 'ok.job', args: [1] }, { type: 'Bad', args: [2] }]), 'INVALID_JOB_TYPE', InvalidJobTypeError, 'type'],
  ['bulk that is not an array', (o, t) => o.enqueueBulk(t, { type: 'ok.job', args: [] }), 'INVALID_ARGS', InvalidArgsError, undefined],
  ['bulk job with an unknown key', (o, t) => o.enqueueBulk(t, [{ type: 'ok.job', args: [], queue: 'q' }]), 'INVALID_ARGS', InvalidArgsError, undefined],
  ['immediate enqueue with a bad type', (o) => o.enqueue('Bad Type', [1]), 'INVALID_JOB_TYPE', InvalidJobTypeError, 'type'],
  ['immediate enqueue with bad options', (o) => o.enqueue('ok.job', [1], { priority: 'high' }), 'INVALID_OPTIONS', InvalidOptionsError, 'options.priority'],
];

let backend;
const dir = scratchDir('bad-input');
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: bad input is refused with its code, stages nothing, keeps the transaction usable`, async (t) => {
    await backend.reset();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(dir, 'bad.db')) : postgresKnex();
    const table = `node_bad_${database}`;
    const users = `node_bad_users_${database}`;
    await knex.schema.dropTableIfExists(table);
    await knex.schema.dropTableIfExists(users);
    await knex.schema.createTable(users, (tb) => tb.string('email'));
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.start();
      const trx = await knex.transaction();
      await trx(users).insert({ email: 'before@example.com' });
      for (const [name, call, code, Class, field] of BAD_CALLS) {
        await t.test(name, async () => {
          await assert.rejects(call(ojs, trx), (error) => {
            assert.ok(error instanceof OJSError, `${error}`);
            assert.ok(error instanceof Class, `${error.name} is not a ${Class.name}`);
            assert.equal(error.code, code);
            if (Class !== PayloadTooLargeError && code.startsWith('INVALID_')) assert.ok(error instanceof ValidationError || code === 'INVALID_CONFIG');
            if (field !== undefined) assert.equal(error.field, field);
            assert.equal(error.retryable, false);
            return true;
          });
          // The transaction is still usable and holds no outbox row.
          const [{ n }] = await trx(table).count({ n: '*' });
          assert.equal(Number(n), 0);
        });
      }
      const good = await ojs.enqueueAfterCommit(trx, 'email.welcome', [7]);
      await trx(users).insert({ email: 'after@example.com' });
      await trx.commit();
      assert.equal((await knex(users).count({ n: '*' }))[0].n * 1, 2);
      const [{ n }] = await knex(table).count({ n: '*' });
      assert.equal(Number(n), 1, 'only the valid job has a row');
      const received = await waitFor(async () => {
        const r = await backend.received();
        return r.jobs.length >= 1 && r;
      }, WAIT_MS, 'the valid job at the backend');
      assert.deepEqual(received.jobs.map((job) => job.id), [good], 'the backend got the valid job only');
      assert.equal(received.requests.single + received.requests.batch >= 1, true);

      await t.test('a finished transaction is refused with NO_TRANSACTION', async () => {
        await assert.rejects(ojs.enqueueAfterCommit(trx, 'email.welcome', [8]), (error) => error instanceof NoTransactionError && error.code === 'NO_TRANSACTION');
      });
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

test('configuration errors are ConfigurationErrors naming the key', async () => {
  const knex = sqliteKnex(path.join(dir, 'config.db'));
  try {
    assert.throws(() => createOjs({ url: 'http://127.0.0.1:1', knex, outbox: { batchSize: 0 }, autoStart: false }), (error) =>
      error instanceof InvalidConfigError && error.code === 'INVALID_CONFIG' && error.field === 'adapter.outbox.batch_size');
    assert.throws(() => createOjs({ url: 'ftp://nowhere', knex, autoStart: false }), (error) =>
      error instanceof InvalidConfigError && error.field === 'adapter.ojs_url');
    assert.throws(() => createOjs({ url: 'http://127.0.0.1:1', knex, relay: 'sometimes', autoStart: false }), (error) =>
      error instanceof InvalidConfigError && error.field === 'adapter.relay.mode');
  } finally {
    await knex.destroy();
  }
  const memory = knexLib({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
  try {
    // The core derives the relay's URL (database_url_from_parts) and refuses a memory database.
    assert.throws(() => createOjs({ url: 'http://127.0.0.1:1', knex: memory, autoStart: false }), (error) =>
      error instanceof InvalidDatabaseUrlError && error instanceof ConfigurationError &&
      error.code === 'INVALID_DATABASE_URL' && error.field === 'database_url' &&
      error.message.includes('createOjs({ databaseUrl })'));
  } finally {
    await memory.destroy();
  }
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: staging into a table that was never migrated is OUTBOX_TABLE_MISSING`, async () => {
    const knex = database === 'sqlite' ? sqliteKnex(path.join(dir, 'missing.db')) : postgresKnex();
    const table = `node_never_migrated_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    try {
      await assert.rejects(ojs.enqueueAfterCommit(knex, 'email.welcome', [1]), (error) =>
        error instanceof OutboxTableMissingError && error instanceof DatabaseError &&
        error.code === 'OUTBOX_TABLE_MISSING' && error.retryable === false && error.cause !== undefined);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

'use strict';
// Job options in JavaScript's spelling (camelCase keys, durations in milliseconds, a Date for a
// time) reach the backend as exactly the job the spec's spelling sends, on every enqueue path;
// a refusal names the option as the caller spelled it, and stages nothing.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs, InvalidOptionsError } = ojsPackage;

const WHEN = new Date(Date.UTC(2030, 0, 2, 3, 4, 5));
const SPEC = {
  queue: 'email',
  priority: 5,
  delay_until: '2030-01-02T03:04:05.000Z',
  timeout_ms: 30000,
  retry: { max_attempts: 4, initial_interval: 'PT1.5S', max_interval: 'PT2M', backoff_coefficient: 2, non_retryable_errors: ['Fatal'] },
  unique: { keys: ['type', 'args'], args_keys: ['id'], period: 'PT1H', on_conflict: 'reject' },
};
const CAMEL = {
  queue: 'email',
  priority: 5,
  delayUntil: WHEN,
  timeoutMs: 30000,
  retry: { maxAttempts: 4, initialInterval: 1500, maxInterval: 120000, backoffCoefficient: 2, nonRetryableErrors: ['Fatal'] },
  unique: { keys: ['type', 'args'], argsKeys: ['id'], period: 3600000, onConflict: 'reject' },
};

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: camelCase options with milliseconds send the job the spec's names send`, async () => {
    await backend.reset();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir('js-options'), 'app.db')) : postgresKnex();
    const table = `node_js_options_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.start();
      // Distinct args, so the unique policy sees four different jobs.
      const ids = await knex.transaction(async (trx) => [
        await ojs.enqueueAfterCommit(trx, 'user.spec', [{ id: 1 }], SPEC),
        await ojs.enqueueAfterCommit(trx, 'user.camel', [{ id: 2 }], CAMEL),
        ...(await ojs.enqueueBulk(trx, [{ type: 'user.bulk', args: [{ id: 3 }], options: CAMEL }])),
      ]);
      const now = await ojs.enqueue('user.now', [{ id: 4 }], CAMEL);
      const received = await waitFor(async () => {
        const r = await backend.received();
        return r.jobs.length >= 4 && r;
      }, WAIT_MS, 'the four jobs at the backend');
      const byId = new Map(received.jobs.map((job) => [job.id, job]));
      const sent = byId.get(ids[0]).options;
      for (const key of Object.keys(SPEC)) assert.deepEqual(sent[key], SPEC[key], `spec form: ${key}`);
      for (const id of [ids[1], ids[2], now]) {
        const options = byId.get(id).options;
        for (const key of Object.keys(SPEC)) assert.deepEqual(options[key], sent[key], `${id}: ${key}`);
        assert.equal(options.delayUntil, undefined, 'no camelCase key on the wire');
      }
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

test('a refused camelCase option is named as written, and nothing is staged', async () => {
  const knex = sqliteKnex(path.join(scratchDir('js-options-refused'), 'app.db'));
  const table = 'node_js_options_refused';
  await knex.schema.dropTableIfExists(table);
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
  try {
    await ojs.migrate();
    const trx = await knex.transaction();
    const cases = [
      [{ timeoutMs: -1 }, 'options.timeoutMs'],
      [{ retry: { initialInterval: 0 } }, 'options.retry.initialInterval'],
      [{ retry: { maxInterval: 1.5 } }, 'options.retry.maxInterval'],
      [{ delayUntil: WHEN, delay_until: '2030-01-02T03:04:05Z' }, 'options.delayUntil'],
    ];
    for (const [options, field] of cases) {
      await assert.rejects(ojs.enqueueAfterCommit(trx, 'user.bad', [1], options), (error) => {
        assert.ok(error instanceof InvalidOptionsError, `${error.name}: ${error.message}`);
        assert.equal(error.code, 'INVALID_OPTIONS');
        assert.ok(error.message.startsWith(`${field}: `), error.message);
        return true;
      });
    }
    const [{ n }] = await trx(table).count({ n: '*' });
    assert.equal(Number(n), 0, 'nothing staged');
    await trx.rollback();
  } finally {
    await ojs.close();
    await knex.destroy();
  }
});

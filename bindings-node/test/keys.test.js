'use strict';
// Keyed staging through knex on SQLite, PostgreSQL and MariaDB, against the devserver: a unique job is
// decided in the staging transaction (reject: DuplicateJobError naming the held job, the
// transaction still usable; ignore: the held job's id; a bulk holding a rejected job stages
// nothing), a job with an ordering key is staged and delivered without the key on the wire,
// and with `encryption` configured the backend receives the args sealed (never the plaintext).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, mysqlKnex, waitFor } = require('./support');

const { createOjs, dropOutboxTable, DuplicateJobError, OJSError } = ojsPackage;

const REJECT = { unique: { keys: ['type', 'args'], argsKeys: ['order'], onConflict: 'reject' } };
const IGNORE = { unique: { keys: ['type', 'args'], args_keys: ['day'], on_conflict: 'ignore' } };
/** Two 32-byte keys (base64); the ids are camelCase on purpose: never respelled. */
const KEYS = { oldKey: 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=', newKey: 'ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=' };

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/** An adapter on a fresh table of `database`, its relay started; `work(ojs, knex, table)`. */
async function withAdapter(database, name, extra, work) {
  await backend.reset();
  const knex = { sqlite: () => sqliteKnex(path.join(scratchDir(`keys-${name}`), 'app.db')), postgres: postgresKnex, mariadb: mysqlKnex }[database]();
  const table = `node_keys_${name}_${database}`;
  await dropOutboxTable(knex, { tableName: table });
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false, ...extra });
  try {
    await ojs.migrate();
    await work(ojs, knex, table);
  } finally {
    await ojs.close();
    await knex.destroy();
  }
}

const count = async (knex, table) => Number((await knex(table).count({ n: '*' }))[0].n);

const receivedJobs = (ids) =>
  waitFor(async () => {
    const { jobs } = await backend.received();
    const byId = new Map(jobs.map((job) => [job.id, job]));
    return ids.every((id) => byId.has(id)) && { jobs, byId };
  }, undefined, `delivery of ${ids.join(', ')}`);

for (const database of ['sqlite', 'postgres', 'mariadb']) {
  test(`${database}: unique reject raises DuplicateJobError naming the held job; the transaction goes on and commits`, async () => {
    await withAdapter(database, 'reject', {}, async (ojs, knex, table) => {
      const ids = await knex.transaction(async (trx) => {
        const first = await ojs.enqueueAfterCommit(trx, 'invoice.send', [{ order: 7, copy: 1 }], REJECT);
        await assert.rejects(ojs.enqueueAfterCommit(trx, 'invoice.send', [{ order: 7, copy: 2 }], REJECT), (error) => {
          assert.ok(error instanceof DuplicateJobError, `${error.name}: ${error.message}`);
          assert.ok(error instanceof OJSError);
          assert.equal(error.code, 'DUPLICATE');
          assert.equal(error.existingJobId, first);
          assert.equal(error.existing_job_id, first);
          return true;
        });
        // A bulk holding a rejected job stages nothing of it (its savepoint rolled back).
        await assert.rejects(
          ojs.enqueueBulk(trx, [
            { type: 'invoice.plain', args: [1] },
            { type: 'invoice.send', args: [{ order: 7, copy: 3 }], options: REJECT },
            { type: 'invoice.plain', args: [2] },
          ]),
          DuplicateJobError,
        );
        assert.equal(await count(trx, table), 1, 'only the first job is staged');
        // The transaction is still usable: another job, then COMMIT.
        const plain = await ojs.enqueueAfterCommit(trx, 'invoice.after', [3]);
        const other = await ojs.enqueueAfterCommit(trx, 'invoice.send', [{ order: 8 }], REJECT);
        return [first, plain, other];
      });
      await ojs.start();
      const { jobs } = await receivedJobs(ids);
      assert.equal(jobs.length, 3);
      // A later transaction meets the held (now sent or still pending) job by the outbox's rule only.
      assert.equal(new Set(ids).size, 3);
    });
  });

  test(`${database}: unique ignore returns the held job's id and stages nothing; a bulk reports it at the job's place`, async () => {
    await withAdapter(database, 'ignore', {}, async (ojs, knex, table) => {
      const held = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'report.build', [{ day: 'd1', n: 1 }], IGNORE));
      const again = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'report.build', [{ day: 'd1', n: 2 }], IGNORE));
      assert.equal(again, held);
      const bulk = await knex.transaction((trx) =>
        ojs.enqueueBulk(trx, [
          { type: 'report.other', args: [1] },
          { type: 'report.build', args: [{ day: 'd1', n: 3 }], options: IGNORE },
        ]),
      );
      assert.equal(bulk[1], held);
      assert.notEqual(bulk[0], held);
      assert.equal(await count(knex, table), 2);
      await ojs.start();
      const { jobs, byId } = await receivedJobs([held, bulk[0]]);
      assert.deepEqual(byId.get(held).args, [{ day: 'd1', n: 1 }]);
      assert.equal(jobs.length, 2);
    });
  });

  test(`${database}: a job with an ordering key is staged and delivered in order, without the key on the wire`, async () => {
    await withAdapter(database, 'order', {}, async (ojs, knex) => {
      await ojs.start();
      const ids = await knex.transaction(async (trx) => [
        await ojs.enqueueAfterCommit(trx, 'account.debit', [1], { orderingKey: 'account-1' }),
        ...(await ojs.enqueueBulk(trx, [
          { type: 'account.debit', args: [2], options: { ordering_key: 'account-1' } },
          { type: 'account.other', args: [3] },
        ])),
      ]);
      const { byId, jobs } = await receivedJobs(ids);
      for (const id of ids) assert.equal(byId.get(id).options && byId.get(id).options.ordering_key, undefined, 'no ordering_key on the wire');
      const position = (id) => jobs.findIndex((job) => job.id === id);
      assert.ok(position(ids[0]) < position(ids[1]), 'the key\'s jobs in commit order');
    });
  });

  test(`${database}: with encryption the backend receives the sealed envelope and the codec meta, never the plaintext`, async () => {
    const encryption = { keyId: 'newKey', keys: KEYS };
    await withAdapter(database, 'enc', { encryption }, async (ojs, knex) => {
      assert.deepEqual(ojs.config.adapter.encryption, { key_id: 'newKey', keys: KEYS }, 'key ids passed as written');
      await ojs.start();
      const card = '4111111111111111';
      const id = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'payment.capture', [{ card, amount: 9999 }]));
      const { byId } = await receivedJobs([id]);
      const job = byId.get(id);
      assert.equal(job.args.length, 1);
      const [envelope] = job.args;
      assert.equal(envelope.ojs_encoded, true);
      assert.equal(envelope.encoding, 'binary/encrypted');
      assert.equal(typeof envelope.data, 'string');
      assert.ok(!JSON.stringify(job).includes(card), 'no plaintext at the backend');
      assert.deepEqual(job.meta['ojs.codec.encodings'], ['binary/encrypted']);
      assert.equal(job.meta['ojs.codec.key_id'], 'newKey');
    });
  });
}

test('a bad encryption key is INVALID_CONFIG at createOjs; the config option keeps key ids as written', async () => {
  const knex = sqliteKnex(path.join(scratchDir('keys-bad-enc'), 'app.db'));
  try {
    assert.throws(
      () => createOjs({ url: backend.url, knex, encryption: { keyId: 'k1', keys: { k1: 'not base64 of 32 bytes' } }, autoStart: false, handleSignals: false }),
      (error) => error instanceof OJSError && error.code === 'INVALID_CONFIG',
    );
    const ojs = createOjs({ url: backend.url, knex, config: { encryption: { key_id: 'oldKey', keys: KEYS } }, relay: 'external', autoStart: false, handleSignals: false });
    assert.deepEqual(ojs.config.adapter.encryption, { key_id: 'oldKey', keys: KEYS });
    await ojs.close();
  } finally {
    await knex.destroy();
  }
});

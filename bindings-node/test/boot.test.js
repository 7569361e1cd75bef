'use strict';
// Issue 11, item 8: the in-process relay starts in createOjs (when the app is built), not on
// the first request or enqueue: rows committed before the app started are sent with no call
// to the adapter at all. On SQLite (relay host process) and PostgreSQL (in this process).

const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, sqliteKnex, postgresKnex, startDevserver, waitFor } = require('./support');

const { createOjs } = ojsPackage;

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: createOjs starts the relay before any request`, async () => {
    const backend = await startDevserver();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`boot-${database}`), 'app.db')) : postgresKnex();
    const table = `node_boot_${database}`;
    await knex.schema.dropTableIfExists(table);
    // Rows committed while no relay runs (an external-mode adapter only stages).
    const stager = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
    let app;
    try {
      await stager.migrate();
      const ids = await knex.transaction((trx) => stager.enqueueBulk(trx, [{ type: 'boot.waiting', args: [1] }, { type: 'boot.waiting', args: [2] }]));
      assert.equal((await backend.received()).jobs.length, 0);
      // The application starts: nothing but createOjs is called.
      app = createOjs({ url: backend.url, knex, outbox: { tableName: table, pollInterval: 'PT0.1S' }, handleSignals: false });
      await waitFor(async () => (await backend.received()).jobs.length === ids.length, undefined, 'the rows sent by the relay createOjs started');
      assert.deepEqual((await backend.received()).jobs.map((job) => job.id).sort(), [...ids].sort());
    } finally {
      if (app) await app.close();
      await stager.close();
      await knex.destroy();
      await backend.stop();
    }
  });
}

'use strict';
// The staged rows themselves, on SQLite, PostgreSQL and MariaDB: a single enqueueAfterCommit (the
// per-call hot path, `stageJob`) writes the same row as a bulk of that one job (the general
// path, `stage`), with and without a tenant (one holding NUL is refused), for the first job of a fresh adapter (which
// fetches the core's INSERT text) and for later ones; a bulk whose job holds a function under
// an unknown key still reaches the core, which refuses the key.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, sqliteKnex, postgresKnex, mysqlKnex } = require('./support');

const { createOjs, dropOutboxTable, InvalidArgsError } = ojsPackage;

/** A knex instance on `database` (a SQLite file `file`), its outbox `table` dropped. */
async function freshKnex(database, file, table) {
  const knex = { sqlite: () => sqliteKnex(file), postgres: postgresKnex, mariadb: mysqlKnex }[database]();
  await dropOutboxTable(knex, { tableName: table });
  return knex;
}

const COLUMNS = ['job_type', 'job_args', 'job_options', 'job_meta', 'tenant_id', 'status'];

async function row(knex, table, jobId) {
  const found = await knex(table).where({ job_id: jobId }).first();
  assert.ok(found, `a row for ${jobId}`);
  return Object.fromEntries(COLUMNS.map((column) => [column, found[column]]));
}

for (const database of ['sqlite', 'postgres', 'mariadb']) {
  test(`${database}: a single call stages the same row as a bulk of that job`, async () => {
    const dir = scratchDir(`staging-${database}`);
    const table = `node_staging_${database}`;
    const knex = await freshKnex(database, path.join(dir, 'staging.db'), table);
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      const jobs = [
        ['plain', 'email.welcome', [1, 'ada@example.com']],
        ['options and meta', 'report.build', [{ month: '2026-11' }], { queue: 'reports', priority: 7 }, { origin: 'test' }],
        ['a tenant', 'invoice.send', [42], null, { tenant_id: 'acme' }],
        ['unicode and quotes', 'note.add', ['\u00e9t\u00e9 "quoted" \\ \u2028 \ud83d\ude00']],
      ];
      const trx = await knex.transaction();
      // A tenant holding NUL is refused on every database (PostgreSQL text cannot hold it).
      await assert.rejects(ojs.enqueueAfterCommit(trx, 'invoice.send', [43], null, { tenant_id: 'a\u0000b' }), (error) =>
        error.code === 'INVALID_META' && error.message.startsWith('meta.tenant_id: '));
      const pairs = [];
      for (const [name, type, args, options, meta] of jobs) {
        const single = await ojs.enqueueAfterCommit(trx, type, args, options, meta);
        const [bulk] = await ojs.enqueueBulk(trx, [{ type, args, options, meta }]);
        pairs.push([name, single, bulk, meta && meta.tenant_id]);
      }
      await trx.commit();
      for (const [name, single, bulk, tenant] of pairs) {
        assert.notEqual(single, bulk, name);
        const singleRow = await row(knex, table, single);
        assert.deepEqual(singleRow, await row(knex, table, bulk), name);
        assert.equal(singleRow.tenant_id, tenant ?? null, name);
        assert.equal(singleRow.status, 'pending', name);
      }
      const [{ n }] = await knex(table).count({ n: '*' });
      assert.equal(Number(n), jobs.length * 2);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });

  test(`${database}: a bulk job holding a function under an unknown key is refused by the core`, async () => {
    const dir = scratchDir(`staging-refused-${database}`);
    const table = `node_staging_refused_${database}`;
    const knex = await freshKnex(database, path.join(dir, 'refused.db'), table);
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      const trx = await knex.transaction();
      await assert.rejects(ojs.enqueueBulk(trx, [{ type: 'ok.job', args: [1] }, { type: 'ok.job', args: [2], callback: () => 1 }]), (error) =>
        error instanceof InvalidArgsError && error.code === 'INVALID_ARGS' && /callback/.test(error.message));
      const ids = await ojs.enqueueBulk(trx, [{ type: 'ok.job', args: [1] }, { type: 'ok.job', args: [2], options: undefined }]);
      await trx.commit();
      const [{ n }] = await knex(table).count({ n: '*' });
      assert.equal(Number(n), 2, 'only the accepted bulk has rows');
      assert.equal(ids.length, 2);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

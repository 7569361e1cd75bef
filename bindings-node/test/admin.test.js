'use strict';
// The bin's operator commands (node_modules/.bin/ojs-relay migrate | status | dead ...) are
// the core's (`Bridge::admin`): its words, its confirmation rule and counts, its exit codes;
// and the adapter's admin calls take `{ tenant }`.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ojsPackage, PACKAGE_DIR, scratchDir, sqliteKnex, knexLib } = require('./support');

const { createOjs } = ojsPackage;
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');

function relay(db, ...args) {
  const env = { ...process.env };
  delete env.OJS_URL;
  return spawnSync(BIN, ['--database-url', db, '--table', 'node_admin', ...args], { env, encoding: 'utf8', timeout: 60_000 });
}

test('ojs-relay migrate, status and dead print what the core says and exit with its code', async () => {
  const dir = scratchDir('admin-bin');
  const file = path.join(dir, 'app.db');
  const db = `sqlite://${file}`;

  const missing = relay(db, 'status');
  assert.equal(missing.status, 1, missing.stderr);
  assert.match(missing.stderr, /OUTBOX_TABLE_MISSING/);
  assert.match(missing.stderr, /`ojs-relay migrate` \(node_modules\/\.bin\) or the knex migration/);

  const created = relay(db, 'migrate');
  assert.equal(created.status, 0, created.stderr);
  assert.match(created.stdout, /created outbox table "node_admin"/);
  const again = relay(db, 'migrate');
  assert.match(again.stdout, /already exists/);

  // Two dead rows of tenant acme, one of another tenant (in the file migrate created).
  const knex = knexLib({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true });
  try {
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: 'node_admin' }, relay: 'external', relayProcess: false, autoStart: false, handleSignals: false });
    await knex.transaction(async (trx) => {
      for (const tenant of ['acme', 'acme', 'other']) {
        await ojs.enqueueAfterCommit(trx, 'admin.job', [], null, { tenant_id: tenant });
      }
    });
    await knex('node_admin').update({ status: 'dead', error: 'gave up' });
    await ojs.close();
  } finally {
    await knex.destroy();
  }

  const status = relay(db, 'status', '--json');
  assert.equal(status.status, 0, status.stderr);
  const counts = JSON.parse(status.stdout);
  assert.equal(counts.dead, 3);
  assert.equal(counts.table, 'node_admin');

  const list = relay(db, 'dead', 'list', '--tenant', 'acme', '--json');
  assert.equal(list.status, 0, list.stderr);
  assert.equal(JSON.parse(list.stdout).length, 2);

  // The core's confirmation rule: without --yes, the count it would delete and exit 2.
  const refused = relay(db, 'dead', 'purge', '--tenant', 'acme');
  assert.equal(refused.status, 2, refused.stderr);
  assert.match(refused.stderr, /refusing to purge without --yes: this would delete 2 dead row\(s\) of tenant "acme"/);
  const purged = relay(db, 'dead', 'purge', '--tenant', 'acme', '--yes');
  assert.equal(purged.status, 0, purged.stderr);
  assert.match(purged.stdout, /purged 2 dead row\(s\) of tenant "acme"/);

  const replayed = relay(db, 'dead', 'replay');
  assert.equal(replayed.status, 0, replayed.stderr);
  assert.match(replayed.stdout, /replayed 1 dead row\(s\)/);

  const bad = relay(db, 'dead', 'frobnicate');
  assert.equal(bad.status, 2, bad.stderr);
  // The core's command line (clap, as the Rust ojs-relay) names the commands it has.
  assert.match(bad.stderr, /unrecognized subcommand 'frobnicate'/);
  assert.match(bad.stderr, /commands: list, replay, purge/);
});

test('admin calls take { tenant }; an old or misspelled key is refused, never ignored', async () => {
  const knex = sqliteKnex(path.join(scratchDir('admin-calls'), 'app.db'));
  const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: 'node_admin_calls' }, relay: 'external', autoStart: false, handleSignals: false });
  try {
    await ojs.migrate();
    await knex.transaction(async (trx) => {
      await ojs.enqueueAfterCommit(trx, 'admin.job', [], null, { tenant_id: 'acme' });
      await ojs.enqueueAfterCommit(trx, 'admin.job', [], null, { tenant_id: 'other' });
    });
    await knex('node_admin_calls').update({ status: 'dead' });
    assert.equal((await ojs.deadList({ tenant: 'acme' })).length, 1);
    assert.equal((await ojs.deadList({ limit: 1 })).length, 1);
    await assert.rejects(ojs.deadList({ tenantId: 'acme' }), (error) => error.code === 'INVALID_CONFIG' && error.field === 'tenantId');
    await assert.rejects(ojs.deadPurge({ tenantId: 'acme' }), (error) => error.code === 'INVALID_CONFIG');
    assert.equal(await ojs.deadReplay({ tenant: 'other' }), 1);
    assert.equal(await ojs.deadPurge({ tenant: 'acme' }), 1);
  } finally {
    await ojs.close();
    await knex.destroy();
  }
});

'use strict';
// The backend URL has no silent default (issue 11): createOjs without `url` fails with
// INVALID_CONFIG naming `createOjs({ url })`, unless NODE_ENV is exactly "development"; then the
// core's development URL is used and one console.warn line says so. Misspelled top-level
// options are refused with the accepted spelling. A real knex on a real SQLite file throughout.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { ojsPackage, PACKAGE_DIR, scratchDir, sqliteKnex } = require('./support');

const { createOjs } = ojsPackage;
const SETTING = 'createOjs({ url })';

/** Runs `fn` with NODE_ENV set to `value` (undefined: unset), restoring it afterwards. */
function withNodeEnv(value, fn) {
  const saved = process.env.NODE_ENV;
  if (value === undefined) delete process.env.NODE_ENV;
  else process.env.NODE_ENV = value;
  try {
    return fn();
  } finally {
    if (saved === undefined) delete process.env.NODE_ENV;
    else process.env.NODE_ENV = saved;
  }
}

test('a missing url fails at createOjs, naming the setting, outside development', async () => {
  const knex = sqliteKnex(path.join(scratchDir('config-no-url'), 'app.db'));
  try {
    for (const nodeEnv of [undefined, 'production', 'test', 'dev']) {
      for (const options of [{}, { url: undefined }, { url: null }]) {
        withNodeEnv(nodeEnv, () =>
          assert.throws(
            () => createOjs({ knex, ...options, autoStart: false, handleSignals: false }),
            (error) =>
              error.code === 'INVALID_CONFIG' &&
              error.field === 'adapter.ojs_url' &&
              error.message.includes(SETTING),
            `NODE_ENV=${nodeEnv} ${JSON.stringify(options)}`,
          ),
        );
      }
    }
  } finally {
    await knex.destroy();
  }
});

test('NODE_ENV=development uses the development URL and warns once, naming the setting', () => {
  const dir = scratchDir('config-dev');
  const script = `
    const { createOjs } = require(${JSON.stringify(PACKAGE_DIR)});
    const knex = require('knex')({ client: 'better-sqlite3', connection: { filename: ${JSON.stringify(path.join(dir, 'app.db'))} }, useNullAsDefault: true });
    const ojs = createOjs({ knex, url: process.env.OJS_URL, relay: 'external', autoStart: false, handleSignals: false });
    ojs.enqueue('dev.default', [1]).then(
      () => console.log('SENT'),
      (error) => console.log('ENQUEUE ' + error.code + ' ' + error.message),
    ).finally(() => ojs.close().then(() => knex.destroy()));
  `;
  const env = { ...process.env, NODE_ENV: 'development' };
  delete env.OJS_URL;
  const child = spawnSync(process.execPath, ['-e', script], { env, cwd: process.cwd(), encoding: 'utf8', timeout: 60_000 });
  assert.equal(child.status, 0, child.stderr);
  const warnings = child.stderr.split('\n').filter((line) => line.includes('no OJS backend URL is set'));
  assert.equal(warnings.length, 1, child.stderr);
  assert.ok(warnings[0].includes('http://localhost:8080') && warnings[0].includes(SETTING), warnings[0]);
  // The job went to the development URL: sent there, or refused naming it (nothing listens).
  assert.match(child.stdout, /SENT|localhost:8080/, child.stdout);
});

test('misspelled top-level options are refused with the accepted spelling', async () => {
  const knex = sqliteKnex(path.join(scratchDir('config-typos'), 'app.db'));
  try {
    const cases = [
      [{ ojsUrl: 'http://127.0.0.1:9' }, 'ojsUrl', 'url'],
      [{ ojs_url: 'http://127.0.0.1:9' }, 'ojs_url', 'url'],
      [{ url: 'http://127.0.0.1:9', knexx: knex }, 'knexx', 'knex'],
      [{ url: 'http://127.0.0.1:9', auth_token: 't' }, 'auth_token', 'authToken'],
      [{ url: 'http://127.0.0.1:9', autostart: false }, 'autostart', 'autoStart'],
    ];
    for (const [options, key, spelling] of cases) {
      assert.throws(
        () => createOjs({ knex, autoStart: false, handleSignals: false, ...options }),
        (error) =>
          error.code === 'INVALID_CONFIG' &&
          error.field === key &&
          error.message.includes(`did you mean "${spelling}"`),
        key,
      );
    }
    // Far from every option: the message lists the accepted ones.
    assert.throws(
      () => createOjs({ knex, url: 'http://127.0.0.1:9', frobnicate: 1, autoStart: false }),
      (error) => error.code === 'INVALID_CONFIG' && error.field === 'frobnicate' && error.message.includes('databaseUrl'),
    );
  } finally {
    await knex.destroy();
  }
});

test('the bin migrates and reports without a backend URL (only `run` needs one)', () => {
  const bin = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');
  const db = `sqlite://${path.join(scratchDir('config-bin-no-url'), 'app.db')}`;
  const env = { ...process.env };
  delete env.OJS_URL;
  for (const args of [['migrate'], ['status', '--json'], ['dead', 'list']]) {
    const child = spawnSync(bin, ['--database-url', db, ...args], { env, encoding: 'utf8', timeout: 60_000 });
    assert.equal(child.status, 0, `ojs-relay ${args.join(' ')}: ${child.stderr}`);
  }
  const run = spawnSync(bin, ['--database-url', db, 'run'], { env, encoding: 'utf8', timeout: 60_000 });
  assert.equal(run.status, 2, run.stderr);
  assert.match(run.stderr, /INVALID_CONFIG.*--ojs-url/);
});

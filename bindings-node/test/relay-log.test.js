'use strict';
// The relay's log records reach the application's logger (createOjs's `logger` option): a
// pause when the backend cannot be reached (warn), a dead letter (error, naming the job id),
// on PostgreSQL (relay in this process) and SQLite (relay in the relay host process, records
// over IPC); and `ojs-relay run` prints them on stderr while it runs. Real relay, real
// ojs-devserver, a real closed port; every wait has a deadline.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const net = require('node:net');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, WAIT_MS, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor } = require('./support');

const { createOjs } = ojsPackage;
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/** A backend URL nothing listens on. */
async function closedPortUrl() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

/** A logger that keeps what it is given: `{level, message}` per call. */
function collectingLogger() {
  const calls = [];
  const keep = (level) => (message, ...rest) => calls.push({ level, message, rest });
  return { calls, info: keep('info'), warn: keep('warn'), error: keep('error') };
}

async function app(database, name, url, extra = {}) {
  const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`log-${name}`), 'app.db')) : postgresKnex();
  const table = `node_log_${name}`;
  await knex.schema.dropTableIfExists(table);
  const logger = collectingLogger();
  const ojs = createOjs({
    url,
    knex,
    outbox: { tableName: table, pollInterval: 'PT0.1S' },
    relay: { initial_backoff: 'PT0.05S', max_backoff: 'PT0.2S' },
    logger,
    handleSignals: false,
    autoStart: false,
    ...extra,
  });
  await ojs.migrate();
  return { knex, table, logger, ojs };
}

for (const database of ['postgres', 'sqlite']) {
  test(`${database}: a pause reaches the logger as a warning when the backend is unreachable`, async () => {
    const env = await app(database, `pause_${database}`, await closedPortUrl());
    try {
      await env.ojs.start();
      await env.ojs.enqueueAfterCommit(env.knex, 'email.welcome', [1]);
      const warned = await waitFor(
        () => env.logger.calls.find((call) => call.level === 'warn'),
        WAIT_MS,
        'a warning from the relay',
      );
      assert.match(warned.message, /^outbox relay: pausing: the OJS backend cannot take jobs now/);
      assert.deepEqual(warned.rest, [], 'one argument: the whole line');
      assert.deepEqual(env.logger.calls.filter((call) => call.level === 'error'), []);
    } finally {
      await env.ojs.close();
      await env.knex.destroy();
    }
  });

  test(`${database}: a dead letter reaches the logger as an error naming its job id`, async () => {
    await backend.reset();
    await backend.call('POST', '/_dev/faults', { status: 400, code: 'invalid_request', match_type: 'poison.job' });
    const env = await app(database, `dead_${database}`, backend.url);
    try {
      await env.ojs.start();
      const jobId = await env.ojs.enqueueAfterCommit(env.knex, 'poison.job', [1]);
      const failed = await waitFor(
        () => env.logger.calls.find((call) => call.level === 'error'),
        WAIT_MS,
        'an error from the relay',
      );
      assert.ok(failed.message.includes(jobId), failed.message);
      assert.match(failed.message, /poison\.job.*is dead.*invalid_request/);
      assert.equal((await env.ojs.outboxRows([jobId]))[jobId].status, 'dead');
    } finally {
      await backend.call('DELETE', '/_dev/faults');
      await env.ojs.close();
      await env.knex.destroy();
    }
  });
}

test('the logger option must have info, warn and error methods', async () => {
  const knex = postgresKnex();
  try {
    assert.throws(
      () => createOjs({ url: backend.url, knex, logger: { info() {}, warn() {} }, autoStart: false, handleSignals: false }),
      (error) => error.code === 'INVALID_CONFIG' && error.field === 'logger' && /missing error/.test(error.message),
    );
  } finally {
    await knex.destroy();
  }
});

test('ojs-relay run prints the relay pausing while it runs, and its start and stop lines', async () => {
  const env = await app('sqlite', 'cli', backend.url, { relay: 'external' });
  let child;
  try {
    await env.ojs.enqueueAfterCommit(env.knex, 'email.welcome', [1]);
    child = spawn(BIN, ['--database-url', env.ojs.config.adapter.database_url, '--table', env.table, 'run', '--ojs-url', await closedPortUrl(), '--poll-interval', 'PT0.1S'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    await waitFor(() => {
      if (child.exitCode !== null) throw new Error(`ojs-relay exited early:\n${stderr}`);
      return stderr.includes('ojs-relay: WARN outbox relay: pausing');
    }, WAIT_MS, 'the pause line of ojs-relay run');
    child.kill('SIGTERM');
    const { code } = await exited;
    assert.equal(code, 0, stderr);
    assert.match(stderr, /ojs-relay: relaying table node_log_cli/);
    assert.match(stderr, /ojs-relay: stopped/);
  } finally {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await env.ojs.close();
    await env.knex.destroy();
  }
});

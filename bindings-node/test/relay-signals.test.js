'use strict';
// Stopping the relay with a signal, through the installed npm bin (node_modules/.bin/ojs-relay)
// and in an application process, on SQLite and PostgreSQL, against ojs-devserver.
//
// `ojs-relay run` must stop on SIGTERM and SIGINT, flush (the send in flight completes and its
// row is settled `sent`) and exit 0, also when the signal comes before the relay runs. An
// application whose only SIGTERM listener is the adapter's must flush, then end by SIGTERM.
// Before the fix the bin spun at 100% CPU until SIGKILL (the core's native signal handler
// chained to Node's, which re-raised the signal forever).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, PG_URL, WAIT_MS, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor } = require('./support');

const { createOjs } = ojsPackage;

/** The installed bin, as `npm install` links it. */
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');
/** Generous (support.js): a busy machine may be slow, a stuck process never ends. */
const TIMEOUT_MS = WAIT_MS;
/** The backend holds the first request this long, so the relay is mid-send when signalled. */
const LATENCY_MS = 1500;

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/** Spawns `args` (a command and its arguments) and collects stderr; `exited` resolves with {code, signal}. */
function start(args, env = {}) {
  const child = spawn(args[0], args.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  child.stdout.on('data', (chunk) => (stdout += chunk));
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, output: () => `stdout: ${stdout}\nstderr: ${stderr}`, stderr: () => stderr, stdout: () => stdout };
}

/** Resolves with how `proc` exited, or fails (and SIGKILLs it) after TIMEOUT_MS. */
async function exitOf(proc, what) {
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), TIMEOUT_MS);
  });
  const result = await Promise.race([proc.exited, timeout]);
  clearTimeout(timer);
  if (result === null) {
    proc.child.kill('SIGKILL');
    await proc.exited;
    assert.fail(`${what} did not exit within ${TIMEOUT_MS} ms of the signal\n${proc.output()}`);
  }
  return result;
}

/** A fresh outbox table (and knex) for one test; the adapter (relay external) stages and reads. */
async function setUp(database, name) {
  await backend.reset();
  const dir = scratchDir(`signals-${name}`);
  const knex = database === 'sqlite' ? sqliteKnex(path.join(dir, 'app.db')) : postgresKnex();
  const table = `node_signals_${name}`;
  await knex.schema.dropTableIfExists(table);
  const ojs = createOjs({
    url: backend.url,
    knex,
    outbox: { tableName: table, pollInterval: 'PT0.1S' },
    relay: 'external',
    autoStart: false,
    handleSignals: false,
  });
  await ojs.migrate();
  return { dir, knex, table, ojs };
}

async function tearDown({ knex, ojs }) {
  await ojs.close();
  await knex.destroy();
}

/**
 * Waits until the relay has claimed the row and is sending it (the backend holds the request):
 * the row is leased (`status().in_flight`, SQLite) or, on PostgreSQL, where a claim holds its
 * rows by the row locks of its open transaction and writes no lease (store.rs `Claim`), locked:
 * a `FOR UPDATE SKIP LOCKED` read skips it.
 */
async function waitInFlight({ ojs, knex, table }, proc) {
  await waitFor(async () => {
    if (proc.child.exitCode !== null) throw new Error(`the relay exited early\n${proc.output()}`);
    if ((await ojs.status()).in_flight >= 1) return true;
    if (ojs.dialect !== 'postgresql') return false;
    const [{ n: rows }] = await knex(table).count({ n: '*' });
    const free = await knex(table).select('id').forUpdate().skipLocked();
    return Number(rows) === 1 && free.length === 0;
  }, TIMEOUT_MS, 'the row in flight');
}

async function assertSent(ojs, jobId) {
  const received = await waitFor(async () => {
    const r = await backend.received();
    return r.jobs.some((job) => job.id === jobId) && r;
  }, TIMEOUT_MS, 'the staged job at the backend');
  assert.equal(received.jobs.filter((job) => job.id === jobId).length, 1);
  const rows = await ojs.outboxRows([jobId]);
  assert.equal(rows[jobId].status, 'sent', `row ${JSON.stringify(rows[jobId])}`);
}

/** Resolves once `proc` wrote `text` on stderr. */
function waitForLine(proc, text) {
  return waitFor(() => {
    if (proc.child.exitCode !== null) throw new Error(`exited before "${text}"\n${proc.output()}`);
    return proc.stderr().includes(text);
  }, TIMEOUT_MS, `"${text}" from ${proc.child.spawnargs.join(' ')}`);
}

for (const database of ['sqlite', 'postgres']) {
  for (const [signal, how] of [
    ['SIGTERM', 'flags'],
    ['SIGINT', 'flags'],
    ['SIGTERM', 'config'],
  ]) {
    test(`${database}: ojs-relay run (${how}) stops on ${signal}, finishes the send in flight and exits 0`, async () => {
      const env = await setUp(database, `${database}_${signal}_${how}`.toLowerCase());
      let proc;
      try {
        const jobId = await env.ojs.enqueueAfterCommit(env.knex, 'email.welcome', [1]);
        await backend.call('POST', '/_dev/faults', { latency_ms: LATENCY_MS, count: 1 });
        const databaseUrl = env.ojs.config.adapter.database_url;
        if (how === 'flags') {
          proc = start([BIN, '--database-url', databaseUrl, '--table', env.table, 'run', '--ojs-url', backend.url, '--poll-interval', 'PT0.1S']);
        } else {
          // The application's own configuration, relay mode "external" included: `run` relays anyway.
          const file = path.join(env.dir, 'ojs.json');
          fs.writeFileSync(file, JSON.stringify(env.ojs.config));
          proc = start([BIN, '--config', file, 'run']);
        }
        await waitForLine(proc, 'ojs-relay: relaying');
        await waitInFlight(env, proc);
        proc.child.kill(signal);
        const { code, signal: killedBy } = await exitOf(proc, `ojs-relay run after ${signal}`);
        assert.equal(killedBy, null, proc.output());
        assert.equal(code, 0, proc.output());
        assert.match(proc.stderr(), /ojs-relay: stopped/);
        await assertSent(env.ojs, jobId);
      } finally {
        if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
        await tearDown(env);
      }
    });
  }

  test(`${database}: ojs-relay run exits 0 on a SIGTERM that comes before the relay runs`, async () => {
    const env = await setUp(database, `${database}_early`);
    let proc;
    try {
      proc = start([BIN, '--database-url', env.ojs.config.adapter.database_url, '--table', env.table, 'run', '--ojs-url', backend.url]);
      // As early as the bin can take it: its handlers come before the addon loads, so once the
      // addon is mapped they are in place and the relay has not connected yet. (A signal during
      // Node's own start-up, before any of our code, ends the process by its default action.)
      const maps = `/proc/${proc.child.pid}/maps`;
      await waitFor(() => {
        if (proc.child.exitCode !== null) throw new Error(`exited early\n${proc.output()}`);
        try {
          return fs.readFileSync(maps, 'utf8').includes('ojs_native.node');
        } catch {
          return false;
        }
      }, TIMEOUT_MS, 'the addon loaded');
      proc.child.kill('SIGTERM');
      const { code, signal } = await exitOf(proc, 'ojs-relay run after an early SIGTERM');
      assert.equal(signal, null, proc.output());
      assert.equal(code, 0, proc.output());
    } finally {
      if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
      await tearDown(env);
    }
  });

  test(`${database}: an application with the in-process relay flushes on SIGTERM, then ends by SIGTERM`, async () => {
    const env = await setUp(database, `${database}_app`);
    let proc;
    try {
      await backend.call('POST', '/_dev/faults', { latency_ms: LATENCY_MS, count: 1 });
      const app = path.join(__dirname, 'fixtures', 'signal-app.js');
      proc = start([process.execPath, app], {
        OJS_URL: backend.url,
        OJS_TABLE: env.table,
        ...(database === 'sqlite' ? { DATABASE_FILE: path.join(env.dir, 'app.db') } : { DATABASE_URL: PG_URL }),
      });
      await waitFor(() => {
        if (proc.child.exitCode !== null) throw new Error(`the app exited early\n${proc.output()}`);
        return /staged (\S+)/.exec(proc.stdout());
      }, TIMEOUT_MS, 'the app staged its job');
      const jobId = /staged (\S+)/.exec(proc.stdout())[1];
      await waitInFlight(env, proc);
      proc.child.kill('SIGTERM');
      const { code, signal } = await exitOf(proc, 'the application after SIGTERM');
      // The adapter was the only listener: it re-raised the signal after its flush.
      assert.equal(signal, 'SIGTERM', `code ${code}\n${proc.output()}`);
      await assertSent(env.ojs, jobId);
    } finally {
      if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
      await tearDown(env);
    }
  });
}

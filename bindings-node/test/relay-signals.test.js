'use strict';
// Stopping the relay with a signal, through the installed npm bin (node_modules/.bin/ojs-relay)
// and in an application process, on SQLite and PostgreSQL, against ojs-devserver.
//
// `ojs-relay run` must stop on SIGTERM and SIGINT, flush (the send in flight completes and its
// row is settled `sent`) and exit 0, also when the signal comes before the relay runs. An
// application whose only SIGTERM listener is the adapter's must flush, then end by SIGTERM.
// Before the fix the bin spun at 100% CPU until SIGKILL (the core's native signal handler
// chained to Node's, which re-raised the signal forever).
//
// An application that drains itself on SIGTERM (its own listener closes the server) must go on
// staging for the requests still running (issue 25: the adapter closed at the signal, and a
// request mid-transaction failed with RELAY_SHUT_DOWN), and its relay must flush when the
// process ends: at `beforeExit`, at `process.exit()`, and in a `cluster` worker whose primary
// got SIGTERM (at the worker's disconnect).
//
// "In flight" is made certain, not timed: the relay sends through a proxy (`holdingBackend`)
// that holds its POSTs until the test releases them, after the process has shown that it is
// stopping (a line it prints). A process that does not flush has ended by then, and its row is
// left pending.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, PG_URL, WAIT_MS, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor } = require('./support');

const { createOjs } = ojsPackage;

/** The installed bin, as `npm install` links it. */
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');
/** Generous (support.js): a busy machine may be slow, a stuck process never ends. */
const TIMEOUT_MS = WAIT_MS;
/** The relay's request timeout in the applications here: longer than any hold of the proxy. */
const REQUEST_TIMEOUT = 'PT60S';
/** Their lease: a round sends only while a request can end within it (relay.md). */
const LEASE = 'PT120S';

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/**
 * A proxy in front of the devserver that holds every POST (the relay's sends) until
 * `release()`; the manifest and other reads pass at once. `held()`: the POSTs waiting now.
 * After `release()` everything passes.
 */
async function holdingBackend() {
  const waiting = [];
  let holding = true;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const forward = () => {
        const out = http.request(new URL(req.url, backend.url), { method: req.method, headers: req.headers }, (answer) => {
          res.writeHead(answer.statusCode, answer.headers);
          answer.pipe(res);
        });
        out.on('error', () => res.destroy());
        res.on('error', () => {});
        out.end(Buffer.concat(chunks));
      };
      if (holding && req.method === 'POST') waiting.push(forward);
      else forward();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    held: () => waiting.length,
    release() {
      holding = false;
      for (const forward of waiting.splice(0)) forward();
    },
    close() {
      this.release();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Spawns `args` (a command and its arguments) and collects its output; `exited` resolves with {code, signal}. */
function start(args, env = {}, stdin = 'ignore') {
  const child = spawn(args[0], args.slice(1), { stdio: [stdin, 'pipe', 'pipe'], env: { ...process.env, ...env } });
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
 * Waits until the relay of `proc` is sending: the proxy holds `count` of its POSTs. `proc`
 * ending first fails, unless `proc` is null (a relay host process may send after its
 * application has exited).
 */
async function waitHeld(proxy, proc, count = 1) {
  await waitFor(() => {
    if (proxy.held() >= count) return true;
    if (proc && (proc.child.exitCode !== null || proc.child.signalCode !== null)) throw new Error(`the process ended early\n${proc.output()}`);
    return false;
  }, TIMEOUT_MS, `${count} send(s) held by the proxy`);
}

/** The job reached the backend once and its row is settled `sent` (by a relay host process, maybe after the app ended). */
async function assertSent(ojs, jobId) {
  await waitFor(async () => (await backend.received()).jobs.some((job) => job.id === jobId), TIMEOUT_MS, 'the staged job at the backend');
  const settled = await waitFor(async () => {
    const rows = await ojs.outboxRows([jobId]);
    return rows[jobId] && rows[jobId].status !== 'pending' && rows[jobId];
  }, TIMEOUT_MS, 'the row settled').catch(async (error) => {
    throw new Error(`${error.message}: ${JSON.stringify((await ojs.outboxRows([jobId]))[jobId])}`);
  });
  assert.equal(settled.status, 'sent', `row ${JSON.stringify(settled)}`);
  const received = await backend.received();
  assert.equal(received.jobs.filter((job) => job.id === jobId).length, 1);
}

/** Resolves once `proc` wrote `text` on stderr (or on stdout: `stream` 'stdout'). */
function waitForLine(proc, text, stream = 'stderr') {
  return waitFor(() => {
    if (proc[stream]().includes(text)) return true;
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) throw new Error(`exited before "${text}"\n${proc.output()}`);
    return false;
  }, TIMEOUT_MS, `"${text}" from ${proc.child.spawnargs.join(' ')}`);
}

/** POSTs to `route` on a connection of its own; resolves with `{ status, body }`. */
function post(port, route) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: route, method: 'POST', agent: false, headers: { connection: 'close' } }, (res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode, body: body ? JSON.parse(body) : null }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Whether process `pid` has ended (gone, or a zombie nobody reaped). */
function ended(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return /^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return true;
  }
}

for (const database of ['sqlite', 'postgres']) {
  for (const [signal, how] of [
    ['SIGTERM', 'flags'],
    ['SIGINT', 'flags'],
    ['SIGTERM', 'config'],
  ]) {
    test(`${database}: ojs-relay run (${how}) stops on ${signal}, finishes the send in flight and exits 0`, async () => {
      const env = await setUp(database, `${database}_${signal}_${how}`.toLowerCase());
      const proxy = await holdingBackend();
      let proc;
      try {
        const jobId = await env.ojs.enqueueAfterCommit(env.knex, 'email.welcome', [1]);
        const databaseUrl = env.ojs.config.adapter.database_url;
        if (how === 'flags') {
          proc = start([BIN, '--database-url', databaseUrl, '--table', env.table, 'run', '--ojs-url', proxy.url, '--poll-interval', 'PT0.1S']);
        } else {
          // The application's own configuration, relay mode "external" included: `run` relays anyway.
          const file = path.join(env.dir, 'ojs.json');
          const config = { adapter: { ...env.ojs.config.adapter, url: proxy.url } };
          config.adapter.relay = { ...config.adapter.relay, request_timeout: REQUEST_TIMEOUT, lease: LEASE };
          fs.writeFileSync(file, JSON.stringify(config));
          proc = start([BIN, '--config', file, 'run']);
        }
        await waitForLine(proc, 'ojs-relay: relaying');
        await waitHeld(proxy, proc);
        proc.child.kill(signal);
        // The relay is stopping while its send is held: the flush must wait for it.
        await waitForLine(proc, 'stopping');
        proxy.release();
        const { code, signal: killedBy } = await exitOf(proc, `ojs-relay run after ${signal}`);
        assert.equal(killedBy, null, proc.output());
        assert.equal(code, 0, proc.output());
        assert.match(proc.stderr(), /ojs-relay: stopped/);
        await assertSent(env.ojs, jobId);
      } finally {
        if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
        await proxy.close();
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
    const proxy = await holdingBackend();
    let proc;
    try {
      const app = path.join(__dirname, 'fixtures', 'signal-app.js');
      proc = start([process.execPath, app], appEnv(env, database, proxy));
      await waitForLine(proc, 'staged ', 'stdout');
      const jobId = /staged (\S+)/.exec(proc.stdout())[1];
      await waitHeld(proxy, proc);
      proc.child.kill('SIGTERM');
      // Nothing the app prints says that the signal arrived (it has no listener of its own):
      // released now, the send may also complete before the signal is handled.
      proxy.release();
      const { code, signal } = await exitOf(proc, 'the application after SIGTERM');
      // The adapter was the only listener: it re-raised the signal after its flush.
      assert.equal(signal, 'SIGTERM', `code ${code}\n${proc.output()}`);
      await assertSent(env.ojs, jobId);
    } finally {
      if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
      await proxy.close();
      await tearDown(env);
    }
  });

  for (const drain of ['exit', 'loop']) {
    const how = drain === 'exit' ? 'server.close(), then process.exit()' : 'server.close(), then the event loop ends';
    test(`${database}: an app that drains itself on SIGTERM (${how}): the request mid-transaction succeeds and its job is sent at the end`, async () => {
      const env = await setUp(database, `${database}_drain_${drain}`);
      const users = `node_signals_users_${database}_${drain}`;
      await env.knex.schema.dropTableIfExists(users);
      await env.knex.schema.createTable(users, (tb) => {
        tb.increments('id');
        tb.string('email');
      });
      const proxy = await holdingBackend();
      let proc;
      try {
        const app = path.join(__dirname, 'fixtures', 'drain-app.js');
        proc = start([process.execPath, app], { ...appEnv(env, database, proxy), DRAIN: drain, USERS_TABLE: users }, 'pipe');
        await waitForLine(proc, 'listening ', 'stdout');
        const port = Number(/listening (\d+)/.exec(proc.stdout())[1]);
        const answer = post(port, '/signup');
        await waitForLine(proc, 'in-transaction', 'stdout');
        proc.child.kill('SIGTERM');
        // The app's own listener has run (after the adapter's): it is closing its server.
        await waitForLine(proc, 'draining', 'stdout');
        proc.child.stdin.write('go\n');
        const { status, body } = await answer;
        assert.equal(status, 200, `${JSON.stringify(body)}\n${proc.output()}`);
        // The job's send is held; the process reaches its end (its own listener, registered
        // before the adapter, prints the line), and the adapter's flush waits for the send.
        // After process.exit() on SQLite the relay host process flushes by itself, once the
        // application has gone.
        await waitForLine(proc, drain === 'exit' ? 'process exit' : 'process beforeExit', 'stdout');
        await waitHeld(proxy, database === 'sqlite' && drain === 'exit' ? null : proc);
        proxy.release();
        const { code, signal } = await exitOf(proc, 'the draining application');
        assert.equal(signal, null, proc.output());
        assert.equal(code, 0, proc.output());
        await assertSent(env.ojs, body.jobId);
        assert.equal((await env.knex(users).count({ n: '*' }))[0].n * 1, 1, 'the transaction committed');
      } finally {
        if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
        await proxy.close();
        await env.knex.schema.dropTableIfExists(users);
        await tearDown(env);
      }
    });
  }
}

/** The environment of an application fixture: its backend (the proxy), table and database. */
function appEnv(env, database, proxy) {
  return {
    OJS_URL: proxy.url,
    OJS_TABLE: env.table,
    OJS_REQUEST_TIMEOUT: REQUEST_TIMEOUT,
    OJS_LEASE: LEASE,
    ...(database === 'sqlite' ? { DATABASE_FILE: path.join(env.dir, 'app.db') } : { DATABASE_URL: PG_URL }),
  };
}

test('postgres: under cluster, SIGTERM to the primary: each worker flushes at its disconnect and its committed jobs are sent', async () => {
  const env = await setUp('postgres', 'cluster');
  const proxy = await holdingBackend();
  let proc;
  let pids = [];
  try {
    const app = path.join(__dirname, 'fixtures', 'cluster-app.js');
    proc = start([process.execPath, app], { ...appEnv(env, 'postgres', proxy), JOBS: '5' });
    const lines = await waitFor(() => {
      const found = [...proc.stdout().matchAll(/worker (\d+) committed (\S+)/g)];
      if (found.length === 2) return found;
      if (proc.child.exitCode !== null) throw new Error(`the primary exited early\n${proc.output()}`);
      return false;
    }, TIMEOUT_MS, 'both workers committed');
    pids = lines.map((line) => Number(line[1]));
    const ids = lines.flatMap((line) => line[2].split(','));
    assert.equal(ids.length, 10);
    // Both relays are sending (the proxy holds a send of each worker).
    await waitHeld(proxy, proc, 2);
    proc.child.kill('SIGTERM');
    const { signal } = await exitOf(proc, 'the primary after SIGTERM');
    assert.equal(signal, 'SIGTERM', proc.output());
    // Each worker says when its channel closed (a listener registered before the adapter's).
    await waitFor(() => pids.every((pid) => proc.stdout().includes(`worker ${pid} disconnected`)), TIMEOUT_MS, 'both workers disconnected');
    proxy.release();
    await waitFor(() => pids.every(ended), TIMEOUT_MS, 'both workers ended');
    const rows = await env.ojs.outboxRows(ids);
    for (const id of ids) assert.equal(rows[id] && rows[id].status, 'sent', `row ${id}: ${JSON.stringify(rows[id])}\n${proc.output()}`);
    const received = (await backend.received()).jobs;
    for (const id of ids) assert.equal(received.filter((job) => job.id === id).length, 1, `job ${id} at the backend once`);
  } finally {
    for (const pid of pids) {
      if (!ended(pid)) process.kill(pid, 'SIGKILL');
    }
    if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    await proxy.close();
    await tearDown(env);
  }
});

'use strict';
// The running side (issue 28): `ojs.worker()` and the `ojs-worker` bin on the core worker
// loop, against the real ojs-devserver, with jobs staged through knex on SQLite and PostgreSQL
// and relayed by the in-process relay. The backend's view of each job (`GET
// /ojs/v1/jobs/{id}`: state, attempt, result, error) is the oracle.
//
// - a committed job runs in its handler and is acked with the handler's result (both
//   databases), the handler seeing args and ctx;
// - `concurrency` handlers run at once, and no job more is reserved while they run;
// - a handler that throws is nacked `failed` with the error's code, message and stack, retried
//   per the job's retry policy, then discarded;
// - a type without a handler is nacked `unknown_type`: retryable, not discarded;
// - a job past its `timeout_ms` is nacked `timeout` by the loop while the handler still runs,
//   its ctx.signal aborts (TimeoutError), and the handler's late outcome is dropped;
// - a graceful stop lets the job in flight finish and be acked, fetches nothing more, and ends
//   the worker's thread; a stop past its deadline gives the job back and aborts its signal
//   (and the loop's record of it reaches the logger); a second stop ends a first one waiting;
// - a backend outage while the worker runs (every request refused 503 by the devserver) and
//   its end are logged on the app's logger, once each, and `backendDown` says so meanwhile;
// - the request's traceparent reaches ctx.traceparent, and what the handler enqueues carries it;
// - bad options: typed errors naming the option;
// - the bin: SIGTERM drains the job in flight (exit 0), a second signal gives it back (exit
//   128 + n), an unknown flag or a refused option exits 2 naming it.
//
// Nothing waits a fixed time: handlers are held by promises (or the bin's stdin) the test
// releases, and every wait is for a condition (support.js `waitFor`, WAIT_MS).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, WAIT_MS, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor } = require('./support');

const { createOjs, InvalidConfigError, Worker } = ojsPackage;

/** The installed bin, as `npm install` links it. */
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-worker');
/** A fetch that found nothing is tried again this soon (the core's option; keeps the tests quick). */
const IDLE_POLL_MS = 50;
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const OTHER_TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

let backend;
const adapters = new Map();

before(async () => {
  backend = await startDevserver();
});
after(async () => {
  for (const { ojs, knex } of adapters.values()) {
    await ojs.close();
    await knex.destroy();
  }
  await backend.stop();
});

/** The adapter of `database` (created once), its relay running; the devserver emptied. */
async function adapter(database) {
  await backend.reset();
  if (!adapters.has(database)) {
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir('worker'), 'app.db')) : postgresKnex();
    const table = `node_worker_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table, pollInterval: 'PT0.2S' }, handleSignals: false });
    await ojs.migrate();
    await ojs.ready;
    adapters.set(database, { ojs, knex, table });
  }
  return adapters.get(database);
}

/** Stages one job in a knex transaction, committed; resolves with its id. */
function stage(ojs, type, args, options) {
  return ojs.transaction((trx) => ojs.enqueueAfterCommit(trx, type, args, options));
}

/** The backend's job, or null. */
async function jobOf(id) {
  const answer = await backend.call('GET', `/ojs/v1/jobs/${id}`);
  return (answer && answer.job) || null;
}

/** Waits until the backend's job satisfies `check(job)`; resolves with the job. */
async function waitJob(id, check, what) {
  let last = null;
  try {
    return await waitFor(async () => {
      last = await jobOf(id);
      return last && check(last) ? last : null;
    }, WAIT_MS, what);
  } catch (error) {
    throw new Error(`${error.message}; the job: ${JSON.stringify(last)}`);
  }
}

/** A promise with its resolve, for holding a handler until the test lets it go. */
function gate() {
  let open;
  const promise = new Promise((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** Stops `worker` at the end of a test whatever happened (give back at once). */
async function stopped(worker, work) {
  try {
    return await work();
  } finally {
    await worker.stop({ deadlineMs: 0 });
  }
}

/** Threads of this process named `name` (the addon names its threads). */
function threadsNamed(name) {
  return fs.readdirSync('/proc/self/task').filter((tid) => {
    try {
      return fs.readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim() === name;
    } catch {
      return false;
    }
  }).length;
}

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: a committed job runs in its handler and is acked with the result`, async () => {
    const { ojs } = await adapter(database);
    const seen = [];
    const completed = [];
    const worker = ojs.worker({
      queues: ['default'],
      idlePollMs: IDLE_POLL_MS,
      handlers: {
        'email.welcome': async (args, ctx) => {
          seen.push({ args, ctx });
          return { sent: args[0], queue: ctx.queue };
        },
      },
    });
    assert.ok(worker instanceof Worker);
    worker.on('completed', (result, ctx) => completed.push([result, ctx.id]));
    await stopped(worker, async () => {
      const id = await stage(ojs, 'email.welcome', ['ada@example.com']);
      const job = await waitJob(id, (j) => j.state === 'completed', 'the job completed');
      assert.deepEqual(job.result, { sent: 'ada@example.com', queue: 'default' });
      assert.equal(seen.length, 1);
      const { args, ctx } = seen[0];
      assert.deepEqual(args, ['ada@example.com']);
      assert.equal(ctx.id, id);
      assert.equal(ctx.type, 'email.welcome');
      assert.equal(ctx.queue, 'default');
      assert.equal(ctx.attempt, job.attempt);
      assert.equal(typeof ctx.meta, 'object');
      assert.equal(ctx.traceparent, null);
      assert.ok(ctx.signal instanceof AbortSignal);
      assert.equal(ctx.signal.aborted, false);
      assert.equal(ctx.workerId, worker.workerId);
      await waitFor(() => completed.length === 1, WAIT_MS, "the 'completed' event");
      assert.deepEqual(completed[0], [{ sent: 'ada@example.com', queue: 'default' }, id]);
    });
    assert.equal(worker.running, false);
  });

  test(`${database}: the request's traceparent reaches ctx.traceparent and what the handler enqueues`, async () => {
    const { ojs } = await adapter(database);
    const traces = new Map();
    // Started inside another context: a handler must not run in it (its scope is the job's).
    const worker = ojs.withContext({ traceparent: OTHER_TRACEPARENT }, () =>
      ojs.worker({
        queues: ['default'],
        idlePollMs: IDLE_POLL_MS,
        handlers: {
          'trace.parent': async (args, ctx) => {
            traces.set(ctx.id, ctx.traceparent);
            return { child: await ojs.enqueue('trace.child', []) };
          },
          'trace.child': async (args, ctx) => ({ traceparent: ctx.traceparent }),
        },
      }),
    );
    await stopped(worker, async () => {
      const traced = await ojs.withContext({ traceparent: TRACEPARENT }, () => stage(ojs, 'trace.parent', []));
      const plain = await stage(ojs, 'trace.parent', []);
      const parent = await waitJob(traced, (j) => j.state === 'completed', 'the traced parent job completed');
      assert.equal(parent.meta.traceparent, TRACEPARENT);
      const child = await waitJob(parent.result.child, (j) => j.state === 'completed', 'its child job completed');
      assert.deepEqual(child.result, { traceparent: TRACEPARENT });
      const plainParent = await waitJob(plain, (j) => j.state === 'completed', 'the plain parent job completed');
      const plainChild = await waitJob(plainParent.result.child, (j) => j.state === 'completed', 'its child job completed');
      assert.deepEqual(plainChild.result, { traceparent: null });
      assert.deepEqual(Object.fromEntries(traces), { [traced]: TRACEPARENT, [plain]: null });
    });
  });
}

test('concurrency: that many handlers run at once, and no job more is reserved until one ends', async () => {
  const { ojs } = await adapter('postgres');
  const hold = gate();
  const started = [];
  const worker = ojs.worker({
    queues: ['default'],
    concurrency: 2,
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      'hold.job': async (args, ctx) => {
        started.push(ctx.id);
        await hold.promise;
        return { done: args[0] };
      },
    },
  });
  await stopped(worker, async () => {
    const ids = [];
    for (const name of ['a', 'b', 'c']) ids.push(await stage(ojs, 'hold.job', [name]));
    await waitFor(() => started.length === 2, WAIT_MS, 'two handlers running at once');
    // Two jobs held: the loop fetches no third (it would sit reserved without a slot).
    const jobs = await waitFor(async () => {
      const all = await Promise.all(ids.map(jobOf));
      return all.every(Boolean) ? all : null;
    }, WAIT_MS, 'every job at the backend');
    const states = jobs.map((job) => job.state);
    assert.deepEqual(states.filter((state) => state === 'active').length, 2, JSON.stringify(states));
    assert.equal(states.filter((state) => state === 'available').length, 1, JSON.stringify(states));
    assert.equal(worker.inFlight, 2);
    hold.open();
    for (const id of ids) await waitJob(id, (j) => j.state === 'completed', `job ${id} completed`);
    assert.deepEqual([...started].sort(), [...ids].sort());
  });
});

test('a handler that throws is nacked with code, message and stack, retried per the policy, then discarded', async () => {
  const { ojs } = await adapter('postgres');
  const attempts = [];
  const failed = [];
  const worker = ojs.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      'card.charge': async (args, ctx) => {
        attempts.push(ctx.attempt);
        const error = new Error(`card declined: ${args[0]}`);
        error.code = 'CARD_DECLINED';
        throw error;
      },
    },
  });
  worker.on('failed', (error, ctx) => failed.push([error.code, ctx.id]));
  await stopped(worker, async () => {
    const id = await stage(ojs, 'card.charge', ['4242'], { retry: { maxAttempts: 2, initialInterval: 100, backoffCoefficient: 1 } });
    const job = await waitJob(id, (j) => j.state === 'discarded', 'the job discarded');
    assert.equal(job.attempt, 2);
    assert.equal(attempts.length, 2, `handler ran ${attempts.length} times`);
    assert.equal(attempts[1], attempts[0] + 1);
    assert.equal(job.error.type, 'CARD_DECLINED');
    assert.equal(job.error.message, 'card declined: 4242');
    assert.match(job.error.details.stack, /^Error: card declined: 4242\n\s+at /);
    assert.deepEqual(failed, [['CARD_DECLINED', id], ['CARD_DECLINED', id]]);
  });
});

test("an error without a code is nacked under its name; an error's retryable: false ends the retries; a result JSON cannot hold fails", async () => {
  const { ojs } = await adapter('sqlite');
  class PaymentRefused extends Error {
    constructor(message) {
      super(message);
      this.name = 'PaymentRefused';
      this.retryable = false;
    }
  }
  const worker = ojs.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      'pay.typeerror': async () => null.nothing,
      'pay.refused': async () => {
        throw new PaymentRefused('no funds');
      },
      'pay.bigint': async () => ({ total: 10n }),
    },
  });
  await stopped(worker, async () => {
    const retry = { maxAttempts: 3, initialInterval: 60_000 };
    const typeError = await stage(ojs, 'pay.typeerror', [], { retry });
    const refused = await stage(ojs, 'pay.refused', [], { retry });
    const bigint = await stage(ojs, 'pay.bigint', [], { retry });
    const a = await waitJob(typeError, (j) => j.state === 'retryable', 'the TypeError job retryable');
    assert.equal(a.error.type, 'TypeError');
    assert.match(a.error.message, /null/);
    const b = await waitJob(refused, (j) => j.state === 'discarded', 'the refused job discarded after one attempt');
    assert.equal(b.attempt, 1);
    assert.equal(b.error.type, 'PaymentRefused');
    assert.equal(b.error.retryable, false);
    // The refusal is an OJSError whose code the core does not retry: the job is not either.
    const c = await waitJob(bigint, (j) => j.state === 'discarded', 'the BigInt result failed, not retried');
    assert.equal(c.attempt, 1);
    assert.equal(c.error.type, 'INVALID_ARGS');
    assert.equal(c.error.retryable, false);
    assert.match(c.error.message, /^result\.total: a BigInt has no JSON form/);
  });
});

test('a type without a handler is nacked unknown_type: retryable, not discarded, its handlers untouched', async () => {
  const { ojs } = await adapter('sqlite');
  const unknown = [];
  let ran = 0;
  const worker = ojs.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      'known.type': async () => {
        ran += 1;
      },
    },
  });
  worker.on('unknown', (ctx) => unknown.push(ctx.id));
  await stopped(worker, async () => {
    const id = await stage(ojs, 'unknown.type', [1], { retry: { maxAttempts: 5, initialInterval: 60_000 } });
    const job = await waitJob(id, (j) => j.state !== 'available' && j.state !== 'active', 'the job nacked');
    assert.equal(job.state, 'retryable');
    assert.equal(job.attempt, 1);
    assert.equal(job.error.type, 'unknown_type');
    assert.equal(job.error.retryable, true);
    assert.deepEqual(unknown, [id]);
    assert.equal(ran, 0);
  });
});

test('a job past its timeout_ms is nacked timeout while the handler runs; ctx.signal aborts; the late outcome is dropped', async () => {
  const { ojs } = await adapter('postgres');
  const reasons = [];
  const dropped = [];
  const completed = [];
  const worker = ojs.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      // Ignores the timeout until its signal says so, then returns (too late).
      'slow.job': (args, ctx) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            reasons.push(ctx.signal.reason.name);
            resolve({ late: true });
          });
        }),
    },
  });
  worker.on('dropped', (ctx) => dropped.push(ctx.id));
  worker.on('completed', (result, ctx) => completed.push(ctx.id));
  await stopped(worker, async () => {
    const id = await stage(ojs, 'slow.job', [], { timeoutMs: 200, retry: { maxAttempts: 1 } });
    const job = await waitJob(id, (j) => j.state === 'discarded', 'the job discarded after its timeout');
    assert.equal(job.error.type, 'timeout');
    assert.equal(job.result, undefined);
    await waitFor(() => dropped.length === 1, WAIT_MS, "the 'dropped' event");
    assert.deepEqual(reasons, ['TimeoutError']);
    assert.deepEqual(dropped, [id]);
    assert.deepEqual(completed, []);
  });
});

test('a graceful stop lets the job in flight finish and be acked, fetches nothing more, and ends the worker thread', async () => {
  const { ojs } = await adapter('sqlite');
  const hold = gate();
  const started = [];
  const worker = ojs.worker({
    queues: ['default'],
    concurrency: 1,
    idlePollMs: IDLE_POLL_MS,
    handlers: {
      'hold.job': async (args, ctx) => {
        started.push(ctx.id);
        await hold.promise;
        return { finished: args[0] };
      },
    },
  });
  let stopResolved = false;
  try {
    // A thread names itself once it runs: wait for it.
    await waitFor(() => threadsNamed('ojs-worker-next') === 1, WAIT_MS, "the worker's wait thread");
    const a = await stage(ojs, 'hold.job', ['a']);
    await waitFor(() => started.length === 1, WAIT_MS, 'the handler started');
    const b = await stage(ojs, 'hold.job', ['b']);
    await waitJob(b, (j) => j.state === 'available', 'the second job at the backend');
    const stopping = worker.stop({ deadlineMs: WAIT_MS }).then(() => {
      stopResolved = true;
    });
    await waitFor(() => worker.stopping, WAIT_MS, 'the loop stopping');
    assert.equal(stopResolved, false, 'stop resolved while the job was in flight');
    assert.equal(worker.inFlight, 1);
    hold.open();
    await stopping;
    const jobA = await jobOf(a);
    assert.equal(jobA.state, 'completed', JSON.stringify(jobA));
    assert.deepEqual(jobA.result, { finished: 'a' });
    assert.equal((await jobOf(b)).state, 'available');
    assert.deepEqual(started, [a]);
    assert.equal(worker.running, false);
    await waitFor(() => threadsNamed('ojs-worker-next') === 0, WAIT_MS, 'the wait thread ended with the stop');
  } finally {
    hold.open();
    await worker.stop({ deadlineMs: 0 });
  }
});

for (const given of ['to stop()', 'as the stopDeadlineMs option']) {
test(`a stop past its deadline (given ${given}) gives the job back and aborts the handler's signal`, async () => {
  const { ojs } = await adapter('postgres');
  const reasons = [];
  const dropped = [];
  const option = given === 'to stop()' ? {} : { stopDeadlineMs: 100 };
  const worker = ojs.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    ...option,
    handlers: {
      'stuck.job': (args, ctx) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            reasons.push(ctx.signal.reason.name);
            resolve();
          });
        }),
    },
  });
  worker.on('dropped', (ctx) => dropped.push(ctx.id));
  const id = await stage(ojs, 'stuck.job', []);
  await waitJob(id, (j) => j.state === 'active', 'the job active');
  await waitFor(() => worker.inFlight === 1, WAIT_MS, 'the handler running');
  // Without an option the core's default (docs/express.md, "Running jobs").
  assert.equal(worker.stopDeadlineMs, given === 'to stop()' ? 25000 : 100);
  await (given === 'to stop()' ? worker.stop({ deadlineMs: 100 }) : worker.stop());
  const job = await jobOf(id);
  assert.equal(job.state, 'available', JSON.stringify(job));
  assert.deepEqual(reasons, ['AbortError']);
  await waitFor(() => dropped.length === 1, WAIT_MS, "the 'dropped' event");
});
}

/** A logger that keeps what it is given: `lines` of `[method, message]`. */
function keepingLogger() {
  const lines = [];
  const logger = {};
  for (const method of ['info', 'warn', 'error']) logger[method] = (message) => lines.push([method, message]);
  return { logger, lines };
}

test("a backend outage during the worker's life is logged on the app's logger, and so is its end", async () => {
  await backend.reset();
  const knex = postgresKnex();
  const { logger, lines } = keepingLogger();
  // No relay here: what reaches the logger is the worker's.
  const ojs = createOjs({ url: backend.url, knex, logger, relay: 'external', autoStart: false, handleSignals: false });
  const worker = ojs.worker({ queues: ['default'], idlePollMs: IDLE_POLL_MS, handlers: { 'a.b': async () => null } });
  const said = (method, pattern) => lines.filter(([m, message]) => m === method && pattern.test(message));
  try {
    assert.equal(worker.backendDown, false);
    await backend.call('POST', '/_dev/faults', { status: 503, applies_to: 'all' });
    await waitFor(() => said('warn', /the OJS backend is unavailable/).length > 0, WAIT_MS, 'the outage logged');
    assert.equal(worker.backendDown, true);
    await backend.call('DELETE', '/_dev/faults');
    await waitFor(() => said('info', /the OJS backend answers again/).length > 0, WAIT_MS, 'the end of the outage logged');
    assert.equal(worker.backendDown, false);
    // Once each, in order, and nothing else (no job ran).
    assert.deepEqual(
      lines.map(([method, message]) => [method, message.replace(/: .*/s, '')]),
      [
        ['warn', 'the OJS backend is unavailable, retrying with backoff until it answers'],
        ['info', 'the OJS backend answers again'],
      ],
    );
  } finally {
    await backend.call('DELETE', '/_dev/faults');
    await worker.stop({ deadlineMs: 0 });
    await ojs.close();
    await knex.destroy();
  }
});

test('a job given back by a stop is logged naming it; a second stop ends the first one waiting', async () => {
  const { ojs } = await adapter('postgres');
  const knex = postgresKnex();
  const { logger, lines } = keepingLogger();
  // The jobs are staged and relayed by `ojs`; the worker's adapter (no relay) logs to `logger`.
  const quiet = createOjs({ url: backend.url, knex, logger, relay: 'external', autoStart: false, handleSignals: false });
  const worker = quiet.worker({
    queues: ['default'],
    idlePollMs: IDLE_POLL_MS,
    handlers: { 'held.job': (args, ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', resolve)) },
  });
  try {
    const id = await stage(ojs, 'held.job', []);
    await waitFor(() => worker.inFlight === 1, WAIT_MS, 'the handler running');
    let firstEnded = false;
    const first = worker.stop({ deadlineMs: WAIT_MS * 4 }).then(() => (firstEnded = true));
    await waitFor(() => worker.stopping, WAIT_MS, 'the loop stopping');
    assert.equal(firstEnded, false, 'the first stop ended while the job was in flight');
    const second = worker.stop({ deadlineMs: 0 });
    // Well before the first stop's own deadline.
    await waitFor(() => firstEnded, WAIT_MS, 'the first stop ended by the second');
    await Promise.all([first, second]);
    assert.equal(worker.running, false);
    assert.equal((await jobOf(id)).state, 'available');
    assert.deepEqual(lines, [['info', `job ${id}: job given back unfinished (the worker stops)`]]);
  } finally {
    await worker.stop({ deadlineMs: 0 });
    await quiet.close();
    await knex.destroy();
  }
});

test('bad options: typed errors naming the option', async () => {
  const { ojs } = await adapter('sqlite');
  const refused = (options, field) =>
    assert.throws(() => ojs.worker(options), (error) => error instanceof InvalidConfigError && error.field === field && error.message.includes(field.split('[')[0]), field);
  refused({ queues: ['default'] }, 'handlers');
  refused({ queues: ['default'], handlers: [] }, 'handlers');
  refused({ queues: ['default'], handlers: { 'a.b': 'not a function' } }, 'handlers["a.b"]');
  refused({ handlers: { 'a.b': () => {} } }, 'queues');
  refused({ queues: ['default'], handlers: {}, concurrency: 0 }, 'concurrency');
  refused({ queues: ['default'], handlers: {}, autorun: 'yes' }, 'autorun');
  // An unknown option is the core's refusal, with the near miss.
  assert.throws(
    () => ojs.worker({ queues: ['default'], handlers: {}, concurency: 2 }),
    (error) => error instanceof InvalidConfigError && /concurency/.test(error.message) && /concurrency/.test(error.message),
  );
  assert.throws(() => ojs.worker(null), (error) => error instanceof InvalidConfigError && error.field === 'worker');
  // autorun: false starts on start().
  const worker = ojs.worker({ queues: ['default'], handlers: {}, autorun: false });
  assert.equal(worker.running, false);
  await assert.rejects(worker.stop({ deadline: 5 }), (error) => error instanceof InvalidConfigError && error.field === 'deadline');
  await assert.rejects(worker.stop({ deadlineMs: -1 }), (error) => error instanceof InvalidConfigError && error.field === 'deadlineMs');
  worker.start();
  assert.equal(worker.running, true);
  assert.equal(typeof worker.workerId, 'string');
  await worker.stop({ deadlineMs: 0 });
  assert.equal(worker.running, false);
});

// ---- the bin --------------------------------------------------------------------------------

/** A handlers module for the bin: `bin.hold` prints "started <id>" and waits for a line on stdin. */
function handlersFile(dir) {
  const file = path.join(dir, 'jobs.js');
  fs.writeFileSync(
    file,
    `'use strict';
module.exports = {
  'bin.hold': async (args, ctx) => {
    console.log('started ' + ctx.id);
    await new Promise((resolve) => process.stdin.once('data', resolve));
    return { released: args[0] };
  },
};
`,
  );
  return file;
}

/** Spawns the bin; `exited` resolves with {code, signal}. */
function startBin(args, env = {}) {
  const child = spawn(BIN, args, { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, stdout: () => stdout, stderr: () => stderr, output: () => `stdout: ${stdout}\nstderr: ${stderr}` };
}

/** Resolves once `proc` wrote `text` on `stream`; fails if it exits first. */
function waitForText(proc, text, stream = 'stderr') {
  return waitFor(() => {
    if (proc[stream]().includes(text)) return true;
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) throw new Error(`exited before "${text}"\n${proc.output()}`);
    return false;
  }, WAIT_MS, `"${text}" from the bin`);
}

/** How `proc` exited; SIGKILLs it and fails when it does not within WAIT_MS. */
async function exitOf(proc) {
  let timer;
  const result = await Promise.race([proc.exited, new Promise((resolve) => (timer = setTimeout(() => resolve(null), WAIT_MS)))]);
  clearTimeout(timer);
  if (result === null) {
    proc.child.kill('SIGKILL');
    await proc.exited;
    assert.fail(`the bin did not exit\n${proc.output()}`);
  }
  return result;
}

test('ojs-worker: SIGTERM lets the job in flight finish and be acked, then exits 0', async () => {
  const { ojs } = await adapter('sqlite');
  const file = handlersFile(scratchDir('worker-bin'));
  const proc = startBin(['--handlers', file, '--queue', 'default', '--concurrency', '2', '--idle-poll-ms', `${IDLE_POLL_MS}`], { OJS_URL: backend.url });
  try {
    await waitForText(proc, 'ojs-worker: running bin.hold on default');
    const id = await stage(ojs, 'bin.hold', ['x']);
    await waitForText(proc, `started ${id}`, 'stdout');
    proc.child.kill('SIGTERM');
    await waitForText(proc, 'ojs-worker: SIGTERM: stopping');
    assert.equal((await jobOf(id)).state, 'active');
    proc.child.stdin.write('go\n');
    assert.deepEqual(await exitOf(proc), { code: 0, signal: null }, proc.output());
    const job = await jobOf(id);
    assert.equal(job.state, 'completed', JSON.stringify(job));
    assert.deepEqual(job.result, { released: 'x' });
  } finally {
    proc.child.kill('SIGKILL');
  }
});

test('ojs-worker: a second signal gives the job in flight back at once (exit 128 + n)', async () => {
  const { ojs } = await adapter('postgres');
  const file = handlersFile(scratchDir('worker-bin2'));
  const proc = startBin(['--handlers', file, '--queue', 'default', '--deadline-ms', `${WAIT_MS * 4}`, '--idle-poll-ms', `${IDLE_POLL_MS}`], {
    OJS_URL: backend.url,
  });
  try {
    await waitForText(proc, 'ojs-worker: running bin.hold');
    const id = await stage(ojs, 'bin.hold', ['y']);
    await waitForText(proc, `started ${id}`, 'stdout');
    proc.child.kill('SIGTERM');
    await waitForText(proc, 'ojs-worker: SIGTERM: stopping');
    proc.child.kill('SIGINT');
    assert.deepEqual(await exitOf(proc), { code: 130, signal: null }, proc.output());
    assert.match(proc.stderr(), /SIGINT: giving the jobs in flight back now/);
    // The loop's own record of it, through the bin's logger.
    assert.ok(proc.stderr().includes(`ojs-worker: INFO job ${id}: job given back unfinished (the worker stops)`), proc.output());
    const job = await jobOf(id);
    assert.equal(job.state, 'available', JSON.stringify(job));
  } finally {
    proc.child.kill('SIGKILL');
  }
});

test('ojs-worker: an unknown flag, a missing --handlers and an option the core refuses exit 2 naming them', async () => {
  const file = handlersFile(scratchDir('worker-bin3'));
  const unknown = startBin(['--handlers', file, '--queue', 'default', '--concurrencyy', '2'], { OJS_URL: backend.url });
  assert.deepEqual(await exitOf(unknown), { code: 2, signal: null }, unknown.output());
  assert.match(unknown.stderr(), /--concurrencyy/);
  assert.match(unknown.stderr(), /usage: ojs-worker/);

  const missing = startBin(['--queue', 'default'], { OJS_URL: backend.url });
  assert.deepEqual(await exitOf(missing), { code: 2, signal: null }, missing.output());
  assert.match(missing.stderr(), /--handlers FILE is required/);

  const zero = startBin(['--handlers', file, '--queue', 'default', '--concurrency', '0'], { OJS_URL: backend.url });
  assert.deepEqual(await exitOf(zero), { code: 2, signal: null }, zero.output());
  assert.match(zero.stderr(), /INVALID_CONFIG.*concurrency/);

  const noUrl = startBin(['--handlers', file, '--queue', 'default'], { OJS_URL: '', NODE_ENV: 'production' });
  const { code } = await exitOf(noUrl);
  assert.equal(code, 2, noUrl.output());
  assert.match(noUrl.stderr(), /--ojs-url URL or OJS_URL/);
});

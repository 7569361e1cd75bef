'use strict';
// The language conformance runner: every case of conformance-tests/cases/*.json through the
// real adapter (createOjs + the transactions of one database library: knex, pg, Kysely,
// Drizzle; test/conformance*.test.js, one per library and matrix column), on SQLite
// (better-sqlite3), PostgreSQL (pg) and MariaDB (mysql2) where the library runs on them,
// against ojs-devserver.
// Prints the matrix case x database at the end and writes target/matrix/<column>.tsv.
//
// A library (`library` below) says how to open its database, how a case's begin / savepoint /
// release / commit / rollback map onto its transactions, and how to read outbox rows through a
// transaction. Reads go through the application's view: inside an open transaction through
// that transaction (its own uncommitted rows included), otherwise the committed rows through
// the core (`ojs.outboxRows`) and a count through the library.
//
// Cases with `relay_kill` run the relay as a separate process (`ojs-relay run`, the package's
// bin, relay mode "external"), because an in-process relay cannot be killed without killing
// the test; SIGKILL on that process is the abrupt death the cases describe.
//
// Worker cases (`worker_start`, `worker_stop`, `wait_jobs`) run the package's own worker,
// `ojs.worker()` of the case's adapter, on the queue `default` with the suite handlers
// (conformance-tests/README.md, "Workers"; `SUITE_HANDLERS` below) and no other type; the
// backend's view of each job (`GET /ojs/v1/jobs/{id}`) is what `wait_jobs` checks.
//
// `race_enqueue` runs a second transaction of the library (`library.race`: knex.transaction,
// ojs.transaction on the other libraries) on a second connection while the case's transaction
// is open; its INSERT waits for that transaction (a row lock on PostgreSQL and MariaDB, the
// write lock on SQLite). On PostgreSQL and MariaDB it runs here, concurrently (the pool's other connection, driven
// asynchronously). On SQLite every library here sits on better-sqlite3, which is synchronous:
// a second connection waiting for the write lock would block this thread, so the main
// transaction could never commit. There it runs in a worker thread with its own connection
// (`library.second`, busy timeout 10 s) and its own adapter (createOjs with the case's
// config): this file is the worker's script (`raceWorker` below).

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { isDeepStrictEqual } = require('node:util');
const { Worker, isMainThread, workerData, parentPort } = require('node:worker_threads');
const { ojsPackage, PACKAGE_DIR, REPO, sleep, WAIT_MS, scratchDir, startDevserver } = require('./support');

const { createOjs, OJSError } = ojsPackage;

const CASES_DIR = path.join(REPO, 'conformance-tests', 'cases');
const SCHEMA = JSON.parse(fs.readFileSync(path.join(REPO, 'conformance-tests', 'schema', 'case.schema.json'), 'utf8'));
const cases = fs
  .readdirSync(CASES_DIR)
  .filter((name) => name.endsWith('.json'))
  .sort()
  .map((name) => JSON.parse(fs.readFileSync(path.join(CASES_DIR, name), 'utf8')))
  // OJS_TEST_CASES (a regular expression on case ids) runs a subset while developing.
  .filter((c) => !process.env.OJS_TEST_CASES || new RegExp(process.env.OJS_TEST_CASES).test(c.id));

/** The suite handlers of the worker cases, as an application writes handlers for `ojs.worker()`. */
const SUITE_HANDLERS = {
  'conf.echo': async (args) => ({ echo: args }),
  'conf.fail': async ([message]) => {
    throw new Error(message);
  },
  'conf.sleep': async ([ms]) => {
    await sleep(ms);
    return { slept: ms };
  },
  'conf.trace': async (args, ctx) => ({ traceparent: ctx.traceparent }),
};

/** Cases this runner cannot execute, with the reason (printed in the matrix). */
function skipReason() {
  return null;
}

/** The suite defaults: the `default` annotations of the schema's config keys. */
function suiteDefaults() {
  const defaults = {};
  for (const section of ['outbox', 'relay']) {
    const keys = SCHEMA.$defs.config.properties[section].properties;
    for (const [key, spec] of Object.entries(keys)) {
      if (spec.default !== undefined) (defaults[section] ||= {})[key] = spec.default;
    }
  }
  return defaults;
}

function merge(base, patch) {
  for (const [key, value] of Object.entries(patch || {})) {
    if (value && typeof value === 'object' && !Array.isArray(value) && base[key] && typeof base[key] === 'object') {
      merge(base[key], value);
    } else base[key] = value;
  }
  return base;
}

/**
 * The case's table: at most 51 characters, since PostgreSQL cuts identifiers at 63 and the
 * core's DDL names an index `<table>_events_time` (`OutboxSql::name_too_long`).
 */
function tableFor(testCase) {
  const slug = testCase.id.toLowerCase().replace(/[^a-z0-9]/g, '_');
  const hash = crypto.createHash('sha1').update(testCase.id).digest('hex').slice(0, 6);
  return `node_case_${slug.slice(0, 34)}_${hash}`;
}

/** In a worker thread running a race's second transaction (`raceWorker`), its data. */
const RACE_WORKER = (!isMainThread && workerData && workerData.ojsRace) || null;

/** How long the end of a case waits for a race still running before giving up on it. */
const RACE_CLEANUP_MS = 15000;

let backend;
let library;
let sqliteDir;
const matrix = new Map();

function summary() {
  const databases = library.databases;
  const width = Math.max(...cases.map((c) => c.id.length));
  const lines = [`${'case'.padEnd(width)}  ${databases.map((d) => d.padEnd(8)).join('  ')}`];
  const counts = { PASS: 0, FAIL: 0, SKIP: 0 };
  for (const testCase of cases) {
    const row = matrix.get(testCase.id) || {};
    lines.push(`${testCase.id.padEnd(width)}  ${databases.map((d) => (row[d] || '-').padEnd(8)).join('  ')}`);
    for (const d of databases) if (row[d]) counts[row[d]] += 1;
  }
  const reasons = cases.filter((c) => skipReason(c)).map((c) => `  SKIP ${c.id}: ${skipReason(c)}`);
  // One line per case and database for scripts/matrix.sh, which joins every runner's column
  // (not for a subset picked by OJS_TEST_CASES or OJS_TEST_DATABASES).
  if (process.env.OJS_REPO_ROOT && !process.env.OJS_TEST_CASES && !process.env.OJS_TEST_DATABASES) {
    const dir = path.join(process.env.OJS_REPO_ROOT, 'target', 'matrix');
    fs.mkdirSync(dir, { recursive: true });
    const tsv = cases.flatMap((c) =>
      databases.map((d) => `${c.id}\t${d === 'postgres' ? 'postgresql' : d}\t${(matrix.get(c.id) || {})[d] || 'MISSING'}\n`),
    );
    fs.writeFileSync(path.join(dir, `${library.column}.tsv`), tsv.join(''));
  }
  console.log(
    `\nconformance matrix (node, ${library.column}, ${cases.length} cases)\n${lines.join('\n')}\n` +
      `PASS ${counts.PASS}, FAIL ${counts.FAIL}, SKIP ${counts.SKIP}\n${reasons.join('\n')}`,
  );
}

/** The separate relay process of the relay_kill cases. */
class RelayProcess {
  constructor(configFile) {
    this.configFile = configFile;
    this.child = null;
  }

  async start() {
    const child = spawn(process.execPath, [path.join(PACKAGE_DIR, 'bin', 'ojs-relay.js'), '--config', this.configFile, 'run'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    // The bin prints this line once the relay runs (its first poll is at once).
    await new Promise((resolve, reject) => {
      let seen = '';
      const timer = setTimeout(() => reject(new Error(`ojs-relay did not start within ${WAIT_MS} ms: ${seen}`)), WAIT_MS);
      child.stderr.on('data', (chunk) => {
        seen += chunk;
        if (seen.includes('ojs-relay: relaying')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => reject(new Error(`ojs-relay exited (${code}): ${seen}`)));
    });
  }

  async stop(signal) {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill(signal);
    });
  }
}

/** `promise`'s value, or `null` when `ms` pass first. */
async function within(promise, ms) {
  let timer;
  try {
    return await Promise.race([promise, new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), ms);
    })]);
  } finally {
    clearTimeout(timer);
  }
}

/** An error of the race's enqueue as it crosses from a worker thread (plain data). */
function plainError(error) {
  return {
    ojs: error instanceof OJSError,
    name: error && error.name,
    code: error && error.code,
    message: error && error.message,
    stack: error && error.stack,
  };
}

class Run {
  constructor(testCase, database, db, ojs, relayProcess, table) {
    this.testCase = testCase;
    this.database = database;
    /** The library's database (a knex instance, a pg Pool, a Kysely or Drizzle database). */
    this.db = db;
    this.ojs = ojs;
    this.relayProcess = relayProcess;
    this.table = table;
    this.refs = new Map();
    this.context = null;
    this.stack = [];
    this.lastCommitUs = 0;
    /** Event subscriptions by name: `{ stream, events, ids, ended }`. */
    this.subscriptions = new Map();
    /**
     * The second transaction of `race_enqueue` while it runs: `{ ref, outcome, stop }`, its
     * outcome resolving to `{ id }`, `{ error }` (the enqueue's, plainError) or `{ failure }`.
     */
    this.race = null;
    /** The worker of `worker_start` while it runs (`ojs.worker()`), else null. */
    this.worker = null;
    /** The first failure of a worker of this case (its 'error' event), or null. */
    this.workerError = null;
    /** What a race's worker thread needs (SQLite): the database file, createOjs's config. */
    this.sqliteFile = null;
    this.raceConfig = null;
  }

  id(ref) {
    if (!this.refs.has(ref)) throw new Error(`ref ${JSON.stringify(ref)} was never enqueued`);
    return this.refs.get(ref);
  }

  /** The innermost open transaction (as `library.begin` / `savepoint` returned it). */
  get top() {
    return this.stack[this.stack.length - 1];
  }

  /** Where the adapter stages and reads: the innermost transaction, or the database. */
  get executor() {
    return this.top ? library.txOf(this.top) : this.db;
  }

  /** Runs an adapter call with the case's request context, as a request would. */
  withContext(work) {
    return this.context ? this.ojs.withContext(this.context, work) : work();
  }

  /** Calls `work`; checks expect_error; returns the result or undefined on an expected error. */
  async expecting(step, work) {
    const expected = step.expect_error;
    let result;
    try {
      result = await work();
    } catch (error) {
      if (!expected) throw error;
      if (!(error instanceof OJSError)) throw new Error(`expected ${expected}, got a non-OJSError: ${error.stack}`);
      if (error.code !== expected) throw new Error(`expected ${expected}, got ${error.code}: ${error.message}`);
      return undefined;
    }
    if (expected) throw new Error(`expected error ${expected}, the call succeeded`);
    return result;
  }

  async stage(step, bulk) {
    const executor = this.executor;
    if (bulk) {
      let entries;
      if (step.generate) {
        const { count, type, ref_prefix: prefix } = step.generate;
        entries = Array.from({ length: count }, (_, i) => [`${prefix}${i}`, { type, args: [i] }]);
      } else {
        entries = step.jobs.map(({ ref, ...job }) => [ref, job]);
      }
      const ids = await this.expecting(step, () =>
        this.withContext(() => this.ojs.enqueueBulk(executor, entries.map(([, job]) => job))),
      );
      if (ids) entries.forEach(([ref], i) => ref && this.refs.set(ref, ids[i]));
    } else {
      const id = await this.expecting(step, () =>
        this.withContext(() => this.ojs.enqueueAfterCommit(executor, step.type, step.args, step.options)),
      );
      // `same_as`: the call reported the id of a job staged before (a unique job's `ignore`).
      if (id && step.same_as !== undefined && id !== this.id(step.same_as)) {
        throw new Error(`returned ${id}, expected the id of ${JSON.stringify(step.same_as)} (${this.id(step.same_as)})`);
      }
      if (id && step.ref) this.refs.set(step.ref, id);
    }
    if (!this.top && !step.expect_error) this.lastCommitUs = Date.now() * 1000;
  }

  /** Outbox rows (job id -> status) as the application sees them. */
  async rows(ids) {
    if (this.top) {
      const rows = await library.rows(library.txOf(this.top), this.database, this.table, ids);
      return new Map(rows.map((row) => [String(row.job_id), row.status]));
    }
    const rows = await this.ojs.outboxRows(ids);
    return new Map(Object.entries(rows).map(([id, row]) => [id, row.status]));
  }

  async count() {
    return Number(await library.count(this.executor, this.database, this.table));
  }

  async checkRows(expected) {
    const refs = Object.keys(expected || {});
    if (!refs.length) return;
    const states = await this.rows(refs.map((ref) => this.id(ref)));
    for (const ref of refs) {
      const actual = states.get(this.id(ref)) || 'absent';
      const allowed = [].concat(expected[ref]);
      if (!allowed.includes(actual)) throw new Error(`row ${JSON.stringify(ref)} is ${actual}, expected ${JSON.stringify(expected[ref])}`);
    }
  }

  async step(step) {
    const timeout = step.timeout_ms ?? 10000;
    switch (step.op) {
      case 'begin':
        if (this.stack.length) throw new Error('begin: a transaction is already open');
        this.stack.push(await library.begin(this.ojs, this.db));
        break;
      case 'savepoint':
        this.stack.push(await library.savepoint(this.ojs, this.top));
        break;
      case 'release_savepoint':
        await library.commit(this.ojs, this.stack.pop(), false);
        break;
      case 'rollback_savepoint':
        await library.rollback(this.stack.pop());
        break;
      case 'commit': {
        const root = this.stack.pop();
        if (this.stack.length) throw new Error('commit with a savepoint open');
        await library.commit(this.ojs, root, Boolean(step.crash_before_hook));
        this.lastCommitUs = Date.now() * 1000;
        break;
      }
      case 'rollback': {
        const root = this.stack.pop();
        await library.rollback(root);
        break;
      }
      case 'enqueue_after_commit':
        await this.stage(step, false);
        break;
      case 'enqueue_bulk':
        await this.stage(step, true);
        break;
      case 'enqueue': {
        const id = await this.expecting(step, () => this.withContext(() => this.ojs.enqueue(step.type, step.args, step.options)));
        if (id && step.ref) this.refs.set(step.ref, id);
        break;
      }
      case 'set_context':
        this.context = { ...step.context };
        break;
      case 'clear_context':
        this.context = null;
        break;
      case 'backend_fault': {
        const { op, ...fault } = step;
        await backend.call('POST', '/_dev/faults', fault);
        break;
      }
      case 'backend_clear_faults':
        await backend.call('DELETE', '/_dev/faults');
        break;
      case 'backend_manifest':
        await backend.call('POST', '/_dev/manifest', { batch_enqueue: step.batch_enqueue });
        break;
      case 'relay_start':
        if (this.relayProcess) await this.relayProcess.start();
        else await this.ojs.start();
        break;
      case 'relay_stop':
        if (this.relayProcess) await this.relayProcess.stop('SIGTERM');
        else await this.ojs.stopRelay();
        break;
      case 'relay_kill':
        if (!this.relayProcess) throw new Error('relay_kill needs the separate relay process');
        await this.relayProcess.stop('SIGKILL');
        break;
      case 'sleep':
        await sleep(step.ms);
        break;
      case 'prune':
        await this.ojs.prune({ olderThan: step.older_than });
        break;
      case 'dead_replay':
        await this.ojs.deadReplay({ tenant: step.tenant_id ?? null });
        break;
      case 'dead_purge':
        await this.ojs.deadPurge({ tenant: step.tenant_id ?? null });
        break;
      case 'wait_delivered':
        await this.waitDelivered(step, timeout);
        break;
      case 'wait_outbox': {
        const deadline = Date.now() + timeout;
        for (;;) {
          try {
            await this.checkRows(step.rows);
            break;
          } catch (why) {
            if (Date.now() >= deadline) throw new Error(`wait_outbox timed out: ${why.message}`);
            await sleep(20);
          }
        }
        break;
      }
      case 'expect_backend':
        await this.expectBackend(step);
        break;
      case 'expect_requests': {
        const received = await backend.received();
        for (const kind of ['batch', 'single']) {
          if (step[kind] === undefined) continue;
          const actual = received.requests[kind] ?? 0;
          if (actual !== step[kind]) throw new Error(`expected ${step[kind]} ${kind} requests, the backend got ${actual}`);
        }
        break;
      }
      case 'expect_outbox': {
        await this.checkRows(step.rows);
        const absent = (step.absent || []).map((ref) => [ref, this.id(ref)]);
        if (absent.length) {
          const rows = await this.rows(absent.map(([, id]) => id));
          const present = absent.find(([, id]) => rows.has(id));
          if (present) throw new Error(`outbox still has a row for ${JSON.stringify(present[0])}`);
        }
        if (step.total !== undefined) {
          const actual = await this.count();
          if (actual !== step.total) throw new Error(`expected ${step.total} outbox rows, found ${actual}`);
        }
        break;
      }
      case 'race_enqueue':
        if (!this.stack.length || this.race) throw new Error('race_enqueue: needs an open transaction and no race running');
        this.race = this.database === 'sqlite' ? this.raceInWorker(step) : this.raceHere(step);
        break;
      case 'race_join':
        await this.joinRace(step, timeout);
        break;
      case 'events_subscribe':
        await this.subscribe(step);
        break;
      case 'wait_events':
        await this.waitEvents(step, timeout);
        break;
      case 'expect_events':
        await this.expectEvents(step);
        break;
      case 'worker_start': {
        if (this.worker) throw new Error('worker_start: a worker is running');
        const worker = this.ojs.worker({
          handlers: SUITE_HANDLERS,
          queues: ['default'],
          concurrency: step.concurrency,
          visibilityTimeoutMs: step.visibility_timeout_ms,
        });
        // A worker failure (not a handler's) fails the case at its next step.
        worker.on('error', (error) => {
          this.workerError ||= error;
        });
        this.worker = worker;
        break;
      }
      case 'worker_stop':
        if (!this.worker) throw new Error('worker_stop: no worker is running');
        await this.worker.stop({ deadlineMs: step.deadline_ms });
        this.worker = null;
        break;
      case 'wait_jobs':
        await this.waitJobs(step, timeout);
        break;
      default:
        throw new Error(`unknown op ${JSON.stringify(step.op)}`);
    }
  }

  // ---- races (race_enqueue / race_join) ----------------------------------------------------

  /**
   * The race's second transaction in this thread (PostgreSQL): `library.race` opens it on the
   * library's database (another connection of its pool), enqueues, commits also after a failed
   * enqueue (the work returns the error instead of throwing it). Not awaited here.
   */
  raceHere(step) {
    const work = async (tx) => {
      try {
        return { id: await this.withContext(() => this.ojs.enqueueAfterCommit(tx, step.type, step.args, step.options)) };
      } catch (error) {
        return { error: plainError(error) };
      }
    };
    const outcome = Promise.resolve()
      .then(() => library.race(this.ojs, this.db, work))
      .catch((error) => ({ failure: error.stack || String(error) }));
    return { ref: step.ref, outcome, stop: async () => {} };
  }

  /** The race's second transaction in a worker thread with its own connection (SQLite). */
  raceInWorker(step) {
    if (!library.file || !library.second) throw new Error(`race_enqueue: the ${library.column} library gives no second SQLite connection (file, second)`);
    const worker = new Worker(__filename, {
      execArgv: [],
      workerData: {
        ojsRace: {
          libraryFile: library.file,
          sqliteFile: this.sqliteFile,
          config: this.raceConfig,
          context: this.context,
          job: { type: step.type, args: step.args, options: step.options },
        },
      },
    });
    const outcome = new Promise((resolve) => {
      worker.once('message', resolve);
      worker.once('error', (error) => resolve({ failure: `the worker thread failed: ${error.stack || error}` }));
      worker.once('exit', (code) => resolve({ failure: `the worker thread exited (${code}) without an outcome` }));
    });
    return { ref: step.ref, outcome, stop: () => worker.terminate() };
  }

  async joinRace(step, timeout) {
    const race = this.race;
    if (!race) throw new Error('race_join: no race running');
    const outcome = await within(race.outcome, timeout);
    // Still running: left in this.race, for the end of the case to clean up.
    if (outcome === null) throw new Error(`race_join: the racing transaction did not end within ${timeout} ms`);
    this.race = null;
    if (outcome.failure) throw new Error(`race_join: the racing transaction failed: ${outcome.failure}`);
    const expected = step.expect_error;
    if (outcome.error) {
      const { ojs, code, message, stack } = outcome.error;
      if (!expected) throw new Error(`race_join: the racing enqueue failed: ${stack || `${code}: ${message}`}`);
      if (!ojs) throw new Error(`race_join: expected ${expected}, got a non-OJSError: ${stack || message}`);
      if (code !== expected) throw new Error(`race_join: expected ${expected}, got ${code}: ${message}`);
      return;
    }
    if (expected) throw new Error(`race_join: expected error ${expected}, the racing enqueue succeeded (${outcome.id})`);
    if (race.ref) this.refs.set(race.ref, outcome.id);
  }

  /**
   * The end of a case with a race still running (a step failed): once the case's transactions
   * are rolled back nothing blocks it, so it is awaited; a worker that still does not end is
   * terminated (its connection closes with its thread).
   */
  async endRace() {
    const race = this.race;
    this.race = null;
    if (!race) return;
    if ((await within(race.outcome, RACE_CLEANUP_MS)) === null) {
      console.error(`conformance: a racing transaction did not end within ${RACE_CLEANUP_MS} ms after its case; stopping it`);
      await race.stop();
    }
  }

  // ---- events (conformance-tests/README.md, "Events") --------------------------------------

  /** Opens a subscriber of the relay's events through the call every mount serves (`relayEvents`). */
  async subscribe(step) {
    const { op, subscription, last_event_id: from, ...filters } = step;
    if (this.subscriptions.has(subscription)) throw new Error(`subscription ${JSON.stringify(subscription)} is opened twice`);
    const request = { ...filters };
    if (from !== undefined) request.last_event_id = this.receivedEvent(from).id;
    const stream = await this.ojs.relayEvents(request);
    this.subscriptions.set(subscription, { name: subscription, stream, events: [], ids: new Set(), ended: false });
  }

  subscription(name) {
    const sub = this.subscriptions.get(name);
    if (!sub) throw new Error(`no subscription ${JSON.stringify(name)}`);
    return sub;
  }

  /** The event of `type` about job `ref` that subscription `subscription` has received. */
  receivedEvent({ subscription, ref, type }) {
    const id = this.id(ref);
    const event = this.subscription(subscription).events.find((e) => e.type === type && e.subject === id);
    if (!event) throw new Error(`subscription ${JSON.stringify(subscription)} has received no ${type} about ${JSON.stringify(ref)}`);
    return event;
  }

  /** Reads the frames waiting (the first wait up to `timeoutMs`) until one comes back idle. */
  async pull(sub, timeoutMs) {
    for (let wait = timeoutMs; !sub.ended; wait = 0) {
      const frame = await sub.stream.next(wait);
      if (frame === null) sub.ended = true;
      else if (frame === '') return;
      else this.accept(sub, frame);
    }
  }

  /** One frame: its `data:` line is the event, checked as a CloudEvents envelope (RFC-0005 §2). */
  accept(sub, frame) {
    const line = frame.split('\n').find((l) => l.startsWith('data:'));
    if (line === undefined) throw new Error(`subscription ${sub.name}: a frame without data: ${JSON.stringify(frame)}`);
    let event;
    try {
      event = JSON.parse(line.slice('data:'.length));
    } catch (error) {
      throw new Error(`subscription ${sub.name}: a frame whose data is not JSON (${error.message}): ${JSON.stringify(frame)}`);
    }
    const wrong = (why) => new Error(`subscription ${sub.name}: ${why}: ${JSON.stringify(event)}`);
    if (event === null || typeof event !== 'object') throw wrong('the event is not an object');
    if (event.specversion !== '1.0') throw wrong('specversion is not "1.0"');
    if (typeof event.id !== 'string' || event.id === '') throw wrong('no id');
    if (sub.ids.has(event.id)) throw wrong('an id received before');
    if (event.source !== `/ojs/outbox/${this.table}`) throw wrong(`source is not /ojs/outbox/${this.table}`);
    if (typeof event.type === 'string' && event.type.startsWith('job.')) {
      if (!event.data || event.subject !== event.data.job_id) throw wrong('subject is not data.job_id');
    }
    sub.ids.add(event.id);
    sub.events.push(event);
  }

  /** Until the subscription's relevant events are exactly `step.events`, in order. */
  async waitEvents(step, timeout) {
    const sub = this.subscription(step.subscription);
    const expected = step.events.map((entry) => ({ ...entry, id: entry.ref === undefined ? undefined : this.id(entry.ref) }));
    const about = new Set(expected.filter((e) => e.id !== undefined).map((e) => e.id));
    const types = new Set(expected.filter((e) => e.id === undefined).map((e) => e.type));
    const relevant = (event) => about.has(event.subject) || types.has(event.type);
    const describe = (events) => JSON.stringify(events.map((e) => `${e.type} ${refOf(this.refs, e.subject) ?? e.subject} ${JSON.stringify(e.data)}`));
    const deadline = Date.now() + timeout;
    for (;;) {
      await this.pull(sub, 20);
      const seen = sub.events.filter(relevant);
      seen.forEach((event, i) => {
        if (i >= expected.length) throw new Error(`more relevant events than listed: ${describe(seen)}`);
        const entry = expected[i];
        const matches =
          event.type === entry.type &&
          (entry.id === undefined || event.subject === entry.id) &&
          Object.entries(entry.data || {}).every(([key, value]) => event.data && Object.hasOwn(event.data, key) && isDeepStrictEqual(event.data[key], value));
        if (!matches) throw new Error(`event ${i} does not match ${JSON.stringify(step.events[i])}: ${describe(seen)}`);
      });
      if (seen.length === expected.length) return;
      if (sub.ended) throw new Error(`subscription ${sub.name} ended while waiting; so far ${describe(seen)}`);
      if (Date.now() >= deadline) throw new Error(`timed out after ${timeout} ms; relevant events so far ${describe(seen)}`);
    }
  }

  /** At once, after reading the events already waiting: `absent` refs, `total` events. */
  async expectEvents(step) {
    const sub = this.subscription(step.subscription);
    await this.pull(sub, 0);
    for (const ref of step.absent || []) {
      const id = this.id(ref);
      const event = sub.events.find((e) => e.subject === id);
      if (event) throw new Error(`subscription ${sub.name} received an event about ${JSON.stringify(ref)}: ${JSON.stringify(event)}`);
    }
    if (step.total !== undefined && sub.events.length !== step.total) {
      throw new Error(`subscription ${sub.name} received ${sub.events.length} events, expected ${step.total}: ${JSON.stringify(sub.events.map((e) => e.type))}`);
    }
  }

  /** Closes every subscription (the end of a case). */
  closeSubscriptions() {
    for (const sub of this.subscriptions.values()) sub.stream.close();
    this.subscriptions.clear();
  }

  /** Until the backend's view of each job matches its entry (`state`, `attempt`, `result`, `error`). */
  async waitJobs(step, timeout) {
    const wanted = Object.entries(step.jobs).map(([ref, expected]) => [ref, this.id(ref), expected]);
    const mismatch = (job, expected) => {
      if (!job) return 'not stored';
      const states = [].concat(expected.state ?? []);
      if (states.length && !states.includes(job.state)) return `state ${job.state}`;
      if (expected.attempt !== undefined && job.attempt !== expected.attempt) return `attempt ${job.attempt}`;
      if (expected.result !== undefined && !isDeepStrictEqual(job.result, expected.result)) return `result ${JSON.stringify(job.result)}`;
      if (expected.error !== undefined) {
        const error = job.error;
        if (!error || typeof error !== 'object') return 'no error';
        if (expected.error.type !== undefined && error.type !== expected.error.type) return `error type ${error.type}`;
        const text = expected.error.message_contains;
        if (text !== undefined && !(typeof error.message === 'string' && error.message.includes(text))) return `error message ${JSON.stringify(error.message)}`;
      }
      return null;
    };
    const deadline = Date.now() + timeout;
    for (;;) {
      if (this.workerError) throw new Error(`the worker failed: ${this.workerError.stack || this.workerError}`);
      const seen = await Promise.all(wanted.map(async ([ref, id, expected]) => {
        const answer = await backend.call('GET', `/ojs/v1/jobs/${id}`);
        const job = (answer && answer.job) || null;
        return [ref, job, mismatch(job, expected)];
      }));
      const wrong = seen.filter(([, , why]) => why !== null);
      if (!wrong.length) return;
      if (Date.now() >= deadline) {
        const described = wrong.map(([ref, job, why]) => `${JSON.stringify(ref)}: ${why} (${JSON.stringify(job)})`);
        throw new Error(`wait_jobs timed out after ${timeout} ms: ${described.join('; ')}`);
      }
      await sleep(20);
    }
  }

  async waitDelivered(step, timeout) {
    const wanted = step.refs.map((ref) => [ref, this.id(ref)]);
    const deadline = Date.now() + timeout;
    for (;;) {
      const received = await backend.received();
      const stored = new Map(received.jobs.map((job) => [job.id, job.received_at_us]));
      const missing = wanted.filter(([, id]) => !stored.has(id)).map(([ref]) => ref);
      if (!missing.length) {
        if (step.min_elapsed_ms !== undefined) {
          const last = Math.max(...wanted.map(([, id]) => stored.get(id)));
          const elapsedMs = Math.floor((last - this.lastCommitUs) / 1000);
          if (elapsedMs < step.min_elapsed_ms) {
            throw new Error(`delivered ${elapsedMs} ms after commit, expected at least ${step.min_elapsed_ms} ms`);
          }
        }
        return;
      }
      if (Date.now() >= deadline) {
        const status = await this.ojs.status().catch((e) => e.message);
        throw new Error(`not delivered within ${timeout} ms: ${JSON.stringify(missing)}; outbox ${JSON.stringify(status)}`);
      }
      await sleep(10);
    }
  }

  async expectBackend(step) {
    const received = await backend.received();
    const jobs = received.jobs;
    const position = new Map(jobs.map((job, i) => [job.id, i]));
    const expected = (step.received || []).map((ref) => [ref, this.id(ref)]);
    for (const [ref, id] of expected) {
      if (!position.has(id)) throw new Error(`the backend did not receive ${JSON.stringify(ref)}`);
    }
    if (step.order === 'exact') {
      for (let i = 1; i < expected.length; i += 1) {
        if (position.get(expected[i][1]) < position.get(expected[i - 1][1])) {
          throw new Error(`${JSON.stringify(expected[i][0])} arrived before ${JSON.stringify(expected[i - 1][0])}`);
        }
      }
    }
    for (const ref of step.absent || []) {
      if (position.has(this.id(ref))) throw new Error(`the backend received ${JSON.stringify(ref)}, which must not be sent`);
    }
    if (step.total !== undefined && jobs.length !== step.total) {
      throw new Error(`the backend stored ${jobs.length} jobs, expected ${step.total}`);
    }
    const deliveries = (ref) => received.deliveries[this.id(ref)] ?? 0;
    for (const [ref, minimum] of Object.entries(step.deliveries_at_least || {})) {
      if (deliveries(ref) < minimum) throw new Error(`${JSON.stringify(ref)} was delivered ${deliveries(ref)} times, expected at least ${minimum}`);
    }
    for (const [ref, exactly] of Object.entries(step.deliveries_exactly || {})) {
      if (deliveries(ref) !== exactly) throw new Error(`${JSON.stringify(ref)} was delivered ${deliveries(ref)} times, expected ${exactly}`);
    }
    // `encrypted`: the stored args are the encryption envelope, the meta names the codec.
    for (const ref of step.encrypted || []) {
      const job = jobs.find((j) => j.id === this.id(ref));
      if (!job) throw new Error(`${JSON.stringify(ref)} not stored`);
      const args = job.args;
      const envelope = Array.isArray(args) && args.length === 1 ? args[0] : null;
      const sealed =
        envelope !== null &&
        typeof envelope === 'object' &&
        envelope.ojs_encoded === true &&
        envelope.encoding === 'binary/encrypted' &&
        typeof envelope.data === 'string';
      if (!sealed) throw new Error(`${JSON.stringify(ref)}: args are not the encrypted envelope: ${JSON.stringify(args)}`);
      const meta = job.meta || {};
      if (!isDeepStrictEqual(meta['ojs.codec.encodings'], ['binary/encrypted']) || typeof meta['ojs.codec.key_id'] !== 'string') {
        throw new Error(`${JSON.stringify(ref)}: meta lacks the codec keys: ${JSON.stringify(meta)}`);
      }
    }
    for (const [ref, { meta_absent: metaAbsent = [], ...fields }] of Object.entries(step.jobs || {})) {
      const job = jobs.find((j) => j.id === this.id(ref));
      if (!job) throw new Error(`${JSON.stringify(ref)} not stored`);
      if (!isSubset(fields, job)) throw new Error(`${JSON.stringify(ref)}: expected ${JSON.stringify(fields)}, stored ${JSON.stringify(job)}`);
      for (const key of metaAbsent) {
        if (job.meta && Object.hasOwn(job.meta, key)) {
          throw new Error(`${JSON.stringify(ref)}: meta must not have ${JSON.stringify(key)}, stored ${JSON.stringify(job.meta)}`);
        }
      }
    }
  }
}

/** The ref whose job id is `id`, or undefined. */
function refOf(refs, id) {
  for (const [ref, jobId] of refs) if (jobId === id) return ref;
  return undefined;
}

/** Subset match: objects by key (recursively), everything else by deep equality. */
function isSubset(expected, actual) {
  if (expected && typeof expected === 'object' && !Array.isArray(expected)) {
    return Boolean(actual) && typeof actual === 'object' && Object.entries(expected).every(([k, v]) => isSubset(v, actual[k]));
  }
  return isDeepStrictEqual(expected, actual);
}

async function runCase(testCase, database) {
  await backend.reset();
  const table = tableFor(testCase);
  const { db, options, close } = await library.open(database, path.join(sqliteDir, `${table}.db`), table);
  const external = testCase.steps.some((step) => step.op === 'relay_kill');
  const config = merge(suiteDefaults(), testCase.config || {});
  config.outbox = { ...config.outbox, table_name: table };
  if (external) config.relay = { ...config.relay, mode: 'external' };
  // Every other key of the merged config (`encryption`) goes to the core as the case gives it.
  const { outbox, relay, ...rest } = config;
  const ojs = createOjs({ url: backend.url, ...options, ...rest, outbox, relay, autoStart: false, handleSignals: false });
  let relayProcess = null;
  const run = new Run(testCase, database, db, ojs, null, table);
  run.sqliteFile = path.join(sqliteDir, `${table}.db`);
  run.raceConfig = { url: backend.url, rest, outbox, relay };
  try {
    await ojs.migrate();
    if (external) {
      const configFile = path.join(sqliteDir, `${table}-${database}.json`);
      fs.writeFileSync(configFile, JSON.stringify(ojs.config));
      relayProcess = new RelayProcess(configFile);
      run.relayProcess = relayProcess;
    }
    if (testCase.relay !== 'stopped') {
      if (relayProcess) await relayProcess.start();
      else await ojs.start();
    }
    for (const [index, step] of testCase.steps.entries()) {
      try {
        await run.step(step);
      } catch (error) {
        throw new Error(`step ${index} (${step.op}): ${error.message}`);
      }
    }
  } finally {
    while (run.stack.length > 1) await library.rollback(run.stack.pop()).catch(() => {});
    if (run.stack.length) await library.rollback(run.stack.pop()).catch(() => {});
    await run.endRace();
    run.closeSubscriptions();
    // A worker the case left running gives its jobs back at once.
    if (run.worker) await run.worker.stop({ deadlineMs: 0 }).catch(() => {});
    if (relayProcess) await relayProcess.stop('SIGKILL');
    await Promise.race([ojs.close(), sleep(8000)]);
    await close();
  }
}

/**
 * Runs every case through `lib`: `{ column, databases, setup(), teardown(), open(database,
 * sqliteFile, table) -> {db, options, close}, begin(ojs, db), savepoint(ojs, tx), commit(ojs,
 * tx, crashBeforeHook), rollback(tx), txOf(tx), rows(executor, database, table, ids),
 * count(executor, database, table), race(ojs, db, work) }` (race: `work(tx)` in a transaction
 * of its own on `db`, committed, resolving with work's result), and with SQLite also `file`
 * (the module calling conformance, loaded by a race's worker thread) and `second(sqliteFile)
 * -> {db, options, close}` (a new connection on the case's file, for that worker).
 *
 * In a race's worker thread this only records `lib`.
 */
function conformance(lib) {
  // OJS_TEST_DATABASES (comma-separated: sqlite, postgres, mariadb) runs a subset while developing.
  const only = process.env.OJS_TEST_DATABASES;
  library = only ? { ...lib, databases: lib.databases.filter((d) => only.split(',').includes(d)) } : lib;
  lib = library;
  if (RACE_WORKER) return;
  sqliteDir = scratchDir(`conformance-${lib.column}`);
  after(async () => {
    await library.teardown();
    if (backend) await backend.stop();
    summary();
  });
  test(`conformance cases (${lib.column})`, async (t) => {
    await library.setup();
    backend = await startDevserver();
    for (const database of library.databases) {
      for (const testCase of cases) {
        const row = matrix.get(testCase.id) || {};
        matrix.set(testCase.id, row);
        const reason = skipReason(testCase);
        await t.test(`${database} ${testCase.id}`, { skip: reason || false }, async () => {
          if (reason) return;
          try {
            await runCase(testCase, database);
            row[database] = 'PASS';
          } catch (error) {
            row[database] = 'FAIL';
            assert.fail(`${testCase.title}\n${error.message}`);
          }
        });
        if (reason) row[database] = 'SKIP';
      }
    }
  });
}

/**
 * A library whose transactions are callbacks (`ojs.transaction(db, async (tx) => ...)`), driven
 * step by step: the callback hands its transaction out and waits until the case commits
 * (returns) or rolls back (throws). `options` go to the outermost ojs.transaction.
 */
const ROLLBACK = Symbol('rollback');

function callbackTransactions(options) {
  const open = async (ojs, db, transactionOptions) => {
    let handOut;
    let end;
    const given = new Promise((resolve) => {
      handOut = resolve;
    });
    const gate = new Promise((resolve, reject) => {
      end = { commit: resolve, rollback: () => reject(ROLLBACK) };
    });
    const done = ojs.transaction(
      db,
      (tx) => {
        handOut(tx);
        return gate;
      },
      transactionOptions,
    );
    const tx = await Promise.race([given, done.then(() => {
      throw new Error('the transaction ended before its work started');
    })]);
    return { tx, end, done };
  };
  return {
    race: (ojs, db, work) => ojs.transaction(db, work, options),
    begin: (ojs, db) => open(ojs, db, options),
    savepoint: (ojs, top) => open(ojs, top.tx),
    txOf: (top) => top.tx,
    async commit(ojs, top, crashBeforeHook) {
      if (crashBeforeHook) ojs._suppressWakeup(top.tx);
      top.end.commit();
      await top.done;
    },
    async rollback(top) {
      top.end.rollback();
      await top.done.catch((error) => {
        if (error !== ROLLBACK) throw error;
      });
    },
  };
}

/**
 * A worker thread's race (SQLite): loads the library's module (its conformance call records the
 * library), opens a second connection and an adapter with the case's config, runs
 * `library.race` with one enqueue_after_commit, closes both and posts the outcome.
 */
async function raceWorker({ libraryFile, sqliteFile, config, context, job }) {
  let outcome;
  let second = null;
  let ojs = null;
  try {
    require(libraryFile);
    second = await library.second(sqliteFile);
    const { url, rest, outbox, relay } = config;
    ojs = createOjs({ url, ...second.options, ...rest, outbox, relay, autoStart: false, handleSignals: false });
    const enqueue = (tx) => ojs.enqueueAfterCommit(tx, job.type, job.args, job.options);
    const work = async (tx) => {
      try {
        return { id: await (context ? ojs.withContext(context, () => enqueue(tx)) : enqueue(tx)) };
      } catch (error) {
        return { error: plainError(error) };
      }
    };
    outcome = await library.race(ojs, second.db, work);
  } catch (error) {
    outcome = { failure: error.stack || String(error) };
  }
  if (ojs) await ojs.close().catch(() => {});
  if (second) await Promise.resolve(second.close()).catch(() => {});
  parentPort.postMessage(outcome);
}

module.exports = { conformance, callbackTransactions };

if (RACE_WORKER) raceWorker(RACE_WORKER);

'use strict';
// knex glue: which core dialect a knex client speaks, the relay's database URL derived from the
// knex connection settings, running the core's statements on the host connection, and the
// wake-up registered on the OUTERMOST transaction's commit.
//
// knex internals relied on (lib/execution/transaction.js, knex 2 and 3): a transactor has
// `isTransaction`, `isCompleted()`, `parentTransaction` (the enclosing transactor, for a
// savepoint), `executionPromise` (settles when COMMIT / RELEASE / ROLLBACK has run: resolved
// on commit, resolved or rejected on rollback), and `commit` / `rollback` looked up as
// properties each time they are called (also by knex itself when a container's promise
// settles). Since a rollback may resolve `executionPromise` as a commit does, the adapter notes
// which of the two was called.

const path = require('node:path');
const native = require('./native');
const { InvalidConfigError, NoTransactionError, errorFor } = require('./errors');

/** The core's dialect name for a knex instance or transactor. */
function dialectOf(knex) {
  const client = knex && knex.client;
  const names = [client && client.dialect, client && client.driverName, client && client.config && client.config.client];
  for (const name of names) {
    if (typeof name !== 'string') continue;
    if (/^(pg|postgres|postgresql|pgnative)$/i.test(name)) return 'postgresql';
    if (/^(sqlite3|better-sqlite3|sqlite)$/i.test(name)) return 'sqlite';
  }
  throw new InvalidConfigError(
    `knex: the client ${JSON.stringify(names.find((n) => typeof n === 'string') || String(client))} is not supported (pg or better-sqlite3)`,
    { code: 'INVALID_CONFIG', field: 'knex' },
  );
}

/**
 * The relay's own database URL, derived from the knex connection settings: a PostgreSQL
 * connection becomes postgres://..., a better-sqlite3 filename becomes sqlite://ABSOLUTE_PATH.
 */
function databaseUrlOf(knex) {
  const dialect = dialectOf(knex);
  const config = knex.client.config || {};
  const connection = config.connection;
  const refuse = (why) =>
    new InvalidConfigError(`database_url: ${why}; pass databaseUrl to createOjs`, {
      code: 'INVALID_CONFIG',
      field: 'database_url',
    });
  if (typeof connection === 'function') throw refuse('the knex connection is a function');
  if (dialect === 'sqlite') {
    const filename = typeof connection === 'string' ? connection : connection && connection.filename;
    if (!filename || filename === ':memory:' || filename.startsWith('file::memory:')) {
      throw refuse('an in-memory SQLite database cannot be shared with the relay');
    }
    return `sqlite://${path.resolve(filename)}`;
  }
  if (typeof connection === 'string') return connection;
  if (!connection || typeof connection !== 'object') throw refuse('the knex connection has no settings');
  if (typeof connection.connectionString === 'string') return connection.connectionString;
  const enc = encodeURIComponent;
  const user = connection.user || process.env.PGUSER || '';
  const password = connection.password ? `:${enc(connection.password)}` : '';
  const auth = user ? `${enc(user)}${password}@` : '';
  let host = connection.host || process.env.PGHOST || 'localhost';
  const query = [];
  if (host.startsWith('/')) {
    query.push(`host=${enc(host)}`);
    host = 'localhost';
  }
  const port = connection.port || process.env.PGPORT;
  const database = connection.database || process.env.PGDATABASE || '';
  if (connection.ssl) query.push('sslmode=require');
  const suffix = query.length ? `?${query.join('&')}` : '';
  return `postgres://${auth}${host}${port ? `:${port}` : ''}/${enc(database)}${suffix}`;
}

/** Whether `executor` is a knex transactor (rather than the knex instance). */
function isTransaction(executor) {
  return Boolean(executor && executor.isTransaction === true);
}

// ---- JSON conversion: the only language-side check, naming the core's code and field ------

const CODE_BY_KEY = { type: 'INVALID_JOB_TYPE', args: 'INVALID_ARGS', options: 'INVALID_OPTIONS', meta: 'INVALID_META' };

/** JSON text of `value` (`null` for undefined); a value JSON cannot hold raises the key's code. */
function jsonOf(value, key, fieldPrefix = '') {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    const field = `${fieldPrefix}${key}`;
    throw errorFor(CODE_BY_KEY[key] || 'INVALID_ARGS', `${field}: cannot be converted to JSON: ${error.message}`, field, error);
  }
  return text === undefined ? 'null' : text;
}

/** The JSON text of one job object as the core takes it: `{"type", "args", "options", "meta"}`. */
function jobJson(type, args, options, meta) {
  return `{"type":${jsonOf(type, 'type')},"args":${jsonOf(args, 'args')},"options":${jsonOf(options, 'options')},"meta":${jsonOf(meta, 'meta')}}`;
}

/**
 * Whether JSON.stringify gives exactly the text `jobsJson` builds key by key for this job: an
 * object (not an array) without `toJSON`, none of whose keys holds a function or a symbol
 * (which JSON.stringify would drop where `jobsJson` passes `null` for the core to judge).
 */
function plainJob(job) {
  if (job === null || typeof job !== 'object' || Array.isArray(job) || typeof job.toJSON === 'function') return false;
  for (const key in job) {
    const kind = typeof job[key];
    if (kind === 'function' || kind === 'symbol') return false;
  }
  return true;
}

/** The JSON text of a bulk: every own key of every job passed on, so the core judges them all. */
function jobsJson(jobs) {
  if (!Array.isArray(jobs)) return jsonOf(jobs, 'args', 'jobs.');
  // The common case in one native call; anything else (or a value JSON cannot hold, which
  // must be reported with its job and key) key by key below.
  if (jobs.every(plainJob)) {
    try {
      return JSON.stringify(jobs);
    } catch {
      // reported below
    }
  }
  const parts = new Array(jobs.length);
  for (let index = 0; index < jobs.length; index += 1) {
    const job = jobs[index];
    if (job === null || typeof job !== 'object' || Array.isArray(job)) {
      parts[index] = jsonOf(job, 'args', `jobs[${index}].`);
      continue;
    }
    const fields = [];
    for (const key of Object.keys(job)) {
      if (job[key] === undefined) continue;
      fields.push(`${JSON.stringify(key)}:${jsonOf(job[key], key, `jobs[${index}].`)}`);
    }
    parts[index] = `{${fields.join(',')}}`;
  }
  return `[${parts.join(',')}]`;
}

// ---- running the core's statements on the host connection --------------------------------

/**
 * A knex error as the package's DatabaseError or OutboxTableMissingError, classified by the
 * core's rule (SQLSTATE from pg, message from better-sqlite3); the driver's error is the cause.
 */
function databaseError(error) {
  const message = String((error && error.message) || error);
  const sqlstate = error && typeof error.code === 'string' && /^[0-9A-Z]{5}$/.test(error.code) ? error.code : null;
  // knex puts the query before the driver's message ("<sql> - <message>"): classify both.
  const driverMessage = message.includes(' - ') ? message.slice(message.lastIndexOf(' - ') + 3) : message;
  let code = native.databaseErrorCode(sqlstate, message);
  if (code === 'DATABASE') code = native.databaseErrorCode(sqlstate, driverMessage);
  return errorFor(code, `the outbox INSERT failed on the application's connection: ${message}`, null, error);
}

/**
 * Runs the core's statements through `executor` (knex instance or transactor). Several
 * statements (bulks over the core's rows-per-INSERT limit) run in a savepoint, or a
 * transaction of their own outside one, so a bulk is staged whole or not at all.
 */
async function execute(executor, statements) {
  try {
    if (statements.length === 1) {
      await executor.raw(statements[0].sql, statements[0].params);
      return;
    }
    await executor.transaction(async (inner) => {
      for (const statement of statements) await inner.raw(statement.sql, statement.params);
    });
  } catch (error) {
    throw databaseError(error);
  }
}

// ---- the after-commit wake-up --------------------------------------------------------------

const LEVEL = Symbol.for('ojs-adapter-express.level');

/**
 * The staging state of one transactor (one nesting level), installed once per transactor:
 * the job ids staged at this level, per adapter to wake, and the transactor's core dialect. At
 * a savepoint's release its ids move to the enclosing level; at the outermost commit they are
 * handed to the relay; at any rollback they are dropped, as the database drops their rows.
 */
function levelOf(trx) {
  const installed = trx[LEVEL];
  if (installed !== undefined) return installed;
  if (!trx.executionPromise || typeof trx.executionPromise.then !== 'function') {
    throw new InvalidConfigError('knex: this knex version exposes no transaction executionPromise (knex >= 2 needed)', {
      code: 'INVALID_CONFIG',
      field: 'knex',
    });
  }
  const parent = trx.parentTransaction ? levelOf(trx.parentTransaction) : null;
  const level = { pending: new Map(), parent, ending: null, suppressed: false, dialect: dialectOf(trx) };
  Object.defineProperty(trx, LEVEL, { value: level });
  const commit = trx.commit;
  const rollback = trx.rollback;
  trx.commit = function commitAndWake(...args) {
    level.ending = 'commit';
    return commit.apply(this, args);
  };
  trx.rollback = function rollbackAndDiscard(...args) {
    level.ending = 'rollback';
    return rollback.apply(this, args);
  };
  trx.executionPromise.then(
    () => {
      const pending = level.pending;
      level.pending = new Map();
      if (level.ending !== 'commit' || pending.size === 0) return;
      if (level.parent) {
        for (const [adapter, jobIds] of pending) addPending(level.parent, adapter, jobIds);
        return;
      }
      if (level.suppressed) return;
      for (const [adapter, jobIds] of pending) adapter.notifyCommitted(jobIds);
    },
    () => {
      level.pending = new Map();
    },
  );
  return level;
}

/** Adds staged ids to a level's list for `adapter` (no copy of what is already there). */
function addPending(level, adapter, jobIds) {
  const staged = level.pending.get(adapter);
  if (staged === undefined) {
    level.pending.set(adapter, jobIds.slice());
    return;
  }
  for (let index = 0; index < jobIds.length; index += 1) staged.push(jobIds[index]);
}

/** Registers one staged id on a level: O(1), woken at the outermost commit, dropped on rollback. */
function stagedAt(level, adapter, jobId) {
  const staged = level.pending.get(adapter);
  if (staged === undefined) level.pending.set(adapter, [jobId]);
  else staged.push(jobId);
}

/** Refuses a transactor that has already committed or rolled back. */
function assertOpen(trx) {
  if (typeof trx.isCompleted === 'function' && trx.isCompleted()) {
    throw new NoTransactionError('the transaction has ended', { code: 'NO_TRANSACTION' });
  }
}

/** Registers staged ids on `trx`'s level: woken at the outermost commit, dropped on rollback. */
function afterCommit(trx, adapter, jobIds) {
  addPending(levelOf(trx), adapter, jobIds);
}

/** Test seam: the outermost transaction of `trx` commits without waking the relay. */
function suppressWakeup(trx) {
  let root = trx;
  while (root.parentTransaction) root = root.parentTransaction;
  levelOf(root).suppressed = true;
}

module.exports = {
  dialectOf,
  databaseUrlOf,
  isTransaction,
  jsonOf,
  jobJson,
  jobsJson,
  execute,
  databaseError,
  assertOpen,
  levelOf,
  stagedAt,
  afterCommit,
  suppressWakeup,
};

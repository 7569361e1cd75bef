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

const native = require('./native');
// A knex level has the providers' shape (`root.ledgers`, `root.depth`): one ledger lookup.
const { ledgerOf } = require('./transaction');
const { OJSError, InvalidConfigError, NoTransactionError, errorFor, fromJson, callNative } = require('./errors');
const { firstColumn, runStaged } = require('./staged');

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

/** How an application sets the relay's database URL itself, named by the core's errors. */
const DATABASE_URL_SETTING = 'createOjs({ databaseUrl })';

/**
 * The relay's own database URL, from the knex connection settings by the core's rule
 * (`database_url_from_parts`): the engine from knex's client, and the connection string or
 * object parts as knex's pg and better-sqlite3 clients take them.
 */
function databaseUrlOf(knex) {
  const engine = dialectOf(knex);
  const connection = (knex.client.config || {}).connection;
  if (typeof connection === 'function') {
    // knex resolves such a connection itself, later: there are no settings to read here.
    throw errorFor(
      'INVALID_DATABASE_URL',
      `database_url: the knex connection is a function; set ${DATABASE_URL_SETTING} yourself`,
      'database_url',
    );
  }
  const text = (value) => (typeof value === 'string' ? value : undefined);
  const parts = { engine, base_dir: process.cwd(), setting: DATABASE_URL_SETTING };
  if (typeof connection === 'string') {
    if (engine === 'sqlite') parts.database = connection;
    else parts.url = connection;
  } else if (connection && typeof connection === 'object') {
    if (engine === 'sqlite') {
      parts.database = text(connection.filename);
    } else {
      parts.url = text(connection.connectionString);
      parts.host = text(connection.host);
      parts.port = typeof connection.port === 'number' ? connection.port : text(connection.port);
      parts.user = text(connection.user);
      parts.password = text(connection.password);
      parts.database = text(connection.database);
      if (connection.ssl) parts.sslmode = 'require';
    }
  }
  return callNative(() => native.databaseUrlFromParts(JSON.stringify(parts)));
}

/** Whether `executor` is a knex transactor (rather than the knex instance). */
function isTransaction(executor) {
  return Boolean(executor && executor.isTransaction === true);
}

// ---- JSON conversion: the only language-side check, naming the core's code and field ------
//
// JSON.stringify turns what JSON cannot hold into something else without a word: a Set, a Map
// or a class instance becomes `{}` (or its enumerable fields), NaN and Infinity become `null`,
// `undefined`, a function or a symbol in an array becomes `null` (and a function or symbol
// property disappears), an invalid Date becomes `null`. The adapter refuses them instead, as
// the Django and Rails adapters do: this finds the value's path, the core gives the error the
// code of its part (`unencodable`: INVALID_ARGS, INVALID_OPTIONS, INVALID_META). What is accepted: null, booleans, strings, finite numbers, arrays,
// objects whose prototype is Object.prototype or null, and anything whose `toJSON` returns
// one of these (a Date becomes its ISO text, as JSON.stringify does). An object property
// holding `undefined` is left out (the key is absent, nothing is coerced), as everywhere in
// Node; `undefined` as the whole part means "not given".
//
// Cost: a JSON.stringify replacer (`faithful`) would do the check inside the encoding pass,
// but any replacer takes V8 off its fast serializer: measured on Node 20, 2 to 3 times the
// encoding time of a job's args (0.12 -> 0.40 us for `[1, "ada@example.com"]`). So the common
// case is one cheap walk (`isPlainJson`: plain values only, no toJSON, no call per value)
// followed by the fast native JSON.stringify (together 0.13 us there); a value with a
// `toJSON` (a Date) is encoded with the replacer; only a refused value pays for the walk that
// finds its path (`findUnencodable`).

/** The parts of a job, each checked on its own (the core names the code of each). */
const JOB_PARTS = new Set(['type', 'args', 'options', 'meta']);

/** Thrown by the replacer: the value at hand has no faithful JSON form (path found later). */
const UNENCODABLE = Symbol('unencodable');

/**
 * The JSON.stringify replacer that refuses what JSON cannot hold. `this` is the holder and
 * `value` the value after `toJSON`. Ordered by what job payloads mostly hold.
 */
function faithful(key, value) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (value - value === 0) return value; // finite (NaN - NaN and Infinity - Infinity are NaN)
      break;
    case 'object': {
      if (value === null) {
        if (!(this[key] instanceof Date)) return value; // an invalid Date's toJSON gives null
        break;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto === Object.prototype || proto === Array.prototype || proto === null || Array.isArray(value)) return value;
      break;
    }
    case 'undefined':
      if (!Array.isArray(this)) return value; // a property left out, or the part not given
      break;
    default:
      break;
  }
  throw UNENCODABLE;
}

/**
 * Whether `value` is JSON as it is: what `faithful` accepts, with no `toJSON` anywhere (so
 * plain JSON.stringify gives its faithful text). A cycle overflows the stack (RangeError),
 * which the caller treats as a refusal.
 */
function isPlainJson(value) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return value - value === 0;
    case 'object': {
      if (value === null) return true;
      if (Array.isArray(value)) {
        for (let index = 0; index < value.length; index += 1) {
          const item = value[index];
          if (item === undefined || !isPlainJson(item)) return false;
        }
        return Object.getPrototypeOf(value) === Array.prototype;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      if (typeof value.toJSON === 'function') return false;
      for (const key in value) {
        const item = value[key];
        if (item !== undefined && !isPlainJson(item)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** `key` appended to a path: `.name` for identifiers, `["other key"]` otherwise, `[i]` for indexes. */
function pathOf(path, key, inArray) {
  if (inArray) return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** What a value that `faithful` refuses is, for the message. */
function describe(original, value) {
  if (value === null) return 'an invalid Date has no JSON form';
  switch (typeof value) {
    case 'number':
      return `${value} has no JSON form`;
    case 'undefined':
      return 'undefined in an array has no JSON form (it would become null)';
    case 'bigint':
      return 'a BigInt has no JSON form (convert it to a string or a number)';
    case 'function':
      return 'a function is not a JSON value';
    case 'symbol':
      return 'a symbol is not a JSON value';
    default: {
      const name = (original && original.constructor && original.constructor.name) || 'object';
      return `a ${name} is not a JSON value (use plain objects, arrays, strings, finite numbers, booleans, null${name === 'Set' || name === 'Map' ? `; e.g. [...value] for a ${name}` : ''})`;
    }
  }
}

/**
 * The first value under `root` that JSON cannot hold faithfully, as `{path, why}`, walking
 * the way JSON.stringify does (toJSON first, then the replacer rule); null if none. Only
 * run once a call has been refused.
 */
function findUnencodable(root, rootPath) {
  const ancestors = [];
  const walk = (holder, key, path) => {
    let value = holder[key];
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint') && typeof value.toJSON === 'function') {
      try {
        value = value.toJSON(key);
      } catch (error) {
        return { path, why: `its toJSON failed: ${error && error.message}` };
      }
    }
    try {
      faithful.call(holder, key, value);
    } catch (error) {
      if (error !== UNENCODABLE) throw error;
      return { path, why: describe(holder[key], value) };
    }
    if (value === null || typeof value !== 'object') return null;
    if (ancestors.includes(value)) return { path, why: 'refers to an object that contains it (a cycle has no JSON form)' };
    ancestors.push(value);
    const isArray = Array.isArray(value);
    const keys = isArray ? value.keys() : Object.keys(value);
    for (const inner of keys) {
      const found = walk(value, inner, pathOf(path, String(inner), isArray));
      if (found) return found;
    }
    ancestors.pop();
    return null;
  };
  return walk({ '': root }, '', rootPath);
}

/**
 * The refusal of `value` (part `key`, at `path`) after JSON.stringify refused it with `cause`:
 * this finds where and why, the core decides the code (`unencodable`).
 */
function unencodableError(value, key, path, cause) {
  const found = findUnencodable(value, path);
  if (found) return fromJson(native.unencodable(key, found.path, found.why));
  const why = cause === UNENCODABLE ? 'has no JSON form' : `cannot be converted to JSON: ${cause && cause.message}`;
  return fromJson(native.unencodable(key, path, why), cause === UNENCODABLE ? undefined : cause);
}

/**
 * JSON text of `value` (`null` for undefined); a value JSON cannot hold raises the key's code,
 * naming its path (`args[0].tags`). `pathPrefix` goes before the key (`jobs[2].`).
 */
function jsonOf(value, key, pathPrefix = '') {
  let text;
  try {
    text = isPlainJson(value) ? JSON.stringify(value) : JSON.stringify(value, faithful);
  } catch (error) {
    throw unencodableError(value, key, `${pathPrefix}${key}`, error);
  }
  return text === undefined ? 'null' : text;
}

/** The JSON text of one job object as the core takes it: `{"type", "args", "options", "meta"}`. */
function jobJson(type, args, options, meta) {
  return `{"type":${jsonOf(type, 'type')},"args":${jsonOf(args, 'args')},"options":${jsonOf(options, 'options')},"meta":${jsonOf(meta, 'meta')}}`;
}

/**
 * The JSON text of a bulk: every own key of every job passed on, so the core judges them all
 * (a key the core does not know is passed as null: the core refuses it by name).
 */
function jobsJson(jobs) {
  if (!Array.isArray(jobs)) return jsonOf(jobs, 'jobs');
  // The common case in one native call; anything else (a Date, a function under an unknown
  // key, or a value JSON cannot hold, which must be reported with its job, part and path) key
  // by key below.
  try {
    if (isPlainJson(jobs)) return JSON.stringify(jobs);
  } catch {
    // a cycle: reported below
  }
  const parts = new Array(jobs.length);
  for (let index = 0; index < jobs.length; index += 1) {
    const job = jobs[index];
    if (job === null || typeof job !== 'object' || Array.isArray(job)) {
      parts[index] = jsonOf(job, `jobs[${index}]`);
      continue;
    }
    const fields = [];
    for (const key of Object.keys(job)) {
      if (job[key] === undefined) continue;
      const text = JOB_PARTS.has(key) ? jsonOf(job[key], key, `jobs[${index}].`) : 'null';
      fields.push(`${JSON.stringify(key)}:${text}`);
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
  // The core's own verdict (a DUPLICATE of a unique job's statement) is no database error.
  if (error instanceof OJSError) return error;
  const message = String((error && error.message) || error);
  const sqlstate = error && typeof error.code === 'string' && /^[0-9A-Z]{5}$/.test(error.code) ? error.code : null;
  // knex puts the query before the driver's message ("<sql> - <message>"): classify both.
  const driverMessage = message.includes(' - ') ? message.slice(message.lastIndexOf(' - ') + 3) : message;
  let code = native.databaseErrorCode(sqlstate, message);
  if (code === 'DATABASE') code = native.databaseErrorCode(sqlstate, driverMessage);
  return errorFor(code, `the outbox INSERT failed on the application's connection: ${message}`, null, error);
}

/**
 * Runs the core's statements (`decodeStaged` in lib/staged.js) through `executor` (knex
 * instance or transactor): in a savepoint of their own (a transaction of their own outside
 * one) when the core says they must be all or nothing (`needsSavepoint`). A statement with
 * `returns` (a unique job's) is read for its row and judged by `heldOutcome` (`runStaged`): a
 * DUPLICATE thrown there rolls the savepoint back and is thrown as it is.
 */
async function execute(executor, staged, heldOutcome) {
  const run = (connection) =>
    runStaged(
      staged,
      (sql, params) => connection.raw(sql, params),
      (sql, params) => connection.raw(sql, params).then(firstColumn),
      heldOutcome,
    );
  try {
    if (staged.needsSavepoint) await executor.transaction(run);
    else await run(executor);
  } catch (error) {
    throw databaseError(error);
  }
}

// ---- the after-commit wake-up: the core's Ledger, driven by knex's transaction events ------

const LEVEL = Symbol.for('ojs-adapter-express.level');

/**
 * The state of one transactor (one nesting level), installed once per transactor, its
 * ancestors first: its core dialect, and `root`, shared by every level of one outermost
 * transaction: the core's ledger per adapter (`NativeLedger`, the savepoint bookkeeping:
 * never restated here), how many levels are open, whether it has ended. This only reports
 * knex's events to the ledgers: a savepoint level opened, released or rolled back, the
 * outermost transaction committed (the adapter hands its ledger to the core, which wakes
 * the relay) or rolled back.
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
  const root = parent ? parent.root : { ledgers: new Map(), depth: 0, ended: false, suppressed: false };
  root.depth += 1;
  for (const { ledger } of root.ledgers.values()) ledger.savepoint();
  const level = { root, ending: null, dialect: dialectOf(trx) };
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
  // A rollback may resolve executionPromise as a commit does: only a commit called counts.
  const settled = (resolved) => {
    if (root.ended) return; // the outermost level ended first (knex COMMIT with a savepoint open)
    const committed = resolved && level.ending === 'commit';
    root.depth -= 1;
    if (parent === null) {
      root.ended = true;
      for (const [adapter, { ledger }] of root.ledgers) {
        if (committed && !root.suppressed) adapter.committed(ledger);
        else ledger.rollback();
      }
      return;
    }
    for (const { ledger } of root.ledgers.values()) {
      if (committed) ledger.release();
      else ledger.rollbackSavepoint();
    }
  };
  trx.executionPromise.then(
    () => settled(true),
    () => settled(false),
  );
  return level;
}

/** Refuses a transactor that has already committed or rolled back. */
function assertOpen(trx) {
  if (typeof trx.isCompleted === 'function' && trx.isCompleted()) {
    throw new NoTransactionError('the transaction has ended', { code: 'NO_TRANSACTION' });
  }
}

/** Test seam: the outermost transaction of `trx` commits without waking the relay. */
function suppressWakeup(trx) {
  let root = trx;
  while (root.parentTransaction) root = root.parentTransaction;
  levelOf(root).root.suppressed = true;
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
  ledgerOf,
  suppressWakeup,
};

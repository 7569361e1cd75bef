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
const { OJSError, InvalidConfigError, NoTransactionError, errorFor, callNative } = require('./errors');
const { firstColumn, runStaged } = require('./staged');

/** The core's dialect name for a knex instance or transactor. */
function dialectOf(knex) {
  const client = knex && knex.client;
  const names = [client && client.dialect, client && client.driverName, client && client.config && client.config.client];
  for (const name of names) {
    if (typeof name !== 'string') continue;
    if (/^(pg|postgres|postgresql|pgnative)$/i.test(name)) return 'postgresql';
    if (/^(sqlite3|better-sqlite3|sqlite)$/i.test(name)) return 'sqlite';
    if (/^(mysql|mysql2)$/i.test(name)) return 'mysql';
  }
  throw new InvalidConfigError(
    `knex: the client ${JSON.stringify(names.find((n) => typeof n === 'string') || String(client))} is not supported (pg, mysql2 or better-sqlite3)`,
    { code: 'INVALID_CONFIG', field: 'knex' },
  );
}

/** How an application sets the relay's database URL itself, named by the core's errors. */
const DATABASE_URL_SETTING = 'createOjs({ databaseUrl })';

/**
 * The relay's own database URL, from the knex connection settings by the core's rule
 * (`database_url_from_parts`): the engine from knex's client, and the connection string or
 * object parts as knex's pg, mysql2 and better-sqlite3 clients take them (mysql2's `uri` and
 * `socketPath` are its names for the URL and the socket, which the core takes as `url` and as a
 * host that is a path).
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
      parts.url = text(engine === 'mysql' ? connection.uri : connection.connectionString);
      parts.host = text(engine === 'mysql' && connection.socketPath ? connection.socketPath : connection.host);
      parts.port = typeof connection.port === 'number' ? connection.port : text(connection.port);
      parts.user = text(connection.user);
      parts.password = text(connection.password);
      parts.database = text(connection.database);
      if (connection.ssl && engine === 'postgresql') parts.sslmode = 'require';
    }
  }
  return callNative(() => native.databaseUrlFromParts(JSON.stringify(parts)));
}

/** The rows of a `knex.raw` result: mysql2's answer is `[rows, fields]`, the others' the rows. */
function rawRows(executor, result) {
  return dialectOf(executor) === 'mysql' && Array.isArray(result) ? result[0] : result;
}

/** Whether `executor` is a knex transactor (rather than the knex instance). */
function isTransaction(executor) {
  return Boolean(executor && executor.isTransaction === true);
}

// ---- running the core's statements on the host connection --------------------------------

/** The SQLSTATE of a driver's error: mysql2's `sqlState` (its `code` is a name), pg's `code`; null when it has none. */
function sqlstateOf(error) {
  for (const value of [error && error.sqlState, error && error.code]) {
    if (typeof value === 'string' && /^[0-9A-Z]{5}$/.test(value)) return value;
  }
  return null;
}

/**
 * A knex error as the package's DatabaseError or OutboxTableMissingError, classified by the
 * core's rule (SQLSTATE from pg and mysql2, message from better-sqlite3); the driver's error is
 * the cause.
 */
function databaseError(error) {
  // The core's own verdict (a DUPLICATE of a unique job's statement) is no database error.
  if (error instanceof OJSError) return error;
  const message = String((error && error.message) || error);
  const sqlstate = sqlstateOf(error);
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
      (sql, params) => connection.raw(sql, params).then((result) => firstColumn(rawRows(connection, result))),
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
  execute,
  databaseError,
  assertOpen,
  levelOf,
  ledgerOf,
  suppressWakeup,
};

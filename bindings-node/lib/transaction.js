'use strict';
// The transactions `ojs.transaction(db, work)` opens on a provider's library (lib/providers/):
// which transaction object belongs to which nesting level, and the reports of each level's end
// to the core's Ledger (`NativeLedger`: the savepoint bookkeeping is the core's, never
// restated here). A provider says only whether its library's transaction (or savepoint)
// committed: its `begin` / `savepoint` promise (or return, for a synchronous library) settles
// after COMMIT / RELEASE ran, or after ROLLBACK. Nothing else decides when the relay wakes.
//
// A level: `{ root, parent, binding, tx, previous, ended }`; a binding is what the adapter
// resolved for the database object: `{ provider, dialect, placeholder, sync }`. A root (one outermost
// transaction): `{ ledgers: Map<adapter, {ledger, handle}>, depth, suppressed }`.

const native = require('./native');

/**
 * The innermost open level of each transaction object handed out by `ojs.transaction`. Once
 * a level ends its object is forgotten: a Kysely or Drizzle transaction object is then refused
 * as a transaction ojs.transaction did not open (`foreignTransaction`), and a pg client or a
 * better-sqlite3 Database is a connection again (a pooled client may be checked out anew).
 */
const current = new WeakMap();

/** The open level `tx` stages into, or undefined. */
function levelOf(tx) {
  if (tx === null || (typeof tx !== 'object' && typeof tx !== 'function')) return undefined;
  return current.get(tx);
}

/** The core's ledger of `adapter` in `level`'s outermost transaction, opened to its depth. */
function ledgerOf(level, adapter) {
  const root = level.root;
  let entry = root.ledgers.get(adapter);
  if (entry === undefined) {
    const ledger = new native.NativeLedger();
    for (let depth = 1; depth < root.depth; depth += 1) ledger.savepoint();
    entry = { ledger, handle: ledger.handle() };
    root.ledgers.set(adapter, entry);
  }
  return entry;
}

/** A level opens on `tx` (the outermost when `parent` is null): the ledgers open a savepoint. */
function open(parent, binding, tx) {
  const root = parent ? parent.root : { ledgers: new Map(), depth: 0, suppressed: false };
  root.depth += 1;
  if (parent) for (const { ledger } of root.ledgers.values()) ledger.savepoint();
  const level = { root, parent, binding, tx, previous: current.get(tx), ended: false };
  current.set(tx, level);
  return level;
}

/**
 * `level` has ended, committed (COMMIT / RELEASE succeeded) or not: the ledgers are told;
 * the outermost commit hands each adapter its ledger (the core wakes the relay).
 */
function close(level, committed) {
  if (level.ended) return;
  level.ended = true;
  const { root, parent, tx } = level;
  root.depth -= 1;
  if (level.previous !== undefined) current.set(tx, level.previous);
  else current.delete(tx);
  if (parent === null) {
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
}

/**
 * Runs `work(tx)` in a transaction of `binding.provider`'s library on `db` (or in a savepoint of the
 * open level `parent`), reporting its end to the ledgers. Asynchronous libraries: resolves
 * with `work`'s result after COMMIT / RELEASE, rejects after ROLLBACK. Synchronous ones
 * (better-sqlite3): returns or throws the same way.
 */
function run(binding, db, parent, work, options) {
  const { provider } = binding;
  let level = null;
  const inner = (tx) => {
    level = open(parent, binding, tx);
    return work(tx);
  };
  const finish = (committed) => {
    if (level !== null) close(level, committed);
  };
  if (binding.sync) {
    let result;
    try {
      result = parent === null ? provider.begin(db, inner, options) : provider.savepoint(parent.tx, inner, options);
    } catch (error) {
      finish(false);
      throw error;
    }
    finish(true);
    return result;
  }
  const started = parent === null ? provider.begin(db, inner, options) : provider.savepoint(parent.tx, inner, options);
  return Promise.resolve(started).then(
    (result) => {
      finish(true);
      return result;
    },
    (error) => {
      finish(false);
      throw error;
    },
  );
}

/** Test seam: the outermost transaction of `tx` commits without waking the relay. */
function suppressWakeup(tx) {
  const level = levelOf(tx);
  if (level) level.root.suppressed = true;
}

module.exports = { levelOf, ledgerOf, run, suppressWakeup };

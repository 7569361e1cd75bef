'use strict';
// Kysely (>= 0.28): a Kysely instance, or a transaction ojs.transaction opened on it. Kysely
// nests transactions only on a ControlledTransaction (`db.startTransaction()`), through named
// savepoints (`trx.savepoint(name)`); a Transaction of `db.transaction().execute(cb)` cannot
// open one. So ojs.transaction(db, work) starts a ControlledTransaction, hands it to `work`,
// and commits it (or rolls it back) when `work` settles; ojs.transaction(trx, work) opens a
// savepoint on it. The core's statements run as Kysely's `CompiledQuery.raw(sql, params)`:
// the text and parameters reach the driver as they are, in the placeholder style of the
// dialect's driver (`$n` for PostgreSQL, `?` for SQLite and MySQL), which the core emits.

const { firstColumn } = require('../staged');

let compiledQuery = null;
/** Kysely's CompiledQuery (the peer dependency, loaded when first needed). */
function CompiledQuery() {
  if (compiledQuery === null) ({ CompiledQuery: compiledQuery } = require('kysely'));
  return compiledQuery;
}

/** Savepoint depth per controlled transaction (names are per nesting level). */
const depths = new WeakMap();

function isKysely(db) {
  return (
    typeof db === 'object' &&
    db !== null &&
    typeof db.selectFrom === 'function' &&
    typeof db.executeQuery === 'function' &&
    typeof db.getExecutor === 'function'
  );
}

module.exports = {
  name: 'kysely',
  sync: false,

  matches: isKysely,

  /** The core's dialect from the Kysely dialect's adapter (PostgresAdapter, SqliteAdapter, MysqlAdapter). */
  dialect(db) {
    const adapter = db.getExecutor().adapter;
    let proto = adapter && Object.getPrototypeOf(adapter);
    while (proto && proto.constructor && proto.constructor !== Object) {
      const name = proto.constructor.name;
      if (/^Postgres/.test(name)) return 'postgresql';
      if (/^Sqlite/.test(name)) return 'sqlite';
      if (/^Mysql/.test(name)) return 'mysql';
      proto = Object.getPrototypeOf(proto);
    }
    return null;
  },

  placeholderFor(dialect) {
    return dialect === 'postgresql' ? 'dollar' : 'question';
  },

  foreignTransaction(db) {
    return db.isTransaction === true;
  },

  execute(executor, sql, params) {
    return executor.executeQuery(CompiledQuery().raw(sql, params));
  },

  queryValue(executor, sql, params) {
    return executor.executeQuery(CompiledQuery().raw(sql, params)).then((result) => firstColumn(result.rows));
  },

  async begin(db, work) {
    const trx = await db.startTransaction().execute();
    depths.set(trx, 0);
    let result;
    try {
      result = await work(trx);
    } catch (error) {
      if (!trx.isCommitted && !trx.isRolledBack) await trx.rollback().execute().catch(() => {});
      throw error;
    }
    // A failed COMMIT rejects: a rollback for the ledger.
    await trx.commit().execute();
    return result;
  },

  async savepoint(trx, work) {
    const depth = (depths.get(trx) || 0) + 1;
    const name = `ojs_savepoint_${depth}`;
    const inner = await trx.savepoint(name).execute();
    depths.set(inner, depth);
    let result;
    try {
      result = await work(inner);
    } catch (error) {
      await inner.rollbackToSavepoint(name).execute().catch(() => {});
      await inner.releaseSavepoint(name).execute().catch(() => {});
      throw error;
    }
    await inner.releaseSavepoint(name).execute();
    return result;
  },
};

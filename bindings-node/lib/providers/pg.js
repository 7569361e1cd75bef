'use strict';
// node-postgres (`pg`): a Pool, a Client or a PoolClient. pg has no transaction API and no
// commit hook, so `ojs.transaction(pool, async (client) => ...)` runs the transaction itself
// on one client (checked out of a Pool and released after) and the wake-up follows its COMMIT.
//
// Every statement is the core's: the outbox's, and the transaction control below
// (`transactionSql`; savepoints named by depth, as the core's own transactions name them).
// pg sends `$n` placeholders to the server as they are: the core emits them ("dollar").

const native = require('../native');
const { firstColumn } = require('../staged');

/** Transaction control for pg, on one client. */
const CONTROL = {
  begin: native.transactionSql('begin', 0),
  commit: native.transactionSql('commit', 0),
  rollback: native.transactionSql('rollback', 0),
  savepoint: (depth) => native.transactionSql('savepoint', depth),
  release: (depth) => native.transactionSql('release', depth),
  rollbackTo: (depth) => native.transactionSql('rollback_to', depth),
};

/** A pg Pool (pg.Pool or pg-pool): hands out clients. */
function isPool(db) {
  return typeof db.connect === 'function' && typeof db.query === 'function' && 'totalCount' in db && 'idleCount' in db;
}

/** A pg Client or PoolClient. */
function isClient(db) {
  return typeof db.query === 'function' && typeof db.connect === 'function' && db.connectionParameters !== undefined;
}

/** Savepoint depth per client (nested ojs.transaction on the same client). */
const depths = new WeakMap();

module.exports = {
  name: 'pg',
  sync: false,
  placeholder: 'dollar',

  matches(db) {
    return typeof db === 'object' && db !== null && (isPool(db) || isClient(db));
  },

  dialect() {
    return 'postgresql';
  },

  /**
   * A client in a transaction ojs.transaction did not open (its own BEGIN): its commit cannot
   * be seen: the server's transaction status of the last ReadyForQuery, which recent pg 8
   * releases keep (`getTransactionStatus()`: 'I' idle, 'T' in a transaction, 'E' failed one).
   * Where pg does not keep it, such a client cannot be told apart and writes as it is.
   */
  foreignTransaction(db) {
    if (!isClient(db)) return false;
    const status = typeof db.getTransactionStatus === 'function' ? db.getTransactionStatus() : db._txStatus;
    return status === 'T' || status === 'E';
  },

  execute(executor, sql, params) {
    return executor.query(sql, params);
  },

  queryValue(executor, sql, params) {
    return executor.query(sql, params).then(firstColumn);
  },

  async begin(db, work) {
    const pooled = isPool(db);
    const client = pooled ? await db.connect() : db;
    let broken; // a ROLLBACK that failed: the connection is not put back into the pool
    const rollback = () =>
      client.query(CONTROL.rollback).catch((error) => {
        broken = error;
      });
    try {
      await client.query(CONTROL.begin);
      depths.set(client, 0);
      let result;
      try {
        result = await work(client);
      } catch (error) {
        await rollback();
        throw error;
      }
      await client.query(CONTROL.commit).catch(async (error) => {
        // A failed COMMIT (a deferred constraint, the connection lost) is a rollback.
        await rollback();
        throw error;
      });
      return result;
    } finally {
      depths.delete(client);
      if (pooled) client.release(broken);
    }
  },

  async savepoint(client, work) {
    const depth = (depths.get(client) || 0) + 1;
    depths.set(client, depth);
    try {
      await client.query(CONTROL.savepoint(depth));
      let result;
      try {
        result = await work(client);
      } catch (error) {
        await client.query(CONTROL.rollbackTo(depth)).catch(() => {});
        await client.query(CONTROL.release(depth)).catch(() => {});
        throw error;
      }
      await client.query(CONTROL.release(depth));
      return result;
    } finally {
      depths.set(client, depth - 1);
    }
  },

  /** The relay's database URL parts from the pool's or client's connection settings. */
  urlParts(db) {
    const options = db.options || db.connectionParameters || {};
    const text = (value) => (typeof value === 'string' ? value : undefined);
    return {
      engine: 'postgresql',
      url: text(options.connectionString),
      host: text(options.host),
      port: typeof options.port === 'number' ? options.port : text(options.port),
      user: text(options.user),
      password: text(options.password),
      database: text(options.database),
      sslmode: options.ssl ? 'require' : undefined,
    };
  },
};

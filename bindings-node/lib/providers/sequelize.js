'use strict';
// Sequelize (6): a Sequelize instance, or a transaction ojs.transaction opened on it
// (`sequelize.transaction(cb)`, a managed transaction; nested: `{ transaction: parent }`, a
// savepoint). The core's statements run as `sequelize.query(sql, { bind, transaction })`:
// Sequelize's bind parameters are `$1`, `$2`, ... on every dialect (placeholder "dollar"; on
// mysql and mariadb Sequelize rewrites them to `?`), sent to the driver as parameters, never
// spliced into the text (its `replacements` would be).
//
// The trap: a transaction's `afterCommit` hook also runs when a savepoint's transaction
// "commits" (at its RELEASE, before the outermost COMMIT), and Sequelize runs it once the
// COMMIT statement returned, whatever it returned. It is not used: the wake-up follows the
// managed transaction's promise, which rejects when COMMIT failed.

const { firstColumn } = require('../staged');

function isSequelize(db) {
  return (
    typeof db === 'object' &&
    db !== null &&
    typeof db.transaction === 'function' &&
    typeof db.query === 'function' &&
    typeof db.getDialect === 'function' &&
    typeof db.define === 'function'
  );
}

function isTransaction(db) {
  return (
    typeof db === 'object' &&
    db !== null &&
    isSequelize(db.sequelize) &&
    typeof db.commit === 'function' &&
    typeof db.rollback === 'function' &&
    typeof db.afterCommit === 'function'
  );
}

const instanceOf = (db) => (isTransaction(db) ? db.sequelize : db);

module.exports = {
  name: 'sequelize',
  sync: false,
  placeholder: 'dollar',

  matches(db) {
    return isSequelize(db) || isTransaction(db);
  },

  dialect(db) {
    const name = instanceOf(db).getDialect();
    if (name === 'postgres') return 'postgresql';
    if (name === 'sqlite') return 'sqlite';
    if (name === 'mysql' || name === 'mariadb') return 'mysql';
    return null;
  },

  foreignTransaction: isTransaction,

  execute(executor, sql, params) {
    if (isTransaction(executor)) return executor.sequelize.query(sql, { bind: params, transaction: executor, raw: true });
    return executor.query(sql, { bind: params, raw: true });
  },

  /** As a SELECT (`type: 'SELECT'`): the rows, on SQLite too (an INSERT would be `run`, rowless). */
  queryValue(executor, sql, params) {
    const options = { bind: params, raw: true, type: 'SELECT' };
    const query = isTransaction(executor) ? executor.sequelize.query(sql, { ...options, transaction: executor }) : executor.query(sql, options);
    return query.then(firstColumn);
  },

  begin(db, work, options) {
    return db.transaction({ ...options }, (t) => work(t));
  },

  savepoint(t, work) {
    return t.sequelize.transaction({ transaction: t }, (inner) => work(inner));
  },

  /** The relay's database URL parts from the instance's connection settings. */
  urlParts(db) {
    const config = db.config || {};
    const text = (value) => (typeof value === 'string' && value !== '' ? value : undefined);
    const dialect = db.getDialect();
    if (dialect === 'sqlite') return { engine: 'sqlite', database: text(db.options && db.options.storage) };
    return {
      engine: dialect === 'postgres' ? 'postgresql' : dialect,
      host: text(config.host),
      port: typeof config.port === 'number' ? config.port : text(config.port),
      user: text(config.username),
      password: text(config.password),
      database: text(config.database),
    };
  },
};

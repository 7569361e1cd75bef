'use strict';
// TypeORM (>= 0.3; tested with 1.1): a DataSource or an EntityManager, or the transactional
// EntityManager ojs.transaction hands out (`dataSource.transaction(cb)`; nested:
// `manager.transaction(cb)`, a savepoint on the same query runner). The core's statements run as
// `manager.query(sql, params)` in the driver's placeholder style (`$n` on PostgreSQL, `?` on
// SQLite through the better-sqlite3 driver and on MySQL/MariaDB through mysql2).
//
// The trap: a subscriber's `afterTransactionCommit` also runs when a nested transaction's
// savepoint is released, before the outermost COMMIT. It is not used: the wake-up follows the
// outermost `transaction(cb)` promise, which settles after COMMIT.

const { firstColumn } = require('../staged');

function isDataSource(db) {
  return typeof db.initialize === 'function' && typeof db.createQueryRunner === 'function' && typeof db.transaction === 'function' && db.options;
}

function isEntityManager(db) {
  return typeof db.getRepository === 'function' && typeof db.transaction === 'function' && typeof db.query === 'function' && db.connection;
}

const optionsOf = (db) => (isDataSource(db) ? db.options : db.connection.options);

module.exports = {
  name: 'typeorm',
  sync: false,

  matches(db) {
    return typeof db === 'object' && db !== null && Boolean(isDataSource(db) || isEntityManager(db));
  },

  dialect(db) {
    const type = optionsOf(db).type;
    if (type === 'postgres') return 'postgresql';
    if (type === 'better-sqlite3' || type === 'sqlite') return 'sqlite';
    if (type === 'mysql' || type === 'mariadb') return 'mysql';
    return null;
  },

  placeholderFor(dialect) {
    return dialect === 'postgresql' ? 'dollar' : 'question';
  },

  /** An EntityManager whose query runner is in a transaction ojs.transaction did not open. */
  foreignTransaction(db) {
    return isEntityManager(db) && Boolean(db.queryRunner && db.queryRunner.isTransactionActive);
  },

  execute(executor, sql, params) {
    return executor.query(sql, params);
  },

  queryValue(executor, sql, params) {
    return executor.query(sql, params).then(firstColumn);
  },

  begin(db, work, options) {
    if (options && options.isolationLevel) return db.transaction(options.isolationLevel, (manager) => work(manager));
    return db.transaction((manager) => work(manager));
  },

  savepoint(manager, work) {
    return manager.transaction((inner) => work(inner));
  },

  /** The relay's database URL parts from the data source's options. */
  urlParts(db) {
    const options = optionsOf(db);
    const text = (value) => (typeof value === 'string' && value !== '' ? value : undefined);
    if (options.type === 'better-sqlite3' || options.type === 'sqlite') return { engine: 'sqlite', database: text(options.database) };
    const mysql = options.type === 'mysql' || options.type === 'mariadb';
    return {
      engine: mysql ? 'mysql' : 'postgresql',
      url: text(options.url),
      host: text(mysql && options.socketPath) || text(options.host),
      port: typeof options.port === 'number' ? options.port : text(options.port),
      user: text(options.username),
      password: text(options.password),
      database: text(options.database),
    };
  },
};

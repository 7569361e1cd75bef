'use strict';
// Drizzle ORM (drizzle-orm >= 0.36) on node-postgres, mysql2 or better-sqlite3: a database, or
// a transaction ojs.transaction opened on it (`db.transaction(cb)`; a nested one is Drizzle's
// savepoint, `tx.transaction(cb)`). On better-sqlite3 Drizzle's transactions are synchronous,
// and so is ojs.transaction there (use enqueueAfterCommitSync / enqueueBulkSync inside).
//
// The trap: a JavaScript array interpolated into Drizzle's `sql` template is expanded into a
// list of parameters. The core's SQL (placeholder "dollar": `$1`, `$2`, ... in order) is cut at
// its placeholders and each parameter is bound as ONE parameter (`sql.param`), whatever its
// value; Drizzle then writes them in its driver's style (`$n` on PostgreSQL, `?` on MySQL and
// SQLite).

const { firstColumn } = require('../staged');

const KIND = Symbol.for('drizzle:entityKind');

let drizzleSql = null;
/** drizzle-orm's `sql` (the peer dependency, loaded when first needed). */
function sqlTag() {
  if (drizzleSql === null) ({ sql: drizzleSql } = require('drizzle-orm'));
  return drizzleSql;
}

/** The entity kinds of `value`'s class and its ancestors ("NodePgDatabase", "PgDatabase", ...). */
function kinds(value) {
  const found = [];
  let cls = value && Object.getPrototypeOf(value) && Object.getPrototypeOf(value).constructor;
  while (cls) {
    if (Object.prototype.hasOwnProperty.call(cls, KIND)) found.push(cls[KIND]);
    cls = Object.getPrototypeOf(cls);
  }
  return found;
}

/** The Drizzle SQL object of the core's statement: text cut at `$n`, each value one parameter. */
function statement(text, params) {
  const sql = sqlTag();
  const strings = [];
  const values = [];
  const placeholder = /\$(\d+)/g;
  let last = 0;
  for (let match = placeholder.exec(text); match !== null; match = placeholder.exec(text)) {
    strings.push(text.slice(last, match.index));
    values.push(sql.param(params[Number(match[1]) - 1]));
    last = match.index + match[0].length;
  }
  strings.push(text.slice(last));
  return sql(strings, ...values);
}

const isSync = (db) => kinds(db.dialect).includes('SQLiteSyncDialect');
const isMysql = (db) => kinds(db.dialect).includes('MySqlDialect');

/**
 * The core's connection parts of a mysql2 pool or connection (callback or promise API: the
 * promise wrappers hold the callback object in `pool` / `connection`), or null.
 */
function mysql2Parts(client) {
  const inner = (client && (client.pool || client.connection)) || client;
  const config = inner && inner.config && (inner.config.connectionConfig || inner.config);
  if (!config || typeof config !== 'object') return null;
  const text = (value) => (typeof value === 'string' && value !== '' ? value : undefined);
  return {
    engine: 'mysql',
    host: text(config.socketPath) || text(config.host),
    port: typeof config.port === 'number' ? config.port : text(config.port),
    user: text(config.user),
    password: text(config.password),
    database: text(config.database),
  };
}

module.exports = {
  name: 'drizzle',
  placeholder: 'dollar',
  kinds,
  statement,
  mysql2Parts,

  matches(db) {
    if (typeof db !== 'object' || db === null || !db.dialect || !db.session) return false;
    const own = kinds(db);
    return own.includes('PgDatabase') || own.includes('BaseSQLiteDatabase') || own.includes('MySqlDatabase');
  },

  dialect(db) {
    const dialect = kinds(db.dialect);
    if (dialect.includes('PgDialect')) return 'postgresql';
    if (dialect.includes('SQLiteDialect')) return 'sqlite';
    if (dialect.includes('MySqlDialect')) return 'mysql';
    return null;
  },

  /** Whether this database's transactions are synchronous (better-sqlite3). */
  syncFor: isSync,

  foreignTransaction(db) {
    const own = kinds(db);
    return own.includes('PgTransaction') || own.includes('SQLiteTransaction') || own.includes('MySqlTransaction');
  },

  execute(executor, text, params) {
    const query = statement(text, params);
    return isSync(executor) ? executor.run(query) : executor.execute(query);
  },

  /**
   * The rows as objects: `all` on better-sqlite3 (synchronous), `execute`'s result on
   * PostgreSQL, its first element on MySQL (mysql2's `[rows, fields]`).
   */
  queryValue(executor, text, params) {
    const query = statement(text, params);
    if (isSync(executor)) return firstColumn(executor.all(query));
    const mysql = isMysql(executor);
    return Promise.resolve(executor.execute(query)).then((result) => firstColumn(mysql ? result[0] : result));
  },

  begin(db, work, options) {
    return db.transaction(work, options);
  },

  savepoint(tx, work) {
    return tx.transaction(work);
  },

  /** The relay's database URL parts from the driver under Drizzle (`db.$client`: a pg pool, a mysql2 pool, ...). */
  urlParts(db, providers) {
    const client = db.$client;
    if (client && isMysql(db)) return mysql2Parts(client);
    const inner = client && providers.find((p) => p !== module.exports && p.matches(client));
    return inner && inner.urlParts ? inner.urlParts(client) : null;
  },
};

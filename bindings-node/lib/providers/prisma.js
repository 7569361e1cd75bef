'use strict';
// Prisma ORM (>= 6.16 with a driver adapter; tested with 7): a PrismaClient, or the
// transaction client of an interactive transaction ojs.transaction opened on it
// (`prisma.$transaction(async (tx) => ...)`; nested, `tx.$transaction(...)`, is Prisma's
// savepoint). The core's statements run as `tx.$executeRawUnsafe(sql, ...params)`, in the
// placeholder style of the database (`$n` on PostgreSQL, `?` on SQLite and MySQL/MariaDB).

const { firstColumn } = require('../staged');

/** What Prisma sets on a transaction client (its scope context). */
const TRANSACTION_SCOPE = Symbol.for('prisma.client.transaction.scope_context');

function isPrisma(db) {
  return typeof db === 'object' && db !== null && typeof db.$executeRawUnsafe === 'function' && typeof db.$transaction === 'function';
}

module.exports = {
  name: 'prisma',
  sync: false,

  matches: isPrisma,

  /** The datasource provider the client was generated for. */
  dialect(db) {
    const provider = db._activeProvider || (db._engineConfig && db._engineConfig.activeProvider);
    if (provider === 'postgresql' || provider === 'postgres') return 'postgresql';
    if (provider === 'sqlite') return 'sqlite';
    if (provider === 'mysql') return 'mysql';
    return null;
  },

  placeholderFor(dialect) {
    return dialect === 'postgresql' ? 'dollar' : 'question';
  },

  /** An interactive transaction's client that ojs.transaction did not open: refused. */
  foreignTransaction(db) {
    return db[TRANSACTION_SCOPE] !== undefined;
  },

  execute(executor, sql, params) {
    return executor.$executeRawUnsafe(sql, ...params);
  },

  queryValue(executor, sql, params) {
    return executor.$queryRawUnsafe(sql, ...params).then(firstColumn);
  },

  begin(db, work, options) {
    return db.$transaction((tx) => work(tx), options);
  },

  savepoint(tx, work, options) {
    return tx.$transaction((inner) => work(inner), options);
  },
};

'use strict';
// The transaction providers: one per database library (pg, Kysely, Drizzle, Prisma, Sequelize,
// TypeORM, better-sqlite3),
// each a small object (docs/express.md, "Transaction providers"):
//   name, matches(db), dialect(db) -> 'postgresql' | 'sqlite',
//   placeholder ('dollar' | 'question') or placeholderFor(dialect),
//   sync (or syncFor(db)): whether the library's transactions are synchronous functions,
//   execute(executor, sql, params): runs one statement of the core, as given (it may return
//     rows, e.g. PostgreSQL's `SELECT pg_advisory_xact_lock(...)`: they are ignored),
//   queryValue(executor, sql, params) (optional): runs one statement of the core that returns
//     a row and answers the first column of its first row (null: no row) — a unique job's
//     staging INSERT ... RETURNING; without it, the first column of what execute answers,
//   begin(db, work, options): runs work(tx) in a new transaction; settles after COMMIT or ROLLBACK,
//   savepoint(tx, work): the same in a savepoint of tx,
//   foreignTransaction(db): db is a transaction the provider did not open (its commit unseen),
//   urlParts(db) (optional): the relay's database URL parts, for createOjs without databaseUrl.
// knex keeps its own glue (lib/knex.js): it reports its transactions' events itself.

const pg = require('./pg');
const kysely = require('./kysely');
const drizzle = require('./drizzle');
const betterSqlite3 = require('./better-sqlite3');
const prisma = require('./prisma');
const sequelize = require('./sequelize');
const typeorm = require('./typeorm');

/** In detection order: the ORMs and query builders before pg (they wrap a pg pool, never are one). */
const BUILTIN = [kysely, drizzle, prisma, sequelize, typeorm, pg, betterSqlite3];

/** The provider of `db` among `providers`, or undefined. */
function providerOf(db, providers = BUILTIN) {
  if (db === null || (typeof db !== 'object' && typeof db !== 'function')) return undefined;
  for (const provider of providers) if (provider.matches(db)) return provider;
  return undefined;
}

module.exports = { BUILTIN, providerOf, pg, kysely, drizzle, prisma, sequelize, typeorm, betterSqlite3 };

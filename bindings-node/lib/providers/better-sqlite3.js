'use strict';
// better-sqlite3: a Database. Its transactions are synchronous functions
// (`db.transaction(fn)`, nested ones savepoints), with no commit hook; ojs.transaction(db, fn)
// runs `fn(db)` in one and wakes the relay after it returns (COMMIT done). Use
// enqueueAfterCommitSync / enqueueBulkSync inside: a failure throws and rolls the
// transaction back. SQLite's placeholders are `?` (placeholder "question").

function isDatabase(db) {
  return (
    typeof db === 'object' &&
    db !== null &&
    typeof db.prepare === 'function' &&
    typeof db.transaction === 'function' &&
    typeof db.pragma === 'function' &&
    'inTransaction' in db
  );
}

const { firstColumn } = require('../staged');

/** Prepared statements per database, by SQL text (the staging INSERT repeats). */
const statements = new WeakMap();

/** The prepared statement of `sql` on `db`, kept for the first 16 texts. */
function prepare(db, sql) {
  let cache = statements.get(db);
  if (cache === undefined) {
    cache = new Map();
    statements.set(db, cache);
  }
  let prepared = cache.get(sql);
  if (prepared === undefined) {
    prepared = db.prepare(sql);
    if (cache.size < 16) cache.set(sql, prepared);
  }
  return prepared;
}

module.exports = {
  name: 'better-sqlite3',
  sync: true,
  placeholder: 'question',

  matches: isDatabase,

  dialect() {
    return 'sqlite';
  },

  /** A transaction ojs.transaction did not open (the application's own db.transaction()). */
  foreignTransaction(db) {
    return db.inTransaction === true;
  },

  execute(db, sql, params) {
    return prepare(db, sql).run(params);
  },

  /** The first row's first column (a statement that returns rows: `get`), or null. */
  queryValue(db, sql, params) {
    const row = prepare(db, sql).get(params);
    return row === undefined ? null : firstColumn([row]);
  },

  begin(db, work) {
    return db.transaction(() => work(db))();
  },

  savepoint(db, work) {
    return db.transaction(() => work(db))();
  },

  urlParts(db) {
    return { engine: 'sqlite', database: db.memory ? undefined : db.name };
  },
};

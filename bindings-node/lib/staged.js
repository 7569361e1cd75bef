'use strict';
// The decoder of the core's staged-jobs text (`stageJobs`, the bridge's `Staged::encode`):
// one `split` instead of a JSON.parse, and each bulk INSERT text kept on the stager after it
// crossed once. Only values are converted here; the statements, their order and whether they
// need a savepoint are the core's.

/**
 * `{ needsSavepoint, idsText, ids, statements: [{ sql, params }] }` of a `stageJobs` text.
 * `texts` (a Map, one per stager) holds the INSERT texts by the keys the core names: a text
 * that comes with its key is stored under it, an empty one is read from it. `idsText` is the
 * ids as the ledger takes them (joined by `\n`).
 */
function decodeStaged(text, texts) {
  if (text.charCodeAt(0) === 0) return decodeJson(text.slice(1));
  const fields = text.split('\0');
  const idsText = fields[1];
  const statements = [];
  let at = 2;
  while (at < fields.length) {
    const key = fields[at];
    let sql = fields[at + 1];
    if (sql === '') sql = texts.get(key);
    else texts.set(key, sql);
    const count = Number(fields[at + 2]);
    const nulls = fields[at + 3];
    const params = fields.slice(at + 4, at + 4 + count);
    if (nulls !== '') for (const index of nulls.split(',')) params[Number(index)] = null;
    statements.push({ sql, params });
    at += 4 + count;
  }
  return { needsSavepoint: fields[0] === '1', idsText, ids: idsText === '' ? [] : idsText.split('\n'), statements };
}

/**
 * The same from the core's `Staged::to_json` text: what a keyed job (`stageJob`) and a bulk
 * whose statements carry `returns` (`stageJobs`) cross as, after a leading NUL. A statement's
 * `returns` (`{ job, token }`) stays as the core wrote it: `runStaged` hands it back.
 */
function decodeJson(json) {
  const staged = JSON.parse(json);
  const ids = staged.job_ids;
  return { needsSavepoint: staged.needs_savepoint === true, idsText: ids.join('\n'), ids, statements: staged.statements };
}

/**
 * The first column of the first row of a driver's query result, as text; null when there is no
 * row. Drivers answer rows as an array, or as an object holding them in `rows` (pg, Kysely);
 * a row as an object (its first column first) or an array.
 */
function firstColumn(result) {
  let rows = result;
  if (rows && !Array.isArray(rows) && Array.isArray(rows.rows)) rows = rows.rows;
  if (!Array.isArray(rows) || rows.length === 0) return null;
  const row = rows[0];
  if (row === null || row === undefined) return null;
  const value = typeof row === 'object' ? (Array.isArray(row) ? row[0] : Object.values(row)[0]) : row;
  return value === null || value === undefined ? null : String(value);
}

/**
 * Runs a decoded `Staged` (`decodeStaged`) statement by statement: `execute(sql, params)` runs
 * one (a promise, or a value for a synchronous library), `query(sql, params)` runs one that
 * returns a row and answers its first column (or null). For a statement with `returns`, the
 * core decides the id its job reports (`heldOutcome(token, returned)`: the staged id, the held
 * job's, or a thrown DUPLICATE) and it replaces that position of `staged.ids`/`idsText`. Returns
 * undefined when every call was synchronous (always with `sync`: a synchronous library's
 * answers are values), else a promise.
 */
function runStaged(staged, execute, query, heldOutcome, sync = false) {
  const { statements } = staged;
  const settle = (statement, returned) => {
    staged.ids[statement.returns.job] = heldOutcome(statement.returns.token, returned);
    staged.idsText = staged.ids.join('\n');
  };
  let index = 0;
  const step = () => {
    while (index < statements.length) {
      const statement = statements[index];
      index += 1;
      const result = statement.returns ? query(statement.sql, statement.params) : execute(statement.sql, statement.params);
      if (!sync && result && typeof result.then === 'function') {
        return result.then((value) => {
          if (statement.returns) settle(statement, value);
          return step();
        });
      }
      if (statement.returns) settle(statement, result);
    }
    return undefined;
  };
  return step();
}

module.exports = { decodeStaged, firstColumn, runStaged };

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

module.exports = { decodeStaged };

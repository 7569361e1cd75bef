'use strict';
// Staging cost of ojs-adapter-express on SQLite and PostgreSQL, inside host transactions of
// each transaction library (knex; pg, Kysely and Drizzle through their providers), as the two
// same-run ratios of issue 16:
//  1. single: enqueueAfterCommit vs a raw parameterized INSERT of the same row (the core's
//     own single-row INSERT text, checked to be the one the adapter runs; a fresh id and args
//     text per row, '{}', '{}' and NULL bound for options, meta and tenant as the core binds
//     them) through the same transaction of the same library. Target <= 1.10x.
//  2. bulk: enqueueBulk of 1,000 jobs vs ONE raw multi-row INSERT of the same 1,000 rows,
//     per job. Target <= 1.25x. What the baseline does, exactly: from the same array of 1,000
//     {type, args} objects it builds the parameter list itself (per row a fresh
//     time-ordered id, the type, JSON.stringify(args): 3,000 values, built inside the timing)
//     and runs ONE statement, the text the core's bulk staging (`stageJobs`) writes for
//     1,000 rows (taken once before the timing and reused, as the single-row baseline reuses
//     its text; checked to be the one the adapter ran): `INSERT INTO <table> (job_id, job_type, job_args, job_options,
//     job_meta, tenant_id) VALUES (?, ?, ?, '{}', '{}', NULL), ...` (PostgreSQL: `$n`
//     placeholders for pg, Kysely and Drizzle, `?` for knex, with `CAST(.. AS uuid)` and
//     `CAST(.. AS jsonb)` on the id and args), through the library's own raw-SQL call (knex
//     `trx.raw`, pg `client.query`, Kysely `executeQuery(CompiledQuery.raw)`, Drizzle `tx.execute`
//     of an `sql` text with bound values) on the same transaction. So both sides insert the same
//     columns with the same values and the same binding (3 bound values a row; the empty
//     options and meta and the missing tenant as literals, as the core writes them); what the
//     ratio measures is everything the adapter adds: encoding the jobs, the core's call (ids,
//     validation, the statement's parameters as one NUL-separated text), the ledger.
// Ids on the raw side are UUIDv7-shaped (48-bit ms time, then a counter) like the core's, so
// both sides insert into the UNIQUE job_id index in time order (OJS_BENCH_IDS=v4: random
// crypto.randomUUID ids, as this bench used before issue 16, for comparison).
// Run by bench.sh against the installed package. No relay runs: only staging is measured.
// OJS_BENCH_LIBS (space-separated, e.g. "knex pg kysely") picks the libraries.
//
// Method, both ratios: the two sides run interleaved in the same transaction, after an
// untimed warm-up of both, alternating which side goes first; each timed block of one side is
// paired with the adjacent block of the other, and the ratio is the median of the pairs'
// ratios, so a burst of load from other processes (or a page-cache spill) moves one pair, not
// the result. The per-job figures are the medians of each side's blocks. Single: per round,
// PER_JOB jobs of each side in blocks of BLOCK jobs (one transaction per round). Bulk: per
// round, BULK_PAIRS pairs of one 1,000-row statement each (a transaction of its own, so the
// single-row one stays small). Every transaction is rolled back.

const crypto = require('node:crypto');
const path = require('node:path');
const os = require('node:os');
const fs = require('node:fs');
const knexLib = require('knex');
const pg = require('pg');
const Database = require('better-sqlite3');
const { Kysely, PostgresDialect, SqliteDialect, CompiledQuery } = require('kysely');
const { drizzle } = require('drizzle-orm/node-postgres');
const PACKAGE = process.env.OJS_PACKAGE || 'ojs-adapter-express';
const { createOjs, providers } = require(PACKAGE);
// The core's staging call and its decoder, for the baselines' INSERT texts.
const packageDir = path.dirname(require.resolve(PACKAGE));
const { stageJobs } = require(path.join(packageDir, 'lib', 'native'));
const { decodeStaged } = require(path.join(packageDir, 'lib', 'staged'));

const PG_URL = process.env.OJS_TEST_DATABASE_URL;
const ROLLBACK = Symbol('rollback');

const PER_JOB = Number(process.env.OJS_BENCH_JOBS || 2000);
const ROUNDS = Number(process.env.OJS_BENCH_ROUNDS || 7);
const BLOCK = Number(process.env.OJS_BENCH_BLOCK || 100);
const WARMUP = 500;

async function timed(work) {
  const start = process.hrtime.bigint();
  await work();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/**
 * A library to measure: `open()` resolves with `{ options, dialect, placeholder, raw(tx, sql,
 * params), transaction(work) (runs work(tx), then rolls back), close() }`.
 */
const LIBRARIES = {
  knex: (database, file) => async () => {
    const knex = database === 'sqlite'
      ? knexLib({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true })
      : knexLib({ client: 'pg', connection: PG_URL });
    return {
      options: { knex },
      placeholder: 'question',
      raw: (trx, sql, params) => trx.raw(sql, params),
      async transaction(work) {
        const trx = await knex.transaction();
        try {
          await work(trx);
        } finally {
          await trx.rollback();
        }
      },
      close: () => knex.destroy(),
    };
  },
  pg: () => async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    return { options: { db: pool }, placeholder: 'dollar', raw: (client, sql, params) => client.query(sql, params), close: () => pool.end() };
  },
  kysely: (database, file) => async () => {
    const db = database === 'sqlite'
      ? new Kysely({ dialect: new SqliteDialect({ database: new Database(file) }) })
      : new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: PG_URL, max: 2 }) }) });
    return {
      options: { db, databaseUrl: database === 'sqlite' ? `sqlite://${file}` : PG_URL },
      placeholder: database === 'sqlite' ? 'question' : 'dollar',
      raw: (trx, sql, params) => trx.executeQuery(CompiledQuery.raw(sql, params)),
      close: () => db.destroy(),
    };
  },
  drizzle: () => async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
    const db = drizzle(pool);
    // Drizzle's own way to run a text with bound values: the provider's statement builder.
    return { options: { db }, placeholder: 'dollar', raw: (tx, sql, params) => providers.drizzle.execute(tx, sql, params), close: () => pool.end() };
  },
};

const BULK = 1000;
const BULK_PAIRS = Number(process.env.OJS_BENCH_BULK_PAIRS || 15);
const SINGLE_TARGET = 1.1;
const BULK_TARGET = 1.25;

// The raw side's job ids: UUIDv7-shaped like the core's (48-bit ms time, version 7, then a
// per-millisecond random start and a counter), so both sides insert in time order.
let idMs = -1;
let idHead = '';
let idCounter = 0;
function timeOrderedId() {
  const now = Date.now();
  if (now > idMs) {
    idMs = now;
    const t = now.toString(16).padStart(12, '0');
    const r = crypto.randomBytes(3).toString('hex');
    idHead = `${t.slice(0, 8)}-${t.slice(8)}-7${r.slice(0, 3)}-8${r.slice(3)}-`;
    idCounter = Math.floor(Math.random() * 2 ** 40);
  } else {
    idCounter += 1;
  }
  return idHead + idCounter.toString(16).padStart(12, '0');
}
const nextId = process.env.OJS_BENCH_IDS === 'v4' ? () => crypto.randomUUID() : timeOrderedId;

const summary = [];

async function bench(library, database, open) {
  const lib = await open();
  const label = `${library}/${database}`;
  const table = `node_bench_${library}_${database}`;
  const ojs = createOjs({ url: 'http://127.0.0.1:9', ...lib.options, outbox: { tableName: table }, autoStart: false, handleSignals: false, relayProcess: false });
  // Through ojs.transaction, rolled back at the end (a provider's library).
  const transaction = lib.transaction || ((work) => ojs.transaction(ojs.db, async (tx) => {
    await work(tx);
    throw ROLLBACK;
  }).catch((error) => {
    if (error !== ROLLBACK) throw error;
  }));
  await lib.raw(ojs.db, `DROP TABLE IF EXISTS ${table}`, []);
  await ojs.migrate();
  // The core's INSERT text for one row, reused with fresh values by the raw single baseline.
  const stager = ojs.native.stager(ojs.dialect, lib.placeholder);
  const texts = new Map();
  const stage = (jobsText) => decodeStaged(stageJobs(stager, jobsText, null), texts);
  const sql = stage('[{"type":"bench.job","args":[0]}]').statements[0].sql;
  // The core's bulk staging of 1,000 rows: one statement, 3 bound values a row (id, type,
  // args JSON), the rest literals. The raw multi-row baseline runs this text with its own values.
  const jobs = Array.from({ length: BULK }, (_, i) => ({ type: 'bench.job', args: [i] }));
  const staged = stage(JSON.stringify(jobs));
  const [first] = staged.statements;
  if (staged.statements.length !== 1 || staged.needsSavepoint || first.params.length !== 3 * BULK ||
      first.params[1] !== 'bench.job' || first.params[2] !== '[0]' || first.params[5] !== '[1]') {
    throw new Error(`the core's bulk staging is not one INSERT of (id, type, args) rows: ${JSON.stringify(staged).slice(0, 400)}`);
  }
  const bulkSql = first.sql;
  const bulkParams = (batch) => {
    const params = new Array(batch.length * 3);
    let k = 0;
    for (const job of batch) {
      params[k] = nextId();
      params[k + 1] = job.type;
      params[k + 2] = JSON.stringify(job.args);
      k += 3;
    }
    return params;
  };
  // The adapter must run exactly these texts: the comparison is of the same statements (knex
  // reports what it ran; a provider's execute is watched during this probe only).
  const ran = [];
  let watching = false;
  const onQuery = (query) => ran.push(query.sql);
  const provider = ojs.knex ? null : providers[library];
  const execute = provider && provider.execute;
  if (ojs.knex) ojs.knex.on('query', onQuery);
  else {
    provider.execute = function watched(executor, text, params) {
      if (watching) ran.push(text);
      return execute.call(this, executor, text, params);
    };
  }
  const probeRaw = (tx, text, params) => {
    if (!ojs.knex) ran.push(text);
    return lib.raw(tx, text, params);
  };
  const probeAdapter = async (call) => {
    watching = true;
    try {
      await call();
    } finally {
      watching = false;
    }
  };
  try {
    await transaction(async (probe) => {
      await probeRaw(probe, sql, [nextId(), 'bench.job', '[0]', '{}', '{}', null]);
      await probeAdapter(() => ojs.enqueueAfterCommit(probe, 'bench.job', [0]));
      await probeRaw(probe, bulkSql, bulkParams(jobs));
      await probeAdapter(() => ojs.enqueueBulk(probe, jobs));
    });
  } finally {
    if (ojs.knex) ojs.knex.off('query', onQuery);
    else provider.execute = execute;
  }
  const inserts = ran.filter((text) => text.startsWith('INSERT'));
  if (inserts.length !== 4 || inserts[0] !== inserts[1] || inserts[2] !== inserts[3]) {
    throw new Error(`not the same INSERTs: ${JSON.stringify(inserts.map((text) => text.slice(0, 200)))}`);
  }
  let n = 0;
  let trx;
  const raw = (count) => async () => {
    for (let i = 0; i < count; i += 1) {
      n += 1;
      await lib.raw(trx, sql, [nextId(), 'bench.job', `[${n}]`, '{}', '{}', null]);
    }
  };
  const adapter = (count) => async () => {
    for (let i = 0; i < count; i += 1) {
      n += 1;
      await ojs.enqueueAfterCommit(trx, 'bench.job', [n]);
    }
  };
  const rawBulk = () => lib.raw(trx, bulkSql, bulkParams(jobs));
  const adapterBulk = () => ojs.enqueueBulk(trx, jobs);
  const results = { adapter: [], raw: [], pairs: [], rawBulk: [], bulk: [], bulkPairs: [] };
  let bulkTurn = 0;
  for (let round = 0; round < ROUNDS; round += 1) {
    await transaction(async (tx) => {
      trx = tx;
      await raw(WARMUP)();
      await adapter(WARMUP)();
      for (let block = 0; block < PER_JOB / BLOCK; block += 1) {
        let rawMs;
        let adapterMs;
        if (block % 2 === 0) {
          rawMs = await timed(raw(BLOCK));
          adapterMs = await timed(adapter(BLOCK));
        } else {
          adapterMs = await timed(adapter(BLOCK));
          rawMs = await timed(raw(BLOCK));
        }
        results.raw.push(rawMs);
        results.adapter.push(adapterMs);
        results.pairs.push(adapterMs / rawMs);
      }
    });
    // Bulks in a transaction of their own (so the single-row one stays small).
    await transaction(async (tx) => {
      trx = tx;
      await rawBulk();
      await adapterBulk();
      for (let pair = 0; pair < BULK_PAIRS; pair += 1) {
        let rawMs;
        let bulkMs;
        bulkTurn += 1;
        if (bulkTurn % 2 === 0) {
          rawMs = await timed(rawBulk);
          bulkMs = await timed(adapterBulk);
        } else {
          bulkMs = await timed(adapterBulk);
          rawMs = await timed(rawBulk);
        }
        results.rawBulk.push(rawMs);
        results.bulk.push(bulkMs);
        results.bulkPairs.push(bulkMs / rawMs);
      }
    });
  }
  await ojs.close();
  await lib.close();
  const quantile = (values, q) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) * q)];
  const spread = (pairs) => `${pairs.length} pairs, quartiles ${quantile(pairs, 0.25).toFixed(2)}-${quantile(pairs, 0.75).toFixed(2)}`;
  const verdict = (ratio, target) => (ratio <= target ? 'met' : 'NOT met');
  const row = {
    label,
    rawSingle: (median(results.raw) * 1000) / BLOCK,
    single: (median(results.adapter) * 1000) / BLOCK,
    singleRatio: median(results.pairs),
    rawBulk: (median(results.rawBulk) * 1000) / BULK,
    bulk: (median(results.bulk) * 1000) / BULK,
    bulkRatio: median(results.bulkPairs),
  };
  summary.push(row);
  console.log(
    `${label.padEnd(18)} single: enqueueAfterCommit ${row.single.toFixed(1)} us, raw INSERT ${row.rawSingle.toFixed(1)} us, ` +
      `ratio ${row.singleRatio.toFixed(2)}x, target <= ${SINGLE_TARGET.toFixed(2)}x: ${verdict(row.singleRatio, SINGLE_TARGET)} (${spread(results.pairs)})\n` +
      `${''.padEnd(18)} bulk of ${BULK}, per job: enqueueBulk ${row.bulk.toFixed(2)} us, raw multi-row INSERT ${row.rawBulk.toFixed(2)} us, ` +
      `ratio ${row.bulkRatio.toFixed(2)}x, target <= ${BULK_TARGET.toFixed(2)}x: ${verdict(row.bulkRatio, BULK_TARGET)} (${spread(results.bulkPairs)})`,
  );
}

function printSummary() {
  if (summary.length === 0) return;
  const mark = (ratio, target) => `${ratio.toFixed(2)}x ${ratio <= target ? 'met' : 'NOT met'}`;
  console.log(`\nSummary (us per job; ratios are medians of paired blocks, ids ${process.env.OJS_BENCH_IDS === 'v4' ? 'v4' : 'time-ordered'})`);
  console.log(
    `${'library/database'.padEnd(18)} ${'raw INSERT'.padStart(10)} ${'single'.padStart(8)} ${`ratio <= ${SINGLE_TARGET.toFixed(2)}x`.padStart(17)}` +
      `  ${'raw multi-row'.padStart(13)} ${'bulk'.padStart(8)} ${`ratio <= ${BULK_TARGET.toFixed(2)}x`.padStart(17)}`,
  );
  for (const row of summary) {
    console.log(
      `${row.label.padEnd(18)} ${row.rawSingle.toFixed(1).padStart(10)} ${row.single.toFixed(1).padStart(8)} ${mark(row.singleRatio, SINGLE_TARGET).padStart(17)}` +
        `  ${row.rawBulk.toFixed(2).padStart(13)} ${row.bulk.toFixed(2).padStart(8)} ${mark(row.bulkRatio, BULK_TARGET).padStart(17)}`,
    );
  }
}

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ojs-node-bench-'));
  const picked = (process.env.OJS_BENCH_LIBS || 'knex pg kysely drizzle').split(/\s+/).filter(Boolean);
  const runs = [
    ['knex', 'sqlite'], ['knex', 'postgres'], ['pg', 'postgres'], ['kysely', 'sqlite'], ['kysely', 'postgres'], ['drizzle', 'postgres'],
  ].filter(([library]) => picked.includes(library));
  for (const [library, database] of runs) {
    await bench(library, database, LIBRARIES[library](database, path.join(dir, `${library}.db`)));
  }
  printSummary();
  fs.rmSync(dir, { recursive: true, force: true });
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

'use strict';
// Staging cost of ojs-adapter-express on SQLite and PostgreSQL, inside host transactions of
// each transaction library (knex; pg, Kysely and Drizzle through their providers):
//  1. per job: enqueueAfterCommit vs a raw parameterized INSERT of the same row (the core's
//     own INSERT text, checked to be the one the adapter runs; a fresh id and args text per
//     row) through the same transaction of the same library (target <= 1.15x);
//  2. bulk: one enqueueBulk of 1000 jobs vs 1000 enqueueAfterCommit calls, in a transaction
//     of their own (target >= 5x).
// Run by bench.sh against the installed package. No relay runs: only staging is measured.
// OJS_BENCH_LIBS (space-separated, e.g. "knex pg kysely") picks the libraries.
//
// Both sides of the per-job comparison run interleaved in the same transaction: per round,
// PER_JOB jobs of each side in blocks of BLOCK jobs, alternating which side goes first, after
// an untimed warm-up of both. Neither side is favoured by the JIT warming up or by the table
// and its index growing; each block of one side is paired with the adjacent block of the
// other, and the ratio is the median of the pairs' ratios, so a burst of load from other
// processes (or a page-cache spill) moves one pair, not the result. The us/job figures are
// the medians of the blocks of each side. Singles and bulks alternate their order per round;
// their speed-up is the ratio of the medians over the rounds.

const crypto = require('node:crypto');
const path = require('node:path');
const os = require('node:os');
const fs = require('node:fs');
const knexLib = require('knex');
const pg = require('pg');
const Database = require('better-sqlite3');
const { Kysely, PostgresDialect, SqliteDialect, CompiledQuery } = require('kysely');
const { drizzle } = require('drizzle-orm/node-postgres');
const { createOjs } = require(process.env.OJS_PACKAGE || 'ojs-adapter-express');

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
    const { providers } = require(process.env.OJS_PACKAGE || 'ojs-adapter-express');
    // Drizzle's own way to run a text with bound values: the provider's statement builder.
    return { options: { db }, placeholder: 'dollar', raw: (tx, sql, params) => providers.drizzle.execute(tx, sql, params), close: () => pool.end() };
  },
};

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
  // The core's INSERT text for one row, reused with fresh values by the raw baseline.
  const sql = JSON.parse(ojs.native.stage(ojs.dialect, lib.placeholder, '[{"type":"bench.job","args":[0]}]', null)).statements[0].sql;
  // The adapter must run exactly this text: the comparison is of the same statement (knex
  // reports what it ran; a provider runs the text its core stager gave it).
  const ran = [];
  const onQuery = (query) => ran.push(query.sql);
  if (ojs.knex) ojs.knex.on('query', onQuery);
  await transaction(async (probe) => {
    await lib.raw(probe, sql, [crypto.randomUUID(), 'bench.job', '[0]', '{}', '{}', null]);
    await ojs.enqueueAfterCommit(probe, 'bench.job', [0]);
  });
  if (ojs.knex) ojs.knex.off('query', onQuery);
  else ran.push(sql, ojs._providerStager(ojs.dialect, lib.placeholder).sql);
  const inserts = ran.filter((text) => text.startsWith('INSERT'));
  if (inserts.length !== 2 || inserts[0] !== inserts[1]) throw new Error(`not the same INSERT: ${JSON.stringify(inserts)}`);
  let n = 0;
  const raw = (count) => async () => {
    for (let i = 0; i < count; i += 1) {
      n += 1;
      await lib.raw(trx, sql, [crypto.randomUUID(), 'bench.job', `[${n}]`, '{}', '{}', null]);
    }
  };
  const adapter = (count) => async () => {
    for (let i = 0; i < count; i += 1) {
      n += 1;
      await ojs.enqueueAfterCommit(trx, 'bench.job', [n]);
    }
  };
  const results = { adapter: [], raw: [], pairs: [], single: [], bulk: [] };
  let trx;
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
    // Singles and bulk in a transaction of their own (so the per-job one stays small).
    await transaction(async (tx) => {
    trx = tx;
    const jobs = Array.from({ length: 1000 }, (_, i) => ({ type: 'bench.job', args: [i] }));
    const single = () => timed(adapter(1000));
    const bulk = () => timed(() => ojs.enqueueBulk(trx, jobs));
    if (round % 2 === 0) {
      results.single.push(await single());
      results.bulk.push(await bulk());
    } else {
      results.bulk.push(await bulk());
      results.single.push(await single());
    }
    });
  }
  await ojs.close();
  await lib.close();
  const perJobUs = (ms) => ((ms * 1000) / BLOCK).toFixed(1);
  const quantile = (values, q) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) * q)];
  const ratio = median(results.pairs);
  const singleMs = median(results.single);
  const bulkMs = median(results.bulk);
  console.log(
    `${label.padEnd(18)} per job: enqueueAfterCommit ${perJobUs(median(results.adapter))} us, raw INSERT ${perJobUs(median(results.raw))} us, ` +
      `ratio ${ratio.toFixed(2)}x (target <= 1.15x; ${results.pairs.length} pairs, quartiles ${quantile(results.pairs, 0.25).toFixed(2)}-${quantile(results.pairs, 0.75).toFixed(2)})\n` +
      `${''.padEnd(18)} 1000 jobs: bulk ${bulkMs.toFixed(1)} ms, 1000 single calls ${singleMs.toFixed(1)} ms, speed-up ${(singleMs / bulkMs).toFixed(1)}x (target >= 5x)`,
  );
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
  fs.rmSync(dir, { recursive: true, force: true });
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

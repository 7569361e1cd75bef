'use strict';
// Staging cost of ojs-adapter-express on SQLite and PostgreSQL, inside host transactions:
//  1. per job: enqueueAfterCommit vs a raw parameterized INSERT of the same row (the core's
//     own INSERT text, checked to be the one the adapter runs; a fresh id and args text per
//     row) through the same knex transaction (target <= 1.15x);
//  2. bulk: one enqueueBulk of 1000 jobs vs 1000 enqueueAfterCommit calls, in a transaction
//     of their own (target >= 5x).
// Run by bench.sh against the installed package. No relay runs: only staging is measured.
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
const { createOjs } = require(process.env.OJS_PACKAGE || 'ojs-adapter-express');

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

async function bench(database, knex) {
  const table = `node_bench_${database}`;
  await knex.schema.dropTableIfExists(table);
  const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
  await ojs.migrate();
  // The core's INSERT text for one row, reused with fresh values by the raw baseline.
  const sql = JSON.parse(ojs.native.stage(ojs.dialect, 'question', '[{"type":"bench.job","args":[0]}]', null)).statements[0].sql;
  // The adapter must run exactly this text: the comparison is of the same statement.
  const ran = [];
  const onQuery = (query) => ran.push(query.sql);
  knex.on('query', onQuery);
  const probe = await knex.transaction();
  await probe.raw(sql, [crypto.randomUUID(), 'bench.job', '[0]', '{}', '{}', null]);
  await ojs.enqueueAfterCommit(probe, 'bench.job', [0]);
  await probe.rollback();
  knex.off('query', onQuery);
  const inserts = ran.filter((text) => text.startsWith('INSERT'));
  if (inserts.length !== 2 || inserts[0] !== inserts[1]) throw new Error(`not the same INSERT: ${JSON.stringify(inserts)}`);
  let n = 0;
  const raw = (count) => async () => {
    for (let i = 0; i < count; i += 1) {
      n += 1;
      await trx.raw(sql, [crypto.randomUUID(), 'bench.job', `[${n}]`, '{}', '{}', null]);
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
    trx = await knex.transaction();
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
    await trx.rollback();
    // Singles and bulk in a transaction of their own (so the per-job one stays small).
    trx = await knex.transaction();
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
    await trx.rollback();
  }
  await ojs.close();
  const perJobUs = (ms) => ((ms * 1000) / BLOCK).toFixed(1);
  const quantile = (values, q) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) * q)];
  const ratio = median(results.pairs);
  const singleMs = median(results.single);
  const bulkMs = median(results.bulk);
  console.log(
    `${database.padEnd(8)} per job: enqueueAfterCommit ${perJobUs(median(results.adapter))} us, raw INSERT ${perJobUs(median(results.raw))} us, ` +
      `ratio ${ratio.toFixed(2)}x (target <= 1.15x; ${results.pairs.length} pairs, quartiles ${quantile(results.pairs, 0.25).toFixed(2)}-${quantile(results.pairs, 0.75).toFixed(2)})\n` +
      `${''.padEnd(8)} 1000 jobs: bulk ${bulkMs.toFixed(1)} ms, 1000 single calls ${singleMs.toFixed(1)} ms, speed-up ${(singleMs / bulkMs).toFixed(1)}x (target >= 5x)`,
  );
}

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ojs-node-bench-'));
  const sqlite = knexLib({ client: 'better-sqlite3', connection: { filename: path.join(dir, 'bench.db') }, useNullAsDefault: true });
  await bench('sqlite', sqlite);
  await sqlite.destroy();
  fs.rmSync(dir, { recursive: true, force: true });
  const pg = knexLib({ client: 'pg', connection: process.env.OJS_TEST_DATABASE_URL });
  await bench('postgres', pg);
  await pg.destroy();
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

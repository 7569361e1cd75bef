'use strict';
// Staging cost of ojs-adapter-express on SQLite and PostgreSQL, in one host transaction:
//  1. per job: enqueueAfterCommit vs a raw parameterized INSERT of the same row (the core's
//     own INSERT text, fresh id) through the same knex transaction (target <= 1.15x);
//  2. bulk: one enqueueBulk of 1000 jobs vs 1000 enqueueAfterCommit calls (target >= 5x).
// Run by bench.sh against the installed package. No relay runs: only staging is measured.

const crypto = require('node:crypto');
const path = require('node:path');
const os = require('node:os');
const fs = require('node:fs');
const knexLib = require('knex');
const { createOjs } = require(process.env.OJS_PACKAGE || 'ojs-adapter-express');

const PER_JOB = Number(process.env.OJS_BENCH_JOBS || 2000);
const ROUNDS = Number(process.env.OJS_BENCH_ROUNDS || 5);

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
  const sql = ojs.native.stage(ojs.dialect, 'question', '[{"type":"bench.job","args":[0]}]', null).statements[0].sql;
  const results = { adapter: [], raw: [], single: [], bulk: [] };
  for (let round = 0; round < ROUNDS; round += 1) {
    const trx = await knex.transaction();
    results.raw.push(await timed(async () => {
      for (let i = 0; i < PER_JOB; i += 1) {
        await trx.raw(sql, [crypto.randomUUID(), 'bench.job', `[${i}]`, '{}', '{}', null]);
      }
    }));
    results.adapter.push(await timed(async () => {
      for (let i = 0; i < PER_JOB; i += 1) await ojs.enqueueAfterCommit(trx, 'bench.job', [i]);
    }));
    results.single.push(await timed(async () => {
      for (let i = 0; i < 1000; i += 1) await ojs.enqueueAfterCommit(trx, 'bench.job', [i]);
    }));
    const jobs = Array.from({ length: 1000 }, (_, i) => ({ type: 'bench.job', args: [i] }));
    results.bulk.push(await timed(() => ojs.enqueueBulk(trx, jobs)));
    await trx.rollback();
  }
  await ojs.close();
  const perJobUs = (ms) => ((ms * 1000) / PER_JOB).toFixed(1);
  const adapter = median(results.adapter);
  const raw = median(results.raw);
  const single = median(results.single);
  const bulk = median(results.bulk);
  console.log(
    `${database.padEnd(8)} per job: enqueueAfterCommit ${perJobUs(adapter)} us, raw INSERT ${perJobUs(raw)} us, ratio ${(adapter / raw).toFixed(2)}x (target <= 1.15x)\n` +
      `${''.padEnd(8)} 1000 jobs: bulk ${bulk.toFixed(1)} ms, 1000 single calls ${single.toFixed(1)} ms, speed-up ${(single / bulk).toFixed(1)}x (target >= 5x)`,
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

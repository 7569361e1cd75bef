// pg-boss working N no-op jobs added in one insert() batch. Settings for throughput: a batch
// fetch of the relay's batch size (batchSize), PB_WORKERS workers (work() called that many
// times: pg-boss 10 has no per-worker concurrency), pollingIntervalSeconds at its minimum
// (0.5 s; a worker that got a full batch fetches again at once only when handling took longer
// than the interval), a pool of PB_POOL connections, maintenance and scheduling off.
// Driven by `ojs-bench drain --peers pgboss` (protocol in lib.js).
// Env: DATABASE_URL, JOBS, OJS_BENCH_PEERS_DIR; optional PB_BATCH, PB_WORKERS, PB_POOL.
"use strict";
const { requirePeer, env, emit, waitForGo, payload, seconds, cpuSeconds, sleep } = require("./lib");
const PgBoss = requirePeer("pg-boss");
const { Pool } = requirePeer("pg");
const version = requirePeer("pg-boss/package.json").version;

const connectionString = env("DATABASE_URL");
const jobs = Number(env("JOBS"));
const batchSize = Number(env("PB_BATCH", "500"));
const workers = Number(env("PB_WORKERS", "4"));
const pool = Number(env("PB_POOL", "10"));
const schema = "pgboss";
const queue = "noop";

async function main() {
  const settings = { batchSize, workers, pollingIntervalSeconds: 0.5, max: pool, supervise: false, schedule: false };
  const admin = new Pool({ connectionString, max: 1 });
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const boss = new PgBoss({ connectionString, schema, max: pool, supervise: false, schedule: false });
  boss.on("error", (e) => process.stderr.write(`pg-boss error: ${e.message}\n`));
  await boss.start();
  await boss.createQueue(queue);
  const addStarted = process.hrtime.bigint();
  const batch = [];
  for (let i = 0; i < jobs; i++) batch.push({ name: queue, data: { args: payload(i) } });
  await boss.insert(batch);
  const addSeconds = seconds(addStarted);
  const count = async (where) =>
    Number((await admin.query(`SELECT count(*) AS n FROM ${schema}.job WHERE name = $1 ${where}`, [queue])).rows[0].n);
  const queued = await count("");
  emit({ event: "added", peer: "pg-boss", version, jobs: queued, add_seconds: addSeconds, tables: [{ schema }], settings });
  if (queued !== jobs) throw new Error(`insert queued ${queued} of ${jobs}`);

  await waitForGo();
  let worked = 0;
  let workedAt = null;
  let firstAt = null;
  let resolveWorked;
  const allWorked = new Promise((r) => (resolveWorked = r));
  const cpu0 = process.cpuUsage();
  const started = process.hrtime.bigint();
  for (let w = 0; w < workers; w++) {
    await boss.work(queue, { batchSize, pollingIntervalSeconds: 0.5 }, async (batchJobs) => {
      if (firstAt === null) firstAt = seconds(started);
      worked += batchJobs.length;
      if (worked >= jobs && workedAt === null) { workedAt = seconds(started); resolveWorked(); }
    });
  }
  await allWorked;
  // Completed in the database (pg-boss completes a batch after its handler resolves).
  while ((await count("AND state <> 'completed'")) !== 0) await sleep(5);
  const completedAt = seconds(started);
  const cpu = cpuSeconds(process.cpuUsage(cpu0));
  emit({ event: "done", peer: "pg-boss", version, jobs, worked, first_job_seconds: firstAt,
    worked_seconds: workedAt, completed_seconds: completedAt, peer_cpu_s: cpu, settings });
  await boss.stop({ graceful: false, wait: true });
  await admin.end();
}

main().then(() => process.exit(0), (e) => { process.stderr.write(`pgboss.js: ${e.stack || e}\n`); process.exit(1); });

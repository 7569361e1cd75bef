// graphile-worker working N no-op jobs added in one addJobs batch, with the settings of its
// performance page (https://worker.graphile.org/docs/performance): concurrentJobs 24,
// maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0; plus
// preparedStatements (its default), useNodeTime, and pollInterval = the relay's poll interval.
// Driven by `ojs-bench drain --peers graphile` (protocol in lib.js).
// Env: DATABASE_URL, JOBS, OJS_BENCH_PEERS_DIR; optional GW_CONCURRENCY, GW_POOL,
// GW_LOCAL_QUEUE, GW_POLL_MS, GW_COMPLETE_BATCH_DELAY.
"use strict";
const { requirePeer, env, emit, waitForGo, payload, seconds, cpuSeconds, sleep } = require("./lib");
const { run, makeWorkerUtils } = requirePeer("graphile-worker");
const { Pool } = requirePeer("pg");
const version = requirePeer("graphile-worker/package.json").version;

const connectionString = env("DATABASE_URL");
const jobs = Number(env("JOBS"));
const concurrency = Number(env("GW_CONCURRENCY", "24"));
const poolSize = Number(env("GW_POOL", "25"));
const localQueue = Number(env("GW_LOCAL_QUEUE", "500"));
const pollInterval = Number(env("GW_POLL_MS", "10"));
const completeDelay = Number(env("GW_COMPLETE_BATCH_DELAY", "0"));
const schema = "graphile_worker";
const table = `${schema}._private_jobs`;

const logger = new (requirePeer("@graphile/logger").Logger)(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});

async function main() {
  const preset = {
    worker: {
      connectionString,
      schema,
      concurrentJobs: concurrency,
      maxPoolSize: poolSize,
      pollInterval,
      preparedStatements: true,
      useNodeTime: true,
      localQueue: { size: localQueue },
      completeJobBatchDelay: completeDelay,
      failJobBatchDelay: completeDelay,
    },
  };
  const settings = { concurrentJobs: concurrency, maxPoolSize: poolSize, pollInterval, preparedStatements: true,
    useNodeTime: true, localQueueSize: localQueue, completeJobBatchDelay: completeDelay, failJobBatchDelay: completeDelay };

  const admin = new Pool({ connectionString, max: 1 });
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  // Migrations run here (makeWorkerUtils migrates), not inside the timed part.
  const utils = await makeWorkerUtils({ preset, logger });
  await utils.migrate();
  const addStarted = process.hrtime.bigint();
  const specs = [];
  for (let i = 0; i < jobs; i++) specs.push({ identifier: "noop", payload: payload(i) });
  await utils.addJobs(specs);
  const addSeconds = seconds(addStarted);
  await utils.release();
  const queued = Number((await admin.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
  emit({ event: "added", peer: "graphile-worker", version, jobs: queued, add_seconds: addSeconds,
    tables: [{ schema, name: "_private_jobs" }], settings });
  if (queued !== jobs) throw new Error(`addJobs queued ${queued} of ${jobs}`);

  await waitForGo();
  let worked = 0;
  let workedAt = null;
  let firstAt = null;
  let resolveWorked;
  const allWorked = new Promise((r) => (resolveWorked = r));
  const cpu0 = process.cpuUsage();
  const started = process.hrtime.bigint();
  const runner = await run({
    preset,
    logger,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        if (firstAt === null) firstAt = seconds(started);
        worked += 1;
        if (worked === jobs) { workedAt = seconds(started); resolveWorked(); }
      },
    },
  });
  await allWorked;
  // Done in the database: completions are batched (completeJobBatchDelay), so wait for the
  // table to be empty (graphile-worker deletes a completed job).
  let left = -1;
  while (left !== 0) {
    left = Number((await admin.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
    if (left !== 0) await sleep(5);
  }
  const completedAt = seconds(started);
  const cpu = cpuSeconds(process.cpuUsage(cpu0));
  emit({ event: "done", peer: "graphile-worker", version, jobs, worked, first_job_seconds: firstAt,
    worked_seconds: workedAt, completed_seconds: completedAt, peer_cpu_s: cpu, settings });
  await runner.stop();
  await admin.end();
}

main().then(() => process.exit(0), (e) => { process.stderr.write(`graphile.js: ${e.stack || e}\n`); process.exit(1); });

// graphile-worker's add -> handler start latency with its worker in another process, woken by
// LISTEN/NOTIFY, at a fixed offered rate: the peer's counterpart of `ojs-bench latency`'s
// separate relay (commit -> delivered).
//
// This process is the producer (an application): it re-creates graphile-worker's schema, forks
// itself as the worker (`graphile_latency.js worker`, IPC channel), waits until the worker's
// LISTEN is in place, then adds one no-op job per tick, each with WorkerUtils.addJob (one
// statement, its own transaction, like an application's commit), at RATE per second on
// absolute tick times (an add starts at its tick even when earlier ones have not returned). The
// first WARMUP_SECONDS of ticks are not counted, the next SECONDS are. A job's latency is from
// the moment its addJob returned here to the moment the worker's handler started for it, both
// read as performance.timeOrigin + performance.now() (ms since the epoch, sub-ms resolution).
// The worker runs graphile-worker run() with graphile.js's settings except pollInterval, which
// is graphile-worker's default (2000 ms) unless GW_POLL_MS is given: new jobs reach it by the
// NOTIFY its add_job sends, not by its poll.
//
// The producer adds through a pool of GW_PRODUCER_POOL connections (default 4, as the relay
// benchmark's application); when the adds cannot keep up with RATE (add_job's NOTIFY takes
// PostgreSQL's notify lock, held until the commit has flushed: notifying commits are serialized),
// the line's achieved_add_rate says so and stderr warns. `negative` counts handlers that started
// before the producer saw their addJob return (kept in the percentiles as negative values).
//
// Output (stdout, one JSON line), then exit 0:
//   {"event":"latency","peer":"graphile-worker","version":...,"rate":...,"seconds":...,
//    "jobs":N,"missing":M,"latency_ms":{"p50","p90","p99","max"},"settings":{...},...}
// A measured job whose handler has not started 120 s after the last add returned is missing:
// the line is still printed, then the script says so on stderr and exits 1.
// Env: DATABASE_URL, RATE, SECONDS, WARMUP_SECONDS, OJS_BENCH_PEERS_DIR; optional GW_POLL_MS,
// GW_CONCURRENCY, GW_POOL, GW_LOCAL_QUEUE, GW_COMPLETE_BATCH_DELAY, GW_PRODUCER_POOL.
"use strict";
const { fork } = require("child_process");
const EventEmitter = require("events");
const { performance } = require("perf_hooks");
const { requirePeer, env, emit, payload, cpuSeconds } = require("./lib");
const { run, makeWorkerUtils } = requirePeer("graphile-worker");
const { Pool } = requirePeer("pg");
const version = requirePeer("graphile-worker/package.json").version;

const connectionString = env("DATABASE_URL");
const schema = "graphile_worker";
const concurrency = Number(env("GW_CONCURRENCY", "24"));
const poolSize = Number(env("GW_POOL", "25"));
const localQueue = Number(env("GW_LOCAL_QUEUE", "500"));
const pollFromEnv = env("GW_POLL_MS", "") !== "";
const pollInterval = Number(env("GW_POLL_MS", "2000"));
const completeDelay = Number(env("GW_COMPLETE_BATCH_DELAY", "0"));
// The application's pool: as many connections as the relay benchmark's application (4).
const producerPool = Number(env("GW_PRODUCER_POOL", "4"));
const READY_DEADLINE_MS = 60_000;
const STARTED_DEADLINE_MS = 120_000;

/** Wall time in ms since the epoch, sub-ms resolution, comparable across processes. */
const now = () => performance.timeOrigin + performance.now();

const logger = new (requirePeer("@graphile/logger").Logger)(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker ${level}: ${message}\n`);
});

const settings = {
  concurrentJobs: concurrency, maxPoolSize: poolSize, pollInterval,
  pollIntervalFrom: pollFromEnv ? "GW_POLL_MS" : "graphile-worker default",
  wakeUp: "LISTEN jobs:insert (NOTIFY sent by add_job)", preparedStatements: true, useNodeTime: true,
  localQueueSize: localQueue, completeJobBatchDelay: completeDelay, failJobBatchDelay: completeDelay,
  worker: "another process (child_process.fork)",
  add: "WorkerUtils.addJob, one job per transaction, each started at its tick",
  producerMaxPoolSize: producerPool,
};

// ---------------------------------------------------------------------------------------------
// The worker (child process)

async function worker() {
  const starts = new Map(); // seq -> handler start (ms since the epoch)
  let pending = null; // seqs the producer waits for that have not started yet
  let onAllStarted = null;
  let runner = null;
  let stopping = null;
  const stop = () => (stopping ??= runner
    ? runner.stop().catch((e) => process.stderr.write(`graphile_latency.js worker: stop: ${e}\n`))
    : Promise.resolve());
  const fail = (e) => {
    process.stderr.write(`graphile_latency.js worker: ${e.stack || e}\n`);
    try { process.send({ type: "error", message: String(e.message || e) }); } catch {}
    stop().finally(() => process.exit(1));
  };
  // The producer gone (exited, killed): stop too.
  process.on("disconnect", () => stop().finally(() => process.exit(0)));
  process.on("message", (message) => {
    if (message.type === "collect") {
      pending = new Set(message.seqs.filter((s) => !starts.has(s)));
      let replied = false;
      const reply = () => {
        if (replied) return;
        replied = true;
        clearTimeout(timer);
        process.send({
          type: "times",
          starts: message.seqs.map((s) => starts.get(s) ?? null),
          started_total: starts.size,
          cpu_s: cpuSeconds(process.cpuUsage()),
        });
      };
      const timer = setTimeout(reply, message.deadline_ms);
      onAllStarted = reply;
      if (pending.size === 0) reply();
    } else if (message.type === "stop") {
      stop().finally(() => process.exit(0));
    }
  });

  const events = new EventEmitter();
  let announced = false;
  // Ready once LISTEN has completed: graphile-worker queues `LISTEN "jobs:insert"` on its
  // listen client right after emitting this event, and a client runs its queries in order.
  events.on("pool:listen:success", ({ client }) => {
    setImmediate(() => client.query("select 1").then(() => {
      if (!announced) { announced = true; process.send({ type: "ready", pid: process.pid }); }
    }, fail));
  });
  const preset = {
    worker: {
      connectionString, schema, concurrentJobs: concurrency, maxPoolSize: poolSize, pollInterval,
      preparedStatements: true, useNodeTime: true, localQueue: { size: localQueue },
      completeJobBatchDelay: completeDelay, failJobBatchDelay: completeDelay, events,
    },
  };
  runner = await run({
    preset,
    logger,
    noHandleSignals: true,
    taskList: {
      noop: async (jobPayload) => {
        const at = now();
        const seq = jobPayload.seq;
        if (!starts.has(seq)) starts.set(seq, at);
        if (pending !== null && pending.delete(seq) && pending.size === 0) onAllStarted();
      },
    },
  });
  runner.promise.catch(fail);
}

// ---------------------------------------------------------------------------------------------
// The producer (main process)

/** Nearest rank, as crates/ojs-bench/src/common.rs `percentile`. */
function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}

const round3 = (x) => (x === null ? null : Math.round(x * 1000) / 1000);

function summary(values) {
  const sorted = Float64Array.from(values).sort();
  return {
    p50: round3(percentile(sorted, 50)), p90: round3(percentile(sorted, 90)),
    p99: round3(percentile(sorted, 99)), max: round3(sorted.length ? sorted[sorted.length - 1] : null),
  };
}

/** Messages from the worker, awaited by type; rejects when the worker fails or exits. */
function listen(child) {
  const waiting = new Map();
  const arrived = new Map();
  let failure = null;
  const failAll = (e) => {
    failure ??= e;
    for (const { reject } of waiting.values()) reject(failure);
    waiting.clear();
  };
  child.on("message", (m) => {
    if (m.type === "error") return failAll(new Error(`worker: ${m.message}`));
    const w = waiting.get(m.type);
    if (w) { waiting.delete(m.type); w.resolve(m); } else arrived.set(m.type, m);
  });
  child.on("exit", (code, signal) => failAll(new Error(`worker exited (code ${code}, signal ${signal})`)));
  child.on("error", failAll);
  return (type, deadlineMs, what) => {
    if (arrived.has(type)) { const m = arrived.get(type); arrived.delete(type); return Promise.resolve(m); }
    if (failure) return Promise.reject(failure);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(type);
        reject(new Error(`worker: no ${what} after ${deadlineMs / 1000} s`));
      }, deadlineMs);
      waiting.set(type, {
        resolve: (m) => { clearTimeout(timer); resolve(m); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      });
    });
  };
}

/** Stops the worker: asks, then SIGTERM, then SIGKILL, each after waiting for its exit. */
async function stopWorker(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const within = (ms) => Promise.race([exited.then(() => true), new Promise((r) => setTimeout(() => r(false), ms).unref())]);
  try { child.send({ type: "stop" }); } catch {}
  if (await within(15_000)) return;
  process.stderr.write("graphile_latency.js: the worker did not stop in 15 s; SIGTERM\n");
  child.kill("SIGTERM");
  if (await within(5_000)) return;
  child.kill("SIGKILL");
  await exited;
}

/** One addJob per tick at `rate`/s, on absolute tick times; resolves with every add's times. */
async function addAtRate(utils, rate, count) {
  const period = 1000 / rate;
  const origin = performance.now() + 1;
  const adds = new Array(count);
  let failures = 0;
  const addOne = async (seq) => {
    const scheduled = performance.timeOrigin + origin + seq * period;
    const started = now();
    try {
      await utils.addJob("noop", { seq, args: payload(seq) });
      return { seq, scheduled, started, returned: now(), ok: true };
    } catch (e) {
      if (++failures <= 3) process.stderr.write(`graphile_latency.js: addJob ${seq} failed: ${e}\n`);
      return { seq, scheduled, started, returned: now(), ok: false };
    }
  };
  let next = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const t = performance.now();
      while (next < count && origin + next * period <= t) { adds[next] = addOne(next); next += 1; }
      if (next >= count) return resolve();
      setTimeout(tick, origin + next * period - performance.now());
    };
    setTimeout(tick, origin - performance.now());
  });
  return Promise.all(adds);
}

async function producer() {
  const rate = Number(env("RATE"));
  const measuredSeconds = Number(env("SECONDS"));
  const warmupSeconds = Number(env("WARMUP_SECONDS", "0"));
  if (!(rate > 0) || !(measuredSeconds > 0) || !(warmupSeconds >= 0)) {
    throw new Error(`RATE (${rate}) and SECONDS (${measuredSeconds}) must be > 0, WARMUP_SECONDS >= 0`);
  }
  const warmup = Math.round(rate * warmupSeconds);
  const measured = Math.round(rate * measuredSeconds);

  const admin = new Pool({ connectionString, max: 1 });
  try {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await admin.end();
  }
  const utils = await makeWorkerUtils({
    preset: { worker: { connectionString, schema, maxPoolSize: producerPool, preparedStatements: true, useNodeTime: true } },
    logger,
  });
  let child = null;
  let failed = false;
  try {
    await utils.migrate();
    child = fork(__filename, ["worker"], { stdio: ["ignore", 2, 2, "ipc"] });
    const next = listen(child);
    await next("ready", READY_DEADLINE_MS, "ready message (LISTEN in place)");

    const cpu0 = process.cpuUsage();
    const adds = await addAtRate(utils, rate, warmup + measured);
    const producerCpu = cpuSeconds(process.cpuUsage(cpu0));
    const ok = adds.filter((a) => a.ok);
    child.send({ type: "collect", seqs: ok.map((a) => a.seq), deadline_ms: STARTED_DEADLINE_MS });
    const times = await next("times", STARTED_DEADLINE_MS + 30_000, "handler start times");

    const latency = [];
    const addMs = [];
    const lag = [];
    let missing = 0;
    let negative = 0;
    ok.forEach((a, i) => {
      if (a.seq < warmup) return;
      const start = times.starts[i];
      addMs.push(a.returned - a.started);
      lag.push(a.started - a.scheduled);
      if (start === null) { missing += 1; return; }
      const ms = start - a.returned;
      if (ms < 0) negative += 1;
      latency.push(ms);
    });
    const measuredAdds = adds.filter((a) => a.seq >= warmup);
    const first = measuredAdds.reduce((m, a) => Math.min(m, a.scheduled), Infinity);
    const last = measuredAdds.reduce((m, a) => Math.max(m, a.returned), -Infinity);
    const addFailures = measuredAdds.length - addMs.length;
    const achieved = measuredAdds.length / ((last - first) / 1000);
    emit({
      event: "latency", peer: "graphile-worker", version, rate, seconds: measuredSeconds,
      warmup_seconds: warmupSeconds, jobs: latency.length, missing,
      latency_ms: summary(latency),
      // Handler started before the producer saw its addJob return (the worker was woken by
      // the commit's NOTIFY while the answer was still on its way).
      negative,
      add_failures: addFailures,
      add_ms: summary(addMs),
      schedule_lag_ms: summary(lag),
      // Measured adds over (last add returned - first add's tick): below `rate` when the adds
      // fell behind their ticks (add_ms then holds the wait for a pooled connection).
      achieved_add_rate: Math.round(achieved * 10) / 10,
      producer_cpu_s: round3(producerCpu), // the producer's CPU while adding
      worker_cpu_s: round3(times.cpu_s), // the worker process's, from its start to the last start
      worker_started_total: times.started_total,
      settings,
    });
    if (achieved < 0.95 * rate) {
      process.stderr.write(`graphile_latency.js: offered ${rate} adds/s, achieved ${achieved.toFixed(1)}/s: `
        + `the adds fell behind their ticks (add_ms p50 ${summary(addMs).p50} ms, ${producerPool} connections)\n`);
    }
    if (missing > 0) {
      failed = true;
      process.stderr.write(`graphile_latency.js: ${missing} of ${addMs.length} measured jobs not started `
        + `${STARTED_DEADLINE_MS / 1000} s after the last add returned\n`);
    }
  } finally {
    if (child) await stopWorker(child);
    await utils.release();
  }
  return failed ? 1 : 0;
}

if (process.argv[2] === "worker") {
  worker().catch((e) => {
    process.stderr.write(`graphile_latency.js worker: ${e.stack || e}\n`);
    try { process.send({ type: "error", message: String(e.message || e) }); } catch {}
    process.exit(1);
  });
} else {
  producer().then((code) => process.exit(code), (e) => {
    process.stderr.write(`graphile_latency.js: ${e.stack || e}\n`);
    process.exit(1);
  });
}

'use strict';
// Hot path under sustained load (issue 16): `hot_dropped` <= 1% of committed jobs while an
// Express app's database layer (knex on better-sqlite3) commits about 1,500 transactions/s on a
// SQLite file, through the installed package (release addon, pack.sh).
//
// What runs: knex with better-sqlite3 on a SQLite file (`PRAGMA journal_mode=WAL` first, as the
// Django and Rails soaks and the relay do), the outbox table from `ojs.migrate()`, the real
// `ojs-devserver` binary (release) as the backend, and `createOjs({ url, knex })` with the
// default relay configuration: on SQLite the relay runs in the package's relay host process
// (docs/express.md, "SQLite"), and wake-ups cross to it over the IPC channel, bounded by
// `relay.hot_queue_capacity` in this process too.
//
// The load: OJS_SOAK_TPS transactions/s (1500) on a fixed schedule (transaction i is due at
// i / rate; late ones start at once, so the schedule catches up) for OJS_SOAK_SECONDS (60).
// Between two transactions the loop yields to the event loop (a timer when ahead of the
// schedule, `setImmediate` when behind), as a server does between requests. Each transaction is
// `knex.transaction(trx => ojs.enqueueAfterCommit(trx, ...))` of one job or, one in
// OJS_SOAK_BULK_EVERY (50), `ojs.enqueueBulk(trx, jobs)` of OJS_SOAK_BULK_SIZE (100). Every
// OJS_SOAK_CHECKPOINT_S (5) s it counts the rows still waiting through knex
// (`status IN ('pending', 'failed')`) and reads `ojs.metrics()`.
//
// After the load it waits (polling `/_dev/stats`; deadline OJS_SOAK_DRAIN_TIMEOUT_S, 600) until
// the devserver holds every committed job, reads `hot_dropped` from the relay's Prometheus text
// (`ojs_relay_wakeups_dropped_total`) and `wakeup_dropped` (ids this process did not get to the
// relay host) from `ojs.metrics()`, compares the devserver's ids with the committed ids, and
// prints the result (met / not met against <= 1% for both drops together) and one line of JSON
// prefixed `SOAK_JSON `. Exit status 0 when every committed job was delivered, 1 otherwise.
//
// Run through scripts/soak.sh (copies this file into target/node-pkg/app and runs it there).

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep, setImmediate: nextTurn } = require('node:timers/promises');

const knexLib = require('knex');
const { createOjs } = require('ojs-adapter-express');

const RATE = Number(process.env.OJS_SOAK_TPS || 1500);
const SECONDS = Number(process.env.OJS_SOAK_SECONDS || 60);
const BULK_EVERY = Number(process.env.OJS_SOAK_BULK_EVERY || 50);
const BULK_SIZE = Number(process.env.OJS_SOAK_BULK_SIZE || 100);
const CHECKPOINT_S = Number(process.env.OJS_SOAK_CHECKPOINT_S || 5);
const DRAIN_TIMEOUT_S = Number(process.env.OJS_SOAK_DRAIN_TIMEOUT_S || 600);
const VERIFY_IDS = process.env.OJS_SOAK_VERIFY_IDS !== '0';
// For diagnosis only (the soak's result is with neither): createOjs options merged in (JSON with
// "outbox" and "relay" sections, e.g. '{"relay": {"hot_queue_capacity": 100000}}') and a PRAGMA
// synchronous for the app's connection (e.g. NORMAL).
const EXTRA_CONFIG = JSON.parse(process.env.OJS_SOAK_CONFIG || '{}');
const APP_SYNCHRONOUS = process.env.OJS_SOAK_APP_SYNCHRONOUS;
const TARGET = 0.01;
const TABLE = 'ojs_outbox'; // the default table
// This file runs from target/node-pkg/app (scripts/soak.sh copies it there) or from bench/.
const REPO = process.env.OJS_REPO_ROOT
  || (__dirname.endsWith(path.join('target', 'node-pkg', 'app')) ? path.resolve(__dirname, '../../..') : path.resolve(__dirname, '../..'));
const DEVSERVER = process.env.OJS_DEVSERVER_BIN || path.join(REPO, 'target', 'release', 'ojs-devserver');
const { spawnDevserver } = require(path.join(REPO, 'bindings-node', 'test', 'devserver.js'));

const say = (...parts) => console.log('soak[express]:', ...parts);

// -- the devserver ---------------------------------------------------------------------------------

async function startDevserver() {
  if (!fs.existsSync(DEVSERVER)) throw new Error(`${DEVSERVER} is missing: cargo build --release -p ojs-devserver`);
  const { child, url } = await spawnDevserver(DEVSERVER, 'ignore');
  process.on('exit', () => child.kill('SIGTERM')); // also when the run fails
  const get = async (route) => (await fetch(`${url}${route}`)).json();
  const stop = () => new Promise((resolve) => {
    child.once('exit', resolve);
    child.kill('SIGTERM');
  });
  return { url, pid: child.pid, get, stop };
}

// -- CPU and load of the machine --------------------------------------------------------------------

const TICK = 100; // USER_HZ: /proc counts in 1/100 s on Linux

function machineBusyS() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f;
  return (user + nice + system + irq + softirq + steal) / TICK;
}

function processCpuS(pid) {
  if (!pid) return 0;
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').pop().trim().split(/\s+/);
    return (Number(fields[11]) + Number(fields[12])) / TICK;
  } catch {
    return 0;
  }
}

function threadsCpuS(pid) {
  const out = new Map();
  if (!pid) return out;
  let tids = [];
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const text = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = text.slice(text.indexOf('(') + 1, text.lastIndexOf(')'));
      const fields = text.slice(text.lastIndexOf(')') + 1).trim().split(/\s+/);
      out.set(`${tid}\0${name}`, (Number(fields[11]) + Number(fields[12])) / TICK);
    } catch {
      // the thread ended
    }
  }
  return out;
}

function threadDelta(before, after) {
  const byName = {};
  for (const [key, value] of after) {
    const name = key.split('\0')[1];
    byName[name] = (byName[name] || 0) + value - (before.get(key) || 0);
  }
  return Object.fromEntries(Object.entries(byName).filter(([, v]) => v >= 0.05)
    .sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, Math.round(v * 100) / 100]));
}

// -- Prometheus text ------------------------------------------------------------------------------

function prometheusSamples(text) {
  const samples = new Map();
  for (const line of (text || '').split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

function sample(samples, name) {
  for (const [key, value] of samples) if (key === name || key.startsWith(`${name}{`)) return value;
  return null;
}

function histogramQuantile(samples, name, q) {
  const buckets = [];
  for (const [key, value] of samples) {
    if (!key.startsWith(`${name}_bucket{`)) continue;
    const le = key.split(',le="')[1].split('"')[0];
    buckets.push([le === '+Inf' ? Infinity : Number(le), value]);
  }
  buckets.sort((a, b) => a[0] - b[0]);
  if (buckets.length === 0 || buckets[buckets.length - 1][1] === 0) return null;
  const total = buckets[buckets.length - 1][1];
  for (const [bound, count] of buckets) if (count >= q * total) return bound === Infinity ? '+Inf' : bound;
  return null;
}

function relaySummary(text) {
  const s = prometheusSamples(text);
  const out = {
    hot_dropped: sample(s, 'ojs_relay_wakeups_dropped_total') || 0,
    sent: sample(s, 'ojs_relay_jobs_sent_total') || 0,
  };
  for (const phase of ['claim', 'send', 'settle']) {
    const count = sample(s, `ojs_relay_${phase}_duration_seconds_count`) || 0;
    const total = sample(s, `ojs_relay_${phase}_duration_seconds_sum`) || 0;
    out[`${phase}_count`] = count;
    out[`${phase}_mean_ms`] = count ? Math.round((1e6 * total) / count) / 1000 : null;
  }
  out.delivery_lag_p50_le_s = histogramQuantile(s, 'ojs_relay_delivery_lag_seconds', 0.5);
  out.delivery_lag_p99_le_s = histogramQuantile(s, 'ojs_relay_delivery_lag_seconds', 0.99);
  return out;
}

function percentile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : null;
}
const round = (v, digits) => (v === null || v === undefined ? v : Math.round(v * 10 ** digits) / 10 ** digits);

// -- the run -----------------------------------------------------------------------------------

async function main() {
  const devserver = await startDevserver();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ojs-node-soak-'));
  const file = path.join(work, 'soak.db');
  const knex = knexLib({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true });
  await knex.raw('PRAGMA journal_mode=WAL');
  if (APP_SYNCHRONOUS) await knex.raw(`PRAGMA synchronous=${APP_SYNCHRONOUS}`);
  // Every setting but the backend URL: the core's default (unless OJS_SOAK_CONFIG).
  const ojs = createOjs({ url: devserver.url, knex, autoStart: false, ...EXTRA_CONFIG });
  await ojs.migrate();
  await ojs.start();
  if ((await ojs.metrics()) === null) throw new Error('no relay runs for this adapter');
  const hostPid = ojs.relayHostPid;
  // Read after the migration's transaction: better-sqlite3 builds SQLite with
  // SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, which applies once the connection works on the WAL file
  // (read right after `journal_mode=WAL` it still says FULL).
  const [{ synchronous }] = await knex.raw('PRAGMA synchronous');
  const appSynchronous = ['OFF', 'NORMAL', 'FULL', 'EXTRA'][synchronous];

  const pendingRows = async () => {
    const [row] = await knex(TABLE).whereIn('status', ['pending', 'failed']).count({ n: '*' });
    return Number(row.n);
  };

  const nTx = Math.floor(RATE * SECONDS);
  const bulks = Math.floor(nTx / BULK_EVERY);
  const singles = nTx - bulks;
  const pkg = require('ojs-adapter-express/package.json');
  say(`ojs-adapter-express ${pkg.version}, knex ${require('knex/package.json').version}, better-sqlite3 `
    + `${require('better-sqlite3/package.json').version}, Node ${process.version}, SQLite file ${file} (WAL), `
    + `devserver ${devserver.url} (${DEVSERVER}); relay in the relay host process ${hostPid}`);
  say(`offering ${RATE} tx/s for ${SECONDS} s: ${nTx} transactions = ${singles} x 1 job + ${bulks} x ${BULK_SIZE} `
    + `jobs (one in ${BULK_EVERY}) = ${singles + bulks * BULK_SIZE} jobs, ${Math.round((singles + bulks * BULK_SIZE) / SECONDS)} `
    + `jobs/s; relay config: ${Object.keys(EXTRA_CONFIG).length ? JSON.stringify(EXTRA_CONFIG) : 'the default'}; `
    + `the app's connection: synchronous=${appSynchronous}`);

  const committedIds = [];
  const commitAt = []; // wall clock (ms) per transaction
  const txOfJob = [];
  const scheduleLag = new Float64Array(nTx);
  const txMs = new Float64Array(nTx);
  const checkpoints = [];
  const periodMs = 1000 / RATE;
  const now = () => performance.now();

  const loadBefore = os.loadavg();
  const busy0 = machineBusyS();
  const self0 = processCpuS(process.pid);
  const host0 = processCpuS(hostPid);
  const dev0 = processCpuS(devserver.pid);
  const threads0 = threadsCpuS(process.pid);
  const hostThreads0 = threadsCpuS(hostPid);
  const started = now();
  let nextCheckpoint = started + CHECKPOINT_S * 1000;
  const end = started + SECONDS * 1000;
  let i = 0;
  const checkpoint = async (t) => {
    const metrics = (await ojs.metrics()) || {};
    const point = {
      t_s: round((t - started) / 1000, 1), tx: i, jobs: committedIds.length, pending_rows: await pendingRows(),
      hot_dropped: metrics.hot_dropped, wakeup_dropped: metrics.wakeup_dropped, sent: metrics.sent,
    };
    checkpoints.push(point);
    return point;
  };
  while (i < nTx) {
    const due = started + i * periodMs;
    let t = now();
    if (t < due) {
      // Timers have 1 ms resolution: sleep whole milliseconds, then run what is due.
      if (due - t >= 1) await sleep(Math.floor(due - t));
      else await nextTurn();
      t = now();
      if (t < due) continue;
    } else {
      await nextTurn(); // a server handles one request per turn of the event loop
      t = now();
    }
    if (t >= end) break; // the duration is over: what the app could not start in it is not offered later
    scheduleLag[i] = t - due;
    let ids;
    if ((i + 1) % BULK_EVERY === 0) {
      const jobs = Array.from({ length: BULK_SIZE }, (_, k) => ({ type: 'soak.bulk', args: [i, k] }));
      ids = await knex.transaction((trx) => ojs.enqueueBulk(trx, jobs));
    } else {
      const n = i;
      ids = [await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'soak.single', [n]))];
    }
    const done = now();
    txMs[i] = done - t;
    commitAt.push(Date.now());
    for (const id of ids) {
      committedIds.push(id);
      txOfJob.push(i);
    }
    i += 1;
    if (done >= nextCheckpoint) {
      say('checkpoint', JSON.stringify(await checkpoint(done)));
      nextCheckpoint += CHECKPOINT_S * 1000;
    }
  }
  const loadSeconds = (now() - started) / 1000;
  const busy1 = machineBusyS();
  const self1 = processCpuS(process.pid);
  const host1 = processCpuS(hostPid);
  const dev1 = processCpuS(devserver.pid);
  const threads1 = threadsCpuS(process.pid);
  const hostThreads1 = threadsCpuS(hostPid);
  const loadAfter = os.loadavg();
  say('end of load', JSON.stringify(await checkpoint(now())));

  // Wait for the devserver to hold every committed job (a condition, polled).
  const jobsCommitted = committedIds.length;
  const drainStarted = now();
  let stats;
  for (;;) {
    stats = await devserver.get('/_dev/stats');
    if (stats.jobs >= jobsCommitted || now() - drainStarted > DRAIN_TIMEOUT_S * 1000) break;
    await sleep(100);
  }
  const drainSeconds = (now() - drainStarted) / 1000;
  say(`devserver holds ${stats.jobs} of ${jobsCommitted} jobs, ${drainSeconds.toFixed(1)} s after the load`);

  const relay = relaySummary(await ojs.metricsText());
  const metrics = await ojs.metrics();
  const rowsByStatus = Object.fromEntries(
    (await knex(TABLE).select('status').count({ n: '*' }).groupBy('status')).map((r) => [r.status, Number(r.n)]),
  );
  let missing = null;
  let latency = {};
  if (VERIFY_IDS) {
    const received = await devserver.get('/_dev/received');
    const at = new Map();
    for (const job of received.jobs) at.set(job.id, job.received_at_us);
    missing = 0;
    const lags = [];
    for (let k = 0; k < committedIds.length; k += 1) {
      const us = at.get(committedIds[k]);
      if (us === undefined) missing += 1;
      else lags.push(us / 1000 - commitAt[txOfJob[k]]);
    }
    lags.sort((a, b) => a - b);
    latency = {
      p50_ms: round(percentile(lags, 0.5), 1), p90_ms: round(percentile(lags, 0.9), 1),
      p99_ms: round(percentile(lags, 0.99), 1), max_ms: round(lags[lags.length - 1], 1),
      over_1s_share: round(lags.filter((v) => v > 1000).length / Math.max(1, lags.length), 4),
    };
  }
  await ojs.close();
  const devserverCpu = processCpuS(devserver.pid) - dev0;
  await devserver.stop();
  await knex.destroy();

  const delivered = stats.jobs;
  const hotDropped = relay.hot_dropped;
  const wakeupDropped = metrics.wakeup_dropped;
  const dropped = hotDropped + wakeupDropped;
  const share = jobsCommitted ? dropped / jobsCommitted : 0;
  const noLoss = delivered === jobsCommitted && (missing === null || missing === 0);
  const met = share <= TARGET;
  const lagSorted = Array.from(scheduleLag.subarray(0, i)).sort((a, b) => a - b);
  const txSorted = Array.from(txMs.subarray(0, i)).sort((a, b) => a - b);
  const selfCpu = self1 - self0;
  const hostCpu = host1 - host0;
  const result = {
    binding: 'express', framework: `knex ${require('knex/package.json').version} + better-sqlite3`,
    offered_tps: RATE, seconds: SECONDS, bulk_every: BULK_EVERY, bulk_size: BULK_SIZE,
    tx_committed: i, single_tx: i - Math.floor(i / BULK_EVERY), bulk_tx: Math.floor(i / BULK_EVERY),
    jobs_committed: jobsCommitted, load_seconds: round(loadSeconds, 2),
    achieved_tps: round(i / loadSeconds, 1), achieved_jobs_per_s: round(jobsCommitted / loadSeconds, 1),
    hot_dropped: hotDropped, wakeup_dropped: wakeupDropped, hot_dropped_metrics_call: metrics.hot_dropped,
    dropped_total: dropped, hot_dropped_share: round(share, 5),
    max_pending_rows: Math.max(...checkpoints.map((p) => p.pending_rows)),
    checkpoints,
    delivered, missing_ids: missing, delivered_equals_committed: noLoss,
    deliveries: stats.deliveries, drain_seconds_after_load: round(drainSeconds, 2),
    rows_by_status: rowsByStatus,
    commit_to_received: latency,
    schedule_lag_ms: { p50: round(percentile(lagSorted, 0.5), 2), p99: round(percentile(lagSorted, 0.99), 2), max: round(lagSorted[lagSorted.length - 1], 1) },
    tx_ms: { p50: round(percentile(txSorted, 0.5), 3), p99: round(percentile(txSorted, 0.99), 3), max: round(txSorted[txSorted.length - 1], 1) },
    relay,
    cpu_s: {
      app_process: round(selfCpu, 2), relay_host: round(hostCpu, 2), devserver: round(dev1 - dev0, 2),
      devserver_incl_drain: round(devserverCpu, 2),
      other: round(busy1 - busy0 - selfCpu - hostCpu - (dev1 - dev0), 2),
      machine_capacity: round(loadSeconds * os.cpus().length, 1),
      app_threads: threadDelta(threads0, threads1), relay_host_threads: threadDelta(hostThreads0, hostThreads1),
    },
    loadavg_before: loadBefore.map((v) => round(v, 2)), loadavg_after: loadAfter.map((v) => round(v, 2)),
    target: TARGET, met,
    extra_config: EXTRA_CONFIG, app_synchronous: appSynchronous,
  };
  console.log();
  console.log(`Express soak: ${i} transactions, ${jobsCommitted} jobs committed in ${loadSeconds.toFixed(1)} s `
    + `(${result.achieved_tps} tx/s of ${RATE} offered, ${result.achieved_jobs_per_s} jobs/s)`);
  console.log(`  hot_dropped            ${hotDropped} in the relay host + ${wakeupDropped} wake-ups dropped in the app = `
    + `${(100 * share).toFixed(2)}% of committed jobs (target <= ${100 * TARGET}%): ${met ? 'met' : 'NOT met'}`);
  console.log(`  max pending rows       ${result.max_pending_rows} (checkpoints every ${CHECKPOINT_S} s: `
    + `${checkpoints.map((p) => p.pending_rows).join(', ')})`);
  console.log(`  delivered              ${delivered} of ${jobsCommitted}${missing === null ? '' : `, ${missing} committed ids missing at the devserver`}: `
    + `${noLoss ? 'no job lost' : 'JOBS MISSING'} (${stats.deliveries} deliveries, drained ${drainSeconds.toFixed(1)} s after the load)`);
  if (VERIFY_IDS) {
    console.log(`  commit -> received     p50 ${latency.p50_ms} ms, p90 ${latency.p90_ms}, p99 ${latency.p99_ms}, `
      + `max ${latency.max_ms}; ${(100 * latency.over_1s_share).toFixed(1)}% over 1 s`);
  }
  console.log(`  relay rounds           claims ${relay.claim_count} (mean ${relay.claim_mean_ms} ms), sends ${relay.send_count} `
    + `(mean ${relay.send_mean_ms} ms), settles ${relay.settle_count} (mean ${relay.settle_mean_ms} ms); ${relay.sent} sent`);
  console.log(`  transaction            p50 ${result.tx_ms.p50} ms, p99 ${result.tx_ms.p99}, max ${result.tx_ms.max}; `
    + `schedule lag p99 ${result.schedule_lag_ms.p99} ms, max ${result.schedule_lag_ms.max}`);
  console.log(`  CPU s during the load  app ${result.cpu_s.app_process}, relay host ${result.cpu_s.relay_host}, devserver `
    + `${result.cpu_s.devserver}, other ${result.cpu_s.other} (of ${result.cpu_s.machine_capacity}); app threads `
    + `${JSON.stringify(result.cpu_s.app_threads)}; relay host threads ${JSON.stringify(result.cpu_s.relay_host_threads)}`);
  console.log(`  load average           ${JSON.stringify(result.loadavg_before)} before, ${JSON.stringify(result.loadavg_after)} after`);
  console.log(`SOAK_JSON ${JSON.stringify(result)}`);
  return noLoss ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);

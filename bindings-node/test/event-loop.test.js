'use strict';
// The event loop is not held while the database or the backend works for the adapter. The
// verdicts compare with what the test controls, never with how fast the machine is:
// - PostgreSQL, staging: the test holds a lock on the outbox table from a connection of its
//   own, so the INSERT of a 2000-job bulk waits in the database for as long as the test likes;
//   the loop must go on turning meanwhile (the test sees the INSERT waiting, then counts timer
//   ticks, and only then lets the lock go). A loop held by the INSERT could not do any of that;
//   the database ends the holder's transaction after WAIT_MS, and the test then fails. (On
//   SQLite better-sqlite3 runs every statement on the main thread: the driver's design.)
// - both databases, the drain: the backend (ojs-devserver, another process) holds the relay's
//   first request HOLD_MS; the largest gap between ticks of a 5 ms timer while the relay drains
//   must stay well under that hold. A loop that waited for the relay's sends would show a gap
//   of about one held request (the relay works on the core's threads, or in the relay host
//   process on SQLite).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const pg = require('pg');
const { ojsPackage, PG_URL, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs } = ojsPackage;

/** How long the backend holds the relay's first request (ms). */
const HOLD_MS = 3000;
const JOBS = 2000;

/** Largest gap between ticks of a 5 ms interval while `work` runs. */
async function maxTickGap(work) {
  let last = performance.now();
  let gap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    gap = Math.max(gap, now - last);
    last = now;
  }, 5);
  try {
    const result = await work();
    // A loop blocked until the end never ticked: count the time since the last tick too.
    return { gap: Math.max(gap, performance.now() - last), result };
  } finally {
    clearInterval(timer);
  }
}

const jobs = Array.from({ length: JOBS }, (_, i) => ({ type: 'report.row', args: [i, `row ${i}`] }));

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

test(`postgres: the event loop turns while the INSERT of a ${JOBS}-job enqueueBulk waits in the database`, async () => {
  const knex = postgresKnex();
  const table = 'node_loop_staging';
  await knex.schema.dropTableIfExists(table);
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
  const holder = new pg.Client({ connectionString: PG_URL });
  let ticks = 0;
  const timer = setInterval(() => (ticks += 1), 5);
  try {
    await ojs.migrate();
    await holder.connect();
    holder.on('error', () => {});
    // If the loop were held, nothing here could let the lock go: the server does, after WAIT_MS.
    await holder.query(`SET idle_in_transaction_session_timeout = ${Number(WAIT_MS)}`);
    await holder.query('BEGIN');
    await holder.query(`LOCK TABLE ${table} IN EXCLUSIVE MODE`);
    const staging = knex.transaction((trx) => ojs.enqueueBulk(trx, jobs));
    staging.catch(() => {});
    // Seen from another connection: the staging INSERT waits on the lock.
    await waitFor(async () => {
      const { rows } = await knex.raw(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE ?",
        [`%insert into%${table}%`],
      );
      return rows[0].n === 1;
    }, WAIT_MS, 'the staging INSERT waiting on the lock');
    const seen = ticks;
    await waitFor(() => ticks >= seen + 5, WAIT_MS, 'five timer ticks while the INSERT waits');
    await holder.query('COMMIT');
    const ids = await staging;
    assert.equal(ids.length, JOBS);
    assert.equal(Number((await knex(table).count({ n: '*' }))[0].n), JOBS);
  } finally {
    clearInterval(timer);
    await holder.end().catch(() => {});
    await ojs.close();
    await knex.destroy();
  }
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: a timer keeps ticking while the relay drains ${JOBS} jobs through a backend that holds its first request`, async () => {
    await backend.reset();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir('loop'), 'loop.db')) : postgresKnex();
    const table = `node_loop_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table, batchSize: 500 }, autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.start();
      await backend.call('POST', '/_dev/faults', { latency_ms: HOLD_MS, count: 1 });
      await knex.transaction(async (trx) => {
        await ojs.enqueueBulk(trx, jobs.slice(0, JOBS / 2));
        await ojs.enqueueBulk(trx, jobs.slice(JOBS / 2));
      });
      const started = performance.now();
      const { gap } = await maxTickGap(() =>
        waitFor(async () => (await backend.received()).jobs.length >= JOBS, WAIT_MS, 'relay drained'),
      );
      console.log(`${database}: max tick gap ${gap.toFixed(1)} ms while draining (${(performance.now() - started).toFixed(0)} ms, first request held ${HOLD_MS} ms)`);
      assert.ok(gap < HOLD_MS / 2, `the loop stood still for ${gap.toFixed(0)} ms while the backend held a request ${HOLD_MS} ms`);
      assert.equal((await backend.received()).jobs.length, JOBS);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

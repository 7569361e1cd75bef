'use strict';
// SQLite: the after-commit wake-up goes to the relay host process over the IPC channel, and
// `child.send` has no backpressure. With the host not reading (SIGSTOP), the wake-ups of many
// commits must not pile up in the application process: at most one message is being written,
// ids committed meanwhile wait coalesced up to `relay.hot_queue_capacity`, and the rest are
// dropped and counted (`ojs.wakeups`, `metrics().wakeup_dropped`). After SIGCONT every row is
// still delivered (the poller finds the dropped ones).
//
// The host is stopped at a moment it holds no SQLite lock: after SIGSTOP the test commits a
// probe row; if the stopped host held a lock the probe fails (SQLITE_BUSY), the host is
// continued and stopped again.

const { test, before, after } = require('node:test');
const { setImmediate: nextTurn } = require('node:timers/promises');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs } = ojsPackage;

const CAPACITY = 64;
const PER_COMMIT = 50;
/** Commits allowed to fill the kernel's socket buffers before the channel is stuck. */
const MAX_COMMITS = 4000;
/** Commits made while the channel is stuck, none of which may send or grow the queue. */
const STUCK_COMMITS = 30;

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

test('sqlite: wake-ups to a relay host that does not read stay bounded, drops are counted, every row is delivered', async () => {
  await backend.reset();
  const knex = sqliteKnex(path.join(scratchDir('wakeup-bound'), 'app.db'));
  const table = 'node_wakeup_bound';
  await knex.schema.createTable('probe', (tb) => tb.integer('n'));
  const ojs = createOjs({
    url: backend.url,
    knex,
    outbox: { tableName: table },
    relay: { hotQueueCapacity: CAPACITY },
    autoStart: false,
    handleSignals: false,
  });
  let stopped = null;
  try {
    await ojs.migrate();
    await ojs.start();
    assert.equal(ojs.wakeups.capacity, CAPACITY, "the core's relay.hot_queue_capacity");
    const ids = [];
    const commit = async (n) => {
      const jobs = Array.from({ length: n }, (_, i) => ({ type: 'wake.job', args: [ids.length + i] }));
      const staged = await knex.transaction((trx) => ojs.enqueueBulk(trx, jobs));
      ids.push(...staged);
    };
    // The host runs and relays.
    await commit(1);
    await waitFor(async () => (await ojs.status()).sent === 1, WAIT_MS, 'the first row sent');
    const pid = ojs.relayHostPid;
    assert.ok(pid > 0, 'a relay host process');

    // Stop the host while it holds no lock on the file.
    await waitFor(async () => {
      process.kill(pid, 'SIGSTOP');
      stopped = pid;
      try {
        await knex.transaction((trx) => trx('probe').insert({ n: 1 }));
        return true;
      } catch {
        process.kill(pid, 'SIGCONT');
        stopped = null;
        return false;
      }
    }, WAIT_MS, 'the relay host stopped outside a write');

    // Commit until the channel is stuck: a window of STUCK_COMMITS commits during which no
    // wake-up is written (sent stays), while ids keep arriving.
    let maxPending = 0;
    let window = null;
    let commits = 0;
    const observe = () => {
      const state = ojs.wakeups;
      maxPending = Math.max(maxPending, state.pending);
      assert.equal(state.sent + state.pending + state.dropped, ids.length, 'every committed id is sent, pending or dropped');
      return state;
    };
    for (;;) {
      assert.ok(commits < MAX_COMMITS, `the channel never got stuck in ${MAX_COMMITS} commits: ${JSON.stringify(ojs.wakeups)}`);
      await commit(PER_COMMIT);
      commits += 1;
      // As between an application's requests: the event loop turns, so a wake-up message
      // the host's socket took completes (better-sqlite3 alone never yields to it).
      await nextTurn();
      const state = observe();
      if (!state.sending) {
        window = null;
        continue;
      }
      if (window === null || window.sent !== state.sent) {
        window = { sent: state.sent, commits: 0 };
        continue;
      }
      window.commits += 1;
      if (window.commits >= STUCK_COMMITS) break;
    }
    const stuck = observe();
    console.log(`wake-ups after ${commits} commits of ${PER_COMMIT}: ${JSON.stringify(stuck)}; max pending ${maxPending}`);
    assert.equal(stuck.pending, CAPACITY, 'the waiting ids are capped');
    assert.ok(maxPending <= CAPACITY, `pending reached ${maxPending}`);
    assert.ok(stuck.dropped >= STUCK_COMMITS * PER_COMMIT - CAPACITY, `dropped ${stuck.dropped}`);
    assert.equal(stuck.sent, window.sent, `no wake-up handed to the channel during ${STUCK_COMMITS} commits`);
    assert.equal(stuck.sending, true, 'the one message in flight has not completed');

    process.kill(pid, 'SIGCONT');
    stopped = null;
    await waitFor(async () => {
      const status = await ojs.status();
      return status.sent === ids.length && status.pending === 0 && status.failed === 0 && !status.in_flight;
    }, WAIT_MS * 2, `all ${ids.length} rows sent`);
    const rows = await ojs.outboxRows(ids);
    assert.equal(Object.keys(rows).length, ids.length);
    assert.ok(Object.values(rows).every((row) => row.status === 'sent'));
    const received = new Set((await backend.received()).jobs.map((job) => job.id));
    assert.ok(ids.every((id) => received.has(id)), 'the backend has every job');
    const metrics = await ojs.metrics();
    assert.ok(metrics.wakeup_dropped >= stuck.dropped, `metrics().wakeup_dropped ${metrics.wakeup_dropped}`);
    assert.equal(metrics.wakeup_pending, 0, 'nothing waits once the host reads again');
    assert.equal(typeof metrics.hot_dropped, 'number', "the core's own count is still there");
  } finally {
    if (stopped !== null) process.kill(stopped, 'SIGCONT');
    await ojs.close();
    await knex.destroy();
  }
});

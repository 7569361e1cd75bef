'use strict';
// Issue 26: under a pre-fork server each worker runs its own relay and its own events mount.
// Before the table's event log, a mount served only the events of its own process's relay (an
// Express mount under `cluster` saw 5 of 10 jobs). Here two `cluster` workers each commit 5
// jobs, each with its own in-process relay, and each worker's mount (on a port of its own) must
// show the job.enqueued of all 10, each once, whichever worker's relay delivered it.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS, PG_URL } = require('./support');

const { createOjs } = ojsPackage;
const APP = path.join(__dirname, 'fixtures', 'cluster-events-app.js');

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/** An SSE stream; `events` fills with each frame's parsed data; `close()` hangs up. */
function openStream(port) {
  return new Promise((resolve, reject) => {
    const headers = { accept: 'text/event-stream', 'x-caller': 'operator' };
    const req = http.get({ host: '127.0.0.1', port, path: '/ojs/v1/events/stream?types=job.enqueued', headers }, (res) => {
      const stream = { status: res.statusCode, events: [], close: () => req.destroy() };
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const data = buffer.slice(0, end).split('\n').find((line) => line.startsWith('data:'));
          buffer = buffer.slice(end + 2);
          if (data !== undefined) stream.events.push(JSON.parse(data.slice(5)));
        }
      });
      resolve(stream);
    });
    req.on('error', (error) => (error.code === 'ECONNRESET' ? null : reject(error)));
  });
}

const timesSeen = (stream, id) => stream.events.filter((e) => e.type === 'job.enqueued' && e.subject === id).length;

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: under cluster, every worker's events mount shows every job of the table once, whichever worker delivered it`, async () => {
    await backend.reset();
    const dir = scratchDir(`cluster-events-${database}`);
    const file = path.join(dir, 'app.db');
    const knex = database === 'sqlite' ? sqliteKnex(file) : postgresKnex();
    const table = `node_cluster_events_${database}`;
    await knex.schema.dropTableIfExists(table);
    // The test's own adapter: the migration, and a last job after the workers' (no relay here).
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
    await ojs.migrate();
    const go = path.join(dir, 'GO');
    fs.rmSync(go, { force: true });
    const env = {
      ...process.env,
      OJS_URL: backend.url,
      OJS_TABLE: table,
      GO_FILE: go,
      JOBS: '5',
      ...(database === 'sqlite' ? { DATABASE_FILE: file } : { DATABASE_URL: PG_URL }),
    };
    const child = spawn(process.execPath, [APP], { stdio: ['ignore', 'pipe', 'pipe'], env, detached: true });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const streams = [];
    try {
      const ports = await waitFor(() => {
        if (child.exitCode !== null) throw new Error(`the primary exited early\n${output}`);
        const found = [...output.matchAll(/worker \d+ port (\d+)/g)].map((m) => Number(m[1]));
        return found.length === 2 ? found : false;
      }, WAIT_MS, 'both workers listening');
      for (const port of ports) streams.push(await openStream(port));
      for (const stream of streams) assert.equal(stream.status, 200);
      fs.writeFileSync(go, '');
      const ids = await waitFor(() => {
        const found = [...output.matchAll(/worker \d+ committed (\S+)/g)];
        return found.length === 2 ? found.flatMap((m) => m[1].split(',')) : false;
      }, WAIT_MS, 'both workers committed');
      assert.equal(new Set(ids).size, 10);
      // A last job, committed after theirs: once each stream has it, the workers' jobs' events
      // are in the log before it, and a second event about one of them would have come too.
      const last = await ojs.enqueueAfterCommit(knex, 'email.welcome', ['last']);
      for (const [i, stream] of streams.entries()) {
        await waitFor(() => timesSeen(stream, last) === 1 && ids.every((id) => timesSeen(stream, id) >= 1), WAIT_MS,
          `worker ${i}'s mount shows all 11 jobs`);
      }
      for (const [i, stream] of streams.entries()) {
        for (const id of ids) assert.equal(timesSeen(stream, id), 1, `job ${id} on worker ${i}'s mount`);
      }
      // Both workers' relays delivered; each job reached the backend once.
      const received = (await backend.received()).jobs;
      for (const id of [...ids, last]) assert.equal(received.filter((job) => job.id === id).length, 1, `job ${id} at the backend once`);
    } catch (error) {
      const seen = streams.map((stream) => stream.events.filter((e) => e.type === 'job.enqueued').map((e) => e.subject));
      error.message += `\nevents seen by each mount: ${JSON.stringify(seen)}\napplication output:\n${output}`;
      throw error;
    } finally {
      for (const stream of streams) stream.close();
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      await ojs.close();
      await knex.destroy();
    }
  });
}

'use strict';
// Events, metrics and health (issues 15 and 28) end to end, on SQLite and PostgreSQL:
// - `ojs.router()` mounted in a real Express server on port 0 and called over HTTP, every
//   answer the core's surface (`Bridge::surface`): a committed job's job.enqueued arrives on
//   the SSE stream; authorize false is 403 with the core's body; a tenant-scoped caller sees
//   only its tenant (and may not ask for another, nor widen its scope through the query: a
//   parameter given twice is 400, `tenant[]` is not `tenant`, an empty tenant from authorize is
//   an error, not every tenant); what authorize returned is never quoted in a message (it may
//   hold a token); /readyz, /healthz (authorize not asked); another path passed on to the app, a wrong
//   method 405, HEAD without a body; a client that goes away releases the core's subscription
//   (its stream thread ends); a stream starts with a keep-alive comment and gets another after
//   15 s without an event;
// - the Codec Server under the mount (with `encryption`): encode then decode gives the payload
//   back, with or without a body parser in front; a tenant 403, a body over 1 MiB 413, no
//   encryption 404;
// - `/metrics` parsed by a Prometheus text-format parser (parse-prometheus-text-format, pinned
//   in package.json), its counters equal to the outbox's counts after a drain;
// - `ojs.subscribeEvents()` against the devserver's stream: N jobs, every stream dropped by the
//   devserver, M more jobs: exactly the N+M job ids in order, no event twice; `break` closes it;
// - bad options: typed errors naming the option.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const express = require('express');
const parsePrometheus = require('parse-prometheus-text-format');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs, InvalidConfigError, OJSError } = ojsPackage;

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

/** An adapter on a fresh outbox table of `database`, its relay running. */
async function adapter(database, name, options = {}) {
  const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`${name}-${database}`), 'app.db')) : postgresKnex();
  const table = `node_${name}_${database}`;
  await knex.schema.dropTableIfExists(table);
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, handleSignals: false, ...options });
  await ojs.migrate();
  await ojs.ready;
  return { ojs, knex, table };
}

/** Threads of `pid` whose name is `name` (the addon names each stream's thread). */
function threadsNamed(pid, name) {
  return fs
    .readdirSync(`/proc/${pid}/task`)
    .filter((tid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() === name;
      } catch {
        return false;
      }
    }).length;
}

/**
 * `method` `route` with `headers` (and a request `body`, text); resolves with `{ status,
 * headers, body }` (body parsed when JSON).
 */
function request(port, method, route, headers = {}, body = undefined) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: route, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => {
        let parsed = text;
        if (text !== '' && (res.headers['content-type'] || '').startsWith('application/json')) parsed = JSON.parse(text);
        resolve({ status: res.statusCode, headers: res.headers, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const get = (port, route, headers = {}) => request(port, 'GET', route, headers);

/**
 * Opens an SSE stream; resolves once the response headers came (the server has subscribed by
 * then). `events` fills as frames arrive (each frame's data line parsed); `close()` hangs up.
 */
function openStream(port, route, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: route, headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      const stream = { status: res.statusCode, headers: res.headers, events: [], comments: 0, ended: false, close: () => req.destroy() };
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame.split('\n').find((line) => line.startsWith('data:'));
          if (data !== undefined) stream.events.push(JSON.parse(data.slice(5)));
          else if (frame.startsWith(':')) stream.comments += 1;
        }
      });
      res.on('end', () => (stream.ended = true));
      res.on('error', () => (stream.ended = true));
      resolve(stream);
    });
    req.on('error', (error) => (error.code === 'ECONNRESET' ? null : reject(error)));
  });
}

/** The Express app of the tests: the router at /ojs; `x-caller` says who calls (authorize, async). */
async function serve(ojs) {
  const app = express();
  app.use(
    '/ojs',
    ojs.router({
      authorize: async (req) => {
        const caller = req.get('x-caller') || '';
        if (caller === 'operator') return true;
        if (caller.startsWith('tenant:')) return { tenant: caller.slice('tenant:'.length) };
        return false;
      },
    }),
  );
  // A synchronous authorize, and one that returns nothing usable (a forgotten `return`).
  app.use('/sync', ojs.router({ authorize: (req) => req.get('x-caller') === 'operator' }));
  app.use('/broken', ojs.router({ authorize: () => undefined }));
  // An empty tenant (a user without one, say) would filter nothing; a user record returned by
  // mistake carries a token.
  app.use('/empty', ojs.router({ authorize: () => ({ tenant: '' }) }));
  app.use('/leaky', ojs.router({ authorize: () => ({ id: 7, token: 'secret-token-123' }) }));
  // Mounted at the root beside the application's own routes: those stay the application's.
  app.use(ojs.router({ authorize: () => false }));
  app.get('/hello', (req, res) => res.type('text/plain').send('the app\n'));
  // The application's error handler sees what the router passed on.
  app.use((error, req, res, next) => {
    res.status(500).json({ name: error.name, code: error.code, field: error.field, message: error.message });
  });
  const server = await new Promise((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  return { server, port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function commitJob(ojs, type, args, context) {
  const work = () => ojs.transaction(async (trx) => ojs.enqueueAfterCommit(trx, type, args));
  return context ? ojs.withContext(context, work) : work();
}

const OPERATOR = { 'x-caller': 'operator' };

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: ojs.router() serves the relay's events, metrics and health over HTTP`, async (t) => {
    await backend.reset();
    const { ojs, knex, table } = await adapter(database, 'router');
    const http_ = await serve(ojs);
    const { port } = http_;
    const relayPid = ojs.relayHostPid ?? process.pid;
    // Open through every subtest, on a type that never comes: the keep-alive comment's stream.
    const quiet = await openStream(port, '/ojs/v1/events/stream?types=ojs.relay.paused', OPERATOR);
    try {
      await t.test('authorize false: 403 on the stream, /metrics and /readyz; /healthz answers anyone', async () => {
        for (const route of ['/ojs/v1/events/stream', '/ojs/metrics', '/ojs/readyz']) {
          const answer = await get(port, route, { 'x-caller': 'nobody' });
          assert.equal(answer.status, 403, route);
          assert.deepEqual(answer.body, { error: { code: 'forbidden', message: 'this caller may not read this surface' } }, route);
        }
        const health = await get(port, '/ojs/healthz');
        assert.equal(health.status, 200);
        assert.match(health.headers['content-type'], /^text\/plain/);
        assert.equal(health.body, 'ok\n');
        // authorize is not asked for /healthz: one that cannot answer does not matter there.
        const unasked = await get(port, '/broken/healthz');
        assert.equal(unasked.status, 200);
        assert.equal(unasked.body, 'ok\n');
      });

      await t.test('another path is passed on to the application, a wrong method 405, HEAD without a body', async () => {
        // A router on the root answers only the surface's paths.
        const app = await get(port, '/hello');
        assert.equal(app.status, 200);
        assert.equal(app.body, 'the app\n');
        const rootMetrics = await get(port, '/metrics');
        assert.equal(rootMetrics.status, 403, 'the root router still guards its own paths');
        // Under /ojs, a path that is not the surface's falls through to Express's 404.
        const unknown = await get(port, '/ojs/nope', OPERATOR);
        assert.equal(unknown.status, 404);
        const post = await request(port, 'POST', '/ojs/metrics', OPERATOR, '{}');
        assert.equal(post.status, 405);
        assert.equal(post.body.error.code, 'method_not_allowed');
        assert.match(post.body.error.message, /GET only/);
        const head = await request(port, 'HEAD', '/ojs/readyz', OPERATOR);
        assert.equal(head.status, 200);
        assert.match(head.headers['content-type'], /^application\/json/);
        assert.equal(head.body, '');
        const headStream = await request(port, 'HEAD', '/ojs/v1/events/stream', OPERATOR);
        assert.equal(headStream.status, 200);
        assert.match(headStream.headers['content-type'], /^text\/event-stream/);
        assert.equal(headStream.body, '');
      });

      await t.test('a synchronous authorize decides the same way; an unusable answer is an error naming authorize', async () => {
        assert.equal((await get(port, '/sync/readyz', OPERATOR)).status, 200);
        assert.equal((await get(port, '/sync/metrics', { 'x-caller': 'nobody' })).status, 403);
        const broken = await get(port, '/broken/v1/events/stream', OPERATOR);
        assert.equal(broken.status, 500);
        assert.equal(broken.body.code, 'INVALID_CONFIG');
        assert.equal(broken.body.field, 'authorize');
        assert.match(broken.body.message, /undefined/);
      });

      await t.test('/readyz: 200 with the core\'s answer', async () => {
        const ready = await get(port, '/ojs/readyz', OPERATOR);
        assert.equal(ready.status, 200);
        assert.deepEqual(ready.body, { ready: true, database: 'ok', backend: 'ok' });
      });

      await t.test('a committed job\'s job.enqueued arrives on the stream', async () => {
        const stream = await openStream(port, '/ojs/v1/events/stream?types=job.*', OPERATOR);
        try {
          assert.equal(stream.status, 200);
          assert.match(stream.headers['content-type'], /^text\/event-stream/);
          const id = await commitJob(ojs, 'email.welcome', [1]);
          const event = await waitFor(
            () => stream.events.find((e) => e.type === 'job.enqueued' && e.subject === id),
            WAIT_MS,
            'job.enqueued on the stream',
          );
          assert.equal(event.source, `/ojs/outbox/${table}`);
          assert.equal(event.data.job_id, id);
          assert.equal(event.data.type, 'email.welcome');
          assert.ok(stream.events.every((e) => e.type.startsWith('job.')), JSON.stringify(stream.events));
        } finally {
          stream.close();
        }
      });

      await t.test('a tenant-scoped caller sees only its own tenant and may not ask for another', async () => {
        const refused = await get(port, '/ojs/v1/events/stream?tenant=t2', { 'x-caller': 'tenant:t1' });
        assert.equal(refused.status, 403);
        assert.deepEqual(refused.body.error, { code: 'forbidden', message: 'this caller reads only its own tenant' });
        for (const route of ['/ojs/metrics', '/ojs/readyz']) {
          const operatorOnly = await get(port, route, { 'x-caller': 'tenant:t1' });
          assert.equal(operatorOnly.status, 403, route);
          assert.match(operatorOnly.body.error.message, /reads only \/v1\/events\/stream/, route);
        }

        const scoped = await openStream(port, '/ojs/v1/events/stream', { 'x-caller': 'tenant:t1' });
        const ownNamed = await openStream(port, '/ojs/v1/events/stream?tenant=t1', { 'x-caller': 'tenant:t1' });
        const all = await openStream(port, '/ojs/v1/events/stream', OPERATOR);
        try {
          const other = await commitJob(ojs, 'email.welcome', [2], { tenant_id: 't2' });
          // The operator's stream has the other tenant's event: it was on the bus before the next job.
          await waitFor(() => all.events.some((e) => e.subject === other), WAIT_MS, 'the t2 job on the operator stream');
          const own = await commitJob(ojs, 'email.welcome', [3], { tenant_id: 't1' });
          for (const stream of [scoped, ownNamed]) {
            await waitFor(() => stream.events.some((e) => e.subject === own), WAIT_MS, 'the t1 job on the tenant stream');
            assert.ok(!stream.events.some((e) => e.subject === other), 'a t2 event reached the t1 caller');
            assert.ok(stream.events.every((e) => e.data.tenant_id === 't1'), JSON.stringify(stream.events));
          }
        } finally {
          for (const stream of [scoped, ownNamed, all]) stream.close();
        }
      });

      await t.test('a tenant-scoped caller cannot widen its scope through the query; an empty tenant is an error', async () => {
        // An empty tenant from authorize: an error naming authorize (it would filter nothing).
        const empty = await openStream(port, '/empty/v1/events/stream');
        empty.close();
        assert.equal(empty.status, 500, 'authorize returning { tenant: "" } must not open a stream of every tenant');
        const emptyAnswer = await get(port, '/empty/metrics');
        assert.equal(emptyAnswer.body.code, 'INVALID_CONFIG');
        assert.equal(emptyAnswer.body.field, 'authorize');
        const t1 = { 'x-caller': 'tenant:t1' };
        for (const [route, headers] of [
          ['/ojs/v1/events/stream?tenant=t1&tenant=t2', t1],
          ['/ojs/v1/events/stream?tenant=t2&tenant=t1', t1],
          ['/ojs/v1/events/stream?tenant=t1&tenant=t2', OPERATOR],
          ['/ojs/v1/events/stream?types=job.*&types=ojs.*', t1],
        ]) {
          const answer = await get(port, route, headers);
          assert.equal(answer.status, 400, `${route} as ${headers['x-caller']}`);
          assert.equal(answer.body.error.code, 'invalid_request', route);
          assert.match(answer.body.error.message, /is given more than once/, route);
        }
        // `tenant[]` is not `tenant`, and a scoped caller's stream stays its own.
        const bracketed = await openStream(port, '/ojs/v1/events/stream?tenant[]=t2&tenant%5B%5D=t2', t1);
        try {
          assert.equal(bracketed.status, 200);
          const other = await commitJob(ojs, 'email.welcome', [4], { tenant_id: 't2' });
          const own = await commitJob(ojs, 'email.welcome', [5], { tenant_id: 't1' });
          await waitFor(() => bracketed.events.some((e) => e.subject === own), WAIT_MS, 'the t1 job on the tenant stream');
          assert.ok(!bracketed.events.some((e) => e.subject === other), 'a t2 event reached the t1 caller');
        } finally {
          bracketed.close();
        }
      });

      await t.test('what authorize returned is never quoted in a message (it may hold a token)', async () => {
        const answer = await get(port, '/leaky/metrics');
        assert.equal(answer.status, 500);
        assert.equal(answer.body.code, 'INVALID_CONFIG');
        assert.equal(answer.body.field, 'authorize');
        assert.match(answer.body.message, /an object with keys id, token/);
        assert.doesNotMatch(answer.body.message, /secret-token-123/);
      });

      await t.test('a client that hangs up releases the core\'s subscription', async () => {
        // One stream is open (the quiet one); the ones earlier subtests closed have ended.
        await waitFor(() => threadsNamed(relayPid, 'ojs-relay-sse') === 1, WAIT_MS, 'earlier streams released');
        const stream = await openStream(port, '/ojs/v1/events/stream', OPERATOR);
        await waitFor(() => threadsNamed(relayPid, 'ojs-relay-sse') === 2, WAIT_MS, 'the stream\'s thread');
        stream.close();
        await waitFor(() => threadsNamed(relayPid, 'ojs-relay-sse') === 1, WAIT_MS, 'the stream\'s thread to end');
      });

      await t.test('a bad query is 400 (the core judges since)', async () => {
        const answer = await get(port, '/ojs/v1/events/stream?since=yesterday', OPERATOR);
        assert.equal(answer.status, 400);
        assert.equal(answer.body.error.code, 'invalid_request');
        assert.match(answer.body.error.message, /since: "yesterday" is not an RFC 3339 time/);
      });

      await t.test('/metrics (OpenMetrics text) parses and its counters equal the outbox counts after a drain', async () => {
        await backend.call('POST', '/_dev/faults', { status: 400, code: 'invalid_request', match_type: 'poison.job' });
        const poison = await commitJob(ojs, 'poison.job', [0]);
        for (let i = 0; i < 5; i += 1) await commitJob(ojs, 'report.row', [i]);
        await waitFor(async () => (await ojs.outboxRows([poison]))[poison]?.status === 'dead', WAIT_MS, 'the poison job dead');
        const status = await waitFor(async () => {
          const s = await ojs.status();
          return s.pending === 0 && s.failed === 0 && !s.in_flight ? s : null;
        }, WAIT_MS, 'the outbox drained');
        // The relay counts a settlement once it has committed: its counters trail the rows briefly.
        await waitFor(async () => {
          const m = await ojs.metrics();
          return m && m.sent === status.sent && m.dead === status.dead;
        }, WAIT_MS, 'the relay\'s counters at the outbox counts');
        const answer = await get(port, '/ojs/metrics', OPERATOR);
        assert.equal(answer.status, 200);
        assert.equal(answer.headers['content-type'], 'application/openmetrics-text; version=1.0.0; charset=utf-8');
        assert.match(answer.body, /\n# EOF\n?$/);
        // A Prometheus text parser reads OpenMetrics as well, except that a counter's samples
        // (`<name>_total`) are a family of their own beside the `# TYPE <name> counter` one.
        const families = new Map(parsePrometheus(answer.body).map((family) => [family.name, family]));
        const value = (name, labels = {}) => {
          const family = families.get(name);
          assert.ok(family, `no ${name} in ${answer.body}`);
          const sample = family.metrics.find((m) =>
            Object.entries({ table, ...labels }).every(([key, v]) => m.labels && m.labels[key] === v),
          );
          assert.ok(sample, `no ${name}${JSON.stringify(labels)} for table ${table}`);
          return Number(sample.value);
        };
        assert.equal(families.get('ojs_relay_jobs_sent').type, 'COUNTER');
        assert.equal(value('ojs_relay_jobs_sent_total'), status.sent);
        assert.equal(value('ojs_relay_jobs_dead_total'), status.dead);
        assert.equal(status.dead, 1);
        assert.equal(value('ojs_outbox_rows', { status: 'sent' }), status.sent);
        assert.equal(value('ojs_outbox_rows', { status: 'dead' }), status.dead);
        assert.equal(value('ojs_outbox_rows', { status: 'pending' }), 0);
        assert.equal(value('ojs_outbox_backlog_jobs'), 0);
        assert.equal(value('ojs_relay_jobs_in_flight'), 0);
        const received = await backend.received();
        assert.equal(status.sent, received.jobs.length);
        const sendDuration = families.get('ojs_relay_send_duration_seconds');
        assert.equal(sendDuration.type, 'HISTOGRAM');
        assert.ok(sendDuration.metrics.length > 0);
        assert.equal(families.get('ojs_relay_delivery_lag_seconds').type, 'HISTOGRAM');
      });

      await t.test('a stream starts with a keep-alive comment and gets another after 15 s without an event', async () => {
        // Opened before the first subtest: its first comment came with the headers.
        assert.ok(quiet.comments >= 1, 'the first keep-alive comment');
        await waitFor(() => quiet.comments >= 2, 15000 + WAIT_MS, 'a keep-alive comment after a quiet interval');
        assert.equal(quiet.events.length, 0);
        assert.ok(!quiet.ended);
      });
    } finally {
      quiet.close();
      await http_.close();
      await ojs.close();
      if (database === 'sqlite') await knex.destroy();
    }
  });

  test(`${database}: ojs.subscribeEvents() reads the devserver's stream and resumes after a drop, no id lost or repeated`, async () => {
    await backend.reset();
    const { ojs, knex } = await adapter(database, 'client', { autoStart: false });
    const openStreams = async () => (await backend.call('GET', '/_dev/events')).open_streams;
    try {
      const N = 20;
      const M = 20;
      const received = [];
      const subscription = ojs.subscribeEvents({ types: ['job.enqueued'] });
      const consumer = (async () => {
        for await (const event of subscription) {
          received.push(event);
          if (received.length === N + M) break;
        }
      })();
      await waitFor(async () => (await openStreams()) === 1, WAIT_MS, 'the client connected');
      const ids = [];
      for (let i = 0; i < N; i += 1) ids.push(await ojs.enqueue('report.row', [i]));
      const dropped = await backend.call('POST', '/_dev/events/drop');
      assert.equal(dropped.dropped, 1);
      for (let i = N; i < N + M; i += 1) ids.push(await ojs.enqueue('report.row', [i]));
      await Promise.race([
        consumer,
        waitFor(() => false, WAIT_MS, `${N + M} events (got ${received.length})`).catch((error) => {
          throw new Error(`${error.message}; received ${received.length}`);
        }),
      ]);
      assert.deepEqual(
        received.map((event) => event.subject),
        ids,
        'every job id once, in order',
      );
      assert.equal(new Set(received.map((event) => event.id)).size, N + M, 'no event id twice');
      for (const event of received) {
        assert.equal(event.type, 'job.enqueued');
        assert.equal(event.data.job_id, event.subject);
        for (const key of ['id', 'type', 'source', 'subject', 'time', 'data']) assert.ok(key in event, key);
      }
      // `break` closed the feed: the devserver has no stream open any more.
      await waitFor(async () => (await openStreams()) === 0, WAIT_MS, 'the feed closed after break');
    } finally {
      await ojs.close();
      if (database === 'sqlite') await knex.destroy();
    }
  });
}

test('the Codec Server under the mount: encode then decode gives the payload back; tenants 403, over 1 MiB 413, no keys 404', async () => {
  await backend.reset();
  const knex = postgresKnex();
  const keys = { k1: 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=' };
  const options = { url: backend.url, knex, relay: 'external', autoStart: false, handleSignals: false };
  const sealed = createOjs({ ...options, encryption: { keyId: 'k1', keys } });
  const plain = createOjs(options);
  const app = express();
  const authorize = async (req) => (req.get('x-caller') === 'operator' ? true : { tenant: 't1' });
  app.use('/raw', sealed.router({ authorize }));
  // A body parser in front has read the body already: the router passes what it parsed.
  app.use('/parsed', express.json(), sealed.router({ authorize }));
  app.use('/plain', plain.router({ authorize }));
  const server = await new Promise((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  const { port } = server.address();
  const json = { ...OPERATOR, 'content-type': 'application/json' };
  try {
    const args = Buffer.from(JSON.stringify(['ada@example.com'])).toString('base64');
    const request_ = JSON.stringify({ payloads: [{ data: args, metadata: { encoding: 'json/plain' } }] });
    for (const mount of ['/raw', '/parsed']) {
      const encoded = await request(port, 'POST', `${mount}/codec/encode`, json, request_);
      assert.equal(encoded.status, 200, JSON.stringify(encoded.body));
      const [payload] = encoded.body.payloads;
      assert.equal(payload.metadata.encoding, 'binary/encrypted');
      assert.equal(payload.metadata.encryption_key_id, 'k1');
      assert.notEqual(payload.data, args);
      const decoded = await request(port, 'POST', `${mount}/codec/decode`, json, JSON.stringify(encoded.body));
      assert.equal(decoded.status, 200, JSON.stringify(decoded.body));
      assert.equal(decoded.body.payloads[0].data, args, mount);
    }
    const tenant = await request(port, 'POST', '/raw/codec/decode', { 'content-type': 'application/json' }, request_);
    assert.equal(tenant.status, 403);
    assert.match(tenant.body.error.message, /only the operator/);
    const large = await request(port, 'POST', '/raw/codec/decode', json, 'x'.repeat(1024 * 1024 + 1));
    assert.equal(large.status, 413);
    assert.equal(large.body.error.code, 'payload_too_large');
    const notJson = await request(port, 'POST', '/raw/codec/decode', json, 'not json');
    assert.equal(notJson.status, 400);
    const unkeyed = await request(port, 'POST', '/plain/codec/decode', json, request_);
    assert.equal(unkeyed.status, 404);
    assert.match(unkeyed.body.error.message, /no encryption configured/);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await sealed.close();
    await plain.close();
    await knex.destroy();
  }
});

test('ojs.subscribeEvents() passes its filters: only the types asked for, a worker\'s start and completion included', async () => {
  await backend.reset();
  const { ojs, knex } = await adapter('postgres', 'client_filters', { autoStart: false });
  const openStreams = async () => (await backend.call('GET', '/_dev/events')).open_streams;
  try {
    const received = [];
    const subscription = ojs.subscribeEvents({ types: ['job.started', 'job.completed'], jobTypes: ['email.welcome'] });
    const consumer = (async () => {
      for await (const event of subscription) {
        received.push(event);
        if (event.type === 'job.completed') break;
      }
    })();
    await waitFor(async () => (await openStreams()) === 1, WAIT_MS, 'the client connected');
    const other = await ojs.enqueue('report.build', [0]);
    const a = await ojs.enqueue('email.welcome', [1]);
    const b = await ojs.enqueue('email.welcome', [2]);
    for (const [id, action] of [[other, 'start'], [a, 'start'], [b, 'start'], [other, 'complete'], [b, 'complete']]) {
      const answer = await backend.call('POST', `/_dev/jobs/${id}/${action}`);
      assert.ok(answer && answer.job, `${action} ${id}: ${JSON.stringify(answer)}`);
    }
    await Promise.race([consumer, waitFor(() => false, WAIT_MS, 'job.completed of b')]);
    assert.deepEqual(
      received.map((event) => [event.type, event.subject]),
      [['job.started', a], ['job.started', b], ['job.completed', b]],
    );
    await waitFor(async () => (await openStreams()) === 0, WAIT_MS, 'the feed closed after break');
  } finally {
    await ojs.close();
    await knex.destroy();
  }
});

test('open streams wait off libuv\'s pool: with more streams waiting than the pool has threads, pool work still runs', async () => {
  await backend.reset();
  const { ojs, knex } = await adapter('postgres', 'pool');
  const crypto = require('node:crypto');
  const streams = [];
  try {
    // Twice the pool's threads (4 unless UV_THREADPOOL_SIZE says otherwise), each waiting for a
    // job event that only comes when the test commits a job (not for a time: a wait that ends
    // by itself would make the verdict depend on how fast the pool work below runs).
    const count = 2 * Number(process.env.UV_THREADPOOL_SIZE || 4);
    for (let i = 0; i < count; i += 1) streams.push(await ojs.relayEvents({ types: 'job.enqueued' }));
    let waiting = count;
    const waits = streams.map((stream) => stream.next(2 * WAIT_MS).then((frame) => {
      waiting -= 1;
      return frame;
    }));
    // Pool work of the package (a core call) and of Node (crypto) completes while every wait is pending.
    const status = await ojs.status();
    await new Promise((resolve, reject) => crypto.pbkdf2('secret', 'salt', 1000, 32, 'sha256', (e) => (e ? reject(e) : resolve())));
    await fs.promises.readFile(__filename);
    assert.equal(waiting, count, 'a stream\'s wait ended before the pool work ran');
    assert.equal(typeof status.pending, 'number');
    // Now the event every wait is for: each ends with its frame.
    const id = await commitJob(ojs, 'email.welcome', [9]);
    const frames = await Promise.all(waits);
    for (const frame of frames) assert.match(frame, new RegExp(`"subject":"${id}"`));
  } finally {
    for (const stream of streams) stream.close();
    await ojs.close();
  }
  await knex.destroy();
});

test('bad options are typed errors naming the option', async () => {
  const knex = postgresKnex();
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: 'node_events_bad' }, autoStart: false, handleSignals: false });
  try {
    for (const options of [undefined, {}, { authorize: true }, { authorize: null }]) {
      assert.throws(() => ojs.router(options), (error) => {
        assert.ok(error instanceof InvalidConfigError, String(error));
        assert.equal(error.code, 'INVALID_CONFIG');
        assert.equal(error.field, 'authorize');
        assert.match(error.message, /authorize/);
        return true;
      });
    }
    assert.throws(() => ojs.router({ authorise: () => true }), (error) => {
      assert.equal(error.code, 'INVALID_CONFIG');
      assert.equal(error.field, 'authorise');
      assert.match(error.message, /authorize/);
      return true;
    });
    assert.throws(() => ojs.subscribeEvents({ jobtypes: ['a.b'] }), (error) => {
      assert.ok(error instanceof OJSError);
      assert.equal(error.code, 'INVALID_CONFIG');
      assert.equal(error.field, 'jobtypes');
      assert.match(error.message, /jobTypes/);
      return true;
    });
    await assert.rejects(ojs.relayEvents({ lastEventID: 'x' }), (error) => {
      assert.equal(error.code, 'INVALID_CONFIG');
      assert.equal(error.field, 'lastEventID');
      return true;
    });
    // The core judges the values: a URL that is not http(s) ends the first iteration.
    const iterator = ojs.subscribeEvents({ url: 'ftp://example.invalid/stream' })[Symbol.asyncIterator]();
    await assert.rejects(iterator.next(), (error) => {
      assert.equal(error.code, 'INVALID_CONFIG');
      assert.equal(error.field, 'url');
      return true;
    });
    // No relay runs for an adapter that was not started: the stream reads the table's event
    // log, which needs no relay here, and the metrics hold no relay's counters.
    const stream = await ojs.relayEvents({});
    assert.equal(await stream.next(50), '');
    stream.close();
    const text = await ojs.metricsText();
    assert.ok(text === null || !/ojs_relay_/.test(text), text);
  } finally {
    await ojs.close();
    await knex.destroy();
  }
});

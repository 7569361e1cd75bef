'use strict';
// The Express integration end to end: a real Express server on port 0, called over HTTP. The
// request context (traceparent, tracestate, X-Request-ID, req.user.id, X-OJS-Tenant, the first
// Accept-Language tag) reaches the job's meta through ojsMiddleware; a route whose transaction
// rolls back sends nothing.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const express = require('express');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs, ojsMiddleware } = ojsPackage;

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

function request(port, route, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: route, method: 'POST', headers }, (res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode, body: body ? JSON.parse(body) : null }));
    });
    req.on('error', reject);
    req.end();
  });
}

const HEADERS = {
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  tracestate: 'congo=t61rcWkgMzE',
  'x-request-id': 'req-abc-123',
  'x-ojs-tenant': 'tenant-acme',
  'accept-language': 'fr-CA, fr;q=0.9, en;q=0.8',
};

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: request context lands in the job meta through the Express middleware`, async () => {
    await backend.reset();
    const dir = scratchDir(`express-${database}`);
    const knex = database === 'sqlite' ? sqliteKnex(path.join(dir, 'app.db')) : postgresKnex();
    const table = `node_express_${database}`;
    const users = `node_express_users_${database}`;
    await knex.schema.dropTableIfExists(table);
    await knex.schema.dropTableIfExists(users);
    await knex.schema.createTable(users, (tb) => {
      tb.increments('id');
      tb.string('email');
    });
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    await ojs.migrate();
    await ojs.start();

    const app = express();
    app.use(ojsMiddleware(ojs));
    // Authentication after ours: the context reads req.user when the job is staged.
    app.use((req, res, next) => {
      req.user = { id: 42 };
      next();
    });
    // Spec §8.3 form: the transaction comes from ojs.transaction, the context from the request.
    app.post('/signup', async (req, res, next) => {
      try {
        const result = await ojs.transaction(async (trx) => {
          const [user] = await trx(users).insert({ email: req.query.email || 'ada@example.com' }).returning('id');
          const id = typeof user === 'object' ? user.id : user;
          const jobId = await req.ojs.enqueueAfterCommit('email.welcome', [id]);
          return { id, jobId };
        });
        res.status(201).json(result);
      } catch (error) {
        next(error);
      }
    });
    // The trx-first form, then a failure: the transaction rolls back and nothing is sent.
    app.post('/signup-fails', async (req, res) => {
      let jobId;
      try {
        await knex.transaction(async (trx) => {
          await trx(users).insert({ email: 'bob@example.com' });
          jobId = await req.ojs.enqueueAfterCommit(trx, 'email.welcome', [0]);
          throw new Error('payment declined');
        });
      } catch {
        res.status(402).json({ jobId });
      }
    });
    // The ambient form outside req.ojs: ojs.enqueueBulk sees the request context too.
    app.post('/bulk', async (req, res) => {
      const ids = await ojs.enqueueBulk(knex, [{ type: 'report.row', args: [1] }, { type: 'report.row', args: [2] }]);
      res.status(201).json({ ids });
    });

    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const port = server.address().port;
    try {
      const created = await request(port, '/signup', HEADERS);
      assert.equal(created.status, 201);
      const failed = await request(port, '/signup-fails', HEADERS);
      assert.equal(failed.status, 402);
      const bulk = await request(port, '/bulk', { 'x-request-id': 'req-bulk' });
      assert.equal(bulk.status, 201);
      const wanted = [created.body.jobId, ...bulk.body.ids];
      const received = await waitFor(async () => {
        const r = await backend.received();
        return wanted.every((id) => r.jobs.some((job) => job.id === id)) && r;
      }, WAIT_MS, 'jobs delivered');
      const job = received.jobs.find((j) => j.id === created.body.jobId);
      assert.deepEqual(job.args, [created.body.id]);
      assert.equal(job.meta['ojs.context.request_id'], 'req-abc-123');
      assert.equal(job.meta.traceparent, HEADERS.traceparent);
      assert.equal(job.meta.tracestate, HEADERS.tracestate);
      assert.equal(job.meta['ojs.context.user_id'], '42');
      assert.equal(job.meta.tenant_id, 'tenant-acme');
      assert.equal(job.meta['ojs.context.locale'], 'fr-CA');
      for (const id of bulk.body.ids) {
        const bulkJob = received.jobs.find((j) => j.id === id);
        assert.equal(bulkJob.meta['ojs.context.request_id'], 'req-bulk');
        assert.equal(bulkJob.meta.tenant_id, undefined);
      }
      // The rolled-back signup: no row, nothing sent (observed once the relay has settled every
      // row it can see: nothing pending, failed or in flight).
      await waitFor(async () => {
        const status = await ojs.status();
        return status.pending === 0 && status.failed === 0 && status.in_flight === 0;
      }, WAIT_MS, 'the relay settled every row');
      const after = await backend.received();
      assert.ok(!after.jobs.some((j) => j.id === failed.body.jobId), 'rolled-back job must not be sent');
      assert.deepEqual(await ojs.outboxRows([failed.body.jobId]), {});
      assert.equal(after.jobs.length, 3);
      assert.equal((await knex(users).count({ n: '*' }))[0].n * 1, 1);
    } finally {
      await new Promise((resolve) => server.close(resolve));
      await ojs.close();
      await knex.destroy();
    }
  });
}

// The spec's §8.3 form: the middleware built from the adapter's options (`url`, as the spec
// spells it), its adapter on `middleware.ojs`; a bad option is refused when the app is built.
test('ojsMiddleware({ url, knex }) builds the adapter, and refuses options createOjs refuses', async () => {
  await backend.reset();
  const knex = sqliteKnex(path.join(scratchDir('express-options'), 'app.db'));
  const table = 'node_express_options';
  await knex.schema.dropTableIfExists(table);
  const middleware = ojsMiddleware({ url: backend.url, knex, outbox: { tableName: table }, handleSignals: false });
  const { ojs } = middleware;
  const app = express();
  app.use(middleware);
  app.post('/signup', async (req, res) => {
    const jobId = await req.ojs.transaction(() => req.ojs.enqueueAfterCommit('email.welcome', [7]));
    res.status(201).json({ jobId });
  });
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    await ojs.migrate();
    const created = await request(server.address().port, '/signup', { 'x-request-id': 'req-spec-form' });
    assert.equal(created.status, 201);
    const received = await waitFor(async () => {
      const r = await backend.received();
      return r.jobs.some((job) => job.id === created.body.jobId) && r;
    }, WAIT_MS, 'the job at the backend');
    const job = received.jobs.find((j) => j.id === created.body.jobId);
    assert.equal(job.meta['ojs.context.request_id'], 'req-spec-form');
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await ojs.close();
    await knex.destroy();
  }
  assert.throws(() => ojsMiddleware({ ojsUrl: backend.url }), (error) => error.code === 'INVALID_CONFIG' && /did you mean "url"/.test(error.message));
  assert.throws(() => ojsMiddleware(), TypeError);
});

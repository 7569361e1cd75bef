'use strict';
// The Express integration end to end: a real Express server on port 0, called over HTTP. The
// request context (traceparent, tracestate, X-Request-ID, req.user.id, the tenant of the app's
// resolver, the first Accept-Language tag) reaches the job's meta through ojsMiddleware; a
// route whose transaction rolls back sends nothing. The tenant (issue 25): a client's
// X-OJS-Tenant header counts only under trustTenantHeader; the app's `tenant(req)` resolver
// decides, and wins over a trusted header; bad resolvers are typed errors naming the option.

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
  // Sent by the client: ignored (no trustTenantHeader); the tenant is the resolver's.
  'x-ojs-tenant': 'tenant-client',
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
    const ojs = createOjs({
      url: backend.url,
      knex,
      outbox: { tableName: table },
      autoStart: false,
      handleSignals: false,
      tenant: (req) => req.user?.tenantId,
    });
    await ojs.migrate();
    await ojs.start();

    const app = express();
    app.use(ojsMiddleware(ojs));
    // Authentication after ours: the context reads req.user when the job is staged.
    app.use((req, res, next) => {
      req.user = { id: 42, tenantId: 'tenant-acme' };
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
        assert.equal(bulkJob.meta.tenant_id, 'tenant-acme');
      }
      // The rolled-back signup: no row, nothing sent (observed once the relay has settled every
      // row it can see: nothing pending, failed or in flight).
      await waitFor(async () => {
        const status = await ojs.status();
        return status.pending === 0 && status.failed === 0 && !status.in_flight;
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

/**
 * An Express app with one route per adapter (`/<name>/stage`: stages a job in ojs.transaction
 * through req.ojs, answers 201 with its id and req.ojs.context, or 500 with the error), behind
 * the app's own authentication (in these tests a header the test sets: req.account).
 * `stage(name, headers)` resolves with the row's tenant, its meta and the request's context.
 */
async function tenantApp(knex, table, adapters) {
  const app = express();
  app.use((req, res, next) => {
    const given = req.get('x-test-account');
    if (given) req.account = JSON.parse(given);
    next();
  });
  for (const [name, ojs] of Object.entries(adapters)) {
    const routes = express.Router();
    routes.use(ojsMiddleware(ojs));
    routes.post('/stage', async (req, res) => {
      try {
        const jobId = await ojs.transaction(() => req.ojs.enqueueAfterCommit('tenant.job', [name]));
        res.status(201).json({ jobId, context: req.ojs.context });
      } catch (error) {
        res.status(500).json({ name: error.name, code: error.code, field: error.field, message: error.message });
      }
    });
    app.use(`/${name}`, routes);
  }
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const port = server.address().port;
  return {
    post: (route, headers) => request(port, route, headers),
    async stage(name, headers) {
      const answer = await request(port, `/${name}/stage`, headers);
      assert.equal(answer.status, 201, JSON.stringify(answer.body));
      const row = await knex(table).where({ job_id: answer.body.jobId }).first('tenant_id', 'job_meta');
      assert.ok(row, `no row for ${answer.body.jobId}`);
      const meta = typeof row.job_meta === 'string' ? JSON.parse(row.job_meta) : row.job_meta; // jsonb on PostgreSQL
      return { tenant: row.tenant_id, meta, context: answer.body.context };
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** A fresh outbox table of `database`; staging only (no relay runs: the rows are what these tests read). */
async function stagingOnly(database, name) {
  const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`express-${name}-${database}`), 'app.db')) : postgresKnex();
  const table = `node_express_${name}_${database}`;
  await knex.schema.dropTableIfExists(table);
  const base = { url: backend.url, knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false };
  return { knex, table, base };
}

/** What an anonymous client sends: a tenant, and headers a careless app might take for the user. */
const CLIENT = { 'x-ojs-tenant': 'tenant-a', 'x-user-id': 'client-user', 'x-ojs-user': 'client-user', 'x-request-id': 'req-t' };
const accountOf = (value) => ({ 'x-test-account': JSON.stringify(value) });

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: an anonymous request's X-OJS-Tenant makes no tenant, and no header makes a user (the defaults)`, async () => {
    const { knex, table, base } = await stagingOnly(database, 'anonymous');
    const ojs = createOjs(base);
    await ojs.migrate();
    const app = await tenantApp(knex, table, { plain: ojs });
    try {
      const anonymous = await app.stage('plain', CLIENT);
      assert.equal(anonymous.tenant, null, 'the row has no tenant');
      assert.equal(anonymous.meta.tenant_id, undefined);
      assert.equal(anonymous.meta['ojs.context.user_id'], undefined);
      assert.equal(anonymous.meta['ojs.context.request_id'], 'req-t');
      assert.deepEqual(anonymous.context, { request_id: 'req-t' });
    } finally {
      await app.close();
      await ojs.close();
      await knex.destroy();
    }
  });

  test(`${database}: the tenant resolver decides; X-OJS-Tenant counts only under trustTenantHeader, and the resolver wins over it; bad answers are typed errors`, async () => {
    const { knex, table, base } = await stagingOnly(database, 'tenant');
    const account = (req) => req.account;
    const adapters = {
      resolved: createOjs({ ...base, tenant: (req) => account(req)?.tenant, user: (req) => account(req)?.user }),
      trusting: createOjs({ ...base, trustTenantHeader: true }),
      both: createOjs({ ...base, trustTenantHeader: true, tenant: (req) => account(req)?.tenant }),
      promised: createOjs({ ...base, tenant: async () => 'tenant-late' }),
    };
    await adapters.resolved.migrate();
    const app = await tenantApp(knex, table, adapters);
    try {
      // The resolvers: the app's tenant and user, the client's header ignored.
      const resolved = await app.stage('resolved', { ...CLIENT, ...accountOf({ tenant: 'tenant-r', user: 7 }) });
      assert.equal(resolved.tenant, 'tenant-r');
      assert.equal(resolved.meta.tenant_id, 'tenant-r');
      assert.equal(resolved.meta['ojs.context.user_id'], '7');
      assert.deepEqual(resolved.context, { request_id: 'req-t', user_id: '7', tenant_id: 'tenant-r' });
      assert.equal((await app.stage('resolved', CLIENT)).tenant, null, 'the resolver said none: no tenant');

      // trustTenantHeader: the header counts (behind a gateway that sets it).
      const trusted = await app.stage('trusting', CLIENT);
      assert.equal(trusted.tenant, 'tenant-a');
      assert.equal(trusted.meta.tenant_id, 'tenant-a');
      assert.equal(trusted.context.tenant_id, 'tenant-a');

      // The resolver wins over a trusted header; when it says none, the trusted header counts.
      const both = await app.stage('both', { ...CLIENT, ...accountOf({ tenant: 'tenant-r' }) });
      assert.equal(both.tenant, 'tenant-r');
      assert.equal(both.meta.tenant_id, 'tenant-r');
      assert.equal((await app.stage('both', CLIENT)).tenant, 'tenant-a');

      // A resolver's unusable answer is a typed error naming the option; nothing is staged.
      const before = Number((await knex(table).count({ n: '*' }))[0].n);
      for (const [name, headers, field, pattern] of [
        ['resolved', accountOf({ tenant: 42 }), 'tenant', /tenant\(req\) must return a non-empty string.*a number/],
        ['resolved', accountOf({ tenant: '' }), 'tenant', /an empty string/],
        ['resolved', accountOf({ tenant: 'tenant-r', user: { id: 1 } }), 'user', /user\(req\) must return.*an object/],
        ['promised', {}, 'tenant', /a promise; resolve it in a middleware/],
      ]) {
        const answer = await app.post(`/${name}/stage`, headers);
        assert.equal(answer.status, 500, JSON.stringify(answer.body));
        assert.equal(answer.body.name, 'InvalidConfigError');
        assert.equal(answer.body.code, 'INVALID_CONFIG');
        assert.equal(answer.body.field, field);
        assert.match(answer.body.message, pattern);
      }
      assert.equal(Number((await knex(table).count({ n: '*' }))[0].n), before, 'nothing staged');
    } finally {
      await app.close();
      for (const ojs of Object.values(adapters)) await ojs.close();
      await knex.destroy();
    }
  });
}

test('createOjs refuses a tenant or user option that is not a function, naming it', async () => {
  const knex = postgresKnex();
  try {
    for (const [name, value] of [['tenant', 'tenant-a'], ['tenant', { header: 'x-tenant' }], ['user', 'id']]) {
      assert.throws(
        () => createOjs({ url: backend.url, knex, relay: 'external', autoStart: false, handleSignals: false, [name]: value }),
        (error) => {
          assert.equal(error.name, 'InvalidConfigError');
          assert.equal(error.code, 'INVALID_CONFIG');
          assert.equal(error.field, name);
          assert.match(error.message, new RegExp(`createOjs\\(\\{ ${name} \\}\\) takes a function`));
          return true;
        },
      );
    }
    assert.throws(
      () => createOjs({ url: backend.url, knex, relay: 'external', autoStart: false, handleSignals: false, trustTenantHeader: 'yes' }),
      (error) => error.code === 'INVALID_CONFIG' && /trust_tenant_header/.test(error.field),
    );
  } finally {
    await knex.destroy();
  }
});

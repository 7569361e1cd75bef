'use strict';
// Issue 29, the Express binding's side of tracing: with `@opentelemetry/api` in the app (and a
// tracer provider registered, here the SDK's NodeTracerProvider), a job staged inside the
// active span carries that span's trace context, so the core's `create` span is its child; an
// explicit traceparent (`withContext`) wins; with no active span, none is invented; a worker
// runs each handler in its job's trace context. Real knex
// on SQLite and PostgreSQL, the devserver as the oracle (the job's meta as received).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { trace } = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor } = require('./support');

const { createOjs } = ojsPackage;
new NodeTracerProvider().register();
const tracer = trace.getTracer('ojs-test');

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

async function deliveredMeta(ojs, context) {
  const stage = () => ojs.transaction(async (trx) => ojs.enqueueAfterCommit(trx, 'email.welcome', ['ada@example.com']));
  const id = await (context ? ojs.withContext(context, stage) : stage());
  const job = await waitFor(async () => (await backend.received()).jobs.find((j) => j.id === id), undefined, 'the job delivered');
  return job.meta || {};
}

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: a job staged in the app's active span continues it, and its handler runs in its context`, async () => {
    await backend.reset();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`tracing-${database}`), 'app.db')) : postgresKnex();
    const table = `node_tracing_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.ready;
      let span;
      const meta = await tracer.startActiveSpan('POST /signup', async (active) => {
        span = active.spanContext();
        try {
          return await deliveredMeta(ojs);
        } finally {
          active.end();
        }
      });
      const [, traceId, spanId] = meta.traceparent.split('-');
      assert.deepEqual([traceId, spanId], [span.traceId, span.spanId], JSON.stringify(meta));

      const given = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
      const explicit = await tracer.startActiveSpan('work', async (active) => {
        try {
          return await deliveredMeta(ojs, { traceparent: given });
        } finally {
          active.end();
        }
      });
      assert.equal(explicit.traceparent, given);
      assert.equal(trace.getActiveSpan(), undefined);
      assert.equal((await deliveredMeta(ojs)).traceparent, undefined);

      // A worker runs the handler in the job's trace context: the handler's own spans continue it.
      const seen = [];
      const worker = ojs.worker({
        queues: ['default'],
        idlePollMs: 50,
        handlers: {
          'email.welcome': async (args, ctx) => {
            const active = trace.getActiveSpan()?.spanContext();
            seen.push({ traceparent: ctx.traceparent, active: active ? `${active.traceId}-${active.spanId}` : null });
          },
        },
      });
      try {
        await waitFor(async () => seen.length >= 3, undefined, 'the three jobs handled');
      } finally {
        await worker.stop({ deadlineMs: 0 });
      }
      const traced = seen.filter((s) => s.traceparent);
      assert.equal(traced.length, 2, JSON.stringify(seen));
      for (const { traceparent, active } of traced) {
        const [, traceId, spanId] = traceparent.split('-');
        assert.equal(active, `${traceId}-${spanId}`);
      }
      assert.deepEqual(seen.filter((s) => !s.traceparent).map((s) => s.active), [null]);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

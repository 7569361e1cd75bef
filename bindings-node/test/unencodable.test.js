'use strict';
// Values JSON cannot hold are refused, not coerced: JSON.stringify would turn a Set or a Map
// into {}, NaN, Infinity, undefined (in an array) and functions into null, drop a function
// property, and turn class instances into their fields. Each call is refused with the code of
// its part (INVALID_ARGS / INVALID_OPTIONS / INVALID_META; field `args`, `options`, `meta`,
// `context`) and the path of the value in the message, before anything is written; the
// transaction stays usable. What has a JSON form by its own `toJSON` (a Date) is accepted as
// that form, and a property holding undefined is left out. Only the accepted jobs reach the
// devserver.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs, InvalidArgsError, InvalidOptionsError, InvalidMetaError } = ojsPackage;

class Money {
  constructor(cents) {
    this.cents = cents;
  }
}

const cycle = { name: 'loop' };
cycle.self = { back: cycle };

/** [name, call(ojs, trx), class, field, path at the start of the message]. */
const REFUSED = [
  ['a Set in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [{ tags: new Set(['a']) }]), InvalidArgsError, 'args', 'args[0].tags'],
  ['a Map in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [new Map([['a', 1]])]), InvalidArgsError, 'args', 'args[0]'],
  ['NaN in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [1, NaN]), InvalidArgsError, 'args', 'args[1]'],
  ['Infinity deep in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [{ a: { b: [-Infinity] } }]), InvalidArgsError, 'args', 'args[0].a.b[0]'],
  ['undefined in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [undefined]), InvalidArgsError, 'args', 'args[0]'],
  ['a function in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [() => 1]), InvalidArgsError, 'args', 'args[0]'],
  ['a function property in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [{ id: 1, save() {} }]), InvalidArgsError, 'args', 'args[0].save'],
  ['a BigInt in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [{ id: 10n }]), InvalidArgsError, 'args', 'args[0].id'],
  ['a cycle in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [cycle]), InvalidArgsError, 'args', 'args[0].self.back'],
  ['a class instance in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [new Money(5)]), InvalidArgsError, 'args', 'args[0]'],
  ['an invalid Date in args', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [new Date('not a date')]), InvalidArgsError, 'args', 'args[0]'],
  ['a key that is not an identifier', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [{ 'a b': new Set() }]), InvalidArgsError, 'args', 'args[0]["a b"]'],
  ['a Set in options', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [1], { tags: new Set(['x']) }), InvalidOptionsError, 'options', 'options.tags'],
  ['NaN in meta', (o, t) => o.enqueueAfterCommit(t, 'user.tag', [1], null, { score: NaN }), InvalidMetaError, 'meta', 'meta.score'],
  ['a Map in the request context', (o, t) => o.withContext({ request_id: new Map() }, () => o.enqueueAfterCommit(t, 'user.tag', [1])), InvalidMetaError, 'context', 'context.request_id'],
  ['a Set in a bulk job', (o, t) => o.enqueueBulk(t, [{ type: 'user.tag', args: [1] }, { type: 'user.tag', args: [{ tags: new Set() }] }]), InvalidArgsError, 'args', 'jobs[1].args[0].tags'],
  ['NaN in a bulk job\'s options', (o, t) => o.enqueueBulk(t, [{ type: 'user.tag', args: [1], options: { priority: NaN } }]), InvalidOptionsError, 'options', 'jobs[0].options.priority'],
  ['a Set in an immediate enqueue', (o) => o.enqueue('user.tag', [new Set([1])]), InvalidArgsError, 'args', 'args[0]'],
];

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: values JSON cannot hold are refused with the path, never coerced`, async (t) => {
    await backend.reset();
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir('unencodable'), 'app.db')) : postgresKnex();
    const table = `node_unencodable_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
    try {
      await ojs.migrate();
      await ojs.start();
      const trx = await knex.transaction();
      for (const [name, call, Class, field, at] of REFUSED) {
        await t.test(name, async () => {
          await assert.rejects(call(ojs, trx), (error) => {
            assert.ok(error instanceof Class, `${error.name}: ${error.message}`);
            assert.equal(error.field, field);
            assert.equal(error.retryable, false);
            assert.ok(error.message.startsWith(`${at}: `), `"${error.message}" does not start with ${at}`);
            return true;
          });
          const [{ n }] = await trx(table).count({ n: '*' });
          assert.equal(Number(n), 0, 'nothing staged');
        });
      }
      // Accepted as their JSON form: a Date (its toJSON), a property holding undefined (left out).
      const when = new Date(Date.UTC(2026, 10, 25, 1, 2, 3));
      const dated = await ojs.enqueueAfterCommit(trx, 'user.dated', [{ at: when, note: undefined }]);
      const [bulk] = await ojs.enqueueBulk(trx, [{ type: 'user.dated', args: [when], options: undefined }]);
      await trx.commit();
      const received = await waitFor(async () => {
        const r = await backend.received();
        return r.jobs.length >= 2 && r;
      }, WAIT_MS, 'the accepted jobs at the backend');
      const byId = new Map(received.jobs.map((job) => [job.id, job]));
      assert.deepEqual(byId.get(dated).args, [{ at: '2026-11-25T01:02:03.000Z' }]);
      assert.deepEqual(byId.get(bulk).args, ['2026-11-25T01:02:03.000Z']);
      assert.equal(received.jobs.length, 2, 'only the accepted jobs were sent');
      const [{ n }] = await knex(table).count({ n: '*' });
      assert.equal(Number(n), 2);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

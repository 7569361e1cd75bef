'use strict';
// The contract with the core (issue 14): the error classes against the core's codes and
// families, the TypeScript declarations against the core's option keys and codes and against
// the package's exports, the package version against the workspace's, the core's ledger as
// knex settles each level, the relay's database URL from knex's settings, the request context
// from the headers the core names, and autoStart's one meaning.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, REPO, scratchDir, sqliteKnex, postgresKnex, knexLib, waitFor } = require('./support');

const native = require(path.join(PACKAGE_DIR, 'lib', 'native'));
const { EXPRESS_OPTIONS } = require(path.join(PACKAGE_DIR, 'lib', 'facade'));
const { createOjs, OJSError, ERROR_CLASSES } = ojsPackage;

const CODES = JSON.parse(native.codesJson());

/** docs/errors.md: the Node class of every code, and the class of each family with several codes. */
const TABLE = {
  INVALID_JOB_TYPE: 'InvalidJobTypeError',
  INVALID_QUEUE: 'InvalidQueueError',
  INVALID_ARGS: 'InvalidArgsError',
  INVALID_OPTIONS: 'InvalidOptionsError',
  INVALID_META: 'InvalidMetaError',
  PAYLOAD_TOO_LARGE: 'PayloadTooLargeError',
  INVALID_CONFIG: 'InvalidConfigError',
  INVALID_DATABASE_URL: 'InvalidDatabaseUrlError',
  OUTBOX_TABLE_MISSING: 'OutboxTableMissingError',
  DATABASE: 'DatabaseError',
  BACKEND_UNAVAILABLE: 'BackendUnavailableError',
  BACKEND_REJECTED: 'BackendRejectedError',
  NO_TRANSACTION: 'NoTransactionError',
  RELAY_SHUT_DOWN: 'RelayShutDownError',
  DUPLICATE: 'DuplicateJobError',
};
const FAMILIES = {
  validation: 'ValidationError',
  configuration: 'ConfigurationError',
  database: 'DatabaseError',
  backend: 'BackendError',
};

test('every core code maps to its class, which derives from its family class and OJSError', () => {
  assert.deepEqual(CODES.map((entry) => entry.code).sort(), Object.keys(TABLE).sort());
  for (const { code, family, retryable } of CODES) {
    const Class = ojsPackage[TABLE[code]];
    assert.equal(typeof Class, 'function', `${code}: ${TABLE[code]} is exported`);
    assert.equal(ERROR_CLASSES[code], Class, code);
    assert.ok(Class.prototype instanceof OJSError || Class === OJSError, code);
    if (FAMILIES[family]) {
      const Family = ojsPackage[FAMILIES[family]];
      assert.ok(Class === Family || Class.prototype instanceof Family, `${code} is a ${FAMILIES[family]}`);
    } else {
      assert.ok(['transaction', 'relay', 'duplicate'].includes(family), `${code}: family ${family} has a class`);
    }
    // Decoded from the core's encoding: the class, and code, field, retryable on the error.
    const error = require(path.join(PACKAGE_DIR, 'lib', 'errors')).fromJson(
      JSON.stringify({ code, field: 'f', message: 'f: why', retryable, family }),
    );
    assert.ok(error instanceof Class, code);
    assert.equal(error.code, code);
    assert.equal(error.field, 'f');
    assert.equal(error.retryable, retryable);
    assert.equal(error.message, 'f: why');
  }
  // A DUPLICATE names the job holding the key, in both spellings.
  const duplicate = require(path.join(PACKAGE_DIR, 'lib', 'errors')).fromJson(
    JSON.stringify({ code: 'DUPLICATE', field: 'options.unique', message: 'held', retryable: false, family: 'duplicate', existing_job_id: 'j-1' }),
  );
  assert.ok(duplicate instanceof ojsPackage.DuplicateJobError);
  assert.equal(duplicate.existingJobId, 'j-1');
  assert.equal(duplicate.existing_job_id, 'j-1');
});

test('a core error thrown by the addon carries code, field and retryable, not an encoded message', () => {
  const { InvalidConfigError, ConfigurationError } = ojsPackage;
  const knex = sqliteKnex(path.join(scratchDir('contract-error'), 'app.db'));
  try {
    assert.throws(
      () => createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { batchSize: 0 }, autoStart: false }),
      (error) =>
        error instanceof InvalidConfigError &&
        error instanceof ConfigurationError &&
        error.code === 'INVALID_CONFIG' &&
        error.field === 'adapter.outbox.batch_size' &&
        error.retryable === false &&
        !error.message.startsWith('{'),
    );
  } finally {
    knex.destroy();
  }
});

/** The keys of an interface of index.d.ts (its own members, two-space indented). */
function interfaceKeys(source, name) {
  const start = source.indexOf(`export interface ${name} {`);
  assert.ok(start >= 0, `index.d.ts declares ${name}`);
  const body = source.slice(start, source.indexOf('\n}', start));
  return [...body.matchAll(/^ {2}([A-Za-z_$][\w$]*)\??:/gm)].map((match) => match[1]);
}

test("index.d.ts: CreateOjsOptions is the core's option keys in camelCase plus Express's own", () => {
  const source = fs.readFileSync(path.join(PACKAGE_DIR, 'index.d.ts'), 'utf8');
  const camel = (key) => key.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
  const expected = [...native.optionKeys().map(camel), ...EXPRESS_OPTIONS].sort();
  assert.deepEqual(interfaceKeys(source, 'CreateOjsOptions').sort(), expected);
});

test("index.d.ts: its values (const, class, function) are exactly the package's exports", () => {
  const source = fs.readFileSync(path.join(PACKAGE_DIR, 'index.d.ts'), 'utf8');
  const declared = new Set([...source.matchAll(/^export declare (?:const|class|function) ([A-Za-z_$][\w$]*)/gm)].map((match) => match[1]));
  assert.deepEqual(Object.keys(ojsPackage).sort(), [...declared].sort());
});

test("index.d.ts: the ErrorCode union is the core's codes", () => {
  const source = fs.readFileSync(path.join(PACKAGE_DIR, 'index.d.ts'), 'utf8');
  const start = source.indexOf('export type ErrorCode =');
  const declared = source.slice(start, source.indexOf(';', start));
  const codes = [...declared.matchAll(/'([A-Z_]+)'/g)].map((match) => match[1]).sort();
  assert.deepEqual(codes, CODES.map((entry) => entry.code).sort());
});

test("package.json's version is the workspace's", () => {
  const cargo = fs.readFileSync(path.join(REPO, 'Cargo.toml'), 'utf8');
  const section = cargo.slice(cargo.indexOf('[workspace.package]'));
  const version = /^version\s*=\s*"([^"]+)"/m.exec(section)[1];
  const pkg = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, 'package.json'), 'utf8'));
  assert.equal(pkg.version, version);
});

test("the relay's database URL comes from knex's settings by the core's rule", async () => {
  const dir = scratchDir('contract-url');
  const cases = [
    [{ client: 'better-sqlite3', connection: { filename: path.join(dir, 'a.db') }, useNullAsDefault: true }, `sqlite://${path.join(dir, 'a.db')}`],
    [{ client: 'pg', connection: 'postgres://u:p@db.example:6543/app' }, 'postgres://u:p@db.example:6543/app'],
    [{ client: 'pg', connection: { connectionString: 'postgres://u@h/app' } }, 'postgres://u@h/app'],
    [
      { client: 'postgresql', connection: { host: 'h', port: 5433, user: 'u s', password: 'p@ss', database: 'app', ssl: { rejectUnauthorized: false } } },
      'postgres://u%20s:p%40ss@h:5433/app?sslmode=require',
    ],
  ];
  for (const [config, url] of cases) {
    const knex = knexLib(config);
    try {
      const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, relay: 'external', autoStart: false, handleSignals: false });
      assert.equal(ojs.config.adapter.database_url, url, JSON.stringify(config));
      await ojs.close();
    } finally {
      await knex.destroy();
    }
  }
  // A relative SQLite file is relative to the working directory.
  const relative = knexLib({ client: 'better-sqlite3', connection: { filename: 'rel.db' }, useNullAsDefault: true });
  try {
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex: relative, relay: 'external', autoStart: false, handleSignals: false });
    assert.equal(ojs.config.adapter.database_url, `sqlite://${path.join(process.cwd(), 'rel.db')}`);
    await ojs.close();
  } finally {
    await relative.destroy();
  }
});

test('req.ojs.context is what the core reads from the request headers, req.user and the tenant resolver', async () => {
  const { RequestOjs } = ojsPackage;
  const knex = postgresKnex();
  const base = { url: 'http://127.0.0.1:9', knex, relay: 'external', autoStart: false, handleSignals: false };
  const adapters = [createOjs(base), createOjs({ ...base, trustTenantHeader: true }), createOjs({ ...base, tenant: (req) => req.user.org })];
  const [plain, trusting, resolved] = adapters;
  try {
    const req = {
      headers: { 'x-request-id': '  req-1 ', 'accept-language': 'fr-CA,fr;q=0.9', 'x-ojs-tenant': 'acme', 'x-other': 'no' },
      user: { id: 42, org: 'org-7' },
    };
    // The client's X-OJS-Tenant is no tenant unless the app trusts the header.
    assert.deepEqual(new RequestOjs(plain, req).context, { request_id: 'req-1', user_id: '42', locale: 'fr-CA' });
    assert.deepEqual(new RequestOjs(trusting, req).context, { request_id: 'req-1', user_id: '42', tenant_id: 'acme', locale: 'fr-CA' });
    assert.deepEqual(new RequestOjs(resolved, req).context, { request_id: 'req-1', user_id: '42', tenant_id: 'org-7', locale: 'fr-CA' });
    assert.equal(new RequestOjs(plain, { headers: {} }).context, null);
  } finally {
    for (const ojs of adapters) await ojs.close();
    await knex.destroy();
  }
});

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: savepoints released, rolled back and nested: only ids of committed levels wake the relay`, async () => {
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`contract-ledger-${database}`), 'app.db')) : postgresKnex();
    const table = `node_ledger_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, relay: 'external', relayProcess: false, autoStart: false, handleSignals: false });
    const woken = [];
    const committed = ojs.committed.bind(ojs);
    ojs.committed = (ledger) => {
      // What the core would wake (the ledger's ids), then the core's own call.
      const probe = ledger.commit();
      woken.push(...(probe === '' ? [] : probe.split('\n')));
      committed(ledger);
    };
    try {
      await ojs.migrate();
      const ids = {};
      await knex.transaction(async (trx) => {
        ids.outer = await ojs.enqueueAfterCommit(trx, 'ledger.outer', []);
        await trx.transaction(async (sp) => {
          ids.released = await ojs.enqueueAfterCommit(sp, 'ledger.released', []);
          await sp
            .transaction(async (inner) => {
              ids.inner = await ojs.enqueueAfterCommit(inner, 'ledger.inner', []);
              throw new Error('roll back the inner savepoint');
            })
            .catch(() => {});
        });
        await trx
          .transaction(async (sp) => {
            [ids.bulk] = await ojs.enqueueBulk(sp, [{ type: 'ledger.bulk', args: [] }]);
            throw new Error('roll back the second savepoint');
          })
          .catch(() => {});
      });
      assert.deepEqual(woken, [ids.outer, ids.released]);
      woken.length = 0;
      await knex
        .transaction(async (trx) => {
          await ojs.enqueueAfterCommit(trx, 'ledger.rolled_back', []);
          throw new Error('roll back');
        })
        .catch(() => {});
      assert.deepEqual(woken, []);
    } finally {
      await ojs.close();
      await knex.destroy();
    }
  });
}

test('autoStart: false starts no relay until start(); the default starts it when the adapter is created', async () => {
  const knex = postgresKnex();
  const table = 'node_autostart';
  await knex.schema.dropTableIfExists(table);
  const manual = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, autoStart: false, handleSignals: false });
  const auto = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: `${table}_auto` }, handleSignals: false });
  try {
    await manual.migrate();
    await auto.migrate();
    await manual.ready;
    assert.equal(await manual.metrics(), null, 'no relay before start()');
    await manual.start();
    assert.notEqual(await manual.metrics(), null);
    await auto.ready.catch(() => {});
    await waitFor(async () => (await auto.metrics()) !== null, 30000, 'the automatic start');
  } finally {
    await manual.close();
    await auto.close();
    await knex.destroy();
  }
});

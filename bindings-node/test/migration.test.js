'use strict';
// A real knex migration of the outbox table, up and down, on SQLite, PostgreSQL and MariaDB:
// `exports.up` is createOutboxTable, `exports.down` dropOutboxTable (the core's DDL and DROP
// for the knex client). After `migrate.latest` a job can be staged; after `migrate.rollback`
// the table is gone and staging fails with OUTBOX_TABLE_MISSING; a second `latest` brings it
// back.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, scratchDir, sqliteKnex, postgresKnex, mysqlKnex } = require('./support');

const { createOjs, dropOutboxTable, OutboxTableMissingError } = ojsPackage;

const knexOf = { sqlite: (dir) => sqliteKnex(path.join(dir, 'app.db')), postgres: () => postgresKnex(), mariadb: () => mysqlKnex() };

for (const database of ['sqlite', 'postgres', 'mariadb']) {
  test(`${database}: a knex migration creates the outbox table and its down drops it`, async () => {
    const dir = scratchDir(`migration-${database}`);
    const migrations = path.join(dir, 'migrations');
    fs.mkdirSync(migrations);
    const table = `node_migrated_${database}`;
    fs.writeFileSync(
      path.join(migrations, '20261125000000_ojs_outbox.js'),
      `const { createOutboxTable, dropOutboxTable } = require(${JSON.stringify(PACKAGE_DIR)});\n` +
        `exports.up = (knex) => createOutboxTable(knex, { tableName: ${JSON.stringify(table)} });\n` +
        `exports.down = (knex) => dropOutboxTable(knex, { tableName: ${JSON.stringify(table)} });\n`,
    );
    const knex = knexOf[database](dir);
    const options = { directory: migrations, tableName: `node_knex_migrations_${database}` };
    await dropOutboxTable(knex, { tableName: table });
    await knex.schema.dropTableIfExists(options.tableName);
    await knex.schema.dropTableIfExists(`${options.tableName}_lock`);
    const ojs = createOjs({ url: 'http://127.0.0.1:9', knex, outbox: { tableName: table }, relay: 'external', autoStart: false, handleSignals: false });
    try {
      await knex.migrate.latest(options);
      assert.equal(await knex.schema.hasTable(table), true, 'up created the table');
      const jobId = await knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'email.welcome', [1]));
      assert.equal((await knex(table).where({ job_id: jobId })).length, 1);

      await knex.migrate.rollback(options);
      assert.equal(await knex.schema.hasTable(table), false, 'down dropped the table');
      await assert.rejects(knex.transaction((trx) => ojs.enqueueAfterCommit(trx, 'email.welcome', [2])), (error) =>
        error instanceof OutboxTableMissingError && error.code === 'OUTBOX_TABLE_MISSING');

      await knex.migrate.latest(options);
      assert.equal(await knex.schema.hasTable(table), true, 'up again');
      assert.equal(Number((await knex(table).count({ n: '*' }))[0].n), 0, 'a new, empty table');
    } finally {
      await ojs.close();
      await dropOutboxTable(knex, { tableName: table });
      await knex.schema.dropTableIfExists(options.tableName);
      await knex.schema.dropTableIfExists(`${options.tableName}_lock`);
      await knex.destroy();
    }
  });
}

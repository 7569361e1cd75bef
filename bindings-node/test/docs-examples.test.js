'use strict';
// The examples of docs/express.md, "Transaction libraries": each ```js block after an
// `<!-- example: NAME -->` line runs as it is written (an ES module in a scratch folder, the
// package and the libraries as installed, beside their node_modules), against PostgreSQL (DATABASE_URL),
// MariaDB (DATABASE_URL, examples named *mysql*) or a SQLite file in its folder, and the
// devserver (OJS_URL). A `users` table is made first. The example must
// exit by itself, and its job (email.welcome with the new user's id) must reach the backend.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const pg = require('pg');
const Database = require('better-sqlite3');
const { PACKAGE_DIR, REPO, PG_URL, MYSQL_URL, WAIT_MS, startDevserver, mysqlKnex, dropMysqlOutbox } = require('./support');
const { prismaClient } = require('./prisma-support');

/** The Prisma example's model (the `users` table made below). */
const USER_MODEL = 'model User {\n  id    Int    @id @default(autoincrement())\n  email String\n\n  @@map("users")\n}\n';

/** The folder whose node_modules holds the libraries (target/node-pkg/app under test.sh). */
const APP_DIR = path.resolve(path.dirname(require.resolve('pg/package.json')), '..', '..');

const DOC = fs.readFileSync(path.join(REPO, 'docs', 'express.md'), 'utf8');
const EXAMPLES = [...DOC.matchAll(/<!-- example: ([\w-]+) -->\s*```js\n([\s\S]*?)```/g)].map(([, name, code]) => ({ name, code }));

let backend;
let pool;

before(async () => {
  backend = await startDevserver();
  pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
});

after(async () => {
  await pool.end();
  await backend.stop();
});

/** Runs `file` with node; resolves with {code, output}. */
function runNode(file, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { cwd: path.dirname(file), env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the example did not exit within ${WAIT_MS} ms:\n${output}`));
    }, WAIT_MS);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

test('docs/express.md has an example per transaction library', () => {
  assert.deepEqual(EXAMPLES.map((e) => e.name).sort(), ['better-sqlite3', 'drizzle-pg', 'drizzle-sqlite', 'knex-mysql', 'kysely', 'pg', 'prisma', 'sequelize', 'typeorm']);
});

for (const { name, code } of EXAMPLES) {
  test(`docs/express.md example "${name}" runs and its job reaches the backend`, async () => {
    // Beside the installed libraries: an ES module finds its imports in the node_modules above it.
    const dir = path.join(APP_DIR, 'doc-examples', name);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    const sqlite = /sqlite/.test(name);
    const mysql = /mysql/.test(name);
    if (mysql) {
      await dropMysqlOutbox('ojs_outbox');
      const knex = mysqlKnex();
      try {
        await knex.schema.dropTableIfExists('users');
        await knex.schema.createTable('users', (t) => {
          t.increments('id');
          t.string('email');
        });
      } finally {
        await knex.destroy();
      }
    } else if (sqlite) {
      const db = new Database(path.join(dir, 'app.db'));
      db.exec('CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)');
      db.close();
    } else {
      await pool.query('DROP TABLE IF EXISTS users, ojs_outbox');
      await pool.query('CREATE TABLE users (id serial PRIMARY KEY, email text)');
    }
    // The application's Prisma Client, generated from its schema (offline: prisma-support.js).
    if (name === 'prisma') prismaClient('default', 'postgresql', USER_MODEL, true);
    // The package under test, wherever it is installed (the example names it as an app would).
    const file = path.join(dir, 'example.mjs');
    fs.writeFileSync(file, code.replaceAll("from 'ojs-adapter-express'", `from ${JSON.stringify(path.join(PACKAGE_DIR, 'index.js'))}`));
    await backend.reset();
    const { code: exit, output } = await runNode(file, { DATABASE_URL: mysql ? MYSQL_URL : PG_URL, OJS_URL: backend.url });
    assert.equal(exit, 0, output);
    const jobs = (await backend.received()).jobs;
    assert.deepEqual(jobs.map((job) => [job.type, job.args]), [['email.welcome', [1]]], output);
  });
}

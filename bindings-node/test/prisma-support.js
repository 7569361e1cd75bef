'use strict';
// Prisma Clients for the tests, generated offline from the installed npm packages: `prisma
// generate` (the CLI of the pinned `prisma` package) writes a client for a schema into
// <app>/prisma-gen/<name>/client, beside the installed @prisma/client runtime. Generating needs
// no schema engine (it reads the schema with @prisma/prisma-schema-wasm), but the CLI fetches
// one before any command unless PRISMA_SCHEMA_ENGINE_BINARY names one: it names /bin/false, so
// a command that did run the engine would fail rather than pass silently. The clients run on
// the query compiler (WebAssembly, an npm package) and a driver adapter (@prisma/adapter-pg,
// @prisma/adapter-better-sqlite3, @prisma/adapter-mariadb): no engine binary at all.

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const PRISMA_DIR = path.dirname(require.resolve('prisma/package.json'));
/** The folder whose node_modules holds the libraries (target/node-pkg/app under test.sh). */
const APP_DIR = path.resolve(PRISMA_DIR, '..', '..');

/**
 * The generated client module of schema `name` (`provider` "postgresql", "sqlite" or "mysql"); with
 * `asDefault`, generated where `require('@prisma/client')` finds it (as an application's).
 */
function prismaClient(name, provider, models = '', asDefault = false) {
  const dir = path.join(APP_DIR, 'prisma-gen', name);
  const output = path.join(dir, 'client');
  const schema = [
    'generator client {',
    '  provider = "prisma-client-js"',
    ...(asDefault ? [] : ['  output   = "./client"']),
    '}',
    '',
    'datasource db {',
    `  provider = "${provider}"`,
    '}',
    '',
    models,
  ].join('\n');
  const file = path.join(dir, 'schema.prisma');
  const current = !asDefault && fs.existsSync(file) && fs.readFileSync(file, 'utf8') === schema && fs.existsSync(path.join(output, 'index.js'));
  if (!current) {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(file, schema);
    execFileSync(process.execPath, [path.join(PRISMA_DIR, 'build', 'index.js'), 'generate', '--schema', file], {
      cwd: dir,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
    });
  }
  return asDefault ? null : require(output);
}

/** A PrismaClient on PostgreSQL (`url`) through @prisma/adapter-pg. */
function postgresPrisma(url, name = 'pg') {
  const { PrismaClient } = prismaClient(name, 'postgresql');
  const { PrismaPg } = require('@prisma/adapter-pg');
  return new PrismaClient({ adapter: new PrismaPg({ connectionString: url }) });
}

/** A PrismaClient on a SQLite file through @prisma/adapter-better-sqlite3. */
function sqlitePrisma(file, name = 'sqlite') {
  const { PrismaClient } = prismaClient(name, 'sqlite');
  const { PrismaBetterSqlite3 } = require('@prisma/adapter-better-sqlite3');
  return new PrismaClient({ adapter: new PrismaBetterSqlite3({ url: `file:${file}` }) });
}

/** A PrismaClient on MySQL/MariaDB (`url`, mysql://) through @prisma/adapter-mariadb (the mariadb connector). */
function mysqlPrisma(url, name = 'mysql') {
  const { PrismaClient } = prismaClient(name, 'mysql');
  const { PrismaMariaDb } = require('@prisma/adapter-mariadb');
  const { hostname, port, username, password, pathname } = new URL(url);
  const adapter = new PrismaMariaDb({
    host: hostname,
    port: Number(port || 3306),
    user: decodeURIComponent(username),
    password: decodeURIComponent(password),
    database: pathname.slice(1),
    connectionLimit: 4,
  });
  return new PrismaClient({ adapter });
}

module.exports = { APP_DIR, prismaClient, postgresPrisma, sqlitePrisma, mysqlPrisma };

#!/usr/bin/env node
'use strict';
// ojs-relay (npm bin of ojs-adapter-express): the outbox commands of the core, with the same
// flags as the Rust `ojs-relay` process. Settings: the JSON config file (--config, spec §5.2
// shape), then OJS_DATABASE_URL / OJS_URL, then flags; anything unset keeps the core default.

const fs = require('node:fs');
const { NativeAdapter } = require('../lib/native');
const { callNative, awaitNative, OJSError } = require('../lib/errors');

const USAGE = `usage: ojs-relay [--config FILE] [--database-url URL] [--table NAME] COMMAND

commands:
  migrate                                   create the outbox table and indexes (idempotent)
  run [--ojs-url URL] [--batch-size N] [--poll-interval ISO8601]
                                            relay rows until SIGINT/SIGTERM, then flush and exit 0
  status [--json]                           row counts, in flight, oldest pending age
  dead list [--tenant T] [--limit N] [--json]
  dead replay [--tenant T]                  dead rows back to pending with fresh attempts
  dead purge [--tenant T] --yes             delete dead rows for good`;

function parse(argv) {
  const flags = {};
  const words = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '-h' || arg === '--help') flags.help = true;
    else if (arg === '--json' || arg === '--yes') flags[arg.slice(2)] = true;
    else if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      const name = eq > 0 ? arg.slice(2, eq) : arg.slice(2);
      const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
      if (value === undefined) throw usageError(`--${name} needs a value`);
      flags[name] = value;
    } else words.push(arg);
  }
  return { flags, words };
}

function usageError(message) {
  const error = new Error(message);
  error.usage = true;
  return error;
}

function buildConfig(flags) {
  let config = { adapter: {} };
  if (flags.config) {
    try {
      config = JSON.parse(fs.readFileSync(flags.config, 'utf8'));
    } catch (error) {
      throw new OJSError(`--config: ${flags.config}: ${error.message}`, { code: 'INVALID_CONFIG', field: '--config' });
    }
    if (!config || typeof config.adapter !== 'object') config = { ...config, adapter: config.adapter };
  }
  const adapter = config.adapter || {};
  const databaseUrl = flags['database-url'] || process.env.OJS_DATABASE_URL;
  if (databaseUrl) adapter.database_url = databaseUrl;
  const ojsUrl = flags['ojs-url'] || process.env.OJS_URL;
  if (ojsUrl) adapter.ojs_url = ojsUrl;
  const outbox = { ...(adapter.outbox || {}) };
  if (flags.table) outbox.table_name = flags.table;
  if (flags['batch-size']) outbox.batch_size = Number(flags['batch-size']);
  if (flags['poll-interval']) outbox.poll_interval = flags['poll-interval'];
  if (Object.keys(outbox).length) adapter.outbox = outbox;
  if (!adapter.database_url) {
    throw new OJSError('database_url: no database URL (--database-url, OJS_DATABASE_URL or the config file)', {
      code: 'INVALID_CONFIG',
      field: 'database_url',
    });
  }
  return { ...config, adapter };
}

function table(rows) {
  const keys = Object.keys(rows[0] || {});
  return [keys.join('\t'), ...rows.map((row) => keys.map((k) => (row[k] === null ? '' : String(row[k]))).join('\t'))].join('\n');
}

async function main(argv) {
  if (argv[0] === '_host') {
    // Internal: the relay host process of an application on SQLite (lib/relay-host.js).
    require('../lib/relay-host').serveHost(NativeAdapter);
    return null;
  }
  const { flags, words } = parse(argv);
  if (flags.help || words.length === 0) {
    console.log(USAGE);
    return flags.help ? 0 : 2;
  }
  const adapter = callNative(() => new NativeAdapter(JSON.stringify(buildConfig(flags))));
  const tenant = flags.tenant || null;
  const [command, sub] = words;
  if (command === 'migrate') {
    await awaitNative(adapter.migrate());
    console.log(`ojs-relay: outbox table ${adapter.tableName} ready`);
  } else if (command === 'run') {
    await awaitNative(adapter.statusJson());
    console.error(`ojs-relay: relaying table ${adapter.tableName} (pid ${process.pid}); SIGINT/SIGTERM stops it`);
    await awaitNative(adapter.runRelayUntilSignal());
    console.error('ojs-relay: stopped');
  } else if (command === 'status') {
    const status = JSON.parse(await awaitNative(adapter.statusJson()));
    console.log(flags.json ? JSON.stringify(status) : table([status]));
  } else if (command === 'dead' && sub === 'list') {
    const limit = flags.limit === undefined ? null : Number(flags.limit);
    const rows = JSON.parse(await awaitNative(adapter.deadListJson(tenant, limit)));
    if (flags.json) console.log(JSON.stringify(rows));
    else console.log(rows.length ? table(rows) : 'no dead rows');
  } else if (command === 'dead' && sub === 'replay') {
    console.log(`replayed ${await awaitNative(adapter.deadReplay(tenant))} dead rows`);
  } else if (command === 'dead' && sub === 'purge') {
    if (!flags.yes) {
      console.error('ojs-relay: dead purge deletes rows for good; pass --yes');
      return 2;
    }
    console.log(`purged ${await awaitNative(adapter.deadPurge(tenant))} dead rows`);
  } else {
    throw usageError(`unknown command: ${words.join(' ')}`);
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => code !== null && process.exit(code),
  (error) => {
    if (error.usage) {
      console.error(`ojs-relay: ${error.message}\n\n${USAGE}`);
      process.exit(2);
    }
    const code = error instanceof OJSError ? error.code : null;
    console.error(code ? `error [${code}]: ${error.message}` : `error: ${error.stack || error}`);
    process.exit(code === 'INVALID_CONFIG' || code === 'INVALID_DATABASE_URL' ? 2 : 1);
  },
);

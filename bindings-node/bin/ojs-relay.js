#!/usr/bin/env node
'use strict';
// ojs-relay (npm bin of ojs-adapter-express): the outbox commands of the core, with the same
// flags as the Rust `ojs-relay` process. Settings: the JSON config file (--config, spec §5.2
// shape), then OJS_DATABASE_URL / OJS_URL, then flags; anything unset keeps the core default,
// except the backend URL, which `run` requires. migrate, status and dead are the core's
// operator commands (`Bridge::admin`): this parses the arguments, prints what the core says
// and exits with its code; `run` hosts the relay (signals are Node's, see below).
//
// Signals: in a Node process SIGINT and SIGTERM belong to Node (libuv), so they are taken here,
// first thing, before the addon loads or anything connects. From then on a signal never kills
// the process: it is remembered, and each command decides what it means (`run` stops the relay
// through the adapter's close, which flushes, and exits 0, also when the signal came during
// start-up). The core's native signal handling (`run_relay_until_signal`) is never used in
// Node: its handler chains to Node's own SIGTERM handler, which re-raises the signal to itself
// expecting the default action back, and the two re-deliver it to each other forever (a
// spinning main thread that never exits).

const SIGNALS = ['SIGINT', 'SIGTERM'];
/** The first stop signal received, or null. */
let stopSignal = null;
let signalled;
/** Resolves with the first stop signal. */
const stopRequested = new Promise((resolve) => {
  signalled = resolve;
});
for (const signal of SIGNALS) {
  process.on(signal, () => {
    stopSignal ||= signal;
    signalled(signal);
  });
}

const fs = require('node:fs');
const os = require('node:os');
const { NativeBridge } = require('../lib/native');
const { callNative, awaitNative, OJSError } = require('../lib/errors');
const { startFeed } = require('../lib/log');

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

/** How `run` users set the backend URL, named by the core when it is missing. */
const URL_SETTING = '--ojs-url URL or OJS_URL (or adapter.ojs_url in the --config file)';

function buildConfig(flags, command) {
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
  // `run` is the relay process itself, whatever mode the (shared) config file gives the app.
  if (command === 'run') adapter.relay = { ...(adapter.relay || {}), mode: 'in_process' };
  return { ...config, adapter };
}

/** How `run` labels the relay's records on stderr. */
const LOG_LABELS = { info: 'INFO', warning: 'WARN', error: 'ERROR' };

/**
 * `run`: connect and check the table, start the relay, and on the first stop signal stop it
 * through the adapter's close (the core's graceful stop: it sends what it holds within
 * relay.shutdown_timeout and releases the rest), then exit 0. A signal while connecting ends
 * the command at once (no relay runs yet, nothing to flush); one while the relay starts stops
 * it once started.
 */
async function run(bridge) {
  // The relay's records (pauses, resumes, dead letters: the core's texts) on stderr as they come.
  const feed = startFeed((records) => {
    for (const record of records) console.error(`ojs-relay: ${LOG_LABELS[record.level] || record.level} ${record.message}`);
  });
  let phase = 'connecting';
  const started = (async () => {
    await awaitNative(bridge.statusJson());
    if (stopSignal) return;
    phase = 'starting';
    await awaitNative(bridge.startRelay());
    phase = 'running';
  })();
  const first = await Promise.race([started, stopRequested.then(() => 'signal')]);
  if (first === 'signal' && phase === 'connecting') {
    console.error(`ojs-relay: ${stopSignal} before the relay started; exiting`);
    feed.stop();
    return 0;
  }
  await started;
  if (!stopSignal) {
    console.error(`ojs-relay: relaying table ${bridge.tableName} (pid ${process.pid}); SIGINT/SIGTERM stops it`);
    // Nothing of Node's waits while the relay works on the core's threads: keep the loop alive.
    const keepAlive = setInterval(() => {}, 1 << 30);
    await stopRequested;
    clearInterval(keepAlive);
  }
  console.error(`ojs-relay: ${stopSignal}: stopping (flushing the relay)`);
  await awaitNative(bridge.close());
  feed.stop();
  console.error('ojs-relay: stopped');
  return 0;
}

async function main(argv) {
  if (argv[0] === '_host') {
    // Internal: the relay host process of an application on SQLite (lib/relay-host.js).
    require('../lib/relay-host').serveHost(NativeBridge, stopRequested);
    return null;
  }
  const { flags, words } = parse(argv);
  if (flags.help || words.length === 0) {
    console.log(USAGE);
    return flags.help ? 0 : 2;
  }
  const [command, sub] = words;
  if (command !== 'run') {
    // A short command: a stop signal ends it as the signal's default action would (128 + n).
    stopRequested.then((signal) => process.exit(128 + os.constants.signals[signal]));
  }
  // Only `run` talks to the backend; it has no development default (as the Rust ojs-relay).
  const host = { urlSetting: URL_SETTING, needsBackend: command === 'run' };
  if (!COMMANDS.includes(command) || words.length !== (command === 'dead' ? 2 : 1)) {
    throw usageError(`unknown command: ${words.join(' ')}`);
  }
  const adminCommand = command === 'run' ? null : commandOf(command, sub, flags);
  const bridge = callNative(() => new NativeBridge(JSON.stringify(buildConfig(flags, command)), host));
  if (command === 'run') return run(bridge);
  const report = await awaitNative(bridge.admin(JSON.stringify(adminCommand)));
  process.stdout.write(report.stdout);
  process.stderr.write(report.stderr);
  return report.exitCode;
}

const COMMANDS = ['migrate', 'run', 'status', 'dead'];

/** How a user of this bin creates a missing outbox table, named by the core's messages. */
const CREATE_TABLE_WITH = '`ojs-relay migrate` (node_modules/.bin) or the knex migration';

/** The core's operator command (`admin::Command`) for these arguments. */
function commandOf(command, action, flags) {
  let limit = null;
  if (flags.limit !== undefined) {
    limit = Number(flags.limit);
    if (!Number.isSafeInteger(limit)) throw usageError(`--limit needs a whole number, got ${JSON.stringify(flags.limit)}`);
  }
  return {
    command,
    action: action ?? null,
    tenant: flags.tenant ?? null,
    limit,
    json: Boolean(flags.json),
    yes: Boolean(flags.yes),
    create_table_with: CREATE_TABLE_WITH,
  };
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

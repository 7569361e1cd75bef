#!/usr/bin/env node
'use strict';
// ojs-relay (npm bin of ojs-adapter-express): the Rust `ojs-relay`'s command line, parsed and
// run by the core (`ojs_bridge::relay_command`: the same clap options, the same settings
// rules, the same standalone relay and `--listen` surface). An unknown flag is refused naming
// the accepted ones (exit 2); `--help` prints the core's option list. migrate, status and dead
// print what the core says and exit with its code; `run` starts the standalone relay (no
// hot path, so no `relay.skip_recent`) with the core's start/stop pair, because the signals
// are Node's (see below).
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

const os = require('node:os');
const { NativeRelayCommand, relayExitCode } = require('../lib/native');
const { callNative, awaitNative, OJSError } = require('../lib/errors');
const { startFeed } = require('../lib/log');

/** How a user of this bin creates a missing outbox table, named by the core's messages. */
const CREATE_TABLE_WITH = '`ojs-relay migrate` (node_modules/.bin) or the knex migration';

/** This bin as the core's relay command line sees it: every command, no settings of its own. */
const FRAMEWORK = JSON.stringify({ program: 'ojs-relay', subcommands: true, create_table_with: CREATE_TABLE_WITH });

/** How `run` labels the relay's records on stderr. */
const LOG_LABELS = { info: 'INFO', warning: 'WARN', error: 'ERROR' };

/**
 * `run`: the core connects, checks the table, starts the standalone relay and the `--listen`
 * surface (`start`); on the first stop signal the core stops them gracefully (`stop`: it sends
 * what it holds within relay.shutdown_timeout and releases the rest), then exit 0. A signal
 * during start-up stops the relay as soon as it has started.
 */
async function run(command) {
  // The relay's records (its start line, the surface's address, pauses, resumes, dead
  // letters: the core's texts) on stderr as they come.
  const feed = startFeed((records) => {
    for (const record of records) console.error(`ojs-relay: ${LOG_LABELS[record.level] || record.level} ${record.message}`);
  });
  // Nothing of Node's waits while the relay works on the core's threads: keep the loop alive.
  const keepAlive = setInterval(() => {}, 1 << 30);
  let started;
  try {
    started = await awaitNative(command.start());
  } catch (error) {
    clearInterval(keepAlive);
    feed.stop();
    throw error;
  }
  if (!stopSignal) {
    console.error(`ojs-relay: relaying table ${started.table} (pid ${process.pid}); SIGINT/SIGTERM stops it`);
    await stopRequested;
  }
  console.error(`ojs-relay: ${stopSignal}: stopping (flushing the relay)`);
  await awaitNative(command.stop());
  clearInterval(keepAlive);
  feed.stop();
  console.error('ojs-relay: stopped');
  return 0;
}

async function main(argv) {
  if (argv[0] === '_host') {
    // Internal: the relay host process of an application on SQLite (lib/relay-host.js).
    require('../lib/relay-host').serveHost(require('../lib/native').NativeBridge, stopRequested);
    return null;
  }
  const command = callNative(() => new NativeRelayCommand(argv, FRAMEWORK));
  const exit = command.exit();
  if (exit) {
    process.stdout.write(exit.stdout);
    process.stderr.write(exit.stderr);
    return exit.exitCode;
  }
  if (command.isRun) return run(command);
  // A short command: a stop signal ends it as the signal's default action would (128 + n).
  stopRequested.then((signal) => process.exit(128 + os.constants.signals[signal]));
  const report = await awaitNative(command.execute());
  process.stdout.write(report.stdout);
  process.stderr.write(report.stderr);
  return report.exitCode;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code === null) return;
    // Exit once what was written has been flushed (a pipe may take a while).
    process.exitCode = code;
    process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
  },
  (error) => {
    const code = error instanceof OJSError ? error.code : null;
    console.error(code ? `error [${code}]: ${error.message}` : `error: ${error.stack || error}`);
    process.exit(code ? relayExitCode(code) : 1);
  },
);

'use strict';
// The relay's log records, through the application's logger (createOjs's `logger` option:
// any object with info, warn and error methods; console by default).
//
// The core writes each relay event once (a pause, a resume, a dead letter, a refusal by the
// backend, a database or prune failure: every text and level is the core's) into a bounded
// queue of the process the relay runs in. It is drained here every 250 ms by an unref'd timer
// (it never keeps a process alive), and each record becomes one call `logger.info|warn|error(
// message)`, the message naming the job id when there is one. Nothing of JavaScript runs on the
// core's threads.
//
// Where the relay runs decides who drains:
// - in this process (PostgreSQL): `forApp` registers the app; one timer serves every app of
//   the process, each record going to the app whose outbox table wrote it;
// - in the relay host process (SQLite, lib/relay-host.js): the host drains its own queue and
//   sends the records over the IPC channel; the app's RelayHost hands them to its logger;
// - in `ojs-relay run` (bin/ojs-relay.js): printed on stderr.
// A last drain follows every relay stop, so the records of the flush are not left behind.

const native = require('./native');
const { errorFor } = require('./errors');

/** Milliseconds between two drains. */
const INTERVAL_MS = 250;
/** The logger method of each core level. */
const METHODS = { info: 'info', warning: 'warn', error: 'error' };

/** createOjs's `logger` option, checked: console when absent, else an object with the three methods. */
function checkLogger(logger) {
  if (logger === undefined || logger === null) return console;
  const missing = ['info', 'warn', 'error'].filter((method) => !logger || typeof logger[method] !== 'function');
  if (missing.length) {
    throw errorFor(
      'INVALID_CONFIG',
      `logger: must have info, warn and error methods (console, a pino or winston logger); missing ${missing.join(', ')}`,
      'logger',
    );
  }
  return logger;
}

/** One call per record on `logger`, at the record's level. A logger that throws loses that record only. */
function write(logger, records) {
  for (const record of records) {
    const method = METHODS[record.level] || 'warn';
    try {
      logger[method](record.message);
    } catch {
      // The feed goes on: the next records may be logged.
    }
  }
}

/**
 * Drains this process's queue every 250 ms into `onRecords(records)` (not called when there
 * are none). Returns `{ flush, stop }`: `flush()` drains now; `stop()` ends the timer after a
 * last drain. Both return what `onRecords` returned (a promise, for the relay host's sends).
 */
function startFeed(onRecords) {
  native.enableLogFeed();
  const flush = () => {
    const records = native.drainLogFeed();
    return records.length ? onRecords(records) : undefined;
  };
  const timer = setInterval(flush, INTERVAL_MS);
  timer.unref();
  return {
    flush,
    stop() {
      clearInterval(timer);
      return flush();
    },
  };
}

/** The apps whose relay runs in this process, and the one feed that serves them. */
const sinks = new Set();
let feed = null;

function dispatch(records) {
  for (const record of records) {
    let target = null;
    for (const sink of sinks) {
      if (sink.table === record.table) {
        target = sink;
        break;
      }
      target ||= sink;
    }
    write(target ? target.logger : console, [record]);
  }
}

function attach(sink) {
  sinks.add(sink);
  feed ||= startFeed(dispatch);
}

/** A last drain for `sink`'s relay (just stopped), then it is forgotten; the timer ends with the last one. */
function detach(sink) {
  if (!sinks.has(sink)) return;
  feed.flush();
  sinks.delete(sink);
  if (sinks.size === 0) {
    feed.stop();
    feed = null;
  }
}

/**
 * The log wiring of one Ojs: `starting()` before its relay starts, `stopped()` after it
 * stopped. With a relay host the records come over IPC (the host drains and flushes them
 * before it answers a stop); in "external" mode there is no relay here to log about.
 */
function forApp(app) {
  if (app.host) {
    app.host.onLog = (records) => write(app.logger, records);
    return { starting() {}, stopped() {} };
  }
  if (!app.relayInProcess) return { starting() {}, stopped() {} };
  const sink = { table: app.tableName, logger: app.logger };
  return { starting: () => attach(sink), stopped: () => detach(sink) };
}

module.exports = { INTERVAL_MS, checkLogger, write, startFeed, forApp };

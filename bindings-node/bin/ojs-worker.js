#!/usr/bin/env node
'use strict';
// ojs-worker (npm bin of ojs-adapter-express): runs the handlers a module exports on the core
// worker loop (`ojs.worker()`, lib/worker.js) until SIGINT/SIGTERM.
//
//   ojs-worker --handlers ./jobs.js --queue default --concurrency 4
//
// The module's default export (`module.exports` in CommonJS) is the handlers object:
// `{ 'email.welcome': async (args, ctx) => result }`. The backend settings are read as
// `ojs-relay run` reads them: the `--config FILE` (spec §5.2 `{"adapter": {...}}`: `ojs_url`,
// `auth_token`, `encryption` for encrypted args), then `OJS_URL`, then `--ojs-url`; the core
// judges them (and the worker options) and names what is wrong. An unknown flag or a missing
// value exits 2 naming it; a configuration the core refuses exits with the relay's code for it.
//
// Signals, as bin/ojs-relay.js takes them (Node's, so listened to first thing): the first
// SIGINT or SIGTERM stops gracefully (no more fetches; the jobs in flight have `--deadline-ms`
// to finish, the rest is given back), then exit 0. A second signal gives the jobs in flight
// back at once and exits 128 + the signal's number, as its default action would.

const SIGNALS = ['SIGINT', 'SIGTERM'];
/** The stop signals received, in order. */
const signals = [];
let signalled;
/** Resolves with the first stop signal. */
const stopRequested = new Promise((resolve) => {
  signalled = resolve;
});
/** Called with each stop signal after the first (set once the worker runs). */
let onAnotherSignal = null;
for (const signal of SIGNALS) {
  process.on(signal, () => {
    signals.push(signal);
    if (signals.length === 1) signalled(signal);
    else if (onAnotherSignal) onAnotherSignal(signal);
  });
}

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { parseArgs } = require('node:util');
const { pathToFileURL } = require('node:url');

const USAGE = `usage: ojs-worker --handlers FILE --queue NAME [--queue NAME ...] [options]

Runs the handlers FILE exports (its default export: { "job.type": async (args, ctx) => result })
on the OJS worker loop until SIGINT/SIGTERM.

options:
  --handlers FILE              the module of handlers (required)
  --queue NAME                 a queue to fetch from (repeatable)
  --concurrency N              handler slots
  --visibility-timeout-ms N    the reservation asked for at fetch (renewed by heartbeats)
  --worker-id ID               the worker id sent to the backend
  --idle-poll-ms N             the wait after a fetch that found nothing
  --deadline-ms N              on SIGINT/SIGTERM, how long jobs in flight may finish (default: the core's, 25000)
  --ojs-url URL                the OJS backend (or OJS_URL, or adapter.ojs_url in --config)
  --config FILE                settings in the spec §5.2 shape, {"adapter": {...}}
  -h, --help                   this text

Left out, a worker option takes the core's default.
`;

const FLAGS = {
  handlers: { type: 'string' },
  queue: { type: 'string', multiple: true },
  concurrency: { type: 'string' },
  'visibility-timeout-ms': { type: 'string' },
  'worker-id': { type: 'string' },
  'idle-poll-ms': { type: 'string' },
  'deadline-ms': { type: 'string' },
  'ojs-url': { type: 'string' },
  config: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};

/** A usage error: printed with the usage, exit 2. */
class UsageError extends Error {}

/** A number flag as the core takes it: a whole number as a number, anything else as given. */
const number = (text) => (text !== undefined && /^-?\d+$/.test(text) ? Number(text) : text);

/** The adapter settings: the --config file's, then OJS_URL, then --ojs-url. */
function settings(values) {
  let config = {};
  if (values.config !== undefined) {
    let text;
    try {
      text = fs.readFileSync(values.config, 'utf8');
    } catch (error) {
      throw new UsageError(`--config ${values.config}: cannot be read: ${error.message}`);
    }
    try {
      config = JSON.parse(text);
    } catch (error) {
      throw new UsageError(`--config ${values.config}: not JSON: ${error.message}`);
    }
  }
  // An empty OJS_URL counts as unset, as for `ojs-relay`.
  const url = values['ojs-url'] ?? (process.env.OJS_URL || undefined);
  if (url !== undefined && config && typeof config === 'object' && !Array.isArray(config)) {
    const adapter = config.adapter && typeof config.adapter === 'object' ? config.adapter : {};
    config = { ...config, adapter: { ...adapter, ojs_url: url } };
  }
  return config;
}

/** The handlers object of the module at `file` (its default export). */
async function loadHandlers(file) {
  const module = await import(pathToFileURL(path.resolve(file)).href);
  return module.default !== undefined ? module.default : module;
}

async function main(argv) {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: FLAGS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new UsageError(error.message);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (values.handlers === undefined) throw new UsageError('--handlers FILE is required');
  const deadlineText = values['deadline-ms'];
  if (deadlineText !== undefined && !/^\d+$/.test(deadlineText)) {
    throw new UsageError(`--deadline-ms ${deadlineText}: a whole number of milliseconds`);
  }
  const config = settings(values);

  const { NativeBridge } = require('../lib/native');
  const { callNative } = require('../lib/errors');
  const { Worker } = require('../lib/worker');
  const host = {
    development: process.env.NODE_ENV === 'development',
    urlSetting: '--ojs-url URL or OJS_URL (or adapter.ojs_url in the --config file)',
  };
  const bridge = callNative(() => new NativeBridge(JSON.stringify(config), host));
  if (bridge.notice) console.error(`ojs-worker: ${bridge.notice}`);
  const handlers = await loadHandlers(values.handlers);
  if (signals.length) return 0; // stopped before anything ran
  // The loop's own records (the backend down and back, timeouts, give-backs: the core's texts)
  // on stderr, labelled as `ojs-relay run` labels the relay's.
  const logger = {
    info: (message) => console.error(`ojs-worker: INFO ${message}`),
    warn: (message) => console.error(`ojs-worker: WARN ${message}`),
    error: (message) => console.error(`ojs-worker: ERROR ${message}`),
  };
  const options = {
    handlers,
    queues: values.queue,
    concurrency: number(values.concurrency),
    visibilityTimeoutMs: number(values['visibility-timeout-ms']),
    workerId: values['worker-id'],
    idlePollMs: number(values['idle-poll-ms']),
    stopDeadlineMs: number(deadlineText),
  };
  const worker = new Worker((optionsJson) => bridge.startWorker(optionsJson), options, logger);
  worker.on('failed', (error, ctx) => {
    const code = (error && (error.code || error.name)) || 'Error';
    console.error(`ojs-worker: job ${ctx.id} (${ctx.type}) failed: ${code}: ${error && error.message}`);
  });
  worker.on('unknown', (ctx) => console.error(`ojs-worker: job ${ctx.id}: no handler for type ${ctx.type}; nacked unknown_type (retried later)`));
  worker.on('dropped', (ctx) => console.error(`ojs-worker: job ${ctx.id} (${ctx.type}) ended after the worker gave it up: ${ctx.signal.reason && ctx.signal.reason.message}`));
  worker.on('error', (error) => console.error(`ojs-worker: ${error && error.stack ? error.stack : error}`));
  console.error(
    `ojs-worker: running ${worker.types.join(', ') || 'no handlers'} on ${values.queue ? values.queue.join(', ') : '(no queue)'} ` +
      `(worker ${worker.workerId}, concurrency ${worker.concurrency}, pid ${process.pid}); SIGINT/SIGTERM stops it`,
  );
  // The worker stops by itself only when it failed (reported as 'error' above).
  const selfStopped = new Promise((resolve) => worker.once('stopped', () => resolve(null)));
  const first = await Promise.race([stopRequested, selfStopped]);
  if (first === null) {
    console.error('ojs-worker: the worker stopped after an error');
    return 1;
  }
  const forced = new Promise((resolve) => {
    onAnotherSignal = resolve;
    if (signals.length > 1) resolve(signals[1]);
  });
  console.error(`ojs-worker: ${first}: stopping (jobs in flight have ${worker.stopDeadlineMs} ms to finish; ${first} again gives them back at once)`);
  const graceful = worker.stop().then(() => null);
  const signal = await Promise.race([graceful, forced]);
  if (signal === null) {
    console.error('ojs-worker: stopped');
    return 0;
  }
  console.error(`ojs-worker: ${signal}: giving the jobs in flight back now`);
  await worker.stop({ deadlineMs: 0 });
  console.error('ojs-worker: stopped (jobs in flight given back)');
  return 128 + os.constants.signals[signal];
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
  },
  (error) => {
    if (error instanceof UsageError) {
      console.error(`ojs-worker: ${error.message}\n\n${USAGE}`);
      process.exit(2);
    }
    const { OJSError } = require('../lib/errors');
    const code = error instanceof OJSError ? error.code : null;
    console.error(code ? `ojs-worker: error [${code}]${error.field ? ` (${error.field})` : ''}: ${error.message}` : `ojs-worker: ${error.stack || error}`);
    process.exit(code ? require('../lib/native').relayExitCode(code) : 1);
  },
);

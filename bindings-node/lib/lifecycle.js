'use strict';
// The end of the process, for the adapters created with `handleSignals` (the default) whose
// relay runs for this process. One set of process listeners serves them all:
//
// - SIGINT / SIGTERM: when the application listens to the signal too, it decides when to stop
//   (it drains: `server.close()`, then exits or lets the event loop end), so nothing closes
//   here and staging keeps working for the requests still running. When our listener is the
//   only one, the process would have ended at once without us: every relay flushes (staging
//   stays open meanwhile), then the signal is raised again and ends the process by its default
//   action.
// - 'beforeExit' (the event loop has nothing left to do): each adapter closes (flush, then the
//   core's runtime and pool go), once; the process then exits.
// - 'exit' (`process.exit()`, where nothing asynchronous runs any more) and a cluster worker's
//   'disconnect' (the primary went away or disconnected it: `cluster` exits the worker right
//   after this event): each relay of this process flushes synchronously, within
//   `relay.shutdown_timeout`, waiting first for a stop under way. A relay host process
//   (SQLite) flushes by itself when this process's channel closes.

const SIGNALS = ['SIGINT', 'SIGTERM'];

/** The adapters whose end this module handles. */
const adapters = new Set();
const signalListeners = new Map();
let processWired = false;
let worker = null;

function register(ojs) {
  adapters.add(ojs);
  if (!processWired) {
    processWired = true;
    process.on('beforeExit', onBeforeExit);
    process.on('exit', onExit);
    // In a cluster worker: `cluster` calls process.exit() right after 'disconnect' when the
    // primary is gone (its SIGTERM, a crash), so only a synchronous flush happens there.
    const cluster = require('node:cluster');
    if (cluster.isWorker && cluster.worker) {
      worker = cluster.worker;
      worker.on('disconnect', onExit);
    }
  }
  if (signalListeners.size === 0) wireSignals();
}

/** Forgets `ojs` (closed); the listeners go with the last adapter. */
function unregister(ojs) {
  if (!adapters.delete(ojs) || adapters.size > 0) return;
  unwireSignals();
  if (processWired) {
    processWired = false;
    process.removeListener('beforeExit', onBeforeExit);
    process.removeListener('exit', onExit);
    if (worker !== null) worker.removeListener('disconnect', onExit);
    worker = null;
  }
}

function wireSignals() {
  for (const signal of SIGNALS) {
    const listener = () => onSignal(signal);
    signalListeners.set(signal, listener);
    // First, so that the application's listeners (`once` ones too) are still counted.
    process.prependListener(signal, listener);
  }
}

function unwireSignals() {
  for (const [signal, listener] of signalListeners) process.removeListener(signal, listener);
  signalListeners.clear();
}

function onSignal(signal) {
  // The application listens too: its listener decides when the process ends.
  if (process.listenerCount(signal) !== 1) return;
  // Alone: flush, then end as if we had never listened (a second signal meanwhile does that
  // at once).
  unwireSignals();
  const flushes = [...adapters].map((ojs) => ojs._flushRelay().catch((error) => ojs.onError(error)));
  Promise.all(flushes).then(() => {
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}

function onBeforeExit() {
  for (const ojs of adapters) {
    if (ojs._closing) continue;
    ojs.close().catch((error) => ojs.onError(error));
  }
}

function onExit() {
  for (const ojs of adapters) ojs._stopRelaySync();
}

module.exports = { register, unregister };

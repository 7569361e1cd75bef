'use strict';
// The running side of jobs (issue 28, docs/express.md "Running jobs"): `ojs.worker({ handlers,
// queues, ... })` runs the application's handlers on the core worker loop
// (`NativeBridge.startWorker`, `src/worker.rs`).
//
// Every rule is the loop's: fetching for free slots, heartbeats, acks and nacks, backoff while
// the backend is down, the job's `timeout_ms` (nacked `timeout`; a later outcome is dropped),
// graceful stop, trace context, decryption, unknown types (nacked `unknown_type`, retryable),
// clipping long error texts; the options' defaults and checks too (an unknown option is the
// core's INVALID_CONFIG naming it). This file only calls the handlers and turns what they did
// into the loop's outcome JSON:
//
// - returned `value` -> `completed` with `value` as the ack's result (left out when undefined;
//   a value JSON cannot hold is a failure, INVALID_ARGS naming its path under `result`);
// - thrown `error` -> `failed`: code `error.code || error.name`, message `error.message`,
//   details `{ stack }`, and `retryable` when the error carries a boolean `retryable` (an
//   OJSError's, or the application's own `retryable = false` for a job that cannot succeed);
// - a type without a handler -> `unknown_type`.
//
// One wait for jobs is outstanding at any time (`next`, on the worker's own thread), asking for
// every slot at once: the loop fetches only for slots waiting (never beyond `concurrency` jobs
// held) and hands over every job it has without I/O, so a single wait feeds every slot, and
// that pending wait is what keeps the process alive while the worker runs.
//
// `ctx.signal` (an AbortSignal) is aborted when the job's `timeout_ms` has passed (the loop
// gives each job the time it has left, `timeout_ms`; the timer fires `TIMER_SLACK_MS` after
// it so that the loop, which decides, has nacked first) or when the worker stopped and gave
// the job back (`stop` resolved while the handler ran). A handler may ignore it: its outcome
// is then dropped (`finish` answers false) and the worker emits 'dropped'.
//
// What the loop itself says (the backend down and back, a job timed out or given back, an ack
// or nack not delivered, a job whose args could not be decoded: the core's texts and levels)
// is drained after each wait and handed to the logger (createOjs's `logger`, console by
// default) as the relay's records are (lib/log.js), a job's record naming the job.

const { EventEmitter } = require('node:events');
const { callNative, awaitNative, errorFor } = require('./errors');
const { rejectOption } = require('./native');
const { runInScope, withTraceContext } = require('./context');
const { jsonOf, snakeKey } = require('./json');
const { write } = require('./log');

/** How long one wait for a job lasts before it is asked again (ms). */
const WAIT_MS = 1000;
/** After the loop's deadline of a job, how much later its signal aborts (ms; see above). */
const TIMER_SLACK_MS = 20;
/** The options that are this package's; every other one goes to the core, in snake_case. */
const OWN_OPTIONS = ['handlers', 'autorun'];

/** The handlers option, checked: a plain object of functions by job type. */
function checkHandlers(handlers) {
  if (handlers === null || typeof handlers !== 'object' || Array.isArray(handlers)) {
    throw errorFor(
      'INVALID_CONFIG',
      `handlers: an object of handler functions by job type is required, e.g. { 'email.welcome': async (args, ctx) => ... }; got ${
        handlers === null ? 'null' : Array.isArray(handlers) ? 'an array' : typeof handlers
      }`,
      'handlers',
    );
  }
  const checked = Object.create(null);
  for (const [type, handler] of Object.entries(handlers)) {
    if (typeof handler !== 'function') {
      const field = `handlers[${JSON.stringify(type)}]`;
      throw errorFor('INVALID_CONFIG', `${field}: a handler must be a function (args, ctx) => result; got ${handler === null ? 'null' : typeof handler}`, field);
    }
    checked[type] = handler;
  }
  return checked;
}

/** The core's worker options JSON from the JavaScript ones (camelCase or snake_case keys). */
function coreOptions(options) {
  const out = {};
  for (const [key, value] of Object.entries(options)) {
    if (OWN_OPTIONS.includes(key) || value === undefined) continue;
    out[snakeKey(key)] = value;
  }
  return JSON.stringify(out);
}

/** The loop's outcome of a handler that threw `thrown` (see the header). */
function failedOutcome(thrown) {
  const isObject = thrown !== null && (typeof thrown === 'object' || typeof thrown === 'function');
  const code = (isObject && (thrown.code || thrown.name)) || 'Error';
  const outcome = {
    outcome: 'failed',
    code: String(code),
    message: thrown instanceof Error ? String(thrown.message) : isObject && typeof thrown.message === 'string' ? thrown.message : String(thrown),
  };
  if (isObject && typeof thrown.retryable === 'boolean') outcome.retryable = thrown.retryable;
  if (isObject && typeof thrown.stack === 'string') outcome.details = { stack: thrown.stack };
  return JSON.stringify(outcome);
}

/**
 * `stop()`'s deadline from its options (`{ deadlineMs }`, no other key); `undefined` when none
 * is given: the loop's `stopDeadlineMs` then (the worker option, else the core's default).
 */
function stopDeadline(options) {
  for (const key of Object.keys(options || {})) {
    if (key !== 'deadlineMs') callNative(() => rejectOption(key, ['deadlineMs']));
  }
  const deadlineMs = options?.deadlineMs ?? undefined;
  if (deadlineMs === undefined) return undefined;
  // What the native call can carry (a u32); the core knows no other limit.
  if (!Number.isInteger(deadlineMs) || deadlineMs < 0 || deadlineMs > 0xffffffff) {
    throw errorFor('INVALID_CONFIG', `deadlineMs: a whole number of milliseconds >= 0; got ${String(deadlineMs)}`, 'deadlineMs');
  }
  return deadlineMs;
}

/** Why a job's signal aborted: its `timeout_ms` passed. */
function timeoutReason(job) {
  return new DOMException(`job ${job.id} (${job.type}) ran past its timeout_ms: the worker loop nacked it as timeout`, 'TimeoutError');
}

/** Why a job's signal aborted: the worker stopped and gave the job back. */
function stoppedReason(job) {
  return new DOMException(`the worker stopped before job ${job.id} (${job.type}) finished: it was given back`, 'AbortError');
}

/**
 * A worker: handlers run on the core worker loop. Created by `ojs.worker(options)`; runs at
 * once unless `autorun: false` (then `start()`). Events: 'completed' (result, ctx), 'failed'
 * (error, ctx), 'unknown' (ctx: no handler for the type), 'dropped' (ctx: the handler ended
 * after the loop had settled the job), 'error' (error: the worker itself failed), 'stopped'.
 */
class Worker extends EventEmitter {
  /**
   * `startNative(optionsJson)` starts the core loop (a `NativeWorker`); `logger` (info, warn
   * and error methods) receives the loop's log records.
   */
  constructor(startNative, options, logger = console) {
    super();
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw errorFor('INVALID_CONFIG', 'worker: takes an options object, e.g. { handlers, queues: ["default"] }', 'worker');
    }
    this._handlers = checkHandlers(options.handlers);
    if (options.autorun !== undefined && typeof options.autorun !== 'boolean') {
      throw errorFor('INVALID_CONFIG', `autorun: true or false; got ${typeof options.autorun}`, 'autorun');
    }
    this._startNative = startNative;
    this._logger = logger;
    this._optionsJson = coreOptions(options);
    /** The running loop, or null (not started, or stopped). */
    this._native = null;
    /** The stop under way (a promise), or null. */
    this._stopping = null;
    /** The handlers running: `{ job, ctx, controller, timer }`. */
    this._active = new Set();
    this.workerId = null;
    this.concurrency = null;
    this.stopDeadlineMs = null;
    if (options.autorun !== false) this.start();
  }

  /** The job types this worker has handlers for. */
  get types() {
    return Object.keys(this._handlers);
  }

  /** Whether the loop runs (started, and no stop has ended it). */
  get running() {
    return this._native !== null;
  }

  /** Whether a stop began and the loop took it (no more fetches). */
  get stopping() {
    return this._native !== null && this._native.stopping;
  }

  /** Whether the backend did not answer the loop's last request (an outage being waited out). */
  get backendDown() {
    return this._native !== null && this._native.backendDown;
  }

  /** Handlers running now (a handler whose job the loop no longer holds included). */
  get inFlight() {
    return this._active.size;
  }

  /**
   * Starts the core loop (the options are judged by the core here: a bad one throws its
   * INVALID_CONFIG). Idempotent while running; after a stop has ended, starts a new loop.
   */
  start() {
    if (this._native !== null) {
      if (this._stopping) throw errorFor('RELAY_SHUT_DOWN', 'worker: stopping; start it again once stop() has resolved', 'worker');
      return this;
    }
    const native = callNative(() => this._startNative(this._optionsJson));
    this._native = native;
    this.workerId = native.workerId;
    this.concurrency = native.concurrency;
    this.stopDeadlineMs = native.stopDeadlineMs;
    this._pumped = this._pump(native);
    return this;
  }

  /**
   * Graceful stop: no more fetches; the jobs in flight have up to `deadlineMs` (default: the
   * worker's `stopDeadlineMs`, the core's 25 s unless given) to finish, the rest is given back
   * (their signals abort). Resolves once the loop has
   * stopped and every ack and nack went. A second call while one runs (`deadlineMs: 0`: give
   * back at once) ends the first one too (the core's rule); both resolve then.
   */
  stop(options = {}) {
    let deadlineMs;
    try {
      deadlineMs = stopDeadline(options);
    } catch (error) {
      return Promise.reject(error);
    }
    const native = this._native;
    if (native === null) return Promise.resolve();
    const stopped = awaitNative(native.stop(deadlineMs)).catch((error) => this._error(error));
    this._stopping ||= stopped.then(() => this._stopped(native));
    return this._stopping;
  }

  /** The first stop of `native` ended: what still runs was given back; the loop is over. */
  async _stopped(native) {
    for (const running of this._active) {
      clearTimeout(running.timer);
      if (!running.controller.signal.aborted) running.controller.abort(stoppedReason(running.job));
    }
    await this._pumped;
    this._log(native);
    this._native = null;
    this._stopping = null;
    this._emit('stopped');
  }

  /** Waits for jobs, one wait at a time, until the loop stops. */
  async _pump(native) {
    try {
      for (;;) {
        // Every slot: the loop caps what it fetches at `concurrency` jobs held.
        const jobs = await awaitNative(native.next(native.concurrency, WAIT_MS));
        this._log(native);
        if (jobs === null) return;
        for (const text of jobs) this._run(native, JSON.parse(text)).catch((error) => this._error(error));
      }
    } catch (error) {
      // The wait failed inside the core: this loop cannot go on; give the jobs back.
      this._error(error);
      if (!this._stopping) this.stop({ deadlineMs: 0 });
    }
  }

  /** Runs the handler of `job` (or reports its type unknown) and hands its outcome to the loop. */
  async _run(native, job) {
    const controller = new AbortController();
    const ctx = {
      id: job.id,
      type: job.type,
      queue: job.queue,
      attempt: job.attempt,
      meta: job.meta,
      traceparent: job.traceparent ?? null,
      tracestate: job.tracestate ?? null,
      timeoutMs: job.timeout_ms ?? null,
      workerId: this.workerId,
      signal: controller.signal,
      job: job.job,
    };
    const handler = this._handlers[job.type];
    if (handler === undefined) {
      this._finish(native, ctx, '{"outcome":"unknown_type"}', 'unknown', [ctx]);
      return;
    }
    const running = { job, ctx, controller, timer: null };
    if (typeof job.timeout_ms === 'number') {
      running.timer = setTimeout(() => controller.abort(timeoutReason(job)), job.timeout_ms + TIMER_SLACK_MS);
    }
    this._active.add(running);
    // The handler runs in the job's trace context (what it stages or sends carries it on), in
    // a scope of its own: nothing of where the worker was started (a request, a transaction).
    const context = {};
    if (ctx.traceparent !== null) context.traceparent = ctx.traceparent;
    if (ctx.tracestate !== null) context.tracestate = ctx.tracestate;
    const scope = Object.keys(context).length ? { context } : {};
    let outcome;
    let event;
    try {
      const result = await runInScope(scope, () => withTraceContext(ctx.traceparent, ctx.tracestate, () => handler(job.args, ctx)));
      outcome = result === undefined ? '{"outcome":"completed"}' : `{"outcome":"completed","result":${jsonOf(result, 'result')}}`;
      event = ['completed', [result, ctx]];
    } catch (thrown) {
      outcome = failedOutcome(thrown);
      event = ['failed', [thrown, ctx]];
    }
    clearTimeout(running.timer);
    this._active.delete(running);
    this._finish(native, ctx, outcome, ...event);
  }

  /** Hands `outcome` to the loop; emits `event` when the loop took it, 'dropped' when not. */
  _finish(native, ctx, outcome, event, args) {
    let accepted;
    try {
      accepted = callNative(() => native.finish(ctx.id, outcome));
    } catch (refused) {
      // The core could not read the outcome (cannot happen for the ones built above): the job
      // fails with the refusal rather than staying held until its reservation runs out.
      this._error(refused);
      accepted = callNative(() => native.finish(ctx.id, failedOutcome(refused)));
      [event, args] = ['failed', [refused, ctx]];
    }
    if (accepted) this._emit(event, ...args);
    else this._emit('dropped', ctx);
  }

  /** The loop's log records since the last call, on the logger (a job's naming the job). */
  _log(native) {
    const records = native.drainLog();
    if (records.length === 0) return;
    write(
      this._logger,
      records.map((record) => (record.jobId ? { ...record, message: `job ${record.jobId}: ${record.message}` } : record)),
    );
  }

  /** Emits without letting a listener's exception break the worker (it becomes 'error'). */
  _emit(event, ...args) {
    try {
      this.emit(event, ...args);
    } catch (error) {
      if (event !== 'error') this._error(error);
    }
  }

  /** The worker's own failure: 'error' when someone listens, else on stderr. */
  _error(error) {
    if (this.listenerCount('error') > 0) this._emit('error', error);
    else console.error(`ojs-adapter-express: worker: ${error && error.stack ? error.stack : error}`);
  }
}

module.exports = { Worker };

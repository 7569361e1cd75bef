'use strict';
// `ojs.router({ authorize })`: the relay's HTTP surface (issue 15) as an Express Router, the
// same surface `ojs-relay run --listen` serves (docs/events.md):
//
//   GET /v1/events/stream   the relay's events, SSE (the core's frames, written as they are)
//   GET /metrics            the core's metrics as OpenMetrics text (its content type too)
//   GET /healthz            the process answers
//   GET /readyz             database, outbox table and backend (the core's check); 503 when not
//
// `authorize(req)` (sync or async, required: the surface is closed by default) decides each
// request but /healthz: `true` full access, `{ tenant }` this tenant's events only (no
// /metrics, no /readyz, no other tenant; the query cannot widen it: the scope replaces any
// `tenant` parameter, and a parameter given twice is refused), `false` 403. The frames,
// filters, replay and tenant scoping are the core's; this file passes the request on, writes
// what comes back, and stops reading when the client goes. It logs nothing, and its messages
// never quote what `authorize` returned or what the request carried beyond the parameters.

const { rejectOption, metricsContentType } = require('./native');
const { callNative, errorFor, OJSError } = require('./errors');
const { WAIT_MS } = require('./events');

/** What `/metrics` is (the core's exposition format). */
const METRICS_CONTENT_TYPE = metricsContentType();

/** A comment line keeps an idle stream's connection (and any proxy's) open, this often (ms). */
const KEEP_ALIVE_MS = 15000;
const ROUTER_OPTIONS = ['authorize'];
const STREAM_QUERY = ['types', 'queues', 'job_types', 'tenant', 'since'];

/** The caller's access, from `authorize(req)`: `{ tenant: null | string }`, or null (refused). */
async function accessOf(authorize, req) {
  const decision = await authorize(req);
  if (decision === true) return { tenant: null };
  if (decision === false) return null;
  if (
    decision !== null &&
    typeof decision === 'object' &&
    typeof decision.tenant === 'string' &&
    // An empty tenant would be no tenant filter at all: every tenant's events.
    decision.tenant !== '' &&
    Object.keys(decision).length === 1
  ) {
    return { tenant: decision.tenant };
  }
  throw errorFor(
    'INVALID_CONFIG',
    `authorize: authorize(req) must return (or resolve with) true, false or { tenant: '<id>' } (a non-empty id); it returned ${describe(decision)}`,
    'authorize',
  );
}

/**
 * What a value is, for a message: its type and an object's keys, never a value (authorize may
 * return a user record, a session or a token by mistake, and the message is logged).
 */
function describe(value) {
  if (value === undefined) return 'undefined (a missing return?)';
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object') {
    if (typeof value.then === 'function') return 'a thenable';
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === 'tenant') {
      return value.tenant === '' ? "{ tenant: '' } (an empty tenant)" : `{ tenant: <${typeof value.tenant}> }`;
    }
    const shown = keys.slice(0, 10).join(', ');
    return keys.length ? `an object with keys ${shown}${keys.length > 10 ? ', ...' : ''}` : 'an empty object';
  }
  return `a ${typeof value}`;
}

function refuse(res, status, code, message) {
  res.status(status).json({ error: { code, message } });
}

/** The router of `ojs` (an `Ojs`); `options.authorize` is required. */
function router(ojs, options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw errorFor(
      'INVALID_CONFIG',
      'authorize: ojs.router({ authorize }) needs authorize(req) returning true, false or { tenant }; ' +
        'to serve the surface to everyone, say so: ojs.router({ authorize: () => true })',
      'authorize',
    );
  }
  for (const key of Object.keys(options)) {
    if (!ROUTER_OPTIONS.includes(key)) callNative(() => rejectOption(key, ROUTER_OPTIONS));
  }
  const { authorize } = options;
  if (typeof authorize !== 'function') {
    throw errorFor(
      'INVALID_CONFIG',
      `authorize: ojs.router() needs authorize(req) returning true, false or { tenant } (got ${describe(authorize)}); ` +
        'to serve the surface to everyone, say so: ojs.router({ authorize: () => true })',
      'authorize',
    );
  }
  // Express is the application's (a peer dependency), loaded only by those who mount this.
  const express = require('express');
  const routes = express.Router();

  /** Runs `handle(req, res, access)` for callers `authorize` lets in; `operatorOnly`: not tenants. */
  const guarded = (operatorOnly, handle) => async (req, res, next) => {
    try {
      const access = await accessOf(authorize, req);
      if (access === null) return refuse(res, 403, 'forbidden', 'authorize(req) refused this request');
      if (operatorOnly && access.tenant !== null) {
        return refuse(res, 403, 'forbidden', 'a tenant-scoped caller reads only /v1/events/stream');
      }
      await handle(req, res, access);
    } catch (error) {
      next(error);
    }
  };

  routes.get('/healthz', (req, res) => {
    res.type('text/plain').send('ok\n');
  });

  routes.get(
    '/readyz',
    guarded(true, async (req, res) => {
      const readiness = await ojs.readiness();
      res.status(readiness.ready ? 200 : 503).json(readiness);
    }),
  );

  routes.get(
    '/metrics',
    guarded(true, async (req, res) => {
      const text = await ojs.metricsText();
      if (text === null) {
        return refuse(res, 503, 'relay_not_running', 'neither a relay in this process nor the outbox table could be read: see /readyz');
      }
      // The core's type (OpenMetrics text), as given: Node's setHeader, since Express's `set`
      // and `send` would rewrite its charset.
      res.status(200).setHeader('Content-Type', METRICS_CONTENT_TYPE);
      res.end(text);
    }),
  );

  routes.get(
    '/v1/events/stream',
    guarded(false, async (req, res, access) => {
      const query = new URLSearchParams(req.url.slice(req.url.indexOf('?') + 1 || req.url.length));
      const request = {};
      for (const key of STREAM_QUERY) {
        const values = query.getAll(key);
        // Given twice, a parameter means what each reader of the URL chooses (the first, the
        // last, both): refused rather than guessed.
        if (values.length > 1) return refuse(res, 400, 'invalid_request', `the query parameter ${key} is given ${values.length} times`);
        if (values.length === 1) request[key] = values[0];
      }
      if (access.tenant !== null) {
        // A scoped caller may name its own tenant, no other (seed 003).
        if (request.tenant !== undefined && request.tenant !== access.tenant) {
          return refuse(res, 403, 'forbidden', 'this caller reads only its own tenant');
        }
        request.tenant = access.tenant;
      }
      const lastEventId = req.get('Last-Event-ID');
      if (lastEventId) request.last_event_id = lastEventId;
      let stream;
      try {
        stream = await ojs.relayEvents(request);
      } catch (error) {
        if (error instanceof OJSError && error.code === 'RELAY_SHUT_DOWN') {
          return refuse(res, 503, 'relay_not_running', error.message);
        }
        if (error instanceof OJSError && error.code === 'INVALID_CONFIG') {
          return refuse(res, 400, 'invalid_request', error.message);
        }
        throw error;
      }
      serve(req, res, stream);
    }),
  );
  return routes;
}

/** Writes the stream's frames until it ends or the client goes; then drops the core's handle. */
function serve(req, res, stream) {
  res.status(200);
  res.set({ 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no' });
  res.flushHeaders();
  let open = true;
  let drained = null;
  res.on('close', () => {
    open = false;
    stream.close();
    if (drained) drained();
  });
  res.on('drain', () => drained && drained());
  (async () => {
    let quietSince = Date.now();
    while (open) {
      const frame = await stream.next(WAIT_MS);
      if (!open || frame === null) break;
      let text = frame;
      if (text === '') {
        if (Date.now() - quietSince < KEEP_ALIVE_MS) continue;
        text = ': keep-alive\n\n';
      }
      quietSince = Date.now();
      if (!res.write(text)) {
        // A slow client: stop reading until it catches up (the core cuts it off if it falls
        // too far behind; nothing piles up here).
        await new Promise((resolve) => {
          drained = resolve;
        });
        drained = null;
      }
    }
  })()
    .catch(() => {})
    .finally(() => {
      stream.close();
      if (open) res.end();
    });
}

module.exports = { router, accessOf, KEEP_ALIVE_MS };

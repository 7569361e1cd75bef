'use strict';
// `ojs.router({ authorize })`: the relay's HTTP surface (issues 15 and 28) as an Express Router,
// the surface `ojs-relay run --listen` serves (docs/express.md, "Events, metrics and health").
//
// The surface is the core's (`ojs_outbox::surface`, reached through `Bridge::surface` in one
// call): its paths and methods (404, 405), who may read what (the operator, a tenant: its own
// events only, refused), the tenant scoping of the stream's query, the refusals and their
// bodies, /healthz, /readyz, /metrics and its content type, the Codec Server, the event
// stream's frames and its keep-alive comments. This file only
// - checks its own option (`authorize`, required: the surface is closed by default);
// - asks `authorize(req)` (sync or async) who the caller is, for every path the core does not
//   answer everyone (`surfaceIsOpen`: /healthz);
// - hands the request and that decision to the core, and writes the answer: its status,
//   headers and body, or the stream's frames as they come, not reading on while the client is
//   slow and dropping the core's subscription when the client goes.
// It logs nothing. What `authorize` returned never reaches a message: an object crosses as
// its keys only (and the `tenant` string), so a user record returned by mistake keeps its token.

const { rejectOption, surfaceIsOpen, surfaceServes } = require('./native');
const { callNative, errorFor } = require('./errors');
const { WAIT_MS } = require('./events');

const ROUTER_OPTIONS = ['authorize'];
/** The most body bytes the core reads (the Codec Server's limit); one more tells it "too large". */
const BODY_LIMIT = 1024 * 1024;

/** How a value that is no decision at all is named (`ojs.router({ authorize: <this> })`). */
function describe(value) {
  if (value === undefined) return 'undefined (a missing return?)';
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  const type = typeof value;
  return `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/**
 * The decision of `authorize(req)` as the core reads it (`access`): `true`, `false`, `null`, a
 * tenant id, `{ tenant }`; the core judges it and names anything else by its shape. An object
 * or array crosses as its shape only (its keys, or its length; the `tenant` string kept).
 * Nothing (`undefined`, from a forgotten `return`, also through a promise) and values JSON
 * cannot hold are a programming error caught here.
 */
function accessOf(decision) {
  if (decision !== null && typeof decision === 'object') {
    if (Array.isArray(decision)) return decision.map(() => null);
    const shape = {};
    for (const key of Object.keys(decision)) {
      const value = decision[key];
      // Only a tenant id and the read-only flag cross; any other value (a user record's token,
      // say) stays here, and the core names the keys it refuses.
      if (key === 'tenant' && typeof value === 'string') shape[key] = value;
      else if (key === 'read_only' && typeof value === 'boolean') shape[key] = value;
      else shape[key] = null;
    }
    return shape;
  }
  if (typeof decision === 'number') return Number.isFinite(decision) ? decision : 0;
  if (decision === null || typeof decision === 'boolean' || typeof decision === 'string') return decision;
  throw errorFor(
    'INVALID_CONFIG',
    `authorize: authorize(req) must return (or resolve with) true, false or { tenant: '<id>' } (a non-empty id); it returned ${describe(decision)}`,
    'authorize',
  );
}

/** The request body for the core (POST: the Codec Server): as a body parser left it, or read here. */
async function bodyOf(req) {
  if (req.method !== 'POST') return undefined;
  if (req.readableEnded || req._body === true) {
    // A body parser in front read it: what it made of it (express.json: the parsed JSON).
    const parsed = req.body;
    if (typeof parsed === 'string') return parsed;
    if (Buffer.isBuffer(parsed)) return parsed.toString('utf8');
    return parsed === undefined ? '' : JSON.stringify(parsed);
  }
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    // Beyond the limit only the count matters: the core answers 413.
    if (size <= BODY_LIMIT) chunks.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(chunks).subarray(0, BODY_LIMIT + 1).toString('utf8');
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
  routes.use(async (req, res, next) => {
    try {
      const queryAt = req.url.indexOf('?');
      const path = queryAt === -1 ? req.url : req.url.slice(0, queryAt);
      // Another path is the application's (a router mounted on `/` or a shared prefix).
      if (!surfaceServes(path)) return next();
      const request = {
        method: req.method,
        path,
        query: queryAt === -1 ? '' : req.url.slice(queryAt + 1),
        last_event_id: req.get('Last-Event-ID') ?? null,
        // /healthz answers everyone: authorize is not asked.
        access: surfaceIsOpen(path) ? null : accessOf(await authorize(req)),
        access_field: 'authorize',
        // A dashboard write needs it (the core's defence against cross-site requests).
        write_header: req.get('X-OJS-Dashboard') ?? null,
      };
      const body = await bodyOf(req);
      if (body !== undefined) request.body = body;
      const answer = await ojs._surface(JSON.stringify(request));
      res.statusCode = answer.status;
      // As given (Node's setHeader: Express's `set` and `send` would rewrite a charset).
      for (const [name, value] of answer.headers) res.setHeader(name, value);
      if (answer.stream) serve(req, res, answer.stream);
      else res.end(answer.body);
    } catch (error) {
      next(error);
    }
  });
  return routes;
}

/** Writes the stream's frames until it ends or the client goes; then drops the core's handle. */
function serve(req, res, stream) {
  // HEAD has no body; a client gone during the core call will not emit 'close' again.
  if (req.method === 'HEAD' || res.destroyed) {
    stream.close();
    res.end();
    return;
  }
  let open = true;
  let drained = null;
  res.on('close', () => {
    open = false;
    stream.close();
    if (drained) drained();
  });
  res.on('drain', () => drained && drained());
  (async () => {
    while (open) {
      // A frame, a keep-alive comment (the core's: the first at once), '' (none yet) or null (the end).
      const frame = await stream.next(WAIT_MS);
      if (!open || frame === null) break;
      if (frame === '') continue;
      if (!res.write(frame)) {
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

module.exports = { router };

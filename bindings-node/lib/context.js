'use strict';
// The ambient scope of a request or an `ojs.transaction`: AsyncLocalStorage holding the request
// context source and the knex transactor the §8.3 form (`req.ojs.enqueueAfterCommit(type,
// args)`) stages into. And the request's context: the headers the core reads, the user and the
// tenant from the application's resolvers (`createOjs({ user, tenant })`).

const { AsyncLocalStorage } = require('node:async_hooks');
const native = require('./native');
const { callNative, errorFor } = require('./errors');

const storage = new AsyncLocalStorage();

/** Runs `fn` with `patch` merged over the current scope. */
function runScoped(patch, fn) {
  return storage.run({ ...(storage.getStore() || {}), ...patch }, fn);
}

/** Runs `fn` in `scope` alone: nothing of the current scope (its transaction, its request). */
function runInScope(scope, fn) {
  return storage.run(scope, fn);
}

const NO_SCOPE = Object.freeze({});

/** The current scope (an empty frozen object outside any). */
function currentScope() {
  return storage.getStore() || NO_SCOPE;
}

/** `@opentelemetry/api` when the application has it (undefined: not looked up yet). */
let otel;

/**
 * The trace context of the application's active OpenTelemetry span (`@opentelemetry/api`,
 * when installed and a span is active), so a job continues the span that staged it (its
 * `create` span a child of it) rather than the request's incoming header; null otherwise.
 */
function activeSpanContext() {
  if (otel === undefined) {
    try {
      otel = require('@opentelemetry/api');
    } catch {
      otel = null;
    }
  }
  const span = otel?.trace.getActiveSpan()?.spanContext();
  if (!span || !otel.isSpanContextValid(span)) return null;
  const fields = { traceparent: `00-${span.traceId}-${span.spanId}-${span.traceFlags.toString(16).padStart(2, '0')}` };
  const state = span.traceState?.serialize();
  if (state) fields.tracestate = state;
  return fields;
}

/**
 * Runs `fn` with the job's trace context (`traceparent`, `tracestate`: the worker loop's
 * `process` span when tracing is on) as the active OpenTelemetry context, so the handler's own
 * spans continue it; read with the propagator the application registered (the SDK's W3C one).
 * Without `@opentelemetry/api` or a `traceparent`, `fn` runs as it is.
 */
function withTraceContext(traceparent, tracestate, fn) {
  activeSpanContext(); // looks the API up once
  if (!otel || !traceparent) return fn();
  const carrier = tracestate ? { traceparent, tracestate } : { traceparent };
  return otel.context.with(otel.propagation.extract(otel.ROOT_CONTEXT, carrier), fn);
}

/** The request headers the core reads the context from (`context_header_names`), lowercase. */
const HEADER_NAMES = native.contextHeaderNames();

/** The default user: `req.user?.id` (as a string), set by the app's authentication. */
function defaultUser(req) {
  const user = req.user == null ? undefined : req.user.id;
  return user === undefined || user === null ? undefined : String(user);
}

/** What a value is, for a message (never the value itself: it may be anything). */
function kindOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object' && typeof value.then === 'function') return 'a promise';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/**
 * The request resolvers of `createOjs` options: `user(req)` and `tenant(req)` (the
 * application's functions, or the defaults: `req.user?.id`, no tenant). A non-function is
 * refused here, naming the option.
 */
function requestResolvers(options) {
  const resolvers = { user: defaultUser, userGiven: false, tenant: null };
  for (const name of ['user', 'tenant']) {
    const given = options[name];
    if (given === undefined) continue;
    if (typeof given !== 'function') {
      throw errorFor(
        'INVALID_CONFIG',
        `${name}: createOjs({ ${name} }) takes a function of the request returning the ${name === 'user' ? "user's id" : "tenant's id"} ` +
          `(or null/undefined for none), e.g. ${name}: (req) => req.user?.${name === 'user' ? 'id' : 'tenantId'}; got ${kindOf(given)}`,
        name,
      );
    }
    resolvers[name] = given;
    if (name === 'user') resolvers.userGiven = true;
  }
  return resolvers;
}

/**
 * One resolver's answer for `req`: a string (a user id may also be a number or a bigint, made
 * text), or undefined for none; anything else, a promise included, is INVALID_CONFIG naming
 * the option. Synchronous because staging is (better-sqlite3's sync calls, `req.ojs.context`):
 * an answer that needs I/O belongs in a middleware before the route (`req.tenantId = await
 * ...`), and the resolver returns what it set.
 */
function resolve(name, resolver, req) {
  const value = resolver(req);
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  if (name === 'user' && ((typeof value === 'number' && Number.isFinite(value)) || typeof value === 'bigint')) return String(value);
  // A promise refused here must not also end the process as an unhandled rejection.
  if (typeof value === 'object' && typeof value.then === 'function') Promise.resolve(value).catch(() => {});
  const wanted = name === 'user' ? 'a non-empty string or a number' : 'a non-empty string';
  const kind = value === '' ? 'an empty string (return null for none)' : kindOf(value);
  const hint = kind === 'a promise' ? `; resolve it in a middleware before the route (req.${name}Id = await ...) and return that` : '';
  throw errorFor('INVALID_CONFIG', `${name}: ${name}(req) must return ${wanted}, null or undefined, synchronously; it returned ${kind}${hint}`, name);
}

/**
 * The request context of an HTTP request as the core takes it: the headers it names, as the
 * request has them (the core maps them: trims, the first Accept-Language tag, X-Request-Id;
 * X-OJS-Tenant only under `trustTenantHeader`), the user (`resolvers.user`, by default
 * `req.user?.id`) and the tenant (`resolvers.tenant`, given explicitly: it wins over any
 * header). Read when a job is staged, so a `req.user` set by an authentication middleware
 * after ours is seen. Nothing here reads a header for the user or the tenant.
 */
function contextFromRequest(req, resolvers) {
  const headers = {};
  const given = req.headers || {};
  for (const name of HEADER_NAMES) {
    const value = given[name];
    // Node gives a header sent twice as an array only for a few names: the first counts.
    const text = Array.isArray(value) ? value[0] : value;
    if (typeof text === 'string') headers[name] = text;
  }
  const context = { headers };
  const user = resolvers.userGiven ? resolve('user', resolvers.user, req) : resolvers.user(req);
  if (user !== undefined) context.user_id = user;
  if (resolvers.tenant !== null) {
    const tenant = resolve('tenant', resolvers.tenant, req);
    if (tenant !== undefined) context.tenant_id = tenant;
  }
  if (Object.keys(context).length === 1 && Object.keys(headers).length === 0) return null; // nothing to read
  return context;
}

/**
 * The context the core reads from `context` (its keys; null when it carries none), under the
 * header trust of `bridge` (a `NativeBridge`: `adapter.trust_tenant_header`).
 */
function requestContext(bridge, context) {
  if (context === null) return null;
  const read = JSON.parse(callNative(() => bridge.requestContextJson(JSON.stringify(context))));
  const present = Object.entries(read).filter(([, value]) => value !== null);
  return present.length ? Object.fromEntries(present) : null;
}

module.exports = {
  activeSpanContext,
  withTraceContext,
  storage,
  runScoped,
  runInScope,
  currentScope,
  contextFromRequest,
  requestContext,
  requestResolvers,
};

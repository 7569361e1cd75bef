'use strict';
// The ambient scope of a request or an `ojs.transaction`: AsyncLocalStorage holding the request
// context source and the knex transactor the §8.3 form (`req.ojs.enqueueAfterCommit(type,
// args)`) stages into.

const { AsyncLocalStorage } = require('node:async_hooks');
const native = require('./native');
const { callNative } = require('./errors');

const storage = new AsyncLocalStorage();

/** Runs `fn` with `patch` merged over the current scope. */
function runScoped(patch, fn) {
  return storage.run({ ...(storage.getStore() || {}), ...patch }, fn);
}

const NO_SCOPE = Object.freeze({});

/** The current scope (an empty frozen object outside any). */
function currentScope() {
  return storage.getStore() || NO_SCOPE;
}

/** The request headers the core reads the context from (`context_header_names`), lowercase. */
const HEADER_NAMES = native.contextHeaderNames();

/**
 * The request context of an HTTP request as the core takes it: the headers it names, as the
 * request has them, and the user (`req.user?.id`); the core maps them to its keys (trims,
 * reads the first Accept-Language tag, X-Request-Id, X-OJS-Tenant). Read when a job is
 * staged, so a `req.user` set by an authentication middleware after ours is seen.
 */
function contextFromRequest(req) {
  const headers = {};
  const given = req.headers || {};
  for (const name of HEADER_NAMES) {
    const value = given[name];
    // Node gives a header sent twice as an array only for a few names: the first counts.
    const text = Array.isArray(value) ? value[0] : value;
    if (typeof text === 'string') headers[name] = text;
  }
  const context = { headers };
  const user = req.user == null ? undefined : req.user.id;
  if (user !== undefined && user !== null) context.user_id = String(user);
  else if (Object.keys(headers).length === 0) return null; // nothing to read
  return context;
}

/** The context the core reads from `context` (its keys; null when it carries none). */
function requestContext(context) {
  if (context === null) return null;
  const read = JSON.parse(callNative(() => native.requestContextJson(JSON.stringify(context))));
  const present = Object.entries(read).filter(([, value]) => value !== null);
  return present.length ? Object.fromEntries(present) : null;
}

module.exports = { storage, runScoped, currentScope, contextFromRequest, requestContext };

'use strict';
// The ambient scope of a request or an `ojs.transaction`: AsyncLocalStorage holding the request
// context source and the knex transactor the §8.3 form (`req.ojs.enqueueAfterCommit(type,
// args)`) stages into.

const { AsyncLocalStorage } = require('node:async_hooks');

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

function header(req, name) {
  const value = req.headers && req.headers[name];
  const text = Array.isArray(value) ? value[0] : value;
  return typeof text === 'string' && text.trim() !== '' ? text.trim() : undefined;
}

/**
 * The request context of an HTTP request, in the core's keys. Read when a job is staged, so a
 * `req.user` set by an authentication middleware after ours is seen. Values are strings; the
 * core validates and maps them to meta keys.
 */
function contextFromRequest(req) {
  const context = {};
  const put = (key, value) => {
    if (value !== undefined && value !== null && String(value) !== '') context[key] = String(value);
  };
  put('traceparent', header(req, 'traceparent'));
  put('tracestate', header(req, 'tracestate'));
  put('request_id', header(req, 'x-request-id'));
  put('user_id', req.user == null ? undefined : req.user.id);
  put('tenant_id', header(req, 'x-ojs-tenant'));
  const language = header(req, 'accept-language');
  if (language) {
    const first = language.split(',')[0].split(';')[0].trim();
    if (first && first !== '*') put('locale', first);
  }
  return Object.keys(context).length ? context : null;
}

/** The JSON text of the current request context, or null. */
function contextJson(scope = currentScope()) {
  const context = typeof scope.context === 'function' ? scope.context() : scope.context;
  return context ? JSON.stringify(context) : null;
}

module.exports = { storage, runScoped, currentScope, contextFromRequest, contextJson };

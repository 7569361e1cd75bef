'use strict';
// Express integration: `ojsMiddleware(ojs)` puts the request's context (traceparent,
// tracestate, X-Request-ID, req.user?.id, X-OJS-Tenant, the first Accept-Language tag) in
// AsyncLocalStorage for everything the request runs, and exposes `req.ojs`.

const { runScoped, contextFromRequest } = require('./context');

/**
 * `req.ojs`: the adapter's calls bound to one request's context. The first argument of
 * enqueueAfterCommit / enqueueBulk may be a knex transactor (or the knex instance); without it
 * the job goes into the current `ojs.transaction` / `req.ojs.transaction`, or autocommits.
 */
class RequestOjs {
  constructor(ojs, req) {
    this.ojs = ojs;
    this.req = req;
  }

  /** The request context as the core receives it (null when the request carries none). */
  get context() {
    return contextFromRequest(this.req);
  }

  _scoped(work) {
    return runScoped({ context: () => contextFromRequest(this.req) }, work);
  }

  enqueue(...call) {
    return this._scoped(() => this.ojs.enqueue(...call));
  }

  enqueueAfterCommit(...call) {
    return this._scoped(() => this.ojs.enqueueAfterCommit(...call));
  }

  enqueueBulk(...call) {
    return this._scoped(() => this.ojs.enqueueBulk(...call));
  }

  transaction(work, config) {
    return this._scoped(() => this.ojs.transaction(work, config));
  }
}

/** Express middleware: request context for every job the request stages, and `req.ojs`. */
function ojsMiddleware(ojs) {
  if (!ojs || typeof ojs.enqueueAfterCommit !== 'function') {
    throw new TypeError('ojsMiddleware(ojs): pass the adapter returned by createOjs');
  }
  return function ojsRequestContext(req, res, next) {
    req.ojs = new RequestOjs(ojs, req);
    runScoped({ context: () => contextFromRequest(req) }, next);
  };
}

module.exports = { ojsMiddleware, RequestOjs };

'use strict';
// Express integration: `ojsMiddleware(ojs)` (or `ojsMiddleware(options)`) puts the request's
// context (the headers the core reads it from, the user and the tenant of the adapter's
// resolvers) in AsyncLocalStorage for everything the request runs, and exposes `req.ojs`.

const { runScoped, contextFromRequest, requestContext } = require('./context');
const { createOjs } = require('./facade');

/**
 * `req.ojs`: the adapter's calls bound to one request's context. The first argument of
 * enqueueAfterCommit / enqueueBulk may be a knex transactor (or the knex instance); without it
 * the job goes into the current `ojs.transaction` / `req.ojs.transaction`, and outside one the
 * call rejects with NoTransactionError.
 */
class RequestOjs {
  constructor(ojs, req) {
    this.ojs = ojs;
    this.req = req;
  }

  /**
   * The request context as the core reads it, in its keys (null when the request carries
   * none): the adapter's user and tenant resolvers run now.
   */
  get context() {
    return requestContext(this.ojs.native, contextFromRequest(this.req, this.ojs._resolvers));
  }

  _scoped(work) {
    return runScoped({ context: (adapter) => contextFromRequest(this.req, adapter._resolvers) }, work);
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

  transaction(...call) {
    return this._scoped(() => this.ojs.transaction(...call));
  }

  enqueueAfterCommitSync(...call) {
    return this._scoped(() => this.ojs.enqueueAfterCommitSync(...call));
  }

  enqueueBulkSync(...call) {
    return this._scoped(() => this.ojs.enqueueBulkSync(...call));
  }
}

/**
 * Express middleware: request context for every job the request stages, and `req.ojs`. Takes
 * the adapter of `createOjs`, or `createOjs`'s options (the spec's §8.3 form,
 * `ojsMiddleware({ url, knex })`), in which case it builds the adapter, which is then
 * `middleware.ojs` (to migrate, close it, or enqueue outside requests).
 */
function ojsMiddleware(ojsOrOptions) {
  let ojs = ojsOrOptions;
  if (typeof ojs?.enqueueAfterCommit !== 'function') {
    if (ojs === null || typeof ojs !== 'object' || Array.isArray(ojs)) {
      throw new TypeError('ojsMiddleware(ojs | options): pass the adapter returned by createOjs, or its options ({ url, knex, ... })');
    }
    ojs = createOjs(ojsOrOptions);
  }
  const middleware = function ojsRequestContext(req, res, next) {
    req.ojs = new RequestOjs(ojs, req);
    // Read when a job is staged, with the resolvers of the adapter that stages it.
    runScoped({ context: (adapter) => contextFromRequest(req, adapter._resolvers) }, next);
  };
  middleware.ojs = ojs;
  return middleware;
}

module.exports = { ojsMiddleware, RequestOjs };

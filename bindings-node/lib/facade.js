'use strict';
// createOjs: one adapter per application. It builds the core configuration (spec §5.2) from
// the options, runs the in-process relay (unless the mode is "external"), and offers the
// adapter interface of spec §5.1 on a knex connection.

const { NativeBridge, stageJob, stageJobs, optionKeys, rejectOption } = require('./native');
const { callNative, awaitNative, errorFor, fromNative, NoTransactionError } = require('./errors');
const hostKnex = require('./knex');
const { jsonOf, jobJson, jobsJson, camelKey, snakeKey } = require('./json');
const providers = require('./providers');
const transactions = require('./transaction');
const { activeSpanContext, runScoped, currentScope, requestResolvers } = require('./context');
const { decodeStaged, firstColumn, runStaged } = require('./staged');
const { RelayHost } = require('./relay-host');
const relayLog = require('./log');
const events = require('./events');
const { router } = require('./mount');
const lifecycle = require('./lifecycle');
const { Worker } = require('./worker');

/**
 * The configuration objects whose keys are the application's names, not option names: passed
 * as given (`encryption.keys`: key ids, which `keyId` names, so `myKey` stays `myKey`).
 */
const DATA_KEYS = new Set(['encryption.keys']);

/**
 * camelCase keys to the core's snake_case, recursively; snake_case keys pass unchanged, and so
 * does every key of a `DATA_KEYS` object (`path`: the dotted snake_case path of `value`).
 */
function snakeKeys(value, path = '') {
  if (Array.isArray(value) || value === null || typeof value !== 'object' || DATA_KEYS.has(path)) return value;
  const out = {};
  for (const [key, inner] of Object.entries(value)) {
    if (inner === undefined) continue;
    const snake = snakeKey(key);
    out[snake] = snakeKeys(inner, path === '' ? snake : `${path}.${snake}`);
  }
  return out;
}

/** createOjs options that are Express's own; every other option is a core configuration key. */
const EXPRESS_OPTIONS = ['knex', 'db', 'providers', 'config', 'relayProcess', 'onError', 'autoStart', 'handleSignals', 'logger', 'user', 'tenant'];
/** How an application sets the backend URL, named by the core when it is missing. */
const URL_SETTING = 'createOjs({ url })';

/**
 * The core configuration for these options: only what the caller gave, so every default stays
 * the core's. The accepted core options are the core's own keys in camelCase (`optionKeys`);
 * anything else is refused by the core's rule, with the accepted spelling when it is near.
 * `relay` is a mode string ("in_process", "external") or the relay section.
 */
function buildConfig(options) {
  const accepted = [...optionKeys().map(camelKey), ...EXPRESS_OPTIONS];
  const adapter = {};
  for (const [key, value] of Object.entries(options)) {
    if (!accepted.includes(key)) callNative(() => rejectOption(key, accepted));
    if (value === undefined || EXPRESS_OPTIONS.includes(key)) continue;
    adapter[snakeKey(key)] = key === 'relay' && typeof value === 'string' ? { mode: value } : snakeKeys(value, snakeKey(key));
  }
  if (adapter.database_url === undefined && options.knex) adapter.database_url = hostKnex.databaseUrlOf(options.knex);
  else if (adapter.database_url === undefined && options.db !== undefined) adapter.database_url = databaseUrlOfDb(options);
  const extra = snakeKeys(options.config || {});
  return { adapter: { ...extra, ...adapter } };
}

/** The providers of an adapter: the application's own (`providers` option) before the built-in ones. */
function providerList(options) {
  const own = options.providers === undefined ? [] : options.providers;
  if (!Array.isArray(own)) throw errorFor('INVALID_CONFIG', 'providers: an array of transaction providers', 'providers');
  for (const [index, provider] of own.entries()) {
    const missing = ['matches', 'dialect', 'execute', 'begin', 'savepoint'].find((m) => !provider || typeof provider[m] !== 'function');
    if (missing) throw errorFor('INVALID_CONFIG', `providers[${index}]: a provider needs a ${missing}() method`, 'providers');
  }
  return [...own, ...providers.BUILTIN];
}

/** The database object's binding (`{provider, dialect, placeholder, sync}`), or null. */
function bindingOf(db, list) {
  const provider = providers.providerOf(db, list);
  if (provider === undefined) return null;
  const dialect = provider.dialect(db);
  if (dialect !== 'postgresql' && dialect !== 'sqlite' && dialect !== 'mysql') {
    throw errorFor('INVALID_CONFIG', `db: this ${provider.name || 'provider'} database is not PostgreSQL, MySQL/MariaDB or SQLite`, 'db');
  }
  const placeholder = provider.placeholderFor ? provider.placeholderFor(dialect) : provider.placeholder || 'dollar';
  const sync = provider.syncFor ? provider.syncFor(db) : Boolean(provider.sync);
  return { provider, dialect, placeholder, sync };
}

/** The relay's database URL from a `db` option by the core's rule, or the missing-setting error. */
function databaseUrlOfDb(options) {
  const list = providerList(options);
  const binding = bindingOf(options.db, list);
  if (binding === null) throw unsupportedDb('db');
  const parts = binding.provider.urlParts ? binding.provider.urlParts(options.db, list) : null;
  if (!parts) {
    throw errorFor(
      'INVALID_DATABASE_URL',
      `database_url: the ${binding.provider.name} database's connection settings cannot be read; set createOjs({ databaseUrl }) yourself`,
      'database_url',
    );
  }
  const defined = Object.fromEntries(Object.entries(parts).filter(([, v]) => v !== undefined));
  return callNative(() =>
    require('./native').databaseUrlFromParts(JSON.stringify({ ...defined, base_dir: process.cwd(), setting: 'createOjs({ databaseUrl })' })),
  );
}

/** The refusal of a value that is no database or transaction of a supported library. */
function unsupportedDb(field) {
  return errorFor(
    'INVALID_CONFIG',
    `${field}: not a database or transaction of a supported library (knex, pg, Kysely, Drizzle, better-sqlite3, or a provider of the providers option)`,
    field,
  );
}

/** The refusal of a library transaction that ojs.transaction did not open: its commit is unseen. */
function foreignTransaction(name) {
  return new NoTransactionError(
    `this ${name} transaction was not opened by ojs.transaction() (or it has ended), so its commit cannot be seen: ` +
      'open it with ojs.transaction(db, async (tx) => ...) and stage into that tx',
    { code: 'NO_TRANSACTION' },
  );
}

/** What the core is told about this process: development mode is NODE_ENV=development only. */
function hostOptions() {
  return { development: process.env.NODE_ENV === 'development', urlSetting: URL_SETTING };
}

/**
 * The JSON text of the current request context for adapter `ojs` (a request's context reads
 * that adapter's user and tenant resolvers), or null; refused like a job's meta.
 */
function contextText(scope, ojs) {
  const context = typeof scope.context === 'function' ? scope.context(ojs) : scope.context;
  const span = activeSpanContext();
  // The active span goes to the core as `span`: the core decides which trace context wins.
  const fields = span ? { ...context, span } : context;
  return fields ? jsonOf(fields, 'context') : null;
}

/**
 * The refusal of a type-first call (`enqueueAfterCommit(type, args)`, `enqueueBulk(jobs)`)
 * made outside `ojs.transaction`. knex keeps no ambient record of the transaction a callback
 * runs in, so such a call cannot see a `knex.transaction(async (trx) => ...)` around it:
 * writing through the knex instance would commit the row on its own (sent even if that
 * transaction rolls back) or, on a one-connection pool (SQLite), wait for the connection the
 * transaction holds until knex's acquire timeout. It fails at once instead.
 */
function noTransaction(call) {
  return new NoTransactionError(
    `${call} without a transaction argument needs an enclosing ojs.transaction(), and there is none ` +
      '(a plain knex.transaction() cannot be seen): pass your knex transaction first ' +
      `(ojs.${call.replace('(', '(trx, ')}), or run the call inside ojs.transaction(async (trx) => ...); ` +
      `to write the row at once in a transaction of its own, pass the knex instance (ojs.${call.replace('(', '(knex, ')})`,
    { code: 'NO_TRANSACTION' },
  );
}

/**
 * The six INSERT parameters of a staged job's one encoding (`StagedJob::encode`) from `start`
 * on: job_id, job_type, job_args, job_options, job_meta separated by NUL, then NUL and the
 * tenant when there is one (5 fields: the tenant is NULL).
 */
function stagedParams(text, start) {
  const a = text.indexOf('\0', start);
  const b = text.indexOf('\0', a + 1);
  const c = text.indexOf('\0', b + 1);
  const d = text.indexOf('\0', c + 1);
  const e = text.indexOf('\0', d + 1);
  return [
    text.slice(start, a),
    text.slice(a + 1, b),
    text.slice(b + 1, c),
    text.slice(c + 1, d),
    e === -1 ? text.slice(d + 1) : text.slice(d + 1, e),
    e === -1 ? null : text.slice(e + 1),
  ];
}

/**
 * One job through the core's per-job stager: the INSERT's six parameters. The stager's INSERT
 * text comes with the first job only and is kept on the stager (`stager.sql`).
 *
 * A job with an ordering key or a unique policy (a keyed job) comes back as the core's
 * `Staged` instead (an empty first field, then its JSON; `decodeStaged`): an object, not an
 * array, run as a bulk of one (`runStaged`). Its id is not recorded in the ledger by the core:
 * the caller records the id the statements report. Its SQL is never the stager's INSERT text.
 */
function stageOne(stager, ledger, type, argsText, optionsText, metaText, context) {
  const withSql = stager.sql === undefined;
  let staged;
  try {
    staged = stageJob(stager.handle, ledger, type, argsText, optionsText, metaText, context, withSql);
  } catch (error) {
    throw fromNative(error);
  }
  if (staged.charCodeAt(0) === 0) return decodeStaged(staged, stager.texts);
  let start = 0;
  if (withSql) {
    start = staged.indexOf('\0') + 1;
    stager.sql = staged.slice(0, start - 1);
  }
  return stagedParams(staged, start);
}

/**
 * Several jobs (a JSON array text) through the core's stager: `decodeStaged`'s statements and
 * ids. The bulk INSERT texts cross once per stager and are kept on it (`stager.texts`).
 */
function stageMany(stager, jobsText, context) {
  return decodeStaged(callNative(() => stageJobs(stager.handle, jobsText, context)), stager.texts);
}

/** The core's staging handle of a dialect and placeholder style, with what it keeps. */
function newStager(native, dialect, placeholder) {
  return { handle: callNative(() => native.stager(dialect, placeholder)), sql: undefined, texts: new Map() };
}

/** Whether a call's first argument is a knex instance or transactor (not a job type). */
function isExecutor(first) {
  if (!first) return false;
  if (typeof first === 'function') return Boolean(first.client);
  return typeof first === 'object' && Boolean(first.client) && typeof first.raw === 'function';
}

class Ojs {
  constructor(options = {}) {
    // The options' names first: a misspelled `knex` is named as such, not as a missing one.
    this.config = buildConfig(options);
    /** A request's user and tenant: the application's resolvers (`user`, `tenant` options). */
    this._resolvers = requestResolvers(options);
    this._providers = providerList(options);
    /** Per database object: its binding (`bindingOf`), resolved once. */
    this._bindings = new WeakMap();
    if (options.knex) {
      this.knex = options.knex;
      this.dialect = hostKnex.dialectOf(options.knex);
      this.db = options.knex;
    } else if (options.db !== undefined) {
      const binding = this._binding(options.db);
      this.knex = null;
      this.db = options.db;
      this.dialect = binding.dialect;
    } else {
      throw errorFor(
        'INVALID_CONFIG',
        "db: createOjs needs the application's database: { knex } or { db } (a pg Pool, Kysely, Drizzle or better-sqlite3 database)",
        'db',
      );
    }
    /** Per dialect and placeholder style: the core's staging handle and its INSERT text (`_stager`). */
    this._stagers = { postgresql: undefined, sqlite: undefined, mysql: undefined };
    this._providerStagers = new Map();
    const host = hostOptions();
    this.native = callNative(() => new NativeBridge(JSON.stringify(this.config), host));
    /** The core's verdict on a unique job's staging statement (`held_outcome`): an id, or DUPLICATE thrown. */
    this._heldOutcome = (token, returned) => callNative(() => this.native.heldOutcome(token, returned));
    /** Where the relay's log records go (lib/log.js): info, warn and error methods. */
    this.logger = relayLog.checkLogger(options.logger);
    const notice = this.native.notice;
    if (notice) this.logger.warn(`ojs-adapter-express: ${notice}`);
    // On SQLite the core's I/O must not share this process with better-sqlite3 (relay-host.js).
    const separate = options.relayProcess ?? this.dialect === 'sqlite';
    this.host = separate ? new RelayHost(this.config, this.native.hotQueueCapacity, host) : null;
    this._log = relayLog.forApp(this);
    this.onError = options.onError || ((error) => console.error(`ojs-adapter-express: ${error.message}`));
    /** The close under way or done (a promise), else null. */
    this._closing = null;
    this.ready = options.autoStart === false ? Promise.resolve() : this.start();
    this.ready.catch((error) => this.onError(error));
    // The process's end: signals, beforeExit, exit, a cluster worker's disconnect (lifecycle.js).
    if (options.handleSignals !== false && this.native.relayInProcess) lifecycle.register(this);
  }

  /** The outbox table name (the core's default unless configured). */
  get tableName() {
    return this.native.tableName;
  }

  /** Whether the relay runs in this process. */
  get relayInProcess() {
    return this.native.relayInProcess;
  }

  /** A core call that may block: on libuv's pool, or in the relay host process. */
  _io(method, ...args) {
    if (this.host) return this.host.call(method, ...args);
    return awaitNative(this.native[method](...args));
  }

  /** The after-commit wake-up for committed job ids: never blocks, never fails. */
  notifyCommitted(jobIds) {
    if (this.host) this.host.notifyCommitted(jobIds);
    else this.native.notifyCommitted(jobIds.join('\n'));
  }

  /**
   * The outermost knex transaction committed with this adapter's core ledger (lib/knex.js):
   * the core wakes the relay for the ids it holds; a relay host (SQLite) is sent them.
   */
  committed(ledger) {
    if (!this.host) {
      this.native.committed(ledger);
      return;
    }
    const ids = ledger.commit();
    if (ids !== '') this.host.notifyCommitted(ids.split('\n'));
  }

  /**
   * Starts the in-process relay unless it runs in this process already (the core's
   * `ensure_relay`; nothing in "external" mode). Idempotent; `autoStart` (default) calls it
   * when the adapter is created.
   */
  async start() {
    this._log.starting();
    await this._io('ensureRelay');
  }

  /** Graceful stop: sends what the relay holds (within shutdown_timeout), keeps the rest pending. */
  async stopRelay() {
    await this._io('stopRelay');
    this._log.stopped();
  }

  /**
   * Flushes and stops the relay, releases the core's runtime and database pool, and unhooks
   * the process listeners (once the flush has ended: a process exiting meanwhile still waits
   * for it). Idempotent (every call resolves when the one close has ended); the adapter
   * cannot be used afterwards.
   */
  close() {
    this._closing ||= (async () => {
      try {
        await this.ready.catch(() => {});
        if (this.host) await this.host.close();
        await awaitNative(this.native.close());
        this._log.stopped();
      } finally {
        lifecycle.unregister(this);
      }
    })();
    return this._closing;
  }

  /** lifecycle.js: the flush of a process that a signal ends (staging stays open). */
  async _flushRelay() {
    if (this._closing) return this._closing;
    if (this.host) {
      // A relay host process gone or closing flushed itself (a terminal's Ctrl-C reaches the
      // whole process group); none is started just to be stopped.
      if (!this.host.child || !this.host.child.connected) return undefined;
      return this.stopRelay().catch((error) => {
        const hostGone = !this.host.child || !this.host.child.connected || error.code === 'RELAY_SHUT_DOWN';
        if (!hostGone) throw error;
      });
    }
    return this.stopRelay();
  }

  /**
   * lifecycle.js: the synchronous flush of a process that is exiting (`process.exit()`, a
   * cluster worker's disconnect); waits for a stop or close under way. A relay host process
   * (SQLite) flushes by itself once this process's channel closes.
   */
  _stopRelaySync() {
    if (this.host) return;
    this.native.stopRelaySync();
    this._log.stopped();
  }

  // ---- spec §5.1 ---------------------------------------------------------------------------

  /** Sends one job to the backend now, without the outbox; resolves with its id. */
  enqueue(type, args, options, meta) {
    return this._enqueueNow(type, args, options, meta, currentScope());
  }

  async _enqueueNow(type, args, options, meta, scope) {
    const job = jobJson(type, args, options, meta);
    return this._io('enqueueNow', job, contextText(scope, this));
  }

  /**
   * Stages one job in the transaction `trx` (sent after the outermost commit), or, given the
   * knex instance, writes it at once and wakes the relay. Without a first knex argument
   * (`enqueueAfterCommit(type, args, options)`), stages into the current `ojs.transaction`;
   * outside one it rejects with NoTransactionError (never autocommits: it cannot tell whether
   * it runs inside a plain knex.transaction). Resolves with the job id.
   *
   * The per-call hot path: one synchronous core call (`stageJob`: validation, id and the row's
   * parameters, the INSERT text only with the first job of a dialect, and the id recorded in
   * the transaction's core ledger for the wake-up), then one query on `trx` whose promise is
   * returned (no async wrapper around it). Errors, also synchronous ones, reject the returned
   * promise.
   */
  enqueueAfterCommit(first, second, third, fourth, fifth) {
    try {
      let executor;
      let type;
      let args;
      let options;
      let meta;
      const scope = currentScope();
      if (isExecutor(first) || this._isDatabase(first)) {
        executor = first;
        type = second;
        args = third;
        options = fourth;
        meta = fifth;
      } else {
        executor = scope.trx;
        if (executor === undefined) throw noTransaction('enqueueAfterCommit(type, args)');
        type = first;
        args = second;
        options = third;
        meta = fourth;
      }
      if (!isExecutor(executor)) {
        if (typeof type !== 'string') {
          // Not a text: the general path hands the value over as JSON, for the core to refuse.
          const jobs = `[${jobJson(type, args, options, meta)}]`;
          return Promise.resolve(this._stageProvider(executor, jobs, scope, false)).then((ids) => ids[0]);
        }
        const { jobId, done, ledger, keyed } = this._stageOne(executor, type, args, options, meta, scope, false);
        if (keyed !== undefined) return Promise.resolve(keyed).then((ids) => ids[0]);
        if (done === null) return Promise.resolve(jobId);
        return done.then(
          () => {
            if (ledger === null) this.notifyCommitted([jobId]);
            return jobId;
          },
          (error) => {
            throw hostKnex.databaseError(error);
          },
        );
      }
      if (typeof type !== 'string') {
        // Not a text: the general path hands the value over as JSON, for the core to refuse.
        return this._stage(executor, `[${jobJson(type, args, options, meta)}]`, scope).then((ids) => ids[0]);
      }
      const argsText = jsonOf(args, 'args');
      const optionsText = options == null ? null : jsonOf(options, 'options');
      const metaText = meta == null ? null : jsonOf(meta, 'meta');
      let level = null;
      let ledger = null;
      if (hostKnex.isTransaction(executor)) {
        hostKnex.assertOpen(executor);
        level = hostKnex.levelOf(executor);
        ledger = hostKnex.ledgerOf(level, this).handle;
      }
      const dialect = level !== null ? level.dialect : executor === this.knex ? this.dialect : hostKnex.dialectOf(executor);
      const stager = this._stagers[dialect] || this._stager(dialect);
      // In a transaction the core records the id in its ledger (woken at the outermost commit).
      const params = stageOne(stager, ledger, type, argsText, optionsText, metaText, contextText(scope, this));
      if (!Array.isArray(params)) return this._runKnex(executor, level, params).then((ids) => ids[0]);
      const jobId = params[0];
      let query;
      try {
        query = executor.raw(stager.sql, params);
      } catch (error) {
        throw hostKnex.databaseError(error);
      }
      return query.then(
        () => {
          if (ledger === null) this.notifyCommitted([jobId]);
          return jobId;
        },
        (error) => {
          throw hostKnex.databaseError(error);
        },
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The staging handle of `dialect` (the INSERT text comes with its first job). */
  _stager(dialect) {
    const stager = newStager(this.native, dialect, 'question');
    this._stagers[dialect] = stager;
    return stager;
  }

  /** Stages every job with one INSERT; same transaction rules; resolves with their ids. */
  async enqueueBulk(...call) {
    const [executor, jobs] = this._executorCall(call);
    if (!isExecutor(executor)) return this._stageProvider(executor, jobsJson(jobs), currentScope(), false);
    return this._stage(executor, jobsJson(jobs), currentScope());
  }

  /**
   * enqueueAfterCommit for a library whose transactions are synchronous (better-sqlite3, and
   * Drizzle on it): the row is written before it returns the job id; a failure throws (and,
   * inside `ojs.transaction`, rolls the transaction back).
   */
  enqueueAfterCommitSync(first, ...rest) {
    const scope = currentScope();
    const given = this._isDatabase(first);
    const executor = given ? first : scope.trx;
    if (executor === undefined) throw noTransaction('enqueueAfterCommitSync(type, args)');
    const [type, args, options, meta] = given ? rest : [first, ...rest];
    if (typeof type !== 'string') {
      return this._stageProvider(executor, `[${jobJson(type, args, options, meta)}]`, scope, true)[0];
    }
    const { jobId, ledger, keyed } = this._stageOne(executor, type, args, options, meta, scope, true);
    if (keyed !== undefined) return keyed[0];
    if (ledger === null) this.notifyCommitted([jobId]);
    return jobId;
  }

  /** enqueueBulk for a synchronous library (see enqueueAfterCommitSync); returns the ids. */
  enqueueBulkSync(...call) {
    const given = this._isDatabase(call[0]);
    const scope = currentScope();
    const executor = given ? call[0] : scope.trx;
    if (executor === undefined) throw noTransaction('enqueueBulkSync(jobs)');
    return this._stageProvider(executor, jobsJson(given ? call[1] : call[0]), scope, true);
  }

  /** Whether `value` is a database or transaction object of one of this adapter's providers. */
  _isDatabase(value) {
    if (value === null || typeof value !== 'object') return false;
    return transactions.levelOf(value) !== undefined || this._bindings.has(value) || providers.providerOf(value, this._providers) !== undefined;
  }

  /** The binding of a database object (cached), or INVALID_CONFIG naming `field`. */
  _binding(db, field = 'db') {
    let binding = this._bindings.get(db);
    if (binding === undefined) {
      binding = bindingOf(db, this._providers);
      if (binding === null) throw unsupportedDb(field);
      this._bindings.set(db, binding);
    }
    return binding;
  }

  /**
   * Where a provider stages: the open level of `executor` (a transaction ojs.transaction
   * opened), or none (a database outside a transaction: written at once, then woken). A
   * transaction the library opened without ojs.transaction is refused: its commit is unseen.
   */
  _place(executor, sync) {
    const level = transactions.levelOf(executor) || null;
    const binding = level !== null ? level.binding : this._binding(executor, 'trx');
    if (level === null && binding.provider.foreignTransaction && binding.provider.foreignTransaction(executor)) {
      throw foreignTransaction(binding.provider.name);
    }
    if (sync && !binding.sync) {
      throw errorFor('INVALID_CONFIG', `trx: ${binding.provider.name} transactions are asynchronous: use enqueueAfterCommit / enqueueBulk`, 'trx');
    }
    return { level, binding };
  }

  /** The core's staging handle of a dialect and placeholder style (INSERT text with its first job). */
  _providerStager(dialect, placeholder) {
    const key = `${dialect}/${placeholder}`;
    let stager = this._providerStagers.get(key);
    if (stager === undefined) {
      stager = newStager(this.native, dialect, placeholder);
      this._providerStagers.set(key, stager);
    }
    return stager;
  }

  /**
   * One job through a provider: the core stages it (validation, id, parameters, the id in the
   * level's ledger), the provider runs the INSERT on `executor`. Returns `{jobId, done, ledger}`:
   * `done` the provider's promise (null once written synchronously); `ledger` null outside a
   * transaction (the caller wakes the relay once the row is written).
   */
  _stageOne(executor, type, args, options, meta, scope, sync) {
    const { level, binding } = this._place(executor, sync);
    const argsText = jsonOf(args, 'args');
    const optionsText = options == null ? null : jsonOf(options, 'options');
    const metaText = meta == null ? null : jsonOf(meta, 'meta');
    const ledger = level === null ? null : transactions.ledgerOf(level, this).handle;
    const stager = this._providerStager(binding.dialect, binding.placeholder);
    const params = stageOne(stager, ledger, type, argsText, optionsText, metaText, contextText(scope, this));
    if (!Array.isArray(params)) {
      // A keyed job: its statements as a bulk of one; `keyed` the ids (synchronous library) or their promise.
      return { keyed: this._runProvider(executor, params, { level, binding }) };
    }
    const jobId = params[0];
    let result;
    try {
      result = binding.provider.execute(executor, stager.sql, params);
    } catch (error) {
      throw hostKnex.databaseError(error);
    }
    const done = result && typeof result.then === 'function' && !binding.sync ? result : null;
    if (done === null && !sync && ledger === null) this.notifyCommitted([jobId]);
    return { jobId, done, ledger };
  }

  /**
   * Several jobs through a provider (the core's `Staged`): run in a savepoint of their own
   * (outside a transaction: in a transaction of their own) when the core says so. Synchronous
   * libraries return the ids; the others a promise of them.
   */
  _stageProvider(executor, jobsText, scope, sync, place = this._place(executor, sync)) {
    const { binding } = place;
    const staged = stageMany(this._providerStager(binding.dialect, binding.placeholder), jobsText, contextText(scope, this));
    return this._runProvider(executor, staged, place);
  }

  /**
   * Runs a decoded `Staged` (`stageMany`, or a keyed job of `stageOne`) through a provider, in
   * a savepoint of its own when the core says so, then records the ids it reports. A statement
   * with `returns` runs through the provider's `queryValue` (without one: the first column of
   * what `execute` answers); the core says what its answer means (`heldOutcome`: a DUPLICATE
   * thrown there rolls the savepoint back). Synchronous libraries return the ids; the others
   * a promise of them.
   */
  _runProvider(executor, staged, { level, binding }) {
    const { provider } = binding;
    const finish = () => {
      if (staged.ids.length === 0) return staged.ids;
      if (level !== null) transactions.ledgerOf(level, this).ledger.staged(staged.idsText);
      else this.notifyCommitted(staged.ids);
      return staged.ids;
    };
    const wrapped = (tx) => {
      if (!staged.needsSavepoint) tx = executor;
      const execute = (sql, params) => provider.execute(tx, sql, params);
      const query = provider.queryValue
        ? (sql, params) => provider.queryValue(tx, sql, params)
        : (sql, params) => {
            const result = execute(sql, params);
            return !binding.sync && result && typeof result.then === 'function' ? result.then(firstColumn) : firstColumn(result);
          };
      const ran = runStaged(staged, execute, query, this._heldOutcome, binding.sync);
      return binding.sync ? undefined : Promise.resolve(ran);
    };
    const run = () => {
      if (!staged.needsSavepoint) return wrapped(executor);
      return level !== null ? provider.savepoint(level.tx, wrapped) : provider.begin(executor, wrapped);
    };
    if (binding.sync) {
      try {
        run();
      } catch (error) {
        throw hostKnex.databaseError(error);
      }
      return finish();
    }
    return Promise.resolve()
      .then(run)
      .then(finish, (error) => {
        throw hostKnex.databaseError(error);
      });
  }

  _executorCall(call) {
    if (isExecutor(call[0]) || this._isDatabase(call[0])) return call;
    const { trx } = currentScope();
    if (trx === undefined) throw noTransaction('enqueueBulk(jobs)');
    return [trx, ...call];
  }

  async _stage(executor, jobsText, scope) {
    let level = null;
    if (hostKnex.isTransaction(executor)) {
      hostKnex.assertOpen(executor);
      level = hostKnex.levelOf(executor);
    }
    const dialect = level !== null ? level.dialect : executor === this.knex ? this.dialect : hostKnex.dialectOf(executor);
    const staged = stageMany(this._stagers[dialect] || this._stager(dialect), jobsText, contextText(scope, this));
    return this._runKnex(executor, level, staged);
  }

  /**
   * Runs a decoded `Staged` on a knex executor (`level`: its transaction's, or null), then
   * records the ids it reports in the level's ledger (or wakes the relay for them).
   */
  async _runKnex(executor, level, staged) {
    await hostKnex.execute(executor, staged, this._heldOutcome);
    if (staged.ids.length === 0) return staged.ids;
    if (level !== null) hostKnex.ledgerOf(level, this).ledger.staged(staged.idsText);
    else this.notifyCommitted(staged.ids);
    return staged.ids;
  }

  /**
   * knex.transaction with the transactor made current for the §8.3 form; nested calls open a
   * savepoint in the current one.
   */
  transaction(first, second, third) {
    if (typeof first === 'function' && !first.client) {
      // ojs.transaction(work, config): in the current ojs.transaction, or on the adapter's database.
      const outer = currentScope().trx;
      if (outer !== undefined && !isExecutor(outer)) return this.transaction(outer, first, second);
      const run = (trx) => runScoped({ trx }, () => first(trx));
      if (outer && !outer.isCompleted()) return outer.transaction(run, second);
      if (this.knex === null) return this.transaction(this.db, first, second);
      return this.knex.transaction(run, second);
    }
    const db = first;
    const work = second;
    if (typeof work !== 'function') throw errorFor('INVALID_CONFIG', 'work: ojs.transaction(db, work) needs a function', 'work');
    if (isExecutor(db)) {
      const run = (trx) => runScoped({ trx }, () => work(trx));
      return db.transaction(run, third);
    }
    const level = transactions.levelOf(db) || null;
    const binding = level !== null ? level.binding : this._binding(db);
    if (level === null && binding.provider.foreignTransaction && binding.provider.foreignTransaction(db)) {
      throw foreignTransaction(binding.provider.name);
    }
    return transactions.run(binding, db, level, (tx) => runScoped({ trx: tx }, () => work(tx)), third);
  }

  /** Runs `work` with this request context (core keys: request_id, traceparent, ...). */
  withContext(context, work) {
    return runScoped({ context }, work);
  }

  // ---- schema and administration ----------------------------------------------------------

  /** The core's DDL for the outbox table, run through the application's knex. */
  async migrate() {
    const statements = callNative(() => this.native.createTableSql(this.dialect));
    if (this.knex !== null) {
      await runDdl(this.knex, statements);
      return;
    }
    const { provider } = this._binding(this.db);
    try {
      for (const sql of statements) await provider.execute(this.db, sql, []);
    } catch (error) {
      throw errorFor('DATABASE', `creating the outbox table failed: ${error.message}`, null, error);
    }
  }

  async status() {
    return JSON.parse(await this._io('statusJson'));
  }

  /**
   * The relay's metrics (the core's), or null when no relay runs here (relay mode
   * "external"). With a relay host process (SQLite) two counts of this process are added:
   * `wakeup_pending`, the committed ids waiting to be sent to the host, and `wakeup_dropped`,
   * the ids not sent because the host was not reading (the poller delivers their rows); both
   * are 0 without a relay host, where a wake-up is a direct core call (`hot_dropped`).
   */
  async metrics() {
    const metrics = JSON.parse(await this._io('metricsJson'));
    if (metrics === null) return null;
    const wakeups = this.wakeups;
    metrics.wakeup_pending = wakeups === null ? 0 : wakeups.pending;
    metrics.wakeup_dropped = wakeups === null ? 0 : wakeups.dropped;
    return metrics;
  }

  /**
   * The metrics text (OpenMetrics) of the relay running for this adapter (the core's, what
   * `/metrics` serves), or null when none runs here (relay mode "external").
   */
  async metricsText() {
    return this._io('metricsText');
  }

  /**
   * The core's readiness check (what `/readyz` answers): `{ ready, database, backend }`, each
   * part `"ok"` or why not, through the relay's own connection.
   */
  async readiness() {
    return JSON.parse(await this._io('readinessJson'));
  }

  /**
   * A subscriber of this adapter's relay events, as the core's SSE frames (what
   * `/v1/events/stream` serves): `{ next(timeoutMs), close() }`, `next` resolving with a frame,
   * `""` when none came in time, or null at the end. `request`: `types`, `queues`, `jobTypes`
   * (comma-separated text, as in the query string), `tenant`, `since`, `lastEventId` (or the
   * snake_case names). Rejects with RELAY_SHUT_DOWN when no relay runs for this adapter.
   */
  async relayEvents(request = {}) {
    const json = events.contractJson(request, events.STREAM_KEYS);
    if (this.host) return this.host.openStream('relay', json);
    return events.nativeStream(await awaitNative(this.native.relayEvents(json)));
  }

  /**
   * The events of an OJS event stream, `for await (const event of ojs.subscribeEvents({...}))`:
   * by default the configured backend's (`<url>/v1/events/stream`), or `url` (a relay's own
   * stream, e.g.). Options: `types`, `queues`, `jobTypes` (arrays), `tenant`, `since`,
   * `lastEventId`, `url`, `token`. Reconnects and resumes after the last event (Last-Event-ID)
   * in the core; `break` closes it.
   */
  subscribeEvents(options = {}) {
    const json = events.contractJson(options, events.SUBSCRIPTION_KEYS);
    return new events.EventSubscription(async () => {
      if (this.host) return this.host.openStream('feed', json);
      return events.nativeStream(await awaitNative(this.native.subscribeEvents(json)));
    });
  }

  /**
   * A worker running `handlers` (`{ 'email.welcome': async (args, ctx) => result }`) on the
   * core worker loop against this adapter's backend (its URL, token and encryption keys):
   * `queues`, `concurrency`, `visibilityTimeoutMs`, `workerId`, `idlePollMs` go to the core as
   * given; `autorun: false` defers the start to `worker.start()` (lib/worker.js). It runs
   * until `worker.stop({ deadlineMs })`, independently of the relay and of `close()`. The
   * loop's log records go to this adapter's `logger`.
   */
  worker(options) {
    return new Worker((optionsJson) => this.native.startWorker(optionsJson), options, this.logger);
  }

  /**
   * The relay's HTTP surface as an Express Router: `GET /v1/events/stream`, `/metrics`,
   * `/healthz`, `/readyz` (and the Codec Server with `adapter.encryption`), answered by the
   * core. `authorize(req)` (required) returns true, false or `{ tenant }`.
   */
  router(options) {
    return router(this, options);
  }

  /**
   * One request of `router()`'s mount answered by the core's surface (`Bridge::surface`, in
   * the relay host process on SQLite): `{ status, headers ([name, value] pairs), body, stream }`,
   * `stream` (`{ next(timeoutMs), close() }`) set for an event stream.
   */
  async _surface(requestJson) {
    if (this.host) return this.host.surface(requestJson);
    const answer = await awaitNative(this.native.surface(requestJson));
    return { ...answer, stream: answer.stream ? events.nativeStream(answer.stream) : null };
  }

  /**
   * The wake-up state of the relay host channel, read at once (also while the host does not
   * answer): `{capacity, pending, sending, sent, dropped}`; null without a relay host.
   * `sending`: one wake-up message is being written (the only one this process holds);
   * `pending`: ids waiting for it (at most `capacity`); `sent`, `dropped`: ids so far.
   */
  get wakeups() {
    if (!this.host) return null;
    const { capacity, ids, sending, sent, dropped } = this.host.wakeups;
    return { capacity, pending: ids.length, sending: sending !== null, sent, dropped };
  }

  /** The process id of the relay host process (SQLite), or null when there is none (yet). */
  get relayHostPid() {
    return this.host && this.host.child ? this.host.child.pid : null;
  }

  /**
   * Committed rows of these jobs, as `{[jobId]: {status, attempts, error}}`: `status` one of
   * "pending", "failed", "sent", "dead"; `attempts` a number; `error` the last error text or
   * null. An id with no committed row (rolled back, pruned, purged, unknown) is absent.
   */
  async outboxRows(jobIds) {
    return JSON.parse(await this._io('rowsJson', jobIds.join('\n')));
  }

  /** Deletes `sent` rows older than `olderThan` (ISO-8601 duration); resolves with the count. */
  async prune({ olderThan }) {
    return this._io('prune', olderThan);
  }

  /** Dead rows of `tenant` (or all), oldest first, at most `limit` (the core's default when null). */
  async deadList(options = {}) {
    const { tenant = null, limit = null } = adminOptions(options, ['tenant', 'limit']);
    return JSON.parse(await this._io('deadListJson', tenant, limit));
  }

  /** Dead rows of `tenant` (or all) back to pending with fresh attempts; resolves with the count. */
  async deadReplay(options = {}) {
    const { tenant = null } = adminOptions(options, ['tenant']);
    return this._io('deadReplay', tenant);
  }

  /** Deletes the dead rows of `tenant` (or all) for good; resolves with the count. */
  async deadPurge(options = {}) {
    const { tenant = null } = adminOptions(options, ['tenant']);
    return this._io('deadPurge', tenant);
  }

  /** Test seam: commits `trx` (outermost) as a process dying before the wake-up would. */
  async _commitWithoutWakeup(trx) {
    hostKnex.suppressWakeup(trx);
    return trx.commit();
  }

  /** Test seam: the outermost ojs.transaction of `tx` will commit without waking the relay. */
  _suppressWakeup(tx) {
    transactions.suppressWakeup(tx);
  }
}

/**
 * The options of an admin call, every key one of `accepted`: an old or misspelled one
 * (`tenantId`) is refused by the core's rule, never ignored.
 */
function adminOptions(options, accepted) {
  for (const key of Object.keys(options || {})) {
    if (!accepted.includes(key)) callNative(() => rejectOption(key, accepted));
  }
  return options || {};
}

/** Creates the adapter; with `autoStart` (default) the in-process relay starts at once (await `ojs.ready`). */
function createOjs(options) {
  return new Ojs(options);
}

/**
 * Creates the outbox table with the core's DDL for this knex client (for a knex migration:
 * `exports.up = (knex) => createOutboxTable(knex)`). `tableName` as in createOjs's outbox.
 */
async function createOutboxTable(knex, { tableName } = {}) {
  const config = { adapter: tableName === undefined ? {} : { outbox: { table_name: tableName } } };
  const adapter = callNative(() => new NativeBridge(JSON.stringify(config), { needsBackend: false }));
  await runDdl(knex, callNative(() => adapter.createTableSql(hostKnex.dialectOf(knex))));
}

/**
 * Drops the outbox table (and its indexes) with the core's statement for this knex client:
 * the `down` of a knex migration, `exports.down = (knex) => dropOutboxTable(knex)`. Every
 * row still in it is lost, sent or not.
 */
async function dropOutboxTable(knex, { tableName } = {}) {
  const config = { adapter: tableName === undefined ? {} : { outbox: { table_name: tableName } } };
  const adapter = callNative(() => new NativeBridge(JSON.stringify(config), { needsBackend: false }));
  await runDdl(knex, [callNative(() => adapter.dropTableSql(hostKnex.dialectOf(knex)))], 'dropping');
}

async function runDdl(knex, statements, what = 'creating') {
  try {
    if (hostKnex.dialectOf(knex) === 'sqlite') {
      // One transaction (a savepoint inside a migration's): another connection sees the table
      // with all its indexes or not at all (docs/outbox-schema.md#applying-the-ddl). MySQL's DDL
      // commits by itself, and would end such a savepoint under knex.
      await knex.transaction(async (trx) => {
        for (const sql of statements) await trx.raw(sql);
      });
      return;
    }
    for (const sql of statements) await knex.raw(sql);
  } catch (error) {
    throw errorFor('DATABASE', `${what} the outbox table failed: ${error.message}`, null, error);
  }
}

module.exports = { Ojs, createOjs, createOutboxTable, dropOutboxTable, buildConfig, EXPRESS_OPTIONS };

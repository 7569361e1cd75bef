// Type declarations of ojs-adapter-express: transactional job enqueue for Express on knex, pg,
// Kysely, Drizzle, Prisma or better-sqlite3 transactions (docs/express.md).
import type { Knex } from 'knex';
import type { Request, RequestHandler, Router } from 'express';

/** JSON a job's args, options or meta may hold. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A time: a Date, or RFC 3339 text. */
export type Timestamp = Date | string;
/** A duration: whole milliseconds, or ISO 8601 text (`PT1M30S`). */
export type Duration = number | string;
type UniqueOnConflict = 'reject' | 'ignore' | 'replace' | 'replace_except_schedule';
type JobState = 'scheduled' | 'available' | 'pending' | 'active' | 'completed' | 'retryable' | 'cancelled' | 'discarded';

/**
 * Job options (validated by the core), in the spec's names or in camelCase with millisecond
 * durations: both send the same job; a key given both ways is refused (docs/express.md).
 */
export interface JobOptions {
  queue?: string;
  priority?: number;
  timeout_ms?: number;
  timeoutMs?: number;
  visibility_timeout_ms?: number;
  visibilityTimeoutMs?: number;
  delay_until?: Timestamp;
  delayUntil?: Timestamp;
  scheduled_at?: Timestamp;
  scheduledAt?: Timestamp;
  expires_at?: Timestamp;
  expiresAt?: Timestamp;
  pending?: boolean;
  retry?: {
    max_attempts?: number;
    maxAttempts?: number;
    initial_interval?: Duration;
    initialInterval?: Duration;
    backoff_coefficient?: number;
    backoffCoefficient?: number;
    max_interval?: Duration;
    maxInterval?: Duration;
    jitter?: boolean;
    on_exhaustion?: 'discard' | 'dead_letter';
    onExhaustion?: 'discard' | 'dead_letter';
    non_retryable_errors?: string[];
    nonRetryableErrors?: string[];
  };
  unique?: {
    keys?: Array<'type' | 'queue' | 'args' | 'meta'>;
    args_keys?: string[];
    argsKeys?: string[];
    meta_keys?: string[];
    metaKeys?: string[];
    period?: Duration;
    on_conflict?: UniqueOnConflict;
    onConflict?: UniqueOnConflict;
    states?: JobState[];
  };
  tags?: string[];
  /**
   * The outbox's own option (never sent): jobs with the same key reach the backend one at a
   * time, in the order their transactions committed (docs/express.md, "Ordering keys").
   */
  ordering_key?: string;
  orderingKey?: string;
}

/** One job of a bulk. */
export interface BulkJob {
  type: string;
  args: Json[];
  options?: JobOptions | null;
  meta?: { [key: string]: Json } | null;
}

/** The request context keys the core maps into job meta. */
export interface RequestContext {
  request_id?: string;
  traceparent?: string;
  tracestate?: string;
  user_id?: string;
  tenant_id?: string;
  locale?: string;
}

/** A knex instance (autocommit) or transactor (staged in that transaction). */
export type KnexExecutor = Knex | Knex.Transaction;

/**
 * A database or transaction object of a provider's library: a pg Pool, Client or PoolClient; a
 * Kysely instance or the ControlledTransaction ojs.transaction hands out; a Drizzle database or
 * transaction; a better-sqlite3 Database. Typed loosely so that no library's types are needed.
 */
export type ProviderDatabase = object;

/** A database or transaction of any supported library (knex or a provider's). */
export type Executor = KnexExecutor | ProviderDatabase;

/**
 * A transaction provider (docs/express.md, "The provider interface"): runs the core's SQL with
 * its parameters on its library's transaction and says when that transaction ended. Every
 * statement, parameter, placeholder style and the savepoint bookkeeping stay the core's.
 */
export interface TransactionProvider {
  /** The library's name, for messages. */
  name: string;
  /** Whether `db` (a database or transaction object) is this library's. */
  matches(db: unknown): boolean;
  /** The core's dialect of `db`. */
  dialect(db: ProviderDatabase): 'postgresql' | 'sqlite' | 'mysql';
  /** The parameter style the core writes: `$1` ('dollar') or `?` ('question'). */
  placeholder?: 'dollar' | 'question';
  placeholderFor?(dialect: 'postgresql' | 'sqlite' | 'mysql'): 'dollar' | 'question';
  /** Whether the library's transactions are synchronous functions (better-sqlite3). */
  sync?: boolean;
  syncFor?(db: ProviderDatabase): boolean;
  /**
   * Runs one statement of the core, as given, on `executor` (a database or a transaction). A
   * statement may return rows (PostgreSQL's `SELECT pg_advisory_xact_lock(...)`): ignored.
   */
  execute(executor: ProviderDatabase, sql: string, params: unknown[]): unknown;
  /**
   * Runs one statement of the core that returns a row (a unique job's INSERT ... RETURNING)
   * and answers the first column of its first row, or null when it returned none (a promise
   * of it for an asynchronous library). Without it: the first column of what `execute` answers.
   */
  queryValue?(executor: ProviderDatabase, sql: string, params: unknown[]): string | null | Promise<string | null>;
  /** Runs `work(tx)` in a new transaction: settles after COMMIT, or rejects after ROLLBACK / a failed COMMIT. */
  begin<T>(db: ProviderDatabase, work: (tx: ProviderDatabase) => T, options?: unknown): Promise<Awaited<T>> | T;
  /** The same in a savepoint of `tx`. */
  savepoint<T>(tx: ProviderDatabase, work: (tx: ProviderDatabase) => T, options?: unknown): Promise<Awaited<T>> | T;
  /** `db` is a transaction the provider did not open (its commit unseen): refused. */
  foreignTransaction?(db: ProviderDatabase): boolean;
  /** The relay's database URL parts, for createOjs without databaseUrl. */
  urlParts?(db: ProviderDatabase, providers: TransactionProvider[]): {
    engine: 'postgresql' | 'sqlite' | 'mysql';
    url?: string;
    host?: string;
    port?: number | string;
    user?: string;
    password?: string;
    database?: string;
    sslmode?: string;
  } | null;
}

/** The built-in providers. */
export declare const providers: {
  pg: TransactionProvider;
  kysely: TransactionProvider;
  drizzle: TransactionProvider;
  prisma: TransactionProvider;
  sequelize: TransactionProvider;
  typeorm: TransactionProvider;
  betterSqlite3: TransactionProvider;
};

/**
 * Where the relay's and the workers' log records go: one call per record, at its level, with
 * the core's whole line (job id included for a dead letter; `job <id>: ` before a worker's
 * record about a job). `console`, a pino or a winston logger fit as they are.
 */
export interface OjsLogger {
  /** The relay resumed (backend or database answering again); a worker's backend answers again, a job given back at a stop. */
  info(message: string): void;
  /** The relay paused (backend unreachable, backpressure), a database or prune failure; a worker's backend down, a job timed out, an ack or nack not delivered. */
  warn(message: string): void;
  /** A dead letter (one per job), or the backend refusing the relay (401/403/404/405); a worker's fetch refused. */
  error(message: string): void;
}

export interface CreateOjsOptions {
  /**
   * Base URL of the OJS backend (adapter.ojs_url). Required: unset (or null) throws INVALID_CONFIG
   * naming `createOjs({ url })`, except with NODE_ENV=development, where the core's development
   * URL is used and one warning (`logger.warn`, console by default) says so. Any option not
   * declared here is refused with INVALID_CONFIG (e.g. `ojsUrl`: did you mean "url"?).
   */
  url?: string | null;
  /** adapter.backend_type: "external", the only type (the core's default). */
  backendType?: 'external';
  /** The application's knex instance (pg, mysql2 or better-sqlite3); this or `db`. */
  knex?: Knex;
  /** In place of `knex`: a pg Pool or Client, a Kysely, Drizzle or better-sqlite3 database, a PrismaClient, a Sequelize instance, a TypeORM DataSource. */
  db?: ProviderDatabase;
  /** Transaction providers of the application's own, tried before the built-in ones. */
  providers?: TransactionProvider[];
  /** The relay's database URL; derived from the knex connection settings when absent. */
  databaseUrl?: string;
  /** Bearer token for the backend (adapter.auth_token). */
  authToken?: string;
  /**
   * adapter.trust_tenant_header (default false): take a request's tenant from its
   * `X-OJS-Tenant` header. Any client can send that header: set this only behind a gateway that
   * sets it and strips the client's. A `tenant` resolver's answer wins over it.
   */
  trustTenantHeader?: boolean;
  /**
   * The tenant of a request, read when a job is staged in it (`ojsMiddleware`): a non-empty
   * string, or null/undefined for none. Synchronous (a promise is refused: resolve it in a
   * middleware before the route and return what it set). Any other answer is INVALID_CONFIG
   * naming `tenant`. Default: none (or the header, with `trustTenantHeader`).
   */
  tenant?: (req: Request) => string | null | undefined;
  /**
   * The user of a request (`ojs.context.user_id`), read like `tenant`: a non-empty string or a
   * number, or null/undefined for none. Default: `req.user?.id`, as your authentication sets it.
   */
  user?: (req: Request) => string | number | bigint | null | undefined;
  /** adapter.outbox: table_name / tableName, poll_interval, batch_size, ... (camelCase or snake_case). */
  outbox?: Record<string, Json>;
  /** "in_process" (default) or "external", or the adapter.relay section. */
  relay?: 'in_process' | 'external' | Record<string, Json>;
  /**
   * adapter.encryption: args sealed (AES-256-GCM) at staging. `keyId` (or `key_id`) names the
   * key that seals; `keys` maps every key id, the current one and older ones still to be read,
   * to its 32 bytes in base64. Key ids are passed as written (never respelled); the core checks
   * everything (a bad key is INVALID_CONFIG at createOjs). Rotation: add the new key to `keys`
   * and point `keyId` at it (docs/express.md, "Encrypted args").
   */
  encryption?: {
    keyId?: string;
    key_id?: string;
    keys: Record<string, string>;
  };
  /**
   * adapter.tracing: OpenTelemetry spans exported over OTLP/HTTP (docs/tracing.md). `true` on,
   * `false` off (over OTEL_TRACES_EXPORTER), unset or null: on only with OTEL_TRACES_EXPORTER=otlp.
   */
  tracing?: boolean | null;
  /** Other adapter keys, merged into the configuration as given. */
  config?: Record<string, Json>;
  /** Start the in-process relay at once (default true); otherwise call start(). */
  autoStart?: boolean;
  /**
   * The adapter handles the process's end (default true with an in-process relay): on
   * SIGINT/SIGTERM with no listener of your own, flush and end by the signal; with yours,
   * staging goes on and the relay flushes at `beforeExit`, at `process.exit()`, in a cluster
   * worker at its disconnect, or at `ojs.close()` (docs/express.md, "Relay modes and lifecycle").
   */
  handleSignals?: boolean;
  /** Run the core's I/O in a relay host process (default: true on SQLite, false on PostgreSQL). */
  relayProcess?: boolean;
  /** Receives a failed automatic start, or a failed flush or close at the process's end (default: console.error). */
  onError?: (error: Error) => void;
  /**
   * Receives the relay's log records (pause, resume, dead letter, refusal, database or prune
   * failure) and the development-URL notice (default: console). Drained every 250 ms by a
   * timer that never keeps the process alive; on SQLite the relay host process sends them here.
   */
  logger?: OjsLogger;
}

/** Counts of the outbox as `ojs-relay status` shows them. */
export interface OutboxStatus {
  pending: number;
  failed: number;
  sent: number;
  dead: number;
  /** Of the sent rows, jobs the backend's unique policy (`onConflict: 'reject'`) refused. */
  unique_rejected: number;
  /** Rows with a live lease (SQLite); null on PostgreSQL, where row locks are invisible to a read. */
  in_flight: number | null;
  oldest_pending_age_ms: number;
  recent_lag_ms: number;
}

/** One committed outbox row as `outboxRows` returns it. */
export interface RowState {
  status: 'pending' | 'failed' | 'sent' | 'dead';
  /** Attempts the relay has used (0 until a send is attributed to the job). */
  attempts: number;
  /** The last error text, or null. */
  error: string | null;
}

/** The relay's metrics: the core's, plus this process's wake-up counts (relay host, SQLite). */
export interface RelayMetrics {
  pending: number;
  in_flight: number;
  sent: number;
  retried: number;
  dead: number;
  deduplicated: number;
  /** Jobs not created: the backend's unique policy (`onConflict: 'reject'`) holds another job. */
  unique_rejected: number;
  /** Committed ids the core's hot queue took. */
  hot_enqueued: number;
  /** Ids the core's hot queue dropped (the poller delivers their rows). */
  hot_dropped: number;
  /** Committed ids waiting in the core's hot queue now. */
  hot_queue_depth: number;
  oldest_pending_age_ms: number;
  backend_healthy: boolean | null;
  last_error: string | null;
  /** Committed ids waiting in this process for the relay host (0 without one). */
  wakeup_pending: number;
  /** Committed ids this process did not send to the relay host because it was not reading (0 without one). */
  wakeup_dropped: number;
}

/** The wake-up channel to the relay host process, read synchronously. */
export interface WakeupState {
  /** At most this many ids wait while a message is being written (relay.hot_queue_capacity). */
  capacity: number;
  pending: number;
  /** A wake-up message is being written (the only one this process holds). */
  sending: boolean;
  sent: number;
  dropped: number;
}

/**
 * What `authorize(req)` decides (the core reads it): `true` full access, `{ tenant }` (or the
 * tenant id alone) that tenant's events and rows only, `{ read_only: true }` (with or without
 * a `tenant`) the same reads and no dashboard replay or purge, `false` or `null` 403.
 */
export type EventAccess =
  | boolean
  | null
  | string
  | { tenant: string }
  | { read_only: true; tenant?: string };

/** `ojs.router()`'s options: `authorize` is required (`() => true` serves everyone, on purpose). */
export interface RouterOptions {
  authorize: (req: Request) => EventAccess | Promise<EventAccess>;
}

/** The core's readiness check, what `/readyz` answers (503 when `ready` is false). */
export interface Readiness {
  ready: boolean;
  /** `"ok"`, or why not. */
  database: string;
  /** `"ok"`, or why not. */
  backend: string;
}

/** A subscriber of the relay's events (`GET /v1/events/stream`'s query); filters are comma-separated text. */
export interface RelayEventsRequest {
  types?: string;
  queues?: string;
  jobTypes?: string;
  job_types?: string;
  tenant?: string;
  /** RFC 3339: replay from this time (needs relay.event_retention). */
  since?: string;
  /** Replay after this event (needs relay.event_retention); wins over `since`. */
  lastEventId?: string;
  last_event_id?: string;
}

/** The core's SSE frames of one subscriber: `next` resolves with a frame, `""` when idle, null at the end. */
export interface RelayFrames {
  next(timeoutMs: number): Promise<string | null>;
  close(): void;
}

/** `ojs.subscribeEvents()`'s options; without `url`, the configured backend's `/v1/events/stream`. */
export interface SubscribeEventsOptions {
  url?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Event types; a trailing `*` matches a prefix (`job.*`). */
  types?: string[];
  queues?: string[];
  jobTypes?: string[];
  job_types?: string[];
  tenant?: string;
  since?: string;
  lastEventId?: string;
  last_event_id?: string;
}

/** One event (CloudEvents 1.0, RFC-0005): the envelope as the stream sent it. */
export interface OjsEvent {
  specversion: string;
  id: string;
  type: string;
  source: string;
  subject?: string;
  time: string;
  datacontenttype?: string;
  data: { [key: string]: Json };
}

/** The events of a stream: `for await (const event of subscription)`; `break` or `close()` ends it. */
export interface EventSubscription extends AsyncIterableIterator<OjsEvent> {
  close(): void;
}

/** What a handler gets besides its args (docs/express.md, "Running jobs"). */
export interface JobContext {
  id: string;
  type: string;
  queue: string;
  /** The backend's attempt count of the job when it was fetched. */
  attempt: number;
  meta: Record<string, Json>;
  /** The W3C trace context the job carries (from the request that staged it), or null. */
  traceparent: string | null;
  tracestate: string | null;
  /** What was left of the job's `timeout_ms` when the handler got it, or null without one. */
  timeoutMs: number | null;
  workerId: string;
  /**
   * Aborted when the job's `timeout_ms` passed (reason: a `TimeoutError` DOMException; the
   * loop has nacked it `timeout`) or when the worker stopped and gave the job back
   * (`AbortError`). A handler may ignore it; its outcome is then dropped.
   */
  signal: AbortSignal;
  /** The whole job as fetched (args decrypted). */
  job: Record<string, Json>;
}

/**
 * A handler: resolves with the ack's result (JSON; `undefined` for none) or throws (nacked
 * `failed`: code `error.code || error.name`, message, `details.stack`, and `retryable` when the
 * error has a boolean `retryable`).
 */
export type JobHandler = (args: Json[], ctx: JobContext) => unknown;

/**
 * `ojs.worker()`'s options: `handlers` and `autorun` are the package's; the others go to the
 * core worker loop as given (camelCase or snake_case), which owns their defaults and checks.
 */
export interface WorkerOptions {
  handlers: Record<string, JobHandler>;
  queues: string[];
  concurrency?: number;
  visibilityTimeoutMs?: number;
  workerId?: string;
  idlePollMs?: number;
  /** A `stop()` without `deadlineMs` gives jobs in flight this long (ms; the core's default 25000). */
  stopDeadlineMs?: number;
  /** Default true: the worker starts at creation; false: on `start()`. */
  autorun?: boolean;
}

/** Runs handlers on the core worker loop (`ojs.worker()`). */
export declare class Worker {
  /** The worker id sent to the backend (once started). */
  readonly workerId: string | null;
  /** Handler slots (once started: the given or the core's default). */
  readonly concurrency: number | null;
  /** A `stop()` without `deadlineMs` waits this long (once started: the given or the core's default). */
  readonly stopDeadlineMs: number | null;
  /** The job types with a handler. */
  readonly types: string[];
  readonly running: boolean;
  /** A stop began and the loop took it: nothing more is fetched. */
  readonly stopping: boolean;
  /** Handlers running now. */
  readonly inFlight: number;
  /** The backend did not answer the loop's last request (an outage, waited out with backoff; logged). */
  readonly backendDown: boolean;
  /** Starts the loop (the core judges the options here); idempotent while running. */
  start(): this;
  /**
   * Graceful stop: jobs in flight have `deadlineMs` (default: `stopDeadlineMs`) to finish, the
   * rest is given back. A second call (`deadlineMs: 0`) ends a first one waiting.
   */
  stop(options?: { deadlineMs?: number }): Promise<void>;
  on(event: 'completed', listener: (result: unknown, ctx: JobContext) => void): this;
  on(event: 'failed', listener: (error: unknown, ctx: JobContext) => void): this;
  on(event: 'unknown' | 'dropped', listener: (ctx: JobContext) => void): this;
  on(event: 'error', listener: (error: Error) => void): this;
  on(event: 'stopped', listener: () => void): this;
  once(event: 'completed', listener: (result: unknown, ctx: JobContext) => void): this;
  once(event: 'failed', listener: (error: unknown, ctx: JobContext) => void): this;
  once(event: 'unknown' | 'dropped', listener: (ctx: JobContext) => void): this;
  once(event: 'error', listener: (error: Error) => void): this;
  once(event: 'stopped', listener: () => void): this;
  off(event: string, listener: (...args: any[]) => void): this;
}

export declare class Ojs {
  /** The knex instance given to createOjs, or null when it was given `db`. */
  readonly knex: Knex | null;
  /** The database given to createOjs (`knex` or `db`). */
  readonly db: Executor;
  readonly dialect: 'postgresql' | 'sqlite' | 'mysql';
  /** The core configuration built from the options (spec §5.2 shape). */
  readonly config: { adapter: Record<string, Json> };
  /** Settles when the automatic start has finished. */
  readonly ready: Promise<void>;
  readonly tableName: string;
  readonly relayInProcess: boolean;
  /** The wake-up channel to the relay host (SQLite), or null without a relay host. */
  readonly wakeups: WakeupState | null;
  /** The relay host process id, or null. */
  readonly relayHostPid: number | null;

  start(): Promise<void>;
  stopRelay(): Promise<void>;
  close(): Promise<void>;
  notifyCommitted(jobIds: string[]): void;

  /** Sends one job to the backend now (no outbox); resolves with its id. */
  enqueue(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  /** Stages one job in `trx` (sent after the outermost commit) or autocommits through a knex instance. */
  enqueueAfterCommit(executor: Executor, type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  /** The same in the current ojs.transaction; rejects with NoTransactionError outside one. */
  enqueueAfterCommit(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  enqueueBulk(executor: Executor, jobs: BulkJob[]): Promise<string[]>;
  enqueueBulk(jobs: BulkJob[]): Promise<string[]>;
  /** For synchronous libraries (better-sqlite3, Drizzle on it): written before it returns; throws on failure. */
  enqueueAfterCommitSync(executor: ProviderDatabase, type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): string;
  enqueueAfterCommitSync(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): string;
  enqueueBulkSync(executor: ProviderDatabase, jobs: BulkJob[]): string[];
  enqueueBulkSync(jobs: BulkJob[]): string[];
  /** knex.transaction with the transactor made current (in the current ojs.transaction: a savepoint). */
  transaction<T>(work: (trx: Knex.Transaction) => Promise<T> | T, config?: Knex.TransactionConfig): Promise<T>;
  /**
   * A transaction of `db`'s library (a savepoint when `db` is a transaction ojs.transaction
   * opened), made current; the relay is woken after the outermost COMMIT. Synchronous
   * libraries (better-sqlite3) return `work`'s result synchronously.
   */
  transaction<T>(db: Executor, work: (tx: any) => T, options?: unknown): Promise<Awaited<T>> | T;
  /** Runs `work` with this request context. */
  withContext<T>(context: RequestContext, work: () => T): T;

  /** Creates the outbox table with the core's DDL through the application's knex. */
  migrate(): Promise<void>;
  status(): Promise<OutboxStatus>;
  metrics(): Promise<RelayMetrics | null>;
  outboxRows(jobIds: string[]): Promise<Record<string, RowState>>;
  deadList(options?: { tenant?: string | null; limit?: number | null }): Promise<Array<Record<string, Json>>>;
  deadReplay(options?: { tenant?: string | null }): Promise<number>;
  deadPurge(options?: { tenant?: string | null }): Promise<number>;
  /** Deletes sent rows older than `olderThan` (ISO-8601 duration); resolves with the count. */
  prune(options: { olderThan: string }): Promise<number>;

  /** The metrics (OpenMetrics text) of this adapter's relay, or null when none runs here. */
  metricsText(): Promise<string | null>;
  /** The core's readiness check (database, outbox table, backend). */
  readiness(): Promise<Readiness>;
  /** A subscriber of this adapter's relay events, as SSE frames; rejects with RELAY_SHUT_DOWN without a relay here. */
  relayEvents(request?: RelayEventsRequest): Promise<RelayFrames>;
  /** An event client of an OJS event stream (the backend's by default); reconnects and resumes in the core. */
  subscribeEvents(options?: SubscribeEventsOptions): EventSubscription;
  /** The relay's HTTP surface: `GET /v1/events/stream`, `/metrics`, `/healthz`, `/readyz`. */
  router(options: RouterOptions): Router;
  /** A worker running `handlers` on the core worker loop against this adapter's backend. */
  worker(options: WorkerOptions): Worker;
}

/** `req.ojs`: the adapter's calls with this request's context. */
export declare class RequestOjs {
  readonly ojs: Ojs;
  readonly context: RequestContext | null;
  enqueue(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  enqueueAfterCommit(executor: Executor, type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  enqueueAfterCommit(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): Promise<string>;
  enqueueBulk(executor: Executor, jobs: BulkJob[]): Promise<string[]>;
  enqueueBulk(jobs: BulkJob[]): Promise<string[]>;
  enqueueAfterCommitSync(executor: ProviderDatabase, type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): string;
  enqueueAfterCommitSync(type: string, args: Json[], options?: JobOptions | null, meta?: Record<string, Json> | null): string;
  enqueueBulkSync(executor: ProviderDatabase, jobs: BulkJob[]): string[];
  enqueueBulkSync(jobs: BulkJob[]): string[];
  transaction<T>(work: (trx: Knex.Transaction) => Promise<T> | T, config?: Knex.TransactionConfig): Promise<T>;
  transaction<T>(db: Executor, work: (tx: any) => T, options?: unknown): Promise<Awaited<T>> | T;
}

export declare function createOjs(options: CreateOjsOptions): Ojs;
export declare function createOutboxTable(knex: Knex, options?: { tableName?: string }): Promise<void>;
/** Drops the outbox table (a knex migration's `down`). */
export declare function dropOutboxTable(knex: Knex, options?: { tableName?: string }): Promise<void>;
/** The middleware for an adapter, or for `createOjs`'s options (the spec's §8.3 form; the adapter built is `.ojs`). */
export declare function ojsMiddleware(ojs: Ojs): RequestHandler & { ojs: Ojs };
export declare function ojsMiddleware(options: CreateOjsOptions): RequestHandler & { ojs: Ojs };

export type ErrorCode =
  | 'INVALID_JOB_TYPE' | 'INVALID_QUEUE' | 'INVALID_ARGS' | 'INVALID_OPTIONS' | 'INVALID_META'
  | 'PAYLOAD_TOO_LARGE' | 'INVALID_CONFIG' | 'INVALID_DATABASE_URL' | 'OUTBOX_TABLE_MISSING'
  | 'DATABASE' | 'BACKEND_UNAVAILABLE' | 'BACKEND_REJECTED' | 'NO_TRANSACTION' | 'RELAY_SHUT_DOWN'
  | 'DUPLICATE';

export declare class OJSError extends Error {
  readonly code: ErrorCode;
  readonly field: string | null;
  readonly retryable: boolean;
  constructor(message: string, init?: { code: ErrorCode; field?: string | null; retryable?: boolean; cause?: unknown });
}
export declare class ValidationError extends OJSError {}
export declare class InvalidJobTypeError extends ValidationError {}
export declare class InvalidQueueError extends ValidationError {}
export declare class InvalidArgsError extends ValidationError {}
export declare class InvalidOptionsError extends ValidationError {}
export declare class InvalidMetaError extends ValidationError {}
export declare class PayloadTooLargeError extends ValidationError {}
export declare class ConfigurationError extends OJSError {}
export declare class InvalidConfigError extends ConfigurationError {}
export declare class InvalidDatabaseUrlError extends ConfigurationError {}
export declare class DatabaseError extends OJSError {}
export declare class OutboxTableMissingError extends DatabaseError {}
export declare class BackendError extends OJSError {}
export declare class BackendUnavailableError extends BackendError {}
export declare class BackendRejectedError extends BackendError {}
export declare class NoTransactionError extends OJSError {}
export declare class RelayShutDownError extends OJSError {}
/**
 * A unique job (`options.unique`, onConflict 'reject') whose key a staged, unsent job holds:
 * nothing was staged and the transaction is still usable. Code DUPLICATE.
 */
export declare class DuplicateJobError extends OJSError {
  /** The id of the job holding the unique key; null when it is being sent right now (retry). */
  readonly existingJobId: string | null;
  /** The same, in the spec's spelling. */
  readonly existing_job_id: string | null;
  constructor(message: string, init?: { code: ErrorCode; field?: string | null; retryable?: boolean; existingJobId?: string | null; cause?: unknown });
}
export declare const ERROR_CLASSES: Record<ErrorCode, typeof OJSError>;

declare global {
  namespace Express {
    interface Request {
      /** Set by ojsMiddleware. */
      ojs: RequestOjs;
    }
  }
}

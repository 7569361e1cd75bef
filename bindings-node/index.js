'use strict';
// ojs-adapter-express: transactional job enqueue for Express over the OJS outbox core, on knex,
// pg, Kysely, Drizzle, Prisma, Sequelize, TypeORM or better-sqlite3 transactions (lib/providers/).

const { Ojs, createOjs, createOutboxTable, dropOutboxTable } = require('./lib/facade');
const { ojsMiddleware, RequestOjs } = require('./lib/express');
const errors = require('./lib/errors');
const providers = require('./lib/providers');
const { Worker } = require('./lib/worker');

module.exports = {
  createOjs,
  createOutboxTable,
  dropOutboxTable,
  ojsMiddleware,
  Ojs,
  RequestOjs,
  /** What `ojs.worker()` returns (docs/express.md, "Running jobs"). */
  Worker,
  /** The built-in transaction providers (docs/express.md, "Transaction providers"). */
  providers: {
    pg: providers.pg,
    kysely: providers.kysely,
    drizzle: providers.drizzle,
    prisma: providers.prisma,
    sequelize: providers.sequelize,
    typeorm: providers.typeorm,
    betterSqlite3: providers.betterSqlite3,
  },
  OJSError: errors.OJSError,
  ValidationError: errors.ValidationError,
  InvalidJobTypeError: errors.InvalidJobTypeError,
  InvalidQueueError: errors.InvalidQueueError,
  InvalidArgsError: errors.InvalidArgsError,
  InvalidOptionsError: errors.InvalidOptionsError,
  InvalidMetaError: errors.InvalidMetaError,
  PayloadTooLargeError: errors.PayloadTooLargeError,
  ConfigurationError: errors.ConfigurationError,
  InvalidConfigError: errors.InvalidConfigError,
  InvalidDatabaseUrlError: errors.InvalidDatabaseUrlError,
  DatabaseError: errors.DatabaseError,
  OutboxTableMissingError: errors.OutboxTableMissingError,
  BackendError: errors.BackendError,
  BackendUnavailableError: errors.BackendUnavailableError,
  BackendRejectedError: errors.BackendRejectedError,
  NoTransactionError: errors.NoTransactionError,
  RelayShutDownError: errors.RelayShutDownError,
  DuplicateJobError: errors.DuplicateJobError,
  ERROR_CLASSES: errors.ERROR_CLASSES,
};

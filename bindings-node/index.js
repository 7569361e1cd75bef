'use strict';
// ojs-adapter-express: transactional job enqueue for Express + knex over the OJS outbox core.

const { Ojs, createOjs, createOutboxTable, dropOutboxTable } = require('./lib/ojs');
const { ojsMiddleware, RequestOjs } = require('./lib/express');
const errors = require('./lib/errors');

module.exports = {
  createOjs,
  createOutboxTable,
  dropOutboxTable,
  ojsMiddleware,
  Ojs,
  RequestOjs,
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
  ERROR_CLASSES: errors.ERROR_CLASSES,
};

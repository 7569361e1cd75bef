'use strict';
// One error hierarchy for the whole package: OJSError with `.code` (the core's stable code,
// docs/errors.md), `.field` (the input concerned, or null) and `.retryable` (the core's flag).
// One subclass per code family, one per code below it; callers test `.code` or `instanceof`.

const native = require('./native');

/** The core's codes and retryable flags (`ErrorCode::ALL`); never restated here. */
const RETRYABLE = new Map(native.errorCodes().map((entry) => [entry.code, entry.retryable]));

/** What the addon puts before the JSON of a core error (src/error.rs). */
const CORE_PREFIX = 'OJS_CORE_ERROR ';

class OJSError extends Error {
  constructor(message, { code, field = null, retryable, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.field = field ?? null;
    this.retryable = retryable ?? RETRYABLE.get(code) ?? false;
  }
}

/** The job's type, queue, args, options or meta are refused; nothing was staged. */
class ValidationError extends OJSError {}
class InvalidJobTypeError extends ValidationError {}
class InvalidQueueError extends ValidationError {}
class InvalidArgsError extends ValidationError {}
class InvalidOptionsError extends ValidationError {}
class InvalidMetaError extends ValidationError {}
class PayloadTooLargeError extends ValidationError {}

/** The adapter's settings cannot be used. */
class ConfigError extends OJSError {}
class InvalidConfigError extends ConfigError {}
class InvalidDatabaseUrlError extends ConfigError {}

/** A database operation failed (the host's knex query or the relay's own connection). */
class DatabaseError extends OJSError {}
class OutboxTableMissingError extends DatabaseError {}

/** The OJS backend could not take the job (immediate `enqueue`). */
class BackendError extends OJSError {}
class BackendUnavailableError extends BackendError {}
class BackendRejectedError extends BackendError {}

/** The operation needs an open transaction and there is none (or it has ended). */
class NoTransactionError extends OJSError {}

/** The relay could not start or was stopped before its flush ended. */
class RelayShutDownError extends OJSError {}

const CLASS_BY_CODE = {
  INVALID_JOB_TYPE: InvalidJobTypeError,
  INVALID_QUEUE: InvalidQueueError,
  INVALID_ARGS: InvalidArgsError,
  INVALID_OPTIONS: InvalidOptionsError,
  INVALID_META: InvalidMetaError,
  PAYLOAD_TOO_LARGE: PayloadTooLargeError,
  INVALID_CONFIG: InvalidConfigError,
  INVALID_DATABASE_URL: InvalidDatabaseUrlError,
  OUTBOX_TABLE_MISSING: OutboxTableMissingError,
  DATABASE: DatabaseError,
  BACKEND_UNAVAILABLE: BackendUnavailableError,
  BACKEND_REJECTED: BackendRejectedError,
  NO_TRANSACTION: NoTransactionError,
  RELAY_SHUT_DOWN: RelayShutDownError,
};

/** The OJSError subclass for `code` (OJSError itself for a code this version does not know). */
function errorFor(code, message, field = null, cause = undefined) {
  const Class = CLASS_BY_CODE[code] || OJSError;
  return new Class(message, { code, field, cause });
}

/** Turns an error thrown by the addon into its OJSError; other errors pass unchanged. */
function fromNative(error) {
  const message = error && typeof error.message === 'string' ? error.message : '';
  if (!message.startsWith(CORE_PREFIX)) return error;
  let payload;
  try {
    payload = JSON.parse(message.slice(CORE_PREFIX.length));
  } catch {
    return error;
  }
  const Class = CLASS_BY_CODE[payload.code] || OJSError;
  return new Class(payload.message, {
    code: payload.code,
    field: payload.field,
    retryable: payload.retryable,
  });
}

/** Runs a synchronous addon call, rethrowing its error as an OJSError. */
function callNative(work) {
  try {
    return work();
  } catch (error) {
    throw fromNative(error);
  }
}

/** Awaits an asynchronous addon call, rejecting with an OJSError. */
async function awaitNative(promise) {
  try {
    return await promise;
  } catch (error) {
    throw fromNative(error);
  }
}

module.exports = {
  OJSError,
  ValidationError,
  InvalidJobTypeError,
  InvalidQueueError,
  InvalidArgsError,
  InvalidOptionsError,
  InvalidMetaError,
  PayloadTooLargeError,
  ConfigError,
  InvalidConfigError,
  InvalidDatabaseUrlError,
  DatabaseError,
  OutboxTableMissingError,
  BackendError,
  BackendUnavailableError,
  BackendRejectedError,
  NoTransactionError,
  RelayShutDownError,
  ERROR_CLASSES: CLASS_BY_CODE,
  errorFor,
  fromNative,
  callNative,
  awaitNative,
};

'use strict';
// One error hierarchy for the whole package (docs/errors.md): OJSError with `.code` (the
// core's stable code), `.field` (the input concerned, or null) and `.retryable` (the core's
// flag). One class per family, one per code below it; callers test `.code` or `instanceof`.
// A core error crosses as its one encoding, `Error::to_json` (the addon error's message),
// decoded here by `fromNative`.

const native = require('./native');

/** The core's codes with their family and retryable flag (`error::codes_json`). */
const CODES = JSON.parse(native.codesJson());
const RETRYABLE = new Map(CODES.map((entry) => [entry.code, entry.retryable]));

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
class ConfigurationError extends OJSError {}
class InvalidConfigError extends ConfigurationError {}
class InvalidDatabaseUrlError extends ConfigurationError {}

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

/**
 * A unique job (`options.unique`, on_conflict `reject`) whose key a staged, not yet sent job
 * holds: nothing was staged, and the transaction is still usable. `existingJobId` (also
 * `existing_job_id`) names the held job, or is null when it is being sent right now (a
 * `replace` that could not replace it: try again).
 */
class DuplicateJobError extends OJSError {
  constructor(message, init = {}) {
    super(message, init);
    this.existingJobId = init.existingJobId ?? null;
  }

  /** The spec's spelling of `existingJobId`. */
  get existing_job_id() {
    return this.existingJobId;
  }
}

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
  DUPLICATE: DuplicateJobError,
};

/** The OJSError subclass for `code` (OJSError itself for a code this version does not know). */
function errorFor(code, message, field = null, cause = undefined) {
  const Class = CLASS_BY_CODE[code] || OJSError;
  return new Class(message, { code, field, cause });
}

/** The class of each family with several codes (the transaction, relay and duplicate families have one). */
const FAMILY_CLASSES = {
  validation: ValidationError,
  configuration: ConfigurationError,
  database: DatabaseError,
  backend: BackendError,
};

/**
 * The error of one `Error::to_json` text (`{"code", "field", "message", "retryable",
 * "family"}`, and `"existing_job_id"` for a DUPLICATE); null when `text` is not one.
 */
function fromJson(text, cause = undefined) {
  let payload;
  try {
    payload = JSON.parse(text);
  } catch {
    return null;
  }
  if (payload === null || typeof payload.code !== 'string' || typeof payload.family !== 'string') return null;
  const Class = CLASS_BY_CODE[payload.code] || FAMILY_CLASSES[payload.family] || OJSError;
  return new Class(payload.message, {
    code: payload.code,
    field: payload.field,
    retryable: payload.retryable,
    existingJobId: payload.existing_job_id,
    cause,
  });
}

/** Turns an error thrown by the addon into its OJSError; other errors pass unchanged. */
function fromNative(error) {
  const message = error && typeof error.message === 'string' ? error.message : '';
  return (message.startsWith('{') && fromJson(message)) || error;
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
  ConfigurationError,
  InvalidConfigError,
  InvalidDatabaseUrlError,
  DatabaseError,
  OutboxTableMissingError,
  BackendError,
  BackendUnavailableError,
  BackendRejectedError,
  NoTransactionError,
  RelayShutDownError,
  DuplicateJobError,
  ERROR_CLASSES: CLASS_BY_CODE,
  FAMILY_CLASSES,
  errorFor,
  fromJson,
  fromNative,
  callNative,
  awaitNative,
};

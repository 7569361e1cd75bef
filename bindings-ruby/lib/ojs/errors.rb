# frozen_string_literal: true

module OJS
  # The one exception hierarchy of the adapter (docs/errors.md). Every error carries the core's
  # stable `code`, the `field` it concerns (or nil) and whether retrying may succeed
  # (`retryable?`). The message is the core's message. Rescue a family (`OJS::ValidationError`)
  # or one code's class (`OJS::InvalidQueue`); compare `#code`, never the message.
  class Error < StandardError
    attr_reader :code, :field

    def initialize(message = nil, code: nil, field: nil, retryable: nil)
      super(message)
      @code = code || self.class.default_code
      @field = field
      @retryable = retryable.nil? ? OJS::Error.retryable_code?(@code) : retryable
    end

    def retryable?
      @retryable
    end
    alias retryable retryable?

    def inspect
      "#<#{self.class.name} code=#{code.inspect} field=#{field.inspect} message=#{message.inspect}>"
    end

    class << self
      # The code of a per-code class (`OJS::InvalidQueue.default_code == "INVALID_QUEUE"`).
      def default_code
        OJS::Error::CLASSES.key(self)
      end

      # The core's list of codes and their retryable flag, read once from the native library.
      def retryable_code?(code)
        RETRYABLE.fetch(code, false)
      end

      # An exception of the class for `code` (the base class for a code this gem does not know).
      def for_code(code, message, field: nil, retryable: nil)
        CLASSES.fetch(code, Error).new(message, code: code, field: field, retryable: retryable)
      end

      # The one decoder of the core's error encoding (`Error::to_json`: {"code", "field",
      # "message", "retryable", "family"}, and "existing_job_id" for DUPLICATE), whichever call
      # it came from.
      def from_json(text)
        failure = JSON.parse(text)
        error = for_code(failure["code"], failure["message"], field: failure["field"], retryable: failure["retryable"])
        error.existing_job_id = failure["existing_job_id"] if error.is_a?(DuplicateJob)
        error
      end
    end
  end

  # The name docs/errors.md uses for the base class.
  OJSError = Error

  # Staging input refused by the core (or, for a value Ruby cannot turn into JSON, by the
  # conversion). Raised before any row is written: the host transaction stays usable.
  class ValidationError < Error; end
  class InvalidJobType < ValidationError; end
  class InvalidQueue < ValidationError; end
  class InvalidArgs < ValidationError; end
  class InvalidOptions < ValidationError; end
  class InvalidMeta < ValidationError; end
  class PayloadTooLarge < ValidationError; end

  # Settings or database URL are wrong: fix the deployment.
  class ConfigurationError < Error; end
  class InvalidConfig < ConfigurationError; end
  class InvalidDatabaseUrl < ConfigurationError; end

  # A database operation failed (DATABASE, retryable), or the outbox table is missing (run
  # the migration).
  class DatabaseError < Error; end
  class OutboxTableMissing < DatabaseError; end

  # The OJS backend could not be reached (retryable) or refused the job.
  class BackendError < Error; end
  class BackendUnavailable < BackendError; end
  class BackendRejected < BackendError; end

  # The operation needs an open transaction or savepoint.
  class NoTransaction < Error; end

  # The relay could not start or was stopped before its flush ended.
  class RelayShutDown < Error; end

  # A unique job (`options[:unique]`) conflicts with a job the outbox still holds (staged and
  # not yet sent): on_conflict "reject" (or a held job being sent right now that the policy
  # would have replaced). Decided in the application's transaction by the staging statement,
  # which never fails in SQL: the transaction stays usable (a bulk holding the job stages
  # nothing). `existing_job_id` names the held job (nil when it was being sent).
  class DuplicateJob < Error
    attr_accessor :existing_job_id

    def initialize(message = nil, existing_job_id: nil, **rest)
      super(message, **rest)
      @existing_job_id = existing_job_id
    end

    def inspect
      "#<#{self.class.name} code=#{code.inspect} existing_job_id=#{existing_job_id.inspect} message=#{message.inspect}>"
    end
  end

  class Error
    CLASSES = {
      "INVALID_JOB_TYPE" => InvalidJobType,
      "INVALID_QUEUE" => InvalidQueue,
      "INVALID_ARGS" => InvalidArgs,
      "INVALID_OPTIONS" => InvalidOptions,
      "INVALID_META" => InvalidMeta,
      "PAYLOAD_TOO_LARGE" => PayloadTooLarge,
      "INVALID_CONFIG" => InvalidConfig,
      "INVALID_DATABASE_URL" => InvalidDatabaseUrl,
      "OUTBOX_TABLE_MISSING" => OutboxTableMissing,
      "DATABASE" => DatabaseError,
      "BACKEND_UNAVAILABLE" => BackendUnavailable,
      "BACKEND_REJECTED" => BackendRejected,
      "NO_TRANSACTION" => NoTransaction,
      "RELAY_SHUT_DOWN" => RelayShutDown,
      "DUPLICATE" => DuplicateJob
    }.freeze

    # The family classes of docs/errors.md; a code of the transaction, relay and duplicate
    # families is its own class, directly below OJS::Error.
    FAMILIES = {
      "validation" => ValidationError,
      "configuration" => ConfigurationError,
      "database" => DatabaseError,
      "backend" => BackendError
    }.freeze

    # Code => retryable, from the core (`error::codes_json`), not restated here.
    RETRYABLE = JSON.parse(OJS::Native.error_codes_json).to_h { |info| [info["code"], info["retryable"]] }.freeze
  end
end

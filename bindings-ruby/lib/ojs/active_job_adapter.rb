# frozen_string_literal: true

require "active_job"

module OJS
  # ActiveJob integration: `config.active_job.queue_adapter = :ojs`. `perform_later` inside a
  # transaction goes through the outbox like OJS.enqueue_after_commit: sent after the outermost
  # commit, never if it rolls back.
  #
  # The OJS job: type derived from the class name (`WelcomeEmailJob` -> `welcome_email_job`,
  # `Admin::ReportJob` -> `admin.report_job`), args `[job.serialize]` (ActiveJob's own
  # serialization), options queue (the ActiveJob queue name), priority, and delay_until for
  # `set(wait:)`. OJS::Worker runs it with `ActiveJob::Base.execute(args.first)`.
  module ActiveJobAdapter
    module_function

    def job_type(job_class)
      type_of_name(job_class.name)
    end

    # The type of the class of this name (what the worker compares a fetched job's type with).
    def type_of_name(class_name)
      ActiveSupport::Inflector.underscore(class_name).tr("/", ".")
    end

    def options(job)
      { queue: job.queue_name, priority: job.priority }.compact
    end

    # The options of a job scheduled for `timestamp` (seconds since the epoch, as ActiveJob
    # passes it to enqueue_at). delay_until is a Time, made RFC 3339 text like any Time option
    # (OJS::JSONValue.time_options).
    def scheduled_options(job, timestamp)
      options(job).merge(delay_until: scheduled_time(job, timestamp))
    end

    # When the job is due. ActiveJob 7.1+ keeps `scheduled_at` as the Time given to
    # `set(wait:)`/`set(wait_until:)` (exact, to the nanosecond); before 7.1 it and the
    # timestamp are Float seconds, which carry microseconds.
    def scheduled_time(job, timestamp)
      at = job.scheduled_at
      at.is_a?(Time) ? at : Time.at(Float(timestamp)).round(6)
    end

    # One job as OJS.enqueue_bulk takes it.
    def bulk_job(job)
      options = job.scheduled_at ? scheduled_options(job, job.scheduled_at.to_f) : options(job)
      { type: job_type(job.class), args: [job.serialize], options: options }
    end

    # ActiveJob 7.2+ has an abstract adapter class (Rails 8.1 calls its `stopping?`); older
    # ones have none.
    def adapter_superclass
      if ActiveJob::QueueAdapters.const_defined?(:AbstractAdapter)
        ActiveJob::QueueAdapters::AbstractAdapter
      else
        Object
      end
    end
  end
end

module ActiveJob
  module QueueAdapters
    # The adapter ActiveJob finds for `queue_adapter = :ojs`.
    class OjsAdapter < OJS::ActiveJobAdapter.adapter_superclass
      # Rails 7.2 asks the adapter whether to defer an enqueue made inside a transaction to
      # after the commit (when the job's `enqueue_after_transaction_commit` is `:default`, which
      # `config.load_defaults 7.2` sets). This adapter must not be deferred: the job is an
      # outbox row written IN the transaction, committed or rolled back with it. Rails 8.0 and
      # later no longer ask the adapter (docs/rails.md, "ActiveJob").
      def enqueue_after_transaction_commit?
        false
      end

      def enqueue(job)
        job.provider_job_id = OJS.enqueue_after_commit(
          OJS::ActiveJobAdapter.job_type(job.class), [job.serialize], **OJS::ActiveJobAdapter.options(job)
        )
      end

      def enqueue_at(job, timestamp)
        job.provider_job_id = OJS.enqueue_after_commit(
          OJS::ActiveJobAdapter.job_type(job.class), [job.serialize],
          **OJS::ActiveJobAdapter.scheduled_options(job, timestamp)
        )
      end

      # `ActiveJob.perform_all_later` (Rails 7.1+): every job in one bulk staging, one INSERT
      # (OJS.enqueue_bulk), all or none. Returns how many were enqueued.
      def enqueue_all(jobs)
        ids = OJS.enqueue_bulk(jobs.map { |job| OJS::ActiveJobAdapter.bulk_job(job) })
        jobs.zip(ids) do |job, id|
          job.provider_job_id = id
          job.successfully_enqueued = true if job.respond_to?(:successfully_enqueued=)
        end
        jobs.length
      end
    end
  end
end

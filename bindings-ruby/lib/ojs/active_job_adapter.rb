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
  # `set(wait:)`. A worker runs it with `ActiveJob::Base.execute(args.first)`.
  module ActiveJobAdapter
    module_function

    def job_type(job_class)
      ActiveSupport::Inflector.underscore(job_class.name).tr("/", ".")
    end

    def options(job)
      { queue: job.queue_name, priority: job.priority }.compact
    end
  end
end

module ActiveJob
  module QueueAdapters
    # The adapter ActiveJob finds for `queue_adapter = :ojs`.
    class OjsAdapter
      # Rails 7.2+: the job is staged in the transaction by this adapter; ActiveJob must not
      # defer it to after the commit itself.
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
          **OJS::ActiveJobAdapter.options(job), delay_until: Time.at(timestamp).utc.iso8601(6)
        )
      end
    end
  end
end

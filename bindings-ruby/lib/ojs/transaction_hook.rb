# frozen_string_literal: true

module OJS
  # Registers the relay's wake-up (`notify_committed(job_ids)`) on the OUTERMOST transaction of
  # an ActiveRecord connection.
  #
  # - Rails 7.2+ (`ActiveRecord::Transaction#after_commit`): the public API is used; ActiveRecord
  #   hands a savepoint's callbacks to its parent on release and drops them on rollback.
  # - Rails 6.1 to 7.1: `connection.add_transaction_record(Wakeup)`. ActiveRecord moves a
  #   released savepoint's records to the parent transaction, calls `rolledback!` (and forgets
  #   them) when the savepoint rolls back, and calls `committed!` only when the outermost
  #   transaction commits. The wake-up therefore fires once, after the COMMIT, for exactly the
  #   rows that committed.
  module TransactionHook
    module_function

    # One Wakeup per transaction level (the outermost transaction or one savepoint) collects the
    # ids staged at that level, so a commit wakes the relay with one call, however many jobs.
    WAKEUPS = ObjectSpace::WeakMap.new

    def register(connection, adapter, job_ids, transaction = connection.current_transaction)
      wakeup = WAKEUPS[transaction]
      return wakeup.add(job_ids) if wakeup&.open_for?(adapter) # this level already has one

      user_transaction = transaction.respond_to?(:user_transaction) ? transaction.user_transaction : nil
      if user_transaction.respond_to?(:after_commit)
        user_transaction.after_commit { Wakeup.fire(adapter, job_ids) }
        return
      end
      wakeup = Wakeup.new(adapter, job_ids)
      WAKEUPS[transaction] = wakeup
      connection.add_transaction_record(wakeup)
    end

    # The object ActiveRecord 6.1's transaction keeps in its records (the protocol of a model
    # record in a transaction).
    class Wakeup
      # Wakes the relay, instrumented as `wakeup.ojs` (payload `job_ids`) for logs and tests.
      def self.fire(adapter, job_ids)
        return if Testing.hooks_suppressed?

        ActiveSupport::Notifications.instrument("wakeup.ojs", job_ids: job_ids) do
          adapter.notify_committed(job_ids)
        end
      end

      def initialize(adapter, job_ids)
        @adapter = adapter
        @job_ids = job_ids.dup
        @finished = false
      end

      def open_for?(adapter)
        !@finished && @adapter.equal?(adapter)
      end

      def add(job_ids)
        @job_ids.concat(job_ids)
      end

      def before_committed!; end

      # Called once, when the outermost transaction has committed.
      def committed!(should_run_callbacks: true) # rubocop:disable Lint/UnusedMethodArgument
        return if @finished

        @finished = true
        Wakeup.fire(@adapter, @job_ids)
      end

      # The transaction or savepoint holding the rows rolled back: the rows are gone.
      def rolledback!(force_restore_state: false, should_run_callbacks: true) # rubocop:disable Lint/UnusedMethodArgument
        @finished = true
      end

      def trigger_transactional_callbacks?
        true
      end
    end
  end

  # Test seams. `OJS::Testing.crash_before_hook { ... }` commits inside the block without
  # running the wake-up, as a process that dies right after COMMIT would (the conformance
  # case `crash_before_hook`); the poller must then find the rows.
  module Testing
    KEY = :ojs_suppress_hooks

    module_function

    def crash_before_hook
      previous = Thread.current[KEY]
      Thread.current[KEY] = true
      yield
    ensure
      Thread.current[KEY] = previous
    end

    def hooks_suppressed?
      Thread.current[KEY] == true
    end
  end
end

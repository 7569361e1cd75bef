# frozen_string_literal: true

module OJS
  # Registers the relay's wake-up (`notify_committed(job_ids)`) on the OUTERMOST transaction of
  # an ActiveRecord connection.
  #
  # - ActiveRecord 7.2+: the transaction's own callbacks (`after_commit` / `after_rollback` of
  #   `connection.current_transaction`, which `ActiveRecord::Transaction#after_commit` wraps).
  #   On a savepoint's release ActiveRecord hands its callbacks to the parent; when it rolls
  #   back it runs its `after_rollback` callbacks and drops the rest; `after_commit` runs only
  #   after the outermost COMMIT. (Not `ActiveRecord.after_all_transactions_commit`, which
  #   waits for every connection's transaction, nor `user_transaction.after_commit`, which runs
  #   the block at once inside a non-joinable transaction.)
  # - ActiveRecord 6.1 to 7.1: `connection.add_transaction_record(Wakeup)`. ActiveRecord moves a
  #   released savepoint's records to the parent transaction, calls `rolledback!` (and forgets
  #   them) when the savepoint rolls back, and calls `committed!` only when the outermost
  #   transaction commits.
  # Either way the wake-up fires once per level, after the COMMIT, for exactly the rows that
  # committed; ActiveRecord does the savepoint bookkeeping, this module none.
  module TransactionHook
    module_function

    # How the hook is registered on this ActiveRecord: :transaction_callbacks (7.2+) or
    # :transaction_record (6.1 to 7.1).
    def api
      @api ||= if ActiveRecord::ConnectionAdapters::RealTransaction.method_defined?(:after_commit)
                 :transaction_callbacks
               else
                 :transaction_record
               end
    end

    # One Wakeup per transaction level (the outermost transaction or one savepoint) collects the
    # ids staged at that level, so a commit wakes the relay with one call, however many jobs.
    WAKEUPS = ObjectSpace::WeakMap.new

    def register(connection, client, job_ids, transaction = connection.current_transaction)
      wakeup = WAKEUPS[transaction]
      return wakeup.add(job_ids) if wakeup&.open_for?(client) # this level already has one

      wakeup = Wakeup.new(client, job_ids)
      WAKEUPS[transaction] = wakeup
      if api == :transaction_callbacks
        transaction.after_commit { wakeup.committed! }
        transaction.after_rollback { wakeup.rolledback! }
      else
        connection.add_transaction_record(wakeup)
      end
    end

    # The ids staged at one transaction level and their wake-up. On ActiveRecord 6.1 to 7.1 it
    # is also the record ActiveRecord keeps in the transaction (the protocol of a model record
    # in a transaction: committed!, rolledback!, ...).
    class Wakeup
      # Wakes the relay, instrumented as `wakeup.ojs` (payload `job_ids`) for logs and tests.
      def self.fire(client, job_ids)
        return if Testing.hooks_suppressed?

        ActiveSupport::Notifications.instrument("wakeup.ojs", job_ids: job_ids) do
          client.notify_committed(job_ids)
        end
      end

      def initialize(client, job_ids)
        @client = client
        @job_ids = job_ids.dup
        @finished = false
      end

      def open_for?(client)
        !@finished && @client.equal?(client)
      end

      def add(job_ids)
        @job_ids.concat(job_ids)
      end

      def before_committed!; end

    # Called once, when the outermost transaction has committed.
      def committed!(should_run_callbacks: true) # rubocop:disable Lint/UnusedMethodArgument
        return if @finished

        @finished = true
        Wakeup.fire(@client, @job_ids)
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

# frozen_string_literal: true

# Savepoints with ActiveRecord's own block API (`transaction(requires_new: true)`): the rows of
# a savepoint rolled back are discarded with their wake-up; a released savepoint wakes nothing
# until the outermost commit; the wake-up fires once, after the COMMIT.

require_relative "test_helper"

class SavepointTest < Minitest::Test
  TABLE = "rb_savepoints"

  def wakeups
    events = []
    subscriber = ActiveSupport::Notifications.subscribe("wakeup.ojs") do |*, payload|
      events << [payload[:job_ids], ActiveRecord::Base.connection.transaction_open?]
    end
    yield events
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  # The savepoint cases below run on ActiveRecord 6.1 (transaction records) and 7.2 (the
  # transaction's own after_commit/after_rollback callbacks): this says which one ran.
  def test_the_hook_uses_the_api_of_this_activerecord
    expected = ActiveRecord.gem_version >= Gem::Version.new("7.2") ? :transaction_callbacks : :transaction_record
    assert_equal expected, OJS::TransactionHook.api
    TestSupport.connect(:sqlite, "savepoints_api", table: TABLE)
    TestSupport.configure(table: TABLE, start_relay: false)
    ActiveRecord::Base.transaction do
      OJS.enqueue_after_commit("email.welcome", [1])
      records = ActiveRecord::Base.connection.current_transaction.records || []
      if expected == :transaction_callbacks
        assert_empty records.grep(OJS::TransactionHook::Wakeup), "7.2+: no transaction record"
      else
        assert_equal 1, records.grep(OJS::TransactionHook::Wakeup).length
      end
      raise ActiveRecord::Rollback
    end
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_rolled_back_savepoint_discards_rows_and_wakeups") do
      TestSupport.connect(database, "savepoints", table: TABLE)
      TestSupport.configure(table: TABLE, outbox: { poll_interval: "PT30S" }) # only the hook delivers
      TestSupport.devserver.reset
      ids = {}
      wakeups do |events|
        ActiveRecord::Base.transaction do
          ids[:outer] = OJS.enqueue_after_commit("email.welcome", [1])
          ActiveRecord::Base.transaction(requires_new: true) do
            ids[:released] = OJS.enqueue_after_commit("email.welcome", [2])
          end
          assert_empty events, "a released savepoint must not wake the relay"
          ActiveRecord::Base.transaction(requires_new: true) do
            ids[:rolled_back] = OJS.enqueue_after_commit("email.welcome", [3])
            ActiveRecord::Base.transaction(requires_new: true) do
              ids[:inner_rolled_back] = OJS.enqueue_after_commit("email.welcome", [4])
            end
            raise ActiveRecord::Rollback
          end
          begin
            ActiveRecord::Base.transaction(requires_new: true) do
              ids[:raised] = OJS.enqueue_after_commit("email.welcome", [5])
              raise ArgumentError, "the application fails inside the savepoint"
            end
          rescue ArgumentError
            nil
          end
          ids[:after] = OJS.enqueue_after_commit("email.welcome", [6])
          assert_equal 3, TestSupport.outbox_count(TABLE), "the savepoints rolled back took their rows"
          assert_empty events
        end
        woken = events.flat_map(&:first)
        assert_equal [ids[:outer], ids[:released], ids[:after]].sort, woken.sort
        assert(events.none?(&:last), "the wake-up runs after the COMMIT, outside the transaction")
        discarded = ids.values_at(:rolled_back, :inner_rolled_back, :raised)
        assert_empty discarded & woken
      end
      delivered = TestSupport.devserver.wait_for(ids.values_at(:outer, :released, :after))
      assert_equal [[1], [2], [6]], delivered.map { |job| job["args"] }
      assert_equal 3, TestSupport.outbox_count(TABLE)
      # A job staged and woken after all of them: once it is there, anything wrongly sent is too.
      sentinel = OJS.enqueue_after_commit("sentinel.job", [0])
      TestSupport.devserver.wait_for([sentinel])
      assert_equal (ids.values_at(:outer, :released, :after) << sentinel).sort,
                   TestSupport.devserver.jobs.map { |job| job["id"] }.sort
    end

    define_method("test_#{database}_outermost_rollback_discards_everything") do
      TestSupport.connect(database, "savepoints_rollback", table: TABLE)
      TestSupport.configure(table: TABLE)
      TestSupport.devserver.reset
      wakeups do |events|
        ActiveRecord::Base.transaction do
          OJS.enqueue_after_commit("email.welcome", [1])
          ActiveRecord::Base.transaction(requires_new: true) { OJS.enqueue_after_commit("email.welcome", [2]) }
          raise ActiveRecord::Rollback
        end
        assert_empty events
      end
      assert_equal 0, TestSupport.outbox_count(TABLE)
      sentinel = OJS.enqueue_after_commit("sentinel.job", [0])
      TestSupport.devserver.wait_for([sentinel])
      assert_equal [sentinel], TestSupport.devserver.jobs.map { |job| job["id"] }
    end

    define_method("test_#{database}_joined_nested_transaction_commits_with_the_outer_one") do
      TestSupport.connect(database, "savepoints_joined", table: TABLE)
      TestSupport.configure(table: TABLE)
      wakeups do |events|
        ActiveRecord::Base.transaction do
          ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) } # joins the outer one
          assert_empty events
        end
        assert_equal 1, events.length
      end
    end
  end
end

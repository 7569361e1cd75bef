# frozen_string_literal: true

# A failure of the outbox INSERT on the application's connection is classified by the core's
# rule (bridge::database_error_code, from the SQLSTATE on PostgreSQL and MariaDB and the driver's
# message):
# a missing outbox table raises OJS::OutboxTableMissing, any other failure OJS::DatabaseError,
# both with ActiveRecord's exception as the cause, and nothing is woken. Real SQLite files and
# the real PostgreSQL and MariaDB servers.

require_relative "test_helper"

class DatabaseErrorTest < Minitest::Test
  TABLE = "rb_database_errors"

  def configure_without_table
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.outbox_table = TABLE
      config.auto_start = false
    end
  end

  def wakeups
    events = []
    subscriber = ActiveSupport::Notifications.subscribe("wakeup.ojs") { |*, payload| events << payload[:job_ids] }
    yield events
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  def core_retryable(code)
    JSON.parse(OJS::Native.error_codes_json).find { |info| info["code"] == code }["retryable"]
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_missing_outbox_table_raises_outbox_table_missing") do
      connection = TestSupport.connect(database, "no_outbox_table", table: TABLE)
      configure_without_table
      refute connection.table_exists?(TABLE)
      calls = {
        "enqueue_after_commit, autocommit" => -> { OJS.enqueue_after_commit("email.welcome", [1]) },
        "enqueue_bulk, autocommit" => -> { OJS.enqueue_bulk([{ type: "email.welcome", args: [1] }]) },
        "enqueue_after_commit in a transaction" => lambda {
          ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1], queue: "email") }
        },
        "enqueue_bulk in a transaction" => lambda {
          ActiveRecord::Base.transaction { OJS.enqueue_bulk([{ type: "a", args: [1] }, { type: "b", args: [2] }]) }
        }
      }
      wakeups do |events|
        calls.each do |description, call|
          error = assert_raises(OJS::OutboxTableMissing, description) { call.call }
          assert_equal "OUTBOX_TABLE_MISSING", error.code, description
          assert_kind_of OJS::DatabaseError, error, description
          assert_equal core_retryable("OUTBOX_TABLE_MISSING"), error.retryable?, description
          assert_kind_of ActiveRecord::StatementInvalid, error.cause, description
          assert_includes error.message, TABLE, description
        end
        assert_empty events, "nothing staged, nothing woken"
      end
      # After the migration the same calls succeed on the same connection.
      OJS::Migration.create_outbox_table
      ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) }
      assert_equal 1, TestSupport.outbox_count(TABLE)
    end

    define_method("test_#{database}_other_insert_failures_raise_database_error") do
      connection = TestSupport.connect(database, "bad_outbox_table", table: TABLE)
      configure_without_table
      connection.create_table(TABLE) { |t| t.string :something_else } # not the outbox's columns
      error = assert_raises(OJS::DatabaseError) { OJS.enqueue_after_commit("email.welcome", [1]) }
      assert_equal "DATABASE", error.code
      assert_equal core_retryable("DATABASE"), error.retryable?
      assert_kind_of ActiveRecord::StatementInvalid, error.cause
      assert_equal 0, TestSupport.outbox_count(TABLE)
    ensure
      ActiveRecord::Base.connection.drop_table(TABLE, if_exists: true)
    end
  end
end

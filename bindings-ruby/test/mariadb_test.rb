# frozen_string_literal: true

# MariaDB through ActiveRecord's mysql2 adapter, what the suites shared with SQLite and
# PostgreSQL (conformance, savepoints, staging, keyed jobs, schema.rb) do not show by
# themselves: how the core's `?` parameters reach the server. mysql2 sends binds only as
# server-side prepared statements, which ActiveRecord uses only with `prepared_statements: true`
# (off by default); otherwise the adapter puts them into the text with ActiveRecord's own
# quoting (Arel's SubstituteBinds collector with the connection as quoter). Both ways must
# store exactly the core's values, quotes, backslashes, question marks and 4-byte UTF-8
# included, for plain, keyed (ordering and unique) and bulk jobs, and deliver them. Also: the
# relay's URL comes from ActiveRecord's mysql2 settings, the core's DDL runs twice without
# harm, and the application's session keeps its own isolation level.

require_relative "test_helper"
require "securerandom"

class MariadbTest < Minitest::Test
  TABLE = "rb_mariadb"
  # Every character ActiveRecord's MySQL quoting must escape, a `?` that is no placeholder,
  # and text outside the BMP (utf8mb4).
  NASTY = "it's \"quoted\" \\ back\\'slash ? ?? %s $1 -- ; /* */ \u00e9\u{1F600} \r\n\t end"

  def setup
    @key = SecureRandom.hex(6) # the devserver's unique keys outlive a test
  end

  # The OJS statements ActiveRecord ran, as [sql, binds] (its "sql.active_record" events).
  def ojs_statements
    statements = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      statements << [payload[:sql], payload[:binds]] if payload[:name] == "OJS"
    end
    yield
    statements
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  def row(job_id)
    connection = ActiveRecord::Base.connection
    connection.select_one("SELECT job_type, job_args, job_meta, tenant_id, order_key FROM #{TABLE} " \
                          "WHERE job_id = #{connection.quote(job_id)}")
  end

  def connect(prepared_statements)
    TestSupport.connect(:mariadb, "mariadb", table: TABLE)
    unless prepared_statements.nil?
      ActiveRecord::Base.remove_connection
      ActiveRecord::Base.establish_connection("#{TestSupport.mysql_url}&prepared_statements=#{prepared_statements}")
    end
    ActiveRecord::Base.connection
  end

  # Plain, ordered, unique (reject and ignore) and bulk jobs with hostile values: rows as the
  # core made them, delivered as sent; returns the OJS statements ActiveRecord ran.
  def stage_and_deliver_hostile_values
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
    unique = { keys: %w[type args], on_conflict: "ignore" }
    ids = {}
    statements = ojs_statements do
      ActiveRecord::Base.transaction do
        OJS.with_context(tenant_id: "t'#{NASTY}") do
          ids[:plain] = OJS.enqueue_after_commit("email.welcome", [NASTY, { NASTY => NASTY }], meta: { "note" => NASTY })
        end
        ids[:ordered] = OJS.enqueue_after_commit("order.charge", [NASTY], ordering_key: "k'?\\#{NASTY}")
        ids[:unique] = OJS.enqueue_after_commit("digest.send", [NASTY, @key], unique: unique)
        ids[:held] = OJS.enqueue_after_commit("digest.send", [NASTY, @key], unique: unique)
        ids[:bulk0], ids[:bulk1] = OJS.enqueue_bulk([{ type: "report.row", args: [NASTY, 0] },
                                                     { type: "report.row", args: ["?", 1] }])
        error = assert_raises(OJS::DuplicateJob) do
          OJS.enqueue_after_commit("digest.send", [NASTY, @key], unique: unique.merge(on_conflict: "reject"))
        end
        assert_equal ids[:unique], error.existing_job_id
      end
    end
    assert_equal ids[:unique], ids[:held], "ignore: the held job's id"

    plain = row(ids[:plain])
    assert_equal [NASTY, { NASTY => NASTY }], JSON.parse(plain["job_args"])
    assert_equal NASTY, JSON.parse(plain["job_meta"])["note"]
    assert_equal "t'#{NASTY}", plain["tenant_id"]
    assert_equal "k'?\\#{NASTY}", row(ids[:ordered])["order_key"]
    assert_equal [NASTY, @key], JSON.parse(row(ids[:unique])["job_args"])
    assert_equal ["?", 1], JSON.parse(row(ids[:bulk1])["job_args"])
    assert_equal 5, TestSupport.outbox_count(TABLE)

    delivered = TestSupport.devserver.wait_for(ids.values_at(:plain, :ordered, :unique, :bulk0, :bulk1))
    assert_equal [[NASTY, { NASTY => NASTY }], [NASTY], [NASTY, @key], [NASTY, 0], ["?", 1]],
                 delivered.map { |job| job["args"] }
    assert_equal NASTY, delivered.first.dig("meta", "note")
    statements
  end

  # mysql2's default (and Rails' database.yml default): no server-side prepared statements.
  def test_without_prepared_statements_activerecord_quotes_the_core_s_parameters
    connection = connect(nil)
    refute connection.prepared_statements, "mysql2's default"
    statements = stage_and_deliver_hostile_values
    refute_empty statements
    statements.each do |sql, binds|
      assert_empty binds.to_a, sql
      refute_includes sql.gsub(/'(?:[^'\\]|\\.)*'/m, ""), "?", "every placeholder was substituted: #{sql}"
    end
  end

  # `prepared_statements: true`: the parameters go to the server as binds, the text untouched.
  def test_with_prepared_statements_the_core_s_parameters_go_as_binds
    connection = connect(true)
    assert connection.prepared_statements
    statements = stage_and_deliver_hostile_values
    refute_empty statements
    statements.each do |sql, binds|
      assert_equal sql.count("?"), binds.to_a.length, sql
      refute_empty binds.to_a, sql
    end
  end

  # The relay's own connection: its URL by the core's rule from ActiveRecord's mysql2 settings.
  def test_the_relay_url_comes_from_activerecord_s_mysql2_settings
    connect(nil)
    expected = URI(TestSupport.mysql_url).tap { |url| url.scheme = "mysql" }.to_s.sub(/\?.*/, "")
    assert_equal expected, OJS::Configuration.new.derived_database_url
  end

  # The core's DDL is idempotent (each statement commits on its own on MySQL): a second run
  # keeps the table and its rows; the application's session keeps its own isolation level
  # (InnoDB's REPEATABLE READ) through staging and delivery.
  def test_the_ddl_runs_twice_and_the_session_keeps_its_isolation
    connection = connect(nil)
    isolation = -> { connection.select_value("SELECT @@session.tx_isolation") }
    before = isolation.call
    assert_equal "REPEATABLE-READ", before
    TestSupport.configure(table: TABLE)
    id = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) }
    TestSupport.devserver.wait_for([id])
    OJS::Migration.create_outbox_table
    assert_equal 1, TestSupport.outbox_count(TABLE)
    %W[#{TABLE}_events #{TABLE}_locks].each { |name| assert connection.table_exists?(name), name }
    assert_equal before, isolation.call
  end
end

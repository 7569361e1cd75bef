# frozen_string_literal: true

# Bad input raises an OJS::Error subclass with the core's code, inside a transaction that stays
# usable, and leaves the outbox as it was. Run on SQLite, PostgreSQL and MariaDB (on PostgreSQL
# a failed statement would abort the transaction: staging is refused before any SQL runs).

require_relative "test_helper"

class BadInputTest < Minitest::Test
  TABLE = "rb_bad_input"

  # [description, code, class, call]
  CASES = [
    ["type with capitals", "INVALID_JOB_TYPE", OJS::InvalidJobType, -> { OJS.enqueue_after_commit("Email.Welcome", [1]) }],
    ["type segment starting with a hyphen", "INVALID_JOB_TYPE", OJS::InvalidJobType, -> { OJS.enqueue_after_commit("email.-welcome", [1]) }],
    ["empty type", "INVALID_JOB_TYPE", OJS::InvalidJobType, -> { OJS.enqueue_after_commit("", [1]) }],
    ["type not a string", "INVALID_JOB_TYPE", OJS::InvalidJobType, -> { OJS.enqueue_after_commit(42, [1]) }],
    ["args a Hash", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", { user: 1 }) }],
    ["args nil", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", nil) }],
    ["args holding an Object", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", [Object.new]) }],
    ["args holding NaN", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", [Float::NAN]) }],
    ["args with invalid UTF-8", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", ["\xFF".b.force_encoding("UTF-8")]) }],
    ["queue with capitals", "INVALID_QUEUE", OJS::InvalidQueue, -> { OJS.enqueue_after_commit("email.welcome", [1], queue: "Email") }],
    ["queue empty", "INVALID_QUEUE", OJS::InvalidQueue, -> { OJS.enqueue_after_commit("email.welcome", [1], queue: "") }],
    ["priority out of range", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], priority: 101) }],
    ["unknown option", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], colour: "red") }],
    ["delay_until not RFC 3339", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], delay_until: "tomorrow") }],
    ["args holding a Time", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_after_commit("email.welcome", [Time.now]) }],
    ["meta holding a Time", "INVALID_META", OJS::InvalidMeta, -> { OJS.enqueue_after_commit("email.welcome", [1], meta: { "at" => Time.now }) }],
    ["delay_until a Date", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], delay_until: Date.today) }],
    ["priority a Time", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], priority: Time.now) }],
    ["retry.max_attempts negative", "INVALID_OPTIONS", OJS::InvalidOptions, -> { OJS.enqueue_after_commit("email.welcome", [1], retry: { max_attempts: -1 }) }],
    ["meta not a Hash", "INVALID_META", OJS::InvalidMeta, -> { OJS.enqueue_after_commit("email.welcome", [1], meta: [1]) }],
    ["meta.tenant_id a number", "INVALID_META", OJS::InvalidMeta, -> { OJS.enqueue_after_commit("email.welcome", [1], meta: { tenant_id: 7 }) }],
    ["unknown request context key", "INVALID_META", OJS::InvalidMeta, lambda {
      OJS.with_context(shoe_size: "44") { OJS.enqueue_after_commit("email.welcome", [1]) }
    }],
    ["payload over 1 MiB", "PAYLOAD_TOO_LARGE", OJS::PayloadTooLarge, -> { OJS.enqueue_after_commit("email.welcome", ["x" * (1024 * 1024)]) }],
    ["bulk with one bad job", "INVALID_JOB_TYPE", OJS::InvalidJobType, lambda {
      OJS.enqueue_bulk([{ type: "email.welcome", args: [1] }, { type: "Bad", args: [2] }])
    }],
    ["bulk not an Array", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_bulk({ type: "email.welcome", args: [1] }) }],
    ["bulk job with an unknown key", "INVALID_ARGS", OJS::InvalidArgs, -> { OJS.enqueue_bulk([{ type: "email.welcome", args: [1], when: "now" }]) }]
  ].freeze

  TestSupport.databases.each do |database|
    define_method("test_#{database}_bad_input_raises_the_code_and_keeps_the_transaction_usable") do
      connection = TestSupport.connect(database, "bad_input", table: TABLE)
      TestSupport.configure(table: TABLE, start_relay: false)
      assert_operator CASES.length, :>=, 15
      ActiveRecord::Base.transaction do
        OJS.enqueue_after_commit("email.welcome", [1])
        CASES.each do |description, code, klass, call|
          error = assert_raises(OJS::Error, description) { call.call }
          assert_equal code, error.code, "#{description}: #{error.message}"
          assert_kind_of klass, error, description
          assert_kind_of OJS::ValidationError, error, description
          refute error.retryable?, description
          assert_equal 1, TestSupport.outbox_count(TABLE), "#{description} wrote a row"
        end
        # The transaction is still usable (on PostgreSQL an aborted one would refuse this).
        OJS.enqueue_after_commit("email.welcome", [2])
        assert_equal 2, connection.select_value("SELECT COUNT(*) FROM #{TABLE}").to_i
      end
      assert_equal 2, TestSupport.outbox_count(TABLE)
    end

    define_method("test_#{database}_bad_input_outside_a_transaction_writes_and_sends_nothing") do
      TestSupport.connect(database, "bad_input_autocommit", table: TABLE)
      TestSupport.configure(table: TABLE, start_relay: true)
      TestSupport.devserver.reset
      CASES.each do |description, code, _klass, call|
        error = assert_raises(OJS::Error, description) { call.call }
        assert_equal code, error.code, description
      end
      %w[Bad email.-welcome].each do |type|
        assert_equal "INVALID_JOB_TYPE", assert_raises(OJS::InvalidJobType) { OJS.enqueue(type, [1]) }.code
      end
      assert_equal 0, TestSupport.outbox_count(TABLE)
      assert_equal({ "batch" => 0, "single" => 0 }, TestSupport.devserver.received["requests"].slice("batch", "single"))
    end
  end

  def test_error_fields_follow_the_core
    TestSupport.connect(:sqlite, "bad_input_fields", table: TABLE)
    TestSupport.configure(table: TABLE, start_relay: false)
    error = assert_raises(OJS::InvalidOptions) { OJS.enqueue_after_commit("a", [1], priority: 500) }
    assert_equal "options.priority", error.field
    error = assert_raises(OJS::InvalidArgs) { OJS.enqueue_after_commit("a", [1, [Object.new]]) }
    assert_equal "args", error.field
    assert_match(/args\[1\]\[0\]/, error.message)
    error = assert_raises(OJS::InvalidJobType) do
      OJS.enqueue_bulk([{ type: "ok", args: [] }, { type: "Bad", args: [] }])
    end
    assert_match(/\Ajobs\[1\]: type/, error.message)
  end

  # docs/errors.md's table: every code of the core (`error::codes_json`) is its class, below its
  # family's class (ValidationError, ConfigurationError, DatabaseError, BackendError; the
  # transaction, relay and duplicate families' one code each directly below OJS::Error), with the core's
  # retryable flag; decoded from the core's error JSON by the one decoder.
  EXPECTED_CLASSES = {
    "INVALID_JOB_TYPE" => "InvalidJobType", "INVALID_QUEUE" => "InvalidQueue", "INVALID_ARGS" => "InvalidArgs",
    "INVALID_OPTIONS" => "InvalidOptions", "INVALID_META" => "InvalidMeta", "PAYLOAD_TOO_LARGE" => "PayloadTooLarge",
    "INVALID_CONFIG" => "InvalidConfig", "INVALID_DATABASE_URL" => "InvalidDatabaseUrl",
    "OUTBOX_TABLE_MISSING" => "OutboxTableMissing", "DATABASE" => "DatabaseError",
    "BACKEND_UNAVAILABLE" => "BackendUnavailable", "BACKEND_REJECTED" => "BackendRejected",
    "NO_TRANSACTION" => "NoTransaction", "RELAY_SHUT_DOWN" => "RelayShutDown", "DUPLICATE" => "DuplicateJob"
  }.freeze
  FAMILY_CLASSES = { "validation" => "ValidationError", "configuration" => "ConfigurationError",
                     "database" => "DatabaseError", "backend" => "BackendError",
                     "transaction" => "Error", "relay" => "Error", "duplicate" => "Error" }.freeze

  def test_every_core_code_is_its_class_below_its_family
    codes = JSON.parse(OJS::Native.error_codes_json)
    assert_equal EXPECTED_CLASSES.keys.sort, codes.map { |info| info["code"] }.sort
    assert_equal codes.map { |info| info["code"] }.sort, OJS::Error::CLASSES.keys.sort
    codes.each do |info|
      klass = OJS.const_get(EXPECTED_CLASSES.fetch(info["code"]))
      family = OJS.const_get(FAMILY_CLASSES.fetch(info["family"]))
      json = JSON.generate("code" => info["code"], "field" => "f", "message" => "m",
                           "retryable" => info["retryable"], "family" => info["family"])
      error = OJS::Error.from_json(json)
      assert_instance_of klass, error, info
      assert_operator klass, :<=, family, "#{klass} derives from #{family}"
      assert_operator klass, :<=, OJS::Error
      assert_equal [info["code"], "f", "m", info["retryable"]], [error.code, error.field, error.message, error.retryable?]
      assert_equal info["retryable"], OJS::Error.for_code(info["code"], "m").retryable?
    end
    assert_same OJS::Error, OJS::OJSError
  end

  # DUPLICATE's JSON carries the held job's id: OJS::DuplicateJob#existing_job_id.
  def test_duplicate_carries_the_existing_job_id
    json = JSON.generate("code" => "DUPLICATE", "field" => "options.unique", "message" => "m", "retryable" => false,
                         "family" => "duplicate", "existing_job_id" => "0190a1b2-0000-7000-8000-000000000001")
    error = OJS::Error.from_json(json)
    assert_instance_of OJS::DuplicateJob, error
    assert_equal "0190a1b2-0000-7000-8000-000000000001", error.existing_job_id
    assert_nil OJS::Error.for_code("DUPLICATE", "m").existing_job_id
  end

  def test_bad_configuration_raises_invalid_config_naming_the_key
    TestSupport.connect(:sqlite, "bad_config", table: TABLE)
    {
      -> { OJS.configure { |c| c.url = "ftp://example.com" } } => %w[INVALID_CONFIG adapter.ojs_url],
      -> { OJS.configure { |c| c.relay = :sideways } } => %w[INVALID_CONFIG adapter.relay.mode],
      -> { OJS.configure { |c| c.outbox_options = { batch_size: 0 } } } => %w[INVALID_CONFIG adapter.outbox.batch_size],
      -> { OJS.configure { |c| c.outbox_options = { flavour: "x" } } } => %w[INVALID_CONFIG adapter.outbox.flavour],
      -> { OJS.configure { |c| c.outbox_table = "drop table;" } } => %w[INVALID_CONFIG adapter.outbox.table_name],
      -> { OJS.configure { |c| c.relay_options = "fast" } } => %w[INVALID_CONFIG relay_options],
      -> { OJS.configure { |c| c.adapter = :redis } } => %w[INVALID_CONFIG adapter],
      -> { OJS.configure { |c| c.url = "http://127.0.0.1:9"; c.database_url = "mssql://x/y" } } => %w[INVALID_DATABASE_URL database_url]
    }.each do |call, (code, field)|
      error = assert_raises(OJS::ConfigurationError) do
        call.call
        OJS.start_relay # a database URL is only opened by the relay
      end
      assert_equal [code, field], [error.code, error.field], error.message
    end
  ensure
    OJS.configure { |c| c.url = TestSupport.devserver.url }
  end

  def test_in_memory_sqlite_cannot_feed_the_relay
    ActiveRecord::Base.remove_connection if ActiveRecord::Base.connected?
    ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: ":memory:")
    error = assert_raises(OJS::InvalidDatabaseUrl) { OJS.configure { |c| c.url = TestSupport.devserver.url } }
    assert_equal "database_url", error.field
    # An external relay has its own database URL: no error then.
    OJS.configure do |c|
      c.url = TestSupport.devserver.url
      c.relay = :external
    end
  end
end

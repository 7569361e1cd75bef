# frozen_string_literal: true

# Jobs the core stages by statements of their own (an ordering key, a unique key) and
# encrypted args, on a real SQLite file, the real PostgreSQL and MariaDB, delivered to the real
# devserver: a unique job is decided in the application's transaction (OJS::DuplicateJob for
# "reject", the held job's id for "ignore"; the transaction goes on either way), a bulk holding
# a rejected job stages nothing, `ordering_key` is the outbox's own option (never on the wire),
# and `config.encryption` seals args before the row is written.

require_relative "test_helper"
require "securerandom"

class KeyedTest < Minitest::Test
  TABLE = "rb_keyed"
  # Two keys of a ring (base64 of 32 bytes each), as the conformance case ENC-* has them.
  K1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
  K2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
  REJECT = { keys: %w[type args], on_conflict: "reject" }.freeze
  IGNORE = { keys: %w[type args], on_conflict: "ignore" }.freeze

  # The devserver applies unique policies too, across tests: each test's keys are its own.
  def setup
    @n = SecureRandom.hex(6)
  end

  def count
    TestSupport.outbox_count(TABLE)
  end

  def row_args(job_id)
    connection = ActiveRecord::Base.connection
    text = connection.select_value("SELECT job_args FROM #{TABLE} WHERE job_id = #{connection.quote(job_id)}")
    text.is_a?(String) ? text : JSON.generate(text)
  end

  # Key ids are passed to the core as written, nothing re-spelled; the core checks the ring.
  def test_encryption_setting_reaches_the_core_unchanged
    config = OJS::Configuration.new
    config.url = "http://127.0.0.1:9"
    config.relay = :external
    config.encryption = { key_id: "keyTwo", keys: { "keyOne" => K1, keyTwo: K2, "key_3" => K1 } }
    assert_equal({ "key_id" => "keyTwo", "keys" => { "keyOne" => K1, "keyTwo" => K2, "key_3" => K1 } },
                 JSON.parse(config.to_core_json).dig("adapter", "encryption"))
    OJS::Client.new(config) # the core accepts it

    config.encryption = { key_id: "k2", keys: { "k1" => K1, "k2" => "bm90IDMyIGJ5dGVz" } }
    error = assert_raises(OJS::InvalidConfig) { OJS::Client.new(config) }
    assert_match(/encryption/, error.field.to_s + error.message)
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_unique_reject_raises_duplicate_and_the_transaction_goes_on") do
      TestSupport.connect(database, "keyed_reject", table: TABLE)
      TestSupport.configure(table: TABLE)
      first = later = nil
      ActiveRecord::Base.transaction do
        first = OJS.enqueue_after_commit("invoice.send", [{ "order" => "r-1#{@n}" }], unique: REJECT)
        error = assert_raises(OJS::DuplicateJob) do
          OJS.enqueue_after_commit("invoice.send", [{ "order" => "r-1#{@n}" }], unique: REJECT)
        end
        assert_equal "DUPLICATE", error.code
        assert_equal first, error.existing_job_id
        assert_kind_of OJS::Error, error
        # The transaction is still usable: stage more and commit.
        later = OJS.enqueue_after_commit("invoice.audit", [1])
        assert_equal 2, count
      end
      TestSupport.devserver.wait_for([first, later])
      assert_equal 2, count
    end

    define_method("test_#{database}_unique_ignore_returns_the_held_job_id") do
      TestSupport.connect(database, "keyed_ignore", table: TABLE)
      TestSupport.configure(table: TABLE, start_relay: false)
      first = ActiveRecord::Base.transaction do
        OJS.enqueue_after_commit("report.build", [{ "day" => "i-1#{@n}" }], unique: IGNORE)
      end
      again = ActiveRecord::Base.transaction do
        OJS.enqueue_after_commit("report.build", [{ "day" => "i-1#{@n}" }], unique: IGNORE)
      end
      assert_equal first, again
      bulk = ActiveRecord::Base.transaction do
        OJS.enqueue_bulk([{ type: "report.other", args: [1] },
                          { type: "report.build", args: [{ "day" => "i-1#{@n}" }], options: { unique: IGNORE } }])
      end
      assert_equal first, bulk.last
      assert_equal 2, count
      OJS.start_relay
      TestSupport.devserver.wait_for([first, bulk.first])
    end

    define_method("test_#{database}_bulk_with_a_rejected_job_stages_nothing") do
      TestSupport.connect(database, "keyed_bulk", table: TABLE)
      TestSupport.configure(table: TABLE)
      held = plain = nil
      ActiveRecord::Base.transaction do
        held = OJS.enqueue_after_commit("invoice.send", [{ "order" => "b-1#{@n}" }], unique: REJECT)
        error = assert_raises(OJS::DuplicateJob) do
          OJS.enqueue_bulk([{ type: "invoice.note", args: [1] },
                            { type: "invoice.send", args: [{ "order" => "b-1#{@n}" }], options: { unique: REJECT } },
                            { type: "invoice.note", args: [2] }])
        end
        assert_equal held, error.existing_job_id
        assert_equal 1, count, "the bulk's savepoint was rolled back"
        plain = OJS.enqueue_after_commit("invoice.note", [3])
      end
      TestSupport.devserver.wait_for([held, plain])
      assert_equal 2, count
    end

    define_method("test_#{database}_ordering_key_is_staged_and_never_sent") do
      TestSupport.connect(database, "keyed_order", table: TABLE)
      TestSupport.configure(table: TABLE)
      ids = ActiveRecord::Base.transaction do
        [OJS.enqueue_after_commit("ledger.post", [1], ordering_key: "acct-7", queue: "ledger"),
         *OJS.enqueue_bulk([{ type: "ledger.post", args: [2], options: { ordering_key: "acct-7" } },
                            { type: "ledger.post", args: [3] }])]
      end
      assert_equal 3, ids.uniq.length
      delivered = TestSupport.devserver.wait_for(ids)
      assert_equal [[1], [2], [3]], delivered.map { |job| job["args"] }
      delivered.each { |job| refute_includes (job["options"] || {}).keys, "ordering_key", job }
      assert_equal "ledger", delivered.first.dig("options", "queue")
    end

    define_method("test_#{database}_encrypted_args_reach_the_backend_as_the_envelope") do
      TestSupport.connect(database, "keyed_enc", table: TABLE)
      card = "4111111111111111"
      TestSupport.configure(table: TABLE, encryption: { key_id: "k1", keys: { "k1" => K1 } })
      old = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("payment.capture", [{ "card" => card }]) }
      refute_includes row_args(old), card, "sealed before the row is written"
      # Rotation: a new current key, the old one kept in the ring.
      TestSupport.configure(table: TABLE, encryption: { key_id: "k2", keys: { "k1" => K1, "k2" => K2 } })
      new = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("payment.capture", [{ "card" => card }]) }
      TestSupport.devserver.wait_for([old, new]).zip(%w[k1 k2]).each do |job, key_id|
        refute_includes JSON.generate(job), card
        assert_equal 1, job["args"].length
        envelope = job["args"].first
        assert_equal true, envelope["ojs_encoded"]
        assert_equal "binary/encrypted", envelope["encoding"]
        assert_kind_of String, envelope["data"]
        assert_equal ["binary/encrypted"], job.dig("meta", "ojs.codec.encodings")
        assert_equal key_id, job.dig("meta", "ojs.codec.key_id")
      end
    end
  end
end

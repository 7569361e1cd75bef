# frozen_string_literal: true

# The staging calls (the C entry points of src/hot.rs behind OJS.enqueue_after_commit and
# OJS.enqueue_bulk) write exactly the row the core prepares, whatever the size of the answer
# (the per-fiber answer buffer grows and the call is repeated), for every kind of type and
# with options, meta and the request context. Rows are read back from the real database.

require_relative "test_helper"

class StagingTest < Minitest::Test
  TABLE = "rb_staging"

  def row(job_id)
    ActiveRecord::Base.connection.select_one(
      "SELECT job_type, job_args, job_options, job_meta, tenant_id FROM #{TABLE} WHERE job_id = " \
      "#{ActiveRecord::Base.connection.quote(job_id)}"
    )
  end

  def json(text)
    text.is_a?(String) ? JSON.parse(text) : text # PostgreSQL's JSONB comes back parsed or as text
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_rows_hold_what_the_core_prepared") do
      TestSupport.connect(database, "staging", table: TABLE)
      TestSupport.configure(table: TABLE, start_relay: false)
      big = "é" * 40_000 # an answer far larger than the first 4 KiB buffer
      ids = ActiveRecord::Base.transaction do
        {
          plain: OJS.enqueue_after_commit("email.welcome", [42, "a", nil, true, 1.5, { "k" => [:sym] }]),
          symbol_type: OJS.enqueue_after_commit(:"report.daily", []),
          big: OJS.enqueue_after_commit("blob.store", [big], meta: { "note" => big }),
          options: OJS.enqueue_after_commit("email.welcome", [1], queue: "mail", priority: 5, tags: ["x"]),
          context: OJS.with_context(tenant_id: "acme", request_id: "r-1") do
            OJS.enqueue_after_commit("email.welcome", [2], meta: { "campaign" => "spring" })
          end
        }
      end
      assert_equal ids.length, ids.values.uniq.length
      assert_equal ids.length, TestSupport.outbox_count(TABLE)

      plain = row(ids[:plain])
      assert_equal "email.welcome", plain["job_type"]
      assert_equal [42, "a", nil, true, 1.5, { "k" => ["sym"] }], json(plain["job_args"])
      assert_equal({}, json(plain["job_options"]))
      assert_nil plain["tenant_id"]

      assert_equal "report.daily", row(ids[:symbol_type])["job_type"]

      stored = row(ids[:big])
      assert_equal [big], json(stored["job_args"])
      assert_equal big, json(stored["job_meta"])["note"]

      options = json(row(ids[:options])["job_options"])
      assert_equal "mail", options["queue"]
      assert_equal 5, options["priority"]
      assert_equal ["x"], options["tags"]

      context = row(ids[:context])
      assert_equal "acme", context["tenant_id"]
      meta = json(context["job_meta"])
      assert_equal "spring", meta["campaign"]
      assert_equal "acme", meta["tenant_id"]
      assert_equal "r-1", meta["ojs.context.request_id"]
    end

    define_method("test_#{database}_large_bulk_and_single_calls_interleave") do
      TestSupport.connect(database, "staging_bulk", table: TABLE)
      TestSupport.configure(table: TABLE, start_relay: false)
      jobs = Array.new(2500) { |i| { type: "report.row", args: [i, "row #{i}"] } }
      ids = ActiveRecord::Base.transaction do
        first = OJS.enqueue_after_commit("email.welcome", [0])
        bulk = OJS.enqueue_bulk(jobs) # an answer of several hundred KiB
        [first, *bulk, OJS.enqueue_after_commit("email.welcome", [1])]
      end
      assert_equal 2502, ids.uniq.length
      assert_equal 2502, TestSupport.outbox_count(TABLE)
      assert_equal [1234, "row 1234"], json(row(ids[1235])["job_args"])
      assert_equal [1], json(row(ids.last)["job_args"])
    end
  end
end

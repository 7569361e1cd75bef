# frozen_string_literal: true

# ActiveJob's queue adapter :ojs: perform_later inside a transaction goes through the outbox.

require_relative "test_helper"
require "active_job"
require "ojs/active_job_adapter"

class WelcomeEmailJob < ActiveJob::Base
  queue_as :mailers

  def perform(user_id, greeting:)
    [user_id, greeting]
  end
end

module Admin
  class ReportJob < ActiveJob::Base
    def perform; end
  end
end

class ActiveJobTest < Minitest::Test
  TABLE = "rb_active_job"

  def setup
    ActiveJob::Base.logger = Logger.new(nil)
    ActiveJob::Base.queue_adapter = :ojs
    # What a Rails 7.2 app with `config.load_defaults 7.2` has: ActiveJob's deferral module
    # (included by its Railtie) and `:default`, so ActiveJob asks the adapter whether to defer an
    # enqueue inside a transaction to after the commit (the :ojs adapter says no).
    if defined?(ActiveJob::EnqueueAfterTransactionCommit)
      ActiveJob::Base.include(ActiveJob::EnqueueAfterTransactionCommit)
      @deferral = ActiveJob::Base.enqueue_after_transaction_commit
      ActiveJob::Base.enqueue_after_transaction_commit = :default
    end
    TestSupport.connect(:sqlite, "active_job", table: TABLE)
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
  end

  def teardown
    ActiveJob::Base.enqueue_after_transaction_commit = @deferral if defined?(@deferral)
  end

  # A job staged after the others and delivered: anything wrongly sent before it is there too.
  def sentinel
    TestSupport.devserver.wait_for([OJS.enqueue_after_commit("sentinel.job", [0])])
  end

  def inserts_into_outbox
    statements = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      statements << payload[:sql] if payload[:sql].to_s.start_with?("INSERT INTO #{TABLE}")
    end
    yield
    statements
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  def test_types_follow_the_ojs_naming_rule
    assert_equal "welcome_email_job", OJS::ActiveJobAdapter.job_type(WelcomeEmailJob)
    assert_equal "admin.report_job", OJS::ActiveJobAdapter.job_type(Admin::ReportJob)
  end

  def test_the_adapter_is_an_active_job_adapter_that_is_never_deferred
    adapter = ActiveJob::Base.queue_adapter
    assert_instance_of ActiveJob::QueueAdapters::OjsAdapter, adapter
    if ActiveJob::QueueAdapters.const_defined?(:AbstractAdapter)
      assert_kind_of ActiveJob::QueueAdapters::AbstractAdapter, adapter
    end
    refute adapter.enqueue_after_transaction_commit?
  end

  def test_perform_later_in_a_transaction_is_sent_after_commit_only
    committed = nil
    ActiveRecord::Base.transaction do
      committed = WelcomeEmailJob.perform_later(42, greeting: "hello")
      assert_equal 1, TestSupport.outbox_count(TABLE), "the row is written in the transaction, not deferred"
    end
    later = Admin::ReportJob.set(wait: 3600).perform_later
    job = TestSupport.devserver.wait_for([committed.provider_job_id]).first
    assert_equal "welcome_email_job", job["type"]
    assert_equal "mailers", job.dig("options", "queue")
    payload = job["args"].first
    assert_equal "WelcomeEmailJob", payload["job_class"]
    assert_equal committed.job_id, payload["job_id"]
    # ActiveJob's own serialization round-trips: a worker runs ActiveJob::Base.execute(payload).
    assert_equal [42, { greeting: "hello" }], ActiveJob::Arguments.deserialize(payload["arguments"])
    scheduled = TestSupport.devserver.wait_for([later.provider_job_id]).first
    assert_equal "admin.report_job", scheduled["type"]
    assert scheduled.dig("options", "delay_until") || scheduled["scheduled_at"], scheduled
  end

  def test_a_job_enqueued_in_a_transaction_that_rolls_back_is_never_sent
    rolled_back = nil
    ActiveRecord::Base.transaction do
      rolled_back = WelcomeEmailJob.perform_later(43, greeting: "never")
      assert_equal 1, TestSupport.outbox_count(TABLE)
      raise ActiveRecord::Rollback
    end
    assert rolled_back.provider_job_id, "the job was staged (it has an outbox id)"
    assert_equal 0, TestSupport.outbox_count(TABLE), "the row went with the transaction"
    sentinel
    ids = TestSupport.devserver.jobs.map { |job| job["id"] }
    refute_includes ids, rolled_back.provider_job_id
    assert_equal 1, ids.length, "only the sentinel reached the backend"
  end

  def test_enqueue_all_stages_every_job_with_one_insert
    jobs = Array.new(5) { |i| WelcomeEmailJob.new(i, greeting: "bulk") }
    scheduled = Admin::ReportJob.new
    if scheduled.respond_to?(:set) # ActiveJob 7.1+
      scheduled.set(wait: 3600)
    else # 6.1: scheduled_at is epoch seconds
      scheduled.scheduled_at = Time.now.to_f + 3600
    end
    jobs << scheduled
    statements = inserts_into_outbox do
      ActiveRecord::Base.transaction do
        if ActiveJob.respond_to?(:perform_all_later) # ActiveJob 7.1+
          assert_nil ActiveJob.perform_all_later(jobs)
        else
          assert_equal 6, ActiveJob::Base.queue_adapter.enqueue_all(jobs)
        end
        assert_equal 6, TestSupport.outbox_count(TABLE)
      end
    end
    assert_equal 1, statements.length, "one bulk INSERT for all jobs: #{statements}"
    ids = jobs.map(&:provider_job_id)
    assert_equal 6, ids.compact.uniq.length
    assert jobs.all?(&:successfully_enqueued?) if jobs.first.respond_to?(:successfully_enqueued?)
    stored = TestSupport.devserver.wait_for(ids)
    assert_equal [0, 1, 2, 3, 4], stored.first(5).map { |job| job["args"].first["arguments"].first }
    assert_equal ["welcome_email_job"] * 5 + ["admin.report_job"], stored.map { |job| job["type"] }
    assert_equal "mailers", stored.first.dig("options", "queue")
    assert stored.last.dig("options", "delay_until"), stored.last
  end

  def test_enqueue_all_in_a_transaction_that_rolls_back_sends_nothing
    jobs = Array.new(3) { |i| WelcomeEmailJob.new(i, greeting: "bulk") }
    ActiveRecord::Base.transaction do
      ActiveJob::Base.queue_adapter.enqueue_all(jobs)
      raise ActiveRecord::Rollback
    end
    assert_equal 0, TestSupport.outbox_count(TABLE)
    sentinel
    assert_empty TestSupport.devserver.jobs.map { |job| job["id"] } & jobs.map(&:provider_job_id)
  end
end

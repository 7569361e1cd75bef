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
    TestSupport.connect(:sqlite, "active_job", table: TABLE)
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
  end

  def test_types_follow_the_ojs_naming_rule
    assert_equal "welcome_email_job", OJS::ActiveJobAdapter.job_type(WelcomeEmailJob)
    assert_equal "admin.report_job", OJS::ActiveJobAdapter.job_type(Admin::ReportJob)
  end

  def test_perform_later_in_a_transaction_is_sent_after_commit_only
    committed = nil
    ActiveRecord::Base.transaction do
      committed = WelcomeEmailJob.perform_later(42, greeting: "hello")
      assert_equal 1, TestSupport.outbox_count(TABLE)
    end
    ActiveRecord::Base.transaction do
      WelcomeEmailJob.perform_later(43, greeting: "never")
      raise ActiveRecord::Rollback
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
    sleep 0.2
    assert_equal 2, TestSupport.devserver.jobs.length, "the rolled back job must not be sent"
  end
end

# frozen_string_literal: true

# Issue 11, item 2: Rails values for time options. `delay_until:` and `expires_at:` take a
# Time, DateTime or ActiveSupport::TimeWithZone, sent as RFC 3339 text in UTC with the
# sub-second digits the value has; what reaches the real devserver is checked, through each
# staging path (one job, bulk, §5.1 enqueue) and through ActiveJob's set(wait:/wait_until:).
# Args and meta keep the strict JSON rule, and a Date (no time of day, no zone) is refused.

require_relative "test_helper"
require "active_support/time"
require "active_job"
require "ojs/active_job_adapter"

class ScheduledReportJob < ActiveJob::Base
  def perform; end
end

class TimeOptionsTest < Minitest::Test
  TABLE = "rb_time_options"

  # [value, the RFC 3339 text the backend must receive]
  VALUES = {
    "Time with an offset and a fraction" =>
      [Time.new(2030, 1, 2, 12, 4, 5.25r, "+09:00"), "2030-01-02T03:04:05.25Z"],
    "whole-second Time" => [Time.utc(2030, 1, 2, 3, 4, 5), "2030-01-02T03:04:05Z"],
    "DateTime with an offset" => [DateTime.new(2030, 1, 2, 3, 4, 5.5r, "-05:00"), "2030-01-02T08:04:05.5Z"],
    "TimeWithZone to the nanosecond" =>
      [Time.utc(2030, 1, 2, 3, 4, 5, 123_456.789r).in_time_zone("Asia/Tokyo"), "2030-01-02T03:04:05.123456789Z"]
  }.freeze

  def setup
    TestSupport.connect(:sqlite, "time_options", table: TABLE)
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
  end

  def delivered(ids)
    TestSupport.devserver.wait_for(ids).map { |job| job["options"] }
  end

  def test_time_values_reach_the_backend_as_rfc3339_utc
    expires = Time.utc(2031, 6, 7, 8, 9, 10, 500_000)
    ids = ActiveRecord::Base.transaction do
      VALUES.values.map { |value, _| OJS.enqueue_after_commit("report.daily", [1], delay_until: value, expires_at: expires) }
    end
    delivered(ids).zip(VALUES) do |options, (description, (_, text))|
      assert_equal text, options["delay_until"], description
      assert_equal "2031-06-07T08:09:10.5Z", options["expires_at"], description
    end
  end

  # `value` was computed between `before` and `after` as now + `seconds`: it lies between them
  # shifted by `seconds` (a microsecond of slack: ActiveJob before 7.1 rounds to microseconds),
  # however long the call took.
  def assert_now_plus(seconds, before, after, value)
    low = before + seconds - 1e-6
    high = after + seconds + 1e-6
    assert value.between?(low, high), "#{value.iso8601(9)} is not within [#{low.iso8601(9)}, #{high.iso8601(9)}]"
  end

  def test_rails_relative_times_are_accepted
    before = Time.now
    id = OJS.enqueue_after_commit("report.daily", [1], delay_until: 5.minutes.from_now, expires_at: 1.day.from_now)
    after = Time.now
    options = delivered([id]).first
    assert_match(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\z/, options["delay_until"])
    assert_now_plus(300, before, after, Time.iso8601(options["delay_until"]))
    assert_now_plus(86_400, before, after, Time.iso8601(options["expires_at"]))
  end

  def test_bulk_and_enqueue_now_convert_the_same_way
    value, text = VALUES.fetch("TimeWithZone to the nanosecond")
    bulk = OJS.enqueue_bulk([{ type: "report.row", args: [1], options: { delay_until: value } },
                             { type: "report.row", args: [2], options: { "expires_at" => value } }])
    now = OJS.enqueue("report.now", [3], delay_until: value)
    first, second, third = delivered([*bulk, now])
    assert_equal text, first["delay_until"]
    assert_equal text, second["expires_at"]
    assert_equal text, third["delay_until"]
  end

  def test_the_callers_time_is_not_changed
    value = Time.new(2030, 1, 2, 12, 4, 5, "+09:00")
    OJS.enqueue_after_commit("report.daily", [1], delay_until: value)
    assert_equal "+09:00", value.strftime("%:z"), "the Time passed in is still in its own zone"
  end

  def test_a_date_and_times_outside_option_values_are_refused
    date = assert_raises(OJS::InvalidOptions) { OJS.enqueue_after_commit("report.daily", [1], delay_until: Date.new(2030, 1, 2)) }
    assert_equal "options", date.field # the core's rule: the part is the field (ojs_bridge::unencodable)
    assert_match(/\Aoptions\.delay_until: a Date/, date.message)
    assert_equal "INVALID_ARGS", assert_raises(OJS::InvalidArgs) { OJS.enqueue_after_commit("report.daily", [Time.now]) }.code
    assert_equal "INVALID_META",
                 assert_raises(OJS::InvalidMeta) { OJS.enqueue_after_commit("report.daily", [1], meta: { at: Time.now }) }.code
    # Only an option's own value: one nested in a Hash or Array stays refused.
    assert_raises(OJS::InvalidOptions) { OJS.enqueue_after_commit("report.daily", [1], tags: [Time.now]) }
    assert_raises(OJS::InvalidArgs) { OJS.enqueue_bulk([{ type: "report.row", args: [Time.now] }]) }
    assert_equal 0, TestSupport.outbox_count(TABLE)
  end

  # ActiveJob: set(wait_until:) and set(wait:) go through the same conversion. ActiveJob 7.1+
  # keeps the Time (sent to the nanosecond); before 7.1 it passes Float seconds, which carry
  # microseconds (rounded).
  def test_active_job_wait_until_and_wait
    ActiveJob::Base.logger = Logger.new(nil)
    ActiveJob::Base.queue_adapter = :ojs
    at = Time.utc(2030, 1, 2, 3, 4, 5, 123_456.789r).in_time_zone("Asia/Tokyo")
    exact = ActiveJob.gem_version >= Gem::Version.new("7.1")
    expected = exact ? "2030-01-02T03:04:05.123456789Z" : "2030-01-02T03:04:05.123457Z"
    before = Time.now
    until_job = ScheduledReportJob.set(wait_until: at).perform_later
    wait_job = ScheduledReportJob.set(wait: 5.minutes).perform_later
    after = Time.now
    bulk_job = ScheduledReportJob.new
    if exact
      bulk_job.set(wait_until: at)
    else
      bulk_job.scheduled_at = at.to_f
    end
    ActiveJob::Base.queue_adapter.enqueue_all([bulk_job])
    until_options, wait_options, bulk_options = delivered([until_job, wait_job, bulk_job].map(&:provider_job_id))
    assert_equal expected, until_options["delay_until"]
    assert_equal expected, bulk_options["delay_until"]
    assert_match(/Z\z/, wait_options["delay_until"])
    assert_now_plus(300, before, after, Time.iso8601(wait_options["delay_until"]))
  end
end

# frozen_string_literal: true

# The backend URL has no silent default (issue 11): OJS.configure without config.ojs_url
# raises OJS::InvalidConfig naming the setting, unless the application runs in development
# (RAILS_ENV / RACK_ENV == "development" outside Rails); then the core's development URL is used
# and OJS.logger gets one warning naming the setting.

require_relative "test_helper"
require "stringio"

class ConfigTest < Minitest::Test
  SETTING = "config.ojs_url"

  def setup
    @env = ENV.to_h.slice("RAILS_ENV", "RACK_ENV")
    ENV.delete("RAILS_ENV")
    ENV.delete("RACK_ENV")
    @logger = OJS.logger
    @log = StringIO.new
    OJS.logger = Logger.new(@log)
    TestSupport.connect(:sqlite, "rb_config", table: "rb_config")
  end

  def teardown
    ENV.delete("RAILS_ENV")
    ENV.delete("RACK_ENV")
    @env.each { |key, value| ENV[key] = value }
    OJS.logger = @logger
    OJS.configure { |c| c.url = TestSupport.devserver.url }
  end

  def test_a_missing_url_fails_at_configure_naming_the_setting
    [nil, "production", "test"].each do |env|
      env ? ENV["RAILS_ENV"] = env : ENV.delete("RAILS_ENV")
      [-> { OJS.configure { |c| c.relay = :external } }, -> { OJS.configure { |c| c.url = nil } }].each do |call|
        error = assert_raises(OJS::InvalidConfig) { call.call }
        assert_equal %w[INVALID_CONFIG adapter.ojs_url], [error.code, error.field], error.message
        assert_includes error.message, SETTING
      end
    end
    assert_empty @log.string
  end

  def test_development_uses_the_development_url_and_warns_once
    %w[RAILS_ENV RACK_ENV].each do |variable|
      ENV.delete("RAILS_ENV")
      ENV.delete("RACK_ENV")
      ENV[variable] = "development"
      @log.truncate(0)
      @log.rewind
      OJS.configure { |c| c.relay = :external }
      OJS.client # the configured client: no second warning
      warnings = @log.string.lines.grep(/no OJS backend URL is set/)
      assert_equal 1, warnings.size, @log.string
      assert_match(/WARN/, warnings[0])
      assert_includes warnings[0], "http://localhost:8080"
      assert_includes warnings[0], SETTING
    end
  end

  # A configuration without config.logger logs its notice to OJS.logger=, not to the logger of
  # the configuration it replaces (which a test run in another order left behind once).
  def test_the_notice_goes_to_the_new_configurations_logger_not_the_replaced_ones
    replaced = StringIO.new
    OJS.configure do |c|
      c.url = TestSupport.devserver.url
      c.relay = :external
      c.logger = Logger.new(replaced)
    end
    ENV["RAILS_ENV"] = "development"
    OJS.configure { |c| c.relay = :external }
    assert_equal 1, @log.string.lines.grep(/no OJS backend URL is set/).size, @log.string
    assert_empty replaced.string
  end

  # A removed or misspelled setting is an error naming it, never silently ignored.
  def test_an_unknown_or_renamed_setting_is_refused
    error = assert_raises(OJS::InvalidConfig) { OJS.configure { |c| c.start_relay_on_first_use = false } }
    assert_includes error.message, "config.auto_start"
    error = assert_raises(OJS::InvalidConfig) { OJS.configure { |c| c.autostart = false } }
    assert_equal "config.autostart", error.field
    assert_includes error.message, "config.auto_start" # the core's near miss
  end

  # config.tracing reaches the core as adapter.tracing, which checks it: false (off, whatever
  # the environment says) is taken, a value that is no boolean is refused naming the setting.
  def test_tracing_is_the_core_s_setting_and_checked_there
    configure = lambda do |tracing|
      OJS.configure do |c|
        c.url = TestSupport.devserver.url
        c.relay = :external
        c.tracing = tracing
      end
    end
    configure.call(false)
    assert_equal false, OJS.configuration.tracing
    ["yes", 1].each do |odd|
      error = assert_raises(OJS::InvalidConfig) { configure.call(odd) }
      assert_equal "adapter.tracing", error.field, error.message
    end
  end

  def test_a_url_that_is_set_is_used_without_a_word_in_development
    ENV["RAILS_ENV"] = "development"
    OJS.configure { |c| c.url = TestSupport.devserver.url }
    assert_empty @log.string
  end
end

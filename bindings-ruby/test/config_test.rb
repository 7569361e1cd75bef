# frozen_string_literal: true

# The backend URL has no silent default (issue 11): OJS.configure without config.ojs_url
# raises OJS::InvalidConfig naming the setting, unless the application runs in development
# (RAILS_ENV / RACK_ENV == "development" outside Rails); then the core's development URL is used
# and OJS.logger gets one warning naming the setting.

require_relative "test_helper"
require "stringio"
require "open3"

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
      OJS.adapter # the configured adapter: no second warning
      warnings = @log.string.lines.grep(/no OJS backend URL is set/)
      assert_equal 1, warnings.size, @log.string
      assert_match(/WARN/, warnings[0])
      assert_includes warnings[0], "http://localhost:8080"
      assert_includes warnings[0], SETTING
    end
  end

  def test_a_url_that_is_set_is_used_without_a_word_in_development
    ENV["RAILS_ENV"] = "development"
    OJS.configure { |c| c.url = TestSupport.devserver.url }
    assert_empty @log.string
  end
end

# Issue 11, item 8: OJS.start_at_boot (what the Railtie runs after initialization in a serving
# process) starts the relay now and again in every process forked later, before any enqueue. In
# a Ruby process of its own, so the fork hook stays out of this one.
class StartAtBootTest < Minitest::Test
  SCRIPT = <<~'RUBY'
    require "active_record"
    require "ojs-adapter-rails"
    ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: ARGV[0])
    OJS.configure do |c|
      c.url = ARGV[1]
      c.outbox_table = "rb_boot_fork"
    end
    OJS::Migration.create_outbox_table
    before = OJS.metrics.nil? ? "none" : "running"
    OJS.start_at_boot
    parent = OJS.metrics.nil? ? "none" : "running"
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      writer.write(OJS.metrics.nil? ? "none" : "running") # no enqueue in the child
      writer.close
      OJS.stop_relay
      exit!(0)
    end
    writer.close
    child = reader.read
    Process.wait(pid)
    OJS.stop_relay
    puts "REPORT #{before} #{parent} #{child}"
  RUBY

  def test_the_relay_starts_now_and_in_each_forked_process
    database = File.join(TestSupport::TMP, "rb_boot_fork.db")
    FileUtils.rm_f(database)
    output, status = Open3.capture2e(RbConfig.ruby, "-e", SCRIPT, database, TestSupport.devserver.url)
    assert status.success?, output
    assert_includes output, "REPORT none running running"
  end
end

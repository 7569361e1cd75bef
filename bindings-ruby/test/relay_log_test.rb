# frozen_string_literal: true

# The relay's log records reach the application's logger (`config.logger`, OJS.logger): a pause
# when the backend cannot be reached (WARN), a dead letter (ERROR, naming its job id), on
# SQLite, PostgreSQL and MariaDB. Real relay, real ojs-devserver, a real closed port; records
# are awaited with a deadline. (`rails ojs:relay` printing them: rails_app_test.rb.)

require_relative "test_helper"
require "socket"
require "stringio"

class RelayLogTest < Minitest::Test
  # A backend URL nothing listens on.
  def closed_port_url
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    server.close
    "http://127.0.0.1:#{port}"
  end

  # Configures OJS against `url` with a Logger writing "SEVERITY message" lines to a StringIO;
  # returns that StringIO.
  def configure(url, table)
    io = StringIO.new
    logger = Logger.new(io)
    logger.formatter = ->(severity, _time, _program, message) { "#{severity} #{message}\n" }
    OJS.configure do |config|
      config.url = url
      config.outbox_table = table
      config.outbox_options = { poll_interval: "PT0.1S" }
      config.relay_options = { initial_backoff: "PT0.05S", max_backoff: "PT0.2S" }
      config.auto_start = false
      config.logger = logger
    end
    OJS::Migration.create_outbox_table
    OJS.start_relay
    io
  end

  def logged_line(io, pattern)
    TestSupport.wait_until("a line #{pattern.inspect} in the logger") do
      io.string.lines.find { |line| line.match?(pattern) }
    end
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_a_pause_reaches_the_logger_as_a_warning") do
      table = "rb_log_pause"
      TestSupport.connect(database, "relay_log_pause", table: table)
      io = configure(closed_port_url, table)
      OJS.enqueue_after_commit("email.welcome", [1])
      line = logged_line(io, /\AWARN outbox relay: pausing: the OJS backend cannot take jobs now/)
      assert_includes line, "rows stay pending"
      refute_match(/^ERROR/, io.string)
      assert_same OJS.configuration.logger, OJS.logger
    ensure
      OJS.stop_relay
    end

    define_method("test_#{database}_a_dead_letter_reaches_the_logger_as_an_error_with_its_job_id") do
      table = "rb_log_dead"
      TestSupport.connect(database, "relay_log_dead", table: table)
      TestSupport.devserver.reset
      TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 400, "code" => "invalid_request",
                                                          "match_type" => "poison.job" })
      io = configure(TestSupport.devserver.url, table)
      job_id = OJS.enqueue_after_commit("poison.job", [1])
      line = logged_line(io, /\AERROR /)
      assert_includes line, "outbox relay: job #{job_id} (poison.job) is dead"
      assert_includes line, "invalid_request"
      assert_equal "dead", OJS.outbox_rows([job_id]).dig(job_id, "status")
    ensure
      TestSupport.devserver.call(:delete, "/_dev/faults")
      OJS.stop_relay
    end
  end
end

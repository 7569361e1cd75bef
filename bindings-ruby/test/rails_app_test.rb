# frozen_string_literal: true

# The Rails glue in a real (minimal) Rails app, the example app, each command in its own
# process as an operator would run it: `rails g ojs:install` (initializer + migration),
# `rails db:migrate` (the core's DDL through ActiveRecord), the Railtie (middleware, external
# relay mode), `rails ojs:relay` stopped by SIGTERM, `ojs:status`, `ojs:dead:list|replay|purge`.

require_relative "test_helper"
require "open3"
require "sqlite3"

class RailsAppTest < Minitest::Test
  EXAMPLE = File.join(TestSupport::ROOT, "bindings-ruby", "example")

  def setup
    @app = File.join(TestSupport::TMP, "rails_app")
    FileUtils.rm_rf(@app)
    FileUtils.cp_r(EXAMPLE, @app)
    @env = {
      "OJS_URL" => TestSupport.devserver.url,
      "EXAMPLE_SQLITE_PATH" => File.join(@app, "db", "app.sqlite3"),
      "RAILS_ENV" => "development"
    }
    TestSupport.devserver.reset
  end

  def rails(*args, expect_success: true)
    output, status = Open3.capture2e(@env, RbConfig.ruby, "bin/rails", *args, chdir: @app)
    assert status.success?, "bin/rails #{args.join(' ')} failed:\n#{output}" if expect_success
    [output, status]
  end

  def test_generator_migration_railtie_and_rake_tasks
    output, = rails("generate", "ojs:install")
    assert_match %r{create\s+config/initializers/ojs\.rb}, output
    migration = Dir[File.join(@app, "db/migrate/*_create_ojs_outbox.rb")].first
    assert migration, "the generator writes the outbox migration"
    assert_includes File.read(migration), "OJS::Migration.create_outbox_table(connection)"
    initializer = File.join(@app, "config/initializers/ojs.rb")
    File.write(initializer, File.read(initializer).sub("# config.relay = :external", "config.relay = :external"))

    rails("db:migrate")
    db = SQLite3::Database.new(@env["EXAMPLE_SQLITE_PATH"])
    assert_equal ["ojs_outbox"], db.execute("SELECT name FROM sqlite_master WHERE name = 'ojs_outbox'").flatten

    output, = rails("runner", <<~RUBY)
      raise "middleware missing" unless Rails.application.middleware.include?(OJS::Middleware)
      raise "relay should be external" if OJS.adapter.relay_in_process?
      ActiveRecord::Base.transaction do
        OJS.enqueue_after_commit("email.welcome", [1])
        OJS.enqueue_after_commit("poison.job", [2])
      end
      puts OJS.status.fetch("pending")
    RUBY
    assert_equal "2", output.lines.last.strip, "external mode: nothing relayed by the app process"
    sleep 0.3
    assert_empty TestSupport.devserver.jobs

    TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 400, "code" => "invalid_request",
                                                         "match_type" => "poison.job" })
    relay_output = +""
    Open3.popen2e(@env, RbConfig.ruby, "bin/rails", "ojs:relay", chdir: @app) do |_stdin, out, thread|
      reader = Thread.new { out.each_line { |line| relay_output << line } }
      delivered = TestSupport.devserver.wait_for_type("email.welcome", timeout: 20)
      assert_equal [1], delivered["args"]
      dead = wait_until(10) { JSON.parse(rails("ojs:dead:list").first[/\[.*\]/m] || "[]") }
      assert_equal 1, dead.length
      Process.kill("TERM", thread.pid)
      status = thread.value
      reader.join
      assert status.success?, "ojs:relay should exit 0 after SIGTERM:\n#{relay_output}"
    end

    status_json = JSON.parse(rails("ojs:status").first[/\{.*\}/m])
    assert_equal 1, status_json["sent"]
    assert_equal 1, status_json["dead"]
    output, status = rails("ojs:dead:purge", expect_success: false)
    refute status.success?, "purge without YES=1 must refuse"
    assert_match(/YES=1/, output)
    assert_match(/replayed 1 dead row/, rails("ojs:dead:replay").first)
    assert_equal 1, JSON.parse(rails("ojs:status").first[/\{.*\}/m])["pending"]
  ensure
    TestSupport.devserver.call(:delete, "/_dev/faults")
  end

  def wait_until(seconds)
    deadline = Time.now + seconds
    loop do
      value = yield
      return value if value.respond_to?(:empty?) ? !value.empty? : value
      raise Minitest::Assertion, "condition not met within #{seconds}s" if Time.now > deadline

      sleep 0.2
    end
  end
end

class TestSupport::DevServer
  def wait_for_type(type, timeout:)
    deadline = Time.now + timeout
    loop do
      job = jobs.find { |stored| stored["type"] == type }
      return job if job
      raise Minitest::Assertion, "no #{type} job within #{timeout}s" if Time.now > deadline

      sleep 0.05
    end
  end
end

# frozen_string_literal: true

# Shared setup for the gem's tests: the INSTALLED gem (test.sh puts it on GEM_PATH), a real
# SQLite file, the real PostgreSQL server (OJS_TEST_DATABASE_URL) or the real MariaDB server
# (OJS_TEST_MYSQL_URL, through ActiveRecord's mysql2 adapter), and the real
# ojs-devserver over HTTP. No mocks: the devserver is the stand-in for the OJS backend.

require "minitest/autorun"
require "json"
require "net/http"
require "uri"
require "fileutils"
require "tmpdir"
require "ojs-adapter-rails"

if ENV["OJS_REQUIRE_INSTALLED_GEM"]
  loaded = $LOADED_FEATURES.find { |path| path.end_with?("/lib/ojs.rb") }
  unless loaded&.start_with?(ENV.fetch("GEM_HOME"))
    abort "the tests must run against the installed gem in GEM_HOME, loaded #{loaded.inspect}"
  end
end

unless ENV["OJS_TEST_DATABASE_URL"]
  abort "OJS_TEST_DATABASE_URL is required (a PostgreSQL server, e.g. postgres://postgres@127.0.0.1:55432/postgres)"
end
unless ENV["OJS_TEST_MYSQL_URL"]
  abort "OJS_TEST_MYSQL_URL is required (a MariaDB server, e.g. mysql://ojs@127.0.0.1:33073/ojs_test)"
end

module TestSupport
  ROOT = File.expand_path("../..", __dir__)
  # MAJOR.MINOR of the ActiveRecord under test: 6.1 on the host, 7.2 in the Debian 13 root
  # (test-rails72.sh). Files and the PostgreSQL and MariaDB databases are per version, so the
  # two suites never share state.
  RAILS = "#{ActiveRecord::VERSION::MAJOR}.#{ActiveRecord::VERSION::MINOR}"
  TMP = File.join(ROOT, "target", "ruby-test", "rails-#{RAILS}")
  FileUtils.mkdir_p(TMP)
  # How long a test waits for something that must happen (generous: the machine may be busy).
  PATIENCE = 30

  # The dev backend, started once per test process on a free port, seen only over HTTP.
  class DevServer
    attr_reader :url

    def initialize
      binary = File.join(ROOT, "target", "debug", "ojs-devserver")
      raise "#{binary} missing: cargo build -p ojs-devserver" unless File.executable?(binary)

      @io = IO.popen([binary, "--port", "0"], err: File::NULL)
      line = @io.gets or raise "ojs-devserver did not start"
      @url = line[%r{listening on (http://\S+)}, 1] or raise "unexpected devserver line: #{line}"
      at_exit { stop }
    end

    def stop
      return unless @io

      Process.kill("TERM", @io.pid)
      @io.close
      @io = nil
    rescue Errno::ESRCH
      nil
    end

    def call(method, path, body = nil)
      uri = URI("#{@url}#{path}")
      request = Net::HTTP.const_get(method.capitalize).new(uri)
      if body
        request["content-type"] = "application/json"
        request.body = JSON.generate(body)
      end
      response = Net::HTTP.start(uri.host, uri.port) { |http| http.request(request) }
      response.body.to_s.empty? ? nil : JSON.parse(response.body)
    end

    def reset
      call(:post, "/_dev/reset")
    end

    def received
      call(:get, "/_dev/received")
    end

    def jobs
      received["jobs"]
    end

    def job(id)
      jobs.find { |job| job["id"] == id }
    end

    # Waits until every id is stored; returns the stored jobs.
    def wait_for(ids, timeout: PATIENCE)
      deadline = TestSupport.monotonic + timeout
      loop do
        stored = jobs.to_h { |job| [job["id"], job] }
        return ids.map { |id| stored[id] } if ids.all? { |id| stored.key?(id) }
        raise Minitest::Assertion, "not delivered within #{timeout}s: #{ids - stored.keys}" if TestSupport.monotonic > deadline

        sleep 0.01
      end
    end
  end

  class << self
    def devserver
      @devserver ||= DevServer.new
    end

    # Seconds on the monotonic clock (deadlines: the wall clock may be stepped meanwhile).
    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # Waits until the block returns a truthy value (returned), polling; fails after `timeout`.
    def wait_until(what, timeout: PATIENCE, every: 0.02)
      deadline = monotonic + timeout
      loop do
        value = yield
        return value if value
        if monotonic > deadline
          raise Minitest::Assertion, "#{what}: not within #{timeout}s"
        end

        sleep every
      end
    end

    # The PostgreSQL database of the Ruby tests of this ActiveRecord version (created on the
    # given server if missing), so other languages' tests on the same server are not disturbed.
    def postgres_url
      @postgres_url ||= begin
        base = URI(ENV.fetch("OJS_TEST_DATABASE_URL"))
        name = "ojs_rb_#{RAILS.delete('.')}"
        ActiveRecord::Base.establish_connection(base.to_s)
        exists = ActiveRecord::Base.connection.select_value(
          "SELECT 1 FROM pg_database WHERE datname = '#{name}'"
        )
        ActiveRecord::Base.connection.execute("CREATE DATABASE #{name}") unless exists
        ActiveRecord::Base.remove_connection
        base.path = "/#{name}"
        base.to_s
      end
    end

    # The MariaDB database of the Ruby tests of this ActiveRecord version (created on the server
    # of OJS_TEST_MYSQL_URL if missing), as ActiveRecord's mysql2 URL, with the `encoding:
    # utf8mb4` of Rails' generated database.yml (the mysql2 gem's own default is 3-byte utf8).
    def mysql_url
      @mysql_url ||= begin
        base = URI(ENV.fetch("OJS_TEST_MYSQL_URL"))
        base.scheme = "mysql2"
        base.query = [base.query, "encoding=utf8mb4"].compact.join("&")
        name = "ojs_rb_#{RAILS.delete('.')}"
        ActiveRecord::Base.establish_connection(base.to_s)
        ActiveRecord::Base.connection.execute("CREATE DATABASE IF NOT EXISTS #{name}")
        ActiveRecord::Base.remove_connection
        base.path = "/#{name}"
        base.to_s
      end
    end

    # Connects ActiveRecord to a fresh database of `kind` (:sqlite: a new file; :postgres and
    # :mariadb: the test database, with `table` dropped, on MariaDB with the event log and the
    # locks table the core's DDL creates beside it).
    def connect(kind, name, table:)
      ActiveRecord::Base.remove_connection if ActiveRecord::Base.connected?
      case kind
      when :sqlite
        path = File.join(TMP, "#{name}.db")
        %w[ -wal -shm -journal].unshift("").each { |suffix| FileUtils.rm_f("#{path}#{suffix}") }
        ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: path, timeout: 10_000)
        # WAL lets the relay's connection read while the application holds a write transaction.
        ActiveRecord::Base.connection.execute("PRAGMA journal_mode=WAL")
      when :postgres
        ActiveRecord::Base.establish_connection(postgres_url)
        ActiveRecord::Base.connection.drop_table(table, if_exists: true)
      when :mariadb
        ActiveRecord::Base.establish_connection(mysql_url)
        %W[#{table} #{table}_events #{table}_locks].each do |name|
          ActiveRecord::Base.connection.drop_table(name, if_exists: true)
        end
      end
      ActiveRecord::Base.connection
    end

    # Configures OJS against the devserver with fast relay settings and creates the table.
    # `settings`: more `config.<name> = value` (current_tenant_id:, trust_tenant_header:, ...).
    def configure(table:, start_relay: true, outbox: {}, relay: {}, **settings)
      OJS.configure do |config|
        config.url = devserver.url
        config.outbox_table = table
        config.outbox_options = { poll_interval: "PT0.2S" }.merge(outbox)
        config.relay_options = { initial_backoff: "PT0.05S", max_backoff: "PT0.5S" }.merge(relay)
        config.auto_start = false
        settings.each { |name, value| config.public_send("#{name}=", value) }
      end
      OJS::Migration.create_outbox_table
      OJS.start_relay if start_relay
    end

    def outbox_count(table)
      ActiveRecord::Base.connection.select_value("SELECT COUNT(*) FROM #{table}").to_i
    end

    def databases
      %i[sqlite postgres mariadb]
    end

    # Runs the block when the tests are done, before minitest's summary (so the summary stays
    # the last line).
    def before_summary(&block)
      BeforeSummary.blocks << block
    end
  end

  # A reporter placed first, so its report runs before the summary reporter's.
  class BeforeSummary < Minitest::AbstractReporter
    def self.blocks
      @blocks ||= []
    end

    def report
      self.class.blocks.each(&:call)
    end
  end
end

module Minitest
  def self.plugin_ojs_before_summary_init(_options)
    reporter.reporters.unshift(TestSupport::BeforeSummary.new)
  end
end
Minitest.extensions << "ojs_before_summary"

ActiveRecord::Base.logger = nil
puts "ruby #{RUBY_VERSION}, ActiveRecord #{ActiveRecord::VERSION::STRING}, " \
     "IsolatedExecutionState: #{defined?(ActiveSupport::IsolatedExecutionState) ? ActiveSupport::IsolatedExecutionState.isolation_level : 'none'}"
OJS.logger = Logger.new($stderr, level: Logger::WARN)

Minitest.after_run do
  OJS.stop_relay
rescue StandardError
  nil
end

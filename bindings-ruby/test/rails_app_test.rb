# frozen_string_literal: true

# The Rails glue in a real (minimal) Rails app, the example app, each command in its own
# process as an operator would run it: `rails g ojs:install` (initializer + migration),
# `rails db:migrate` (the core's DDL through ActiveRecord), the Railtie (middleware, external
# relay mode), `rails ojs:relay` stopped by SIGTERM (exit status 0 whenever the signal comes:
# during start-up, while the environment loads, once running), `ojs:status`,
# `ojs:dead:list|replay|purge`.

require_relative "test_helper"
require "open3"
require "socket"
require "sqlite3"
require "timeout"
require "net/http"
require "securerandom"

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
    # This test process's own relay, started by other tests, could still deliver their rows
    # (a retry after a backoff, the poller) into the devserver these tests read.
    OJS.stop_relay
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

    marker = rand(1 << 30) # names this test's job among any other process's
    output, = rails("runner", <<~RUBY)
      raise "middleware missing" unless Rails.application.middleware.include?(OJS::Middleware)
      raise "relay should be external" if OJS.client.relay_in_process?
      ActiveRecord::Base.transaction do
        OJS.enqueue_after_commit("email.welcome", [#{marker}])
        OJS.enqueue_after_commit("poison.job", [2])
      end
      puts OJS.status.fetch("pending")
    RUBY
    assert_equal "2", output.lines.last.strip, "external mode: nothing relayed by the app process"
    # The runner has exited (an in-process relay would have sent, or flushed at exit, by now).
    assert_empty TestSupport.devserver.jobs

    TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 400, "code" => "invalid_request",
                                                         "match_type" => "poison.job" })
    relay_output = +""
    Open3.popen2e(@env, RbConfig.ruby, "bin/rails", "ojs:relay", chdir: @app) do |_stdin, out, thread|
      reader = Thread.new { out.each_line { |line| relay_output << line } }
      delivered = TestSupport.devserver.wait_for_job("the runner's email.welcome") { |job| job["args"] == [marker] }
      assert_equal "email.welcome", delivered["type"]
      dead = TestSupport.wait_until("a dead row", every: 0.2) do
        rows = JSON.parse(rails("ojs:dead:list").first[/\[.*\]/m] || "[]")
        rows unless rows.empty?
      end
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

  # The generated initializer with OJS_URL unset (issue 11, item 3): in development the app
  # boots with the core's development URL and Rails.logger (stderr here) says so once; in any
  # other environment booting fails with OJS::InvalidConfig naming the setting.
  def test_generated_initializer_without_ojs_url
    rails("generate", "ojs:install")
    @env = @env.merge("OJS_URL" => nil)
    output, = rails("runner", "puts OJS.client.table_name")
    warnings = output.lines.grep(/no OJS backend URL is set/)
    assert_equal 1, warnings.size, output
    assert_includes warnings[0], "http://localhost:8080"
    assert_includes warnings[0], "config.ojs_url"
    assert_equal "ojs_outbox", output.lines.last.strip

    @env = @env.merge("RAILS_ENV" => "test")
    output, status = rails("runner", "puts :booted", expect_success: false)
    refute status.success?, output
    refute_includes output, "booted"
    assert_match(/adapter\.ojs_url: no OJS backend URL is set: set config\.ojs_url/, output)
  end

  # Runs `bin/rails args`, which must end by itself within PATIENCE (a server or a relay that
  # wrongly boots is killed, and the test fails); returns [output, status].
  def rails_exit(*args)
    log = File.join(TestSupport::TMP, "rails_exit.log")
    pid = Process.spawn(@env, RbConfig.ruby, "bin/rails", *args, chdir: @app, %i[out err] => [log, "w"])
    deadline = TestSupport.monotonic + TestSupport::PATIENCE
    until (status = Process.waitpid2(pid, Process::WNOHANG)&.last)
      if TestSupport.monotonic > deadline
        Process.kill("KILL", pid)
        Process.wait(pid)
        flunk "bin/rails #{args.join(' ')} still ran after #{TestSupport::PATIENCE} s:\n#{File.read(log)}"
      end
      sleep 0.1
    end
    [File.read(log), status]
  end

  # Issue 25: in production without OJS_URL, the tasks that never talk to the backend run
  # (db:migrate, ojs:status, ojs:dead:*); before, each failed at boot with OJS::InvalidConfig.
  # The server and the relay still fail at boot, naming the setting.
  def test_backend_free_tasks_run_in_production_without_ojs_url
    rails("generate", "ojs:install")
    @env = @env.merge("OJS_URL" => nil, "RAILS_ENV" => "production")
    rails("db:migrate")
    db = SQLite3::Database.new(@env["EXAMPLE_SQLITE_PATH"])
    assert_equal ["ojs_outbox"], db.execute("SELECT name FROM sqlite_master WHERE name = 'ojs_outbox'").flatten
    db.close
    status_json = JSON.parse(rails("ojs:status").first[/\{.*\}/m])
    assert_equal 0, status_json["pending"]
    assert_equal [], JSON.parse(rails("ojs:dead:list").first[/\[.*\]/m])
    assert_equal [], JSON.parse(rails("ojs:dead:list[acme,5]").first[/\[.*\]/m])
    assert_match(/replayed 0 dead row/, rails("ojs:dead:replay[acme]").first)
    @env = @env.merge("YES" => "1")
    rails("ojs:dead:purge")
    @env = @env.merge("YES" => nil)
    rails("db:migrate:status")

    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    [["server", "-u", "puma", "-b", "127.0.0.1", "-p", port.to_s], ["ojs:relay"], ["runner", "puts :booted"],
     ["db:migrate", "ojs:relay"]].each do |args|
      output, status = rails_exit(*args)
      refute status.success?, "bin/rails #{args.join(' ')} must not run without the URL:\n#{output}"
      assert_match(/adapter\.ojs_url: no OJS backend URL is set: set config\.ojs_url/, output, args.join(" "))
    end
  end

  # --- config.auto_start in a serving process --------------------------------------------------

  # A probe in front of OJS::Middleware (so asking it starts nothing): this process's relay
  # metrics (nil: no relay runs here).
  PROBE = <<~'RUBY'
    class OjsProbe
      def initialize(app)
        @app = app
      end

      def call(env)
        return @app.call(env) unless env["PATH_INFO"] == "/_ojs_probe"

        probe = { "ffi" => FFI::VERSION, "pid" => Process.pid, "metrics" => OJS.client.metrics }
        [200, { "content-type" => "application/json" }, [JSON.generate(probe)]]
      end
    end
    Rails.application.config.middleware.insert_before OJS::Middleware, OjsProbe
  RUBY

  # GET path on the server, retried until it answers (the server booting) within PATIENCE.
  def server_get(port, path)
    TestSupport.wait_until("the server answering #{path}", every: 0.1) do
      Net::HTTP.get_response(URI("http://127.0.0.1:#{port}#{path}"))
    rescue SystemCallError, EOFError, Net::ReadTimeout
      nil
    end
  end

  # A real `rails server` with config.auto_start: no relay at boot (the lazy start,
  # docs/rails.md "Relay modes": a start at boot is not fork-safe), started by the first
  # request that passes OJS::Middleware, which then relays a job staged by another process.
  def test_auto_start_in_a_rails_server
    rails("generate", "ojs:install")
    rails("db:migrate")
    File.write(File.join(@app, "config/initializers/zz_probe.rb"), PROBE)
    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    log = File.join(TestSupport::TMP, "rails_server.log")
    pid = Process.spawn(@env, RbConfig.ruby, "bin/rails", "server", "-u", "webrick", "-b", "127.0.0.1",
                        "-p", port.to_s, chdir: @app, %i[out err] => [log, "w"])
    probe = JSON.parse(server_get(port, "/_ojs_probe").body)
    assert_nil probe["metrics"], "ffi #{probe['ffi']}: no relay before the first request\n#{File.read(log)}"
    server_get(port, "/") # any request passes OJS::Middleware
    refute_nil JSON.parse(server_get(port, "/_ojs_probe").body)["metrics"], "started by the first request"
  ensure
    if pid
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end

  # The example app's routes mount OJS::EventsApp at /ojs (authorize: a bearer token). Under a
  # real `rails server` with Puma, through Rails' whole middleware stack (Rack::ETag included)
  # and its router: the stream answers at once and shows the job a signup commits; /metrics,
  # /readyz and /healthz answer; a caller without the token is refused.
  def test_events_mount_in_a_rails_server_under_puma
    rails("generate", "ojs:install")
    rails("db:migrate")
    env = @env.merge("OJS_EVENTS_TOKEN" => "t0ken")
    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    log = File.join(TestSupport::TMP, "rails_server_puma.log")
    pid = Process.spawn(env, RbConfig.ruby, "bin/rails", "server", "-u", "puma", "-b", "127.0.0.1",
                        "-p", port.to_s, chdir: @app, %i[out err] => [log, "w"])
    assert_equal "ok\n", server_get(port, "/ojs/healthz").body
    auth = { "Authorization" => "Bearer t0ken" }
    http = ->(request) { Net::HTTP.start("127.0.0.1", port) { |connection| connection.request(request) } }
    forbidden = '{"error":{"code":"forbidden","message":"this caller may not read this surface"}}'
    [{}, { "Authorization" => "Bearer wrong" }].each do |headers|
      refused = http.call(Net::HTTP::Get.new("/ojs/readyz", headers))
      assert_equal ["403", forbidden], [refused.code, refused.body]
    end

    socket = TCPSocket.new("127.0.0.1", port)
    socket.write("GET /ojs/v1/events/stream?types=job.*&queues=email HTTP/1.1\r\nHost: 127.0.0.1\r\n" \
                 "Authorization: Bearer t0ken\r\n\r\n")
    received = +""
    lock = Mutex.new
    Thread.new do
      loop do
        chunk = socket.readpartial(4096)
        lock.synchronize { received << chunk }
      end
    rescue IOError, SystemCallError
      nil
    end
    text = -> { lock.synchronize { received.dup } }
    TestSupport.wait_until("the stream's first comment through Rails (log #{log})") { text.call.include?(": keep-alive") }
    assert_match(%r{^content-type: text/event-stream\r$}i, text.call)

    # Rails' request id (X-Request-Id) lands in the job's meta (OJS::Middleware): it names this
    # signup's job among any other process's.
    request_id = "puma-signup-#{SecureRandom.hex(8)}"
    signup = http.call(Net::HTTP::Post.new("/signup", "Content-Type" => "application/json",
                                                      "X-Request-Id" => request_id).tap do |request|
      request.body = JSON.generate(email: "ada@example.com")
    end)
    assert_equal "201", signup.code, signup.body
    job = TestSupport.devserver.wait_for_job("the signup's job") do |stored|
      stored.dig("meta", "ojs.context.request_id") == request_id
    end
    assert_equal "email.welcome", job["type"]
    TestSupport.wait_until("job.enqueued of #{job['id']} on the stream") { text.call.include?(%("subject":"#{job['id']}")) }
    assert_match(/event: job\.enqueued\r?\ndata: .*"queue":"email"/, text.call)

    # The relay counts a settlement once it has committed, after the event that the stream
    # showed: the counter trails it briefly.
    sent_line = /\Aojs_relay_jobs_sent_total\{table="ojs_outbox",relay="\h{32}"\} 1\z/
    metrics = nil
    TestSupport.wait_until("the sent counter at 1 on /ojs/metrics") do
      metrics = http.call(Net::HTTP::Get.new("/ojs/metrics", auth))
      metrics.code != "200" || metrics.body.lines.map(&:chomp).any? { |line| line.match?(sent_line) }
    end
    assert_equal ["200", "application/openmetrics-text; version=1.0.0; charset=utf-8"], [metrics.code, metrics["content-type"]]
    assert metrics.body.lines.map(&:chomp).any? { |line| line.match?(sent_line) }, metrics.body
    ready = http.call(Net::HTTP::Get.new("/ojs/readyz", auth))
    assert_equal ["200", true], [ready.code, JSON.parse(ready.body)["ready"]]
  ensure
    socket&.close
    stop_server(pid) if pid
  end

  # SIGTERM; Puma stops once its requests have ended (a stream ends at its next keep-alive
  # write after the client went away). A server still running after PATIENCE is killed, and the
  # test fails: a stream that never ends would hold a graceful stop forever.
  def stop_server(pid)
    Process.kill("TERM", pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + TestSupport::PATIENCE
    until Process.waitpid(pid, Process::WNOHANG)
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        Process.kill("KILL", pid)
        Process.wait(pid)
        flunk "the server did not stop within #{TestSupport::PATIENCE}s of SIGTERM"
      end
      sleep 0.1
    end
  end

  # --- ojs:relay and SIGTERM, whenever it arrives ---------------------------------------------

  # The app with the outbox migrated and the relay external, as an operator runs ojs:relay.
  def prepare_relay_app
    rails("generate", "ojs:install")
    initializer = File.join(@app, "config/initializers/ojs.rb")
    File.write(initializer, File.read(initializer).sub("# config.relay = :external", "config.relay = :external"))
    rails("db:migrate")
    # Holds the environment's loading when OJS_TEST_HOLD names a file, until that file exists:
    # the test signals the process while Rails is loading the application.
    File.write(File.join(@app, "config/initializers/zz_hold.rb"), <<~RUBY)
      if (hold = ENV["OJS_TEST_HOLD"])
        $stdout.puts "test: environment loading, held"
        $stdout.flush
        sleep 0.01 until File.exist?(hold)
      end
    RUBY
  end

  # Starts `bin/rails ojs:relay`; yields the pid and a function that waits for an output line.
  # Returns [exit status, output].
  def relay_process(env = {}, *args)
    lines = Queue.new
    output = +""
    Open3.popen2e(@env.merge(env), RbConfig.ruby, "bin/rails", "ojs:relay", *args, chdir: @app) do |stdin, out, thread|
      stdin.close
      reader = Thread.new do
        out.each_line do |line|
          output << line
          lines << line
        end
        lines << nil
      end
      wait_line = lambda do |pattern|
        Timeout.timeout(TestSupport::PATIENCE, Minitest::Assertion, "no line #{pattern.inspect} within #{TestSupport::PATIENCE}s:\n#{output}") do
          loop do
            line = lines.pop or raise Minitest::Assertion, "ojs:relay ended before #{pattern.inspect}:\n#{output}"
            break line if line.match?(pattern)
          end
        end
      end
      yield thread.pid, wait_line
      status = Timeout.timeout(TestSupport::PATIENCE, Minitest::Assertion, "ojs:relay did not exit:\n#{output}") { thread.value }
      reader.join
      [status, output]
    end
  end

  def test_ojs_relay_exits_0_on_sigterm_whenever_it_arrives
    prepare_relay_app
    # 1. At start-up: as soon as the command's first line says it is armed, before the
    #    :environment task loads the application.
    status, output = relay_process do |pid, wait_line|
      wait_line.call(/ojs:relay: starting/)
      Process.kill("TERM", pid)
    end
    assert status.success?, "SIGTERM at start-up: #{status.inspect}\n#{output}"
    assert_match(/stopped before the relay started/, output)

    # 2. While the environment loads (an initializer is running).
    hold = File.join(@app, "tmp", "hold-released")
    FileUtils.mkdir_p(File.dirname(hold))
    status, output = relay_process("OJS_TEST_HOLD" => hold) do |pid, wait_line|
      wait_line.call(/environment loading, held/)
      Process.kill("TERM", pid)
      FileUtils.touch(hold)
    end
    assert status.success?, "SIGTERM while the environment loads: #{status.inspect}\n#{output}"
    assert_match(/stopped before the relay started/, output)

    # 3. Once it reports it is running (the relay starting or started): flushed and stopped.
    status, output = relay_process do |pid, wait_line|
      wait_line.call(/ojs:relay: running/)
      Process.kill("TERM", pid)
    end
    assert status.success?, "SIGTERM once running: #{status.inspect}\n#{output}"
    assert_match(/ojs:relay: stopped/, output)
  end

  # The relay's records while ojs:relay runs: a committed row, a backend nothing listens on.
  # First through Rails.logger, which the example app points at $stderr (so they are not
  # printed twice); then through a config.logger writing to a file (as Rails' own
  # log/<env>.log), so the command prints them on stderr as well.
  def test_ojs_relay_prints_the_relay_pausing_while_it_runs
    prepare_relay_app
    rails("runner", 'OJS.enqueue_after_commit("email.welcome", [1])')
    server = TCPServer.new("127.0.0.1", 0)
    closed = "http://127.0.0.1:#{server.addr[1]}"
    server.close

    status, output = relay_process("OJS_URL" => closed) do |pid, wait_line|
      wait_line.call(/WARN -- : outbox relay: pausing: the OJS backend cannot take jobs now/)
      Process.kill("TERM", pid)
    end
    assert status.success?, "ojs:relay after SIGTERM: #{status.inspect}\n#{output}"
    assert_equal 1, output.scan("outbox relay: pausing").length, "once, through Rails.logger:\n#{output}"

    log = File.join(TestSupport::TMP, "ojs_relay.log")
    FileUtils.rm_f(log)
    initializer = File.join(@app, "config/initializers/ojs.rb")
    File.write(initializer, File.read(initializer).sub("# config.logger = Rails.logger", "config.logger = Logger.new(#{log.inspect})"))
    status, output = relay_process("OJS_URL" => closed) do |pid, wait_line|
      wait_line.call(/ojs:relay: WARN outbox relay: pausing: the OJS backend cannot take jobs now/)
      Process.kill("TERM", pid)
    end
    assert status.success?, "ojs:relay after SIGTERM: #{status.inspect}\n#{output}"
    assert_match(/ojs:relay: running for table ojs_outbox/, output)
    assert_match(/ojs:relay: stopped/, output)
    assert_match(/WARN -- : outbox relay: pausing/, File.read(log))
  end
end

# `bin/rails ojs:relay -- OPTIONS` (or OJS_RELAY_ARGS) is the core's relay command line
# (issue 26): an unknown flag is refused naming the accepted ones (exit 2), `-- --help` lists
# the options of `ojs-relay run --help`, and `--listen` with a token serves /metrics through the
# command, by the core's rules.
class RailsAppTest
  RUST_BIN = File.join(TestSupport::ROOT, "target", "debug", "ojs-relay")

  # The `--long` names of a clap help text's "Options:" section.
  def long_options(help)
    start = help.index("\nOptions:\n") or flunk("no Options: section in\n#{help}")
    section = help[(start + "\nOptions:\n".length)..].split("\n\n").first
    section.scan(/(?:^|[ ,])(--[a-z][a-z-]*)/).flatten.uniq.sort
  end

  def capture(env, *args)
    Open3.capture3(@env.merge(env), RbConfig.ruby, "bin/rails", "ojs:relay", *args, chdir: @app)
  end

  def test_an_unknown_flag_is_refused_with_exit_2_naming_the_accepted_options
    prepare_relay_app
    [[{}, ["--", "--bogus-flag"]], [{ "OJS_RELAY_ARGS" => "--poll-interval PT1S --bogus-flag" }, []]].each do |env, args|
      _out, err, status = capture(env, *args)
      assert_equal 2, status.exitstatus, "#{args.inspect} #{env.inspect}:\n#{err}"
      assert_match(/unexpected argument '--bogus-flag'/, err)
      assert_match(/accepted options: .*--listen.*--token/, err)
    end
  end

  def test_help_lists_the_options_of_ojs_relay_run
    prepare_relay_app
    out, err, status = capture({}, "--", "--help")
    assert status.success?, err
    rust_out, rust_err, rust_status = Open3.capture3(RUST_BIN, "run", "--help")
    assert rust_status.success?, rust_err
    options = long_options(out)
    assert_includes options, "--listen"
    assert_includes options, "--no-auth"
    assert_equal long_options(rust_out), options
    # Rails 6.1 runs the task through bin/rails' own Rake application, Rails 7 through rake's.
    assert_match(/Usage: (bin\/rails|rake) ojs:relay -- \[OPTIONS\]/, out)
  end

  def test_listen_with_a_token_serves_metrics_through_the_command
    prepare_relay_app
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    server.close
    get = lambda do |path, token = nil|
      request = Net::HTTP::Get.new(path)
      request["Authorization"] = "Bearer #{token}" if token
      Net::HTTP.start("127.0.0.1", port, open_timeout: 2, read_timeout: 10) { |http| http.request(request) }.code.to_i
    end
    # In OJS_RELAY_ARGS: Rails 7's bin/rails takes a bare word after `--` (the address, the
    # token) for a task name (docs/rails.md).
    status, output = relay_process({ "OJS_RELAY_ARGS" => "--listen 127.0.0.1:#{port} --token T0ken" }) do |pid, wait_line|
      wait_line.call(/ojs:relay: running for table ojs_outbox/)
      TestSupport.wait_until("the relay's /healthz") do
        get.call("/healthz") == 200
      rescue SystemCallError
        false
      end
      assert_equal 401, get.call("/metrics")
      assert_equal 401, get.call("/metrics", "wrong")
      assert_equal 200, get.call("/metrics", "T0ken")
      Process.kill("TERM", pid)
    end
    assert status.success?, "ojs:relay after SIGTERM: #{status.inspect}\n#{output}"
    assert_match(/ojs:relay: stopped/, output)
    refute_match(/Don't know how to build task/, output)
  end
end

class TestSupport::DevServer
  # The first stored job the block accepts, waited for within PATIENCE.
  def wait_for_job(what, &accept)
    TestSupport.wait_until("#{what} at the devserver", every: 0.05) { jobs.find(&accept) }
  end
end

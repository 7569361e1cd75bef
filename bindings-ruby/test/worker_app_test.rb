# frozen_string_literal: true

# `bin/rails ojs:work` in a real Rails app (the example app, SQLite, the devserver), each
# command in its own process as an operator runs it: a signup's plain job run by the app's
# OJS.handle handler, ActiveJob jobs run inside Rails' executor with the job's trace context and
# the changed code after an edit (the reloader), a failing job reported to Rails.error (Rails 7.2; 6.1 has none) and nacked,
# SIGTERM stopping gracefully (the job in flight finishes), a second signal giving the job in
# flight back at once, a signal while the application loads, and bad options refused naming
# them.

require_relative "test_helper"
require "open3"

class WorkerAppTest < Minitest::Test
  EXAMPLE = File.join(TestSupport::ROOT, "bindings-ruby", "example")
  TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

  # Written into the app's copy: ActiveJob jobs, and a Rails.error subscriber that prints each
  # report (or says that this Rails has no Rails.error).
  FILES = {
    "app/jobs/receipt_job.rb" => <<~'RUBY',
      class ReceiptJob < ActiveJob::Base
        def perform(user_id)
          user = User.find(user_id)
          $stdout.puts("receipt v1 for #{user.email}: executor=#{Rails.application.executor.active?} " \
                       "traceparent=#{OJS::Worker.current_job&.traceparent} provider_job_id=#{provider_job_id}")
          $stdout.flush
        end
      end
    RUBY
    "app/jobs/declined_job.rb" => <<~'RUBY',
      class DeclinedJob < ActiveJob::Base
        def perform(message)
          raise ArgumentError, message
        end
      end
    RUBY
    # Runs until the file `path` exists (the test creates it), polling.
    "app/jobs/blocking_job.rb" => <<~'RUBY',
      class BlockingJob < ActiveJob::Base
        def perform(path)
          $stdout.puts("blocking job started")
          $stdout.flush
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
          sleep 0.01 until File.exist?(path) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          $stdout.puts("blocking job finished")
          $stdout.flush
        end
      end
    RUBY
    # With BOOT_GATE set, the application's boot waits until that file exists.
    "config/initializers/boot_gate.rb" => <<~'RUBY',
      if (gate = ENV["BOOT_GATE"])
        $stdout.puts("booting: waiting for the gate")
        $stdout.flush
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
        sleep 0.01 until File.exist?(gate) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      end
    RUBY
    # With EXIT_PROBE set, says when the process's at_exit hooks run.
    "config/initializers/exit_probe.rb" => <<~'RUBY',
      if ENV["EXIT_PROBE"]
        at_exit do
          $stdout.puts("at_exit hooks ran")
          $stdout.flush
        end
      end
    RUBY
    "config/initializers/error_probe.rb" => <<~'RUBY'
      if Rails.respond_to?(:error)
        probe = Object.new
        def probe.report(error, handled:, severity:, context:, source: nil)
          $stdout.puts("rails.error: #{error.class}: #{error.message} handled=#{handled} source=#{source} " \
                       "job_id=#{context[:job_id]}")
          $stdout.flush
        end
        Rails.error.subscribe(probe)
      else
        $stdout.puts("rails.error: none in Rails #{Rails.version}")
      end
    RUBY
  }.freeze

  def setup
    @app = File.join(TestSupport::TMP, "worker_app")
    FileUtils.rm_rf(@app)
    FileUtils.cp_r(EXAMPLE, @app)
    FILES.each do |path, text|
      FileUtils.mkdir_p(File.dirname(File.join(@app, path)))
      File.write(File.join(@app, path), text)
    end
    @env = {
      "OJS_URL" => TestSupport.devserver.url,
      "EXAMPLE_SQLITE_PATH" => File.join(@app, "db", "app.sqlite3"),
      "RAILS_ENV" => "development"
    }
    OJS.stop_relay # this process's own relay must not deliver other tests' rows meanwhile
    TestSupport.devserver.reset
    @workers = []
    rails("generate", "ojs:install")
    rails("db:migrate")
  end

  def teardown
    @workers.each do |worker|
      Process.kill("KILL", worker[:pid])
      Process.wait(worker[:pid])
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end

  def rails(*args, env: {})
    output, status = Open3.capture2e(@env.merge(env), RbConfig.ruby, "bin/rails", *args, chdir: @app)
    assert status.success?, "bin/rails #{args.join(' ')} failed:\n#{output}"
    output
  end

  # `bin/rails ojs:work` in the background, its output in a file; waits for `wait_for` in it.
  def start_worker(env, wait_for: "ojs:work: running")
    log = File.join(TestSupport::TMP, "worker_app_#{name}_#{@workers.length}.log")
    pid = Process.spawn(@env.merge(env), RbConfig.ruby, "bin/rails", "ojs:work", chdir: @app,
                                                                                 %i[out err] => [log, "w"])
    worker = { pid: pid, log: log }
    @workers << worker
    wait_output(worker, wait_for)
    worker
  end

  def output(worker)
    File.read(worker[:log])
  end

  def wait_output(worker, text)
    TestSupport.wait_until("the worker printing #{text.inspect}", every: 0.05) { output(worker).include?(text) }
  rescue Minitest::Assertion => e
    raise Minitest::Assertion, "#{e.message}; its output:\n#{output(worker)}"
  end

  # The worker's exit status, waiting at most PATIENCE.
  def wait_exit(worker)
    status = TestSupport.wait_until("the worker ending", every: 0.05) { Process.waitpid2(worker[:pid], Process::WNOHANG)&.last }
    @workers.delete(worker)
    status
  rescue Minitest::Assertion => e
    raise Minitest::Assertion, "#{e.message}; its output:\n#{output(worker)}"
  end

  def backend_job(id)
    TestSupport.devserver.call(:get, "/ojs/v1/jobs/#{id}")&.dig("job")
  end

  def wait_for_state(id, *states)
    TestSupport.wait_until("job #{id} in state #{states.join(' or ')}") do
      job = backend_job(id)
      job if job && states.include?(job["state"])
    end
  end

  # A runner script's JSON line (the last line it printed).
  def runner(script)
    JSON.parse(rails("runner", script).lines.last)
  end

  def test_ojs_work_runs_plain_and_active_job_jobs_the_rails_way
    worker = start_worker({ "QUEUES" => "email,default", "CONCURRENCY" => "2" })
    assert_match(/ojs:work: running worker \S+ on email, default \(concurrency 2\)/, output(worker))
    ids = runner(<<~RUBY)
      # Started before the transaction: on SQLite a start inside it would wait for its lock.
      OJS.start_relay
      ids = {}
      ActiveRecord::Base.transaction do
        user = User.create!(email: "ada@example.com")
        ids["welcome"] = OJS.enqueue_after_commit("email.welcome", [user.id], queue: "email")
        OJS.with_context(traceparent: "#{TRACEPARENT}") { ids["receipt"] = ReceiptJob.perform_later(user.id).provider_job_id }
        ids["declined"] = DeclinedJob.perform_later("payment declined").provider_job_id
      end
      puts JSON.generate(ids)
    RUBY

    assert_equal({ "sent_to" => "ada@example.com" }, wait_for_state(ids["welcome"], "completed")["result"])
    wait_output(worker, "welcome email sent to ada@example.com")
    wait_for_state(ids["receipt"], "completed")
    wait_output(worker, "receipt v1 for ada@example.com: executor=true traceparent=#{TRACEPARENT} " \
                        "provider_job_id=#{ids['receipt']}")
    failed = TestSupport.wait_until("the declined job's failure at the backend") do
      job = backend_job(ids["declined"])
      job if job&.dig("error", "message")&.include?("payment declined")
    end
    assert_equal "ArgumentError", failed.dig("error", "type")
    if output(worker).include?("rails.error: none")
      assert_match(/rails\.error: none in Rails 6\./, output(worker), "only Rails 6.1 lacks Rails.error")
    else
      wait_output(worker, "rails.error: ArgumentError: payment declined handled=false source=job.ojs " \
                          "job_id=#{ids['declined']}")
    end

    # Development: the next job runs the changed class (the reloader, between jobs).
    path = File.join(@app, "app/jobs/receipt_job.rb")
    File.write(path, File.read(path).sub("receipt v1", "receipt v2")) # a newer mtime (not in the future: ignored)
    again = runner("OJS.start_relay; puts JSON.generate(id: ReceiptJob.perform_later(User.first.id).provider_job_id)")["id"]
    wait_for_state(again, "completed")
    wait_output(worker, "receipt v2 for ada@example.com: executor=true traceparent= provider_job_id=#{again}")

    Process.kill("TERM", worker[:pid])
    status = wait_exit(worker)
    assert status.success?, "exit 0 after SIGTERM:\n#{output(worker)}"
    assert_includes output(worker), "ojs:work: stopped"
  end

  # SIGTERM: the job in flight finishes and is acked, then the process exits 0. A second signal
  # gives the job in flight back at once and ends the process normally (its at_exit hooks run),
  # well before the stop deadline.
  def test_sigterm_waits_for_the_job_in_flight_and_a_second_signal_gives_it_back
    release = File.join(@app, "tmp", "release-first")
    worker = start_worker({ "QUEUES" => "default", "STOP_DEADLINE_MS" => "60000" })
    first = runner("OJS.start_relay; puts JSON.generate(id: BlockingJob.perform_later(#{release.inspect}).provider_job_id)")["id"]
    wait_output(worker, "blocking job started")
    Process.kill("TERM", worker[:pid])
    wait_output(worker, "ojs:work: SIGTERM: stopping; the jobs in flight have 60000 ms to finish")
    assert_nil Process.waitpid(worker[:pid], Process::WNOHANG), "the stop waits for the job in flight"
    assert_equal "active", backend_job(first)["state"]
    FileUtils.mkdir_p(File.dirname(release))
    File.write(release, "")
    status = wait_exit(worker)
    assert status.success?, output(worker)
    assert_includes output(worker), "blocking job finished"
    wait_for_state(first, "completed")

    worker = start_worker({ "QUEUES" => "default", "STOP_DEADLINE_MS" => "60000", "EXIT_PROBE" => "1" })
    second = runner("OJS.start_relay; puts JSON.generate(id: BlockingJob.perform_later(#{(release + '-never').inspect}).provider_job_id)")["id"]
    wait_output(worker, "blocking job started")
    started = TestSupport.monotonic
    Process.kill("TERM", worker[:pid])
    wait_output(worker, "ojs:work: SIGTERM: stopping")
    Process.kill("INT", worker[:pid])
    status = wait_exit(worker)
    assert status.success?, output(worker)
    assert_operator TestSupport.monotonic - started, :<, 60, "ended before the stop deadline"
    assert_includes output(worker), "ojs:work: SIGINT again: giving the jobs in flight back now"
    assert_includes output(worker), "ojs:work: stopped (the jobs in flight were given back)"
    refute_includes output(worker), "blocking job finished"
    assert_includes output(worker), "at_exit hooks ran", "the process ends normally, not with exit!"
    job = wait_for_state(second, "available")
    assert_equal 0, job["attempt"], "given back without using an attempt"
  end

  # A signal while the application loads (the task's file loaded, the initializers running)
  # ends the command before the worker starts, with status 0.
  def test_a_signal_while_the_application_loads_ends_the_command
    gate = File.join(@app, "tmp", "boot-gate")
    worker = start_worker({ "QUEUES" => "default", "BOOT_GATE" => gate }, wait_for: "booting: waiting for the gate")
    assert_includes output(worker), "ojs:work: starting; SIGINT or SIGTERM stops it"
    Process.kill("TERM", worker[:pid])
    FileUtils.mkdir_p(File.dirname(gate))
    File.write(gate, "")
    status = wait_exit(worker)
    assert status.success?, output(worker)
    assert_includes output(worker), "ojs:work: stopped before the worker started"
    refute_includes output(worker), "ojs:work: running"
  end

  def test_bad_options_are_refused_naming_them
    [[{ "QUEUES" => "default", "CONCURRENCY" => "zero" }, /error \[INVALID_CONFIG\]: concurrency/],
     [{}, /error \[INVALID_CONFIG\]: queues/],
     [{ "QUEUES" => "default", "STOP_DEADLINE_MS" => "soon" }, /error \[INVALID_CONFIG\]: stop_deadline_ms/]].each do |env, error|
      text, status = Open3.capture2e(@env.merge(env), RbConfig.ruby, "bin/rails", "ojs:work", chdir: @app)
      assert_equal 2, status.exitstatus, "#{env}: exit 2 (configuration), got #{status.inspect}:\n#{text}"
      assert_match error, text
    end
  end
end

# frozen_string_literal: true

# The running side (OJS::Worker on the core worker loop) against the real devserver, on a real
# SQLite file, the real PostgreSQL server and MariaDB: ActiveJob jobs staged in a transaction, committed,
# relayed, fetched, performed and acked; failures nacked and retried by the OJS policy;
# `retry_on` and `discard_on`; unknown classes and types; `timeout_ms`; graceful stop; the trace
# context; the error reporter; bad options. The backend's view of a job (GET /ojs/v1/jobs/{id})
# is the oracle. Handlers that must be "in flight" wait on a gate the test opens: no test
# sleeps a fixed time.

require_relative "test_helper"
require "active_job"
require "ojs/active_job_adapter"
require "stringio"
require "securerandom"

# What the jobs of these tests did, in order (thread-safe).
module WorkerLog
  @lock = Mutex.new
  @entries = []

  class << self
    def add(kind, **fields)
      @lock.synchronize { @entries << fields.merge(kind: kind) }
    end

    def of(kind)
      @lock.synchronize { @entries.select { |entry| entry[:kind] == kind } }
    end

    def clear
      @lock.synchronize { @entries.clear }
    end
  end
end

# A handler's gate: `wait` blocks until the test opens it (true), or PATIENCE runs out (false).
class WorkerGate
  def initialize
    @lock = Mutex.new
    @opened = ConditionVariable.new
    @open = false
  end

  def wait
    deadline = TestSupport.monotonic + TestSupport::PATIENCE
    @lock.synchronize do
      @opened.wait(@lock, deadline - TestSupport.monotonic) until @open || TestSupport.monotonic > deadline
      @open
    end
  end

  def open
    @lock.synchronize do
      @open = true
      @opened.broadcast
    end
  end
end

class WorkerGreetingJob < ActiveJob::Base
  queue_as "worker-test"

  def perform(person_id)
    name = ActiveRecord::Base.connection.select_value("SELECT name FROM rb_worker_people WHERE id = #{Integer(person_id)}")
    WorkerLog.add(:greeted, name: name, provider_job_id: provider_job_id,
                            traceparent: OJS::Worker.current_job&.traceparent, current: OJS::Worker.current_job&.id)
  end
end

class WorkerFlakyError < StandardError; end

class WorkerFlakyJob < ActiveJob::Base
  queue_as "worker-test"
  retry_on WorkerFlakyError, wait: 0, attempts: 3

  def perform(failures)
    WorkerLog.add(:flaky, executions: executions, provider_job_id: provider_job_id)
    raise WorkerFlakyError, "flaky execution #{executions}" if executions <= failures
  end
end

class WorkerDiscardedJob < ActiveJob::Base
  queue_as "worker-test"
  discard_on WorkerFlakyError

  def perform
    WorkerLog.add(:discarded, provider_job_id: provider_job_id)
    raise WorkerFlakyError, "not worth another try"
  end
end

class WorkerBrokenJob < ActiveJob::Base
  queue_as "worker-test"

  def perform(message)
    WorkerLog.add(:broken, provider_job_id: provider_job_id)
    raise ArgumentError, message
  end
end

class WorkerTest < Minitest::Test
  TABLE = "rb_worker"
  PEOPLE = "rb_worker_people"
  QUEUE = "worker-test"
  TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

  def setup
    ActiveJob::Base.logger = Logger.new(nil)
    ActiveJob::Base.queue_adapter = :ojs
    WorkerLog.clear
    @log = StringIO.new
    @logger = Logger.new(@log)
    @gates = []
    @workers = []
  end

  def teardown
    @gates.each(&:open)
    @workers.each do |worker|
      worker.stop(deadline_ms: 0)
      worker.join(TestSupport::PATIENCE)
    end
    OJS.clear_context
  end

  def prepare(database)
    OJS.stop_relay # the previous test's, before its database file goes
    connection = TestSupport.connect(database, "worker", table: TABLE)
    connection.drop_table(PEOPLE, if_exists: true)
    connection.create_table(PEOPLE) { |t| t.string :name }
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
    connection
  end

  def gate
    WorkerGate.new.tap { |gate| @gates << gate }
  end

  def start_worker(handlers: {}, **options)
    worker = OJS.worker(queues: [QUEUE], handlers: handlers, logger: @logger, **options)
    @workers << worker
    worker.start
  end

  # The backend's view of a job (GET /ojs/v1/jobs/{id}), nil before it has it.
  def backend_job(id)
    TestSupport.devserver.call(:get, "/ojs/v1/jobs/#{id}")&.dig("job")
  end

  # Waits until the backend's job is in one of `states` (and the block, given the job, agrees).
  def wait_for_state(id, *states, &check)
    TestSupport.wait_until("job #{id} in state #{states.join(' or ')}") do
      job = backend_job(id)
      job if job && states.include?(job["state"]) && (check.nil? || check.call(job))
    end
  rescue Minitest::Assertion => e
    raise Minitest::Assertion, "#{e.message}; the backend has #{backend_job(id).inspect}; log:\n#{@log.string}"
  end

  def jobs_of_type(type)
    TestSupport.devserver.jobs.select { |job| job["type"] == type }
  end

  # --- an ActiveJob job, end to end (SQLite, PostgreSQL and MariaDB) ------------------------

  TestSupport.databases.each do |database|
    define_method("test_#{database}_an_active_job_committed_in_a_transaction_runs_and_is_acked") do
      connection = prepare(database)
      start_worker(handlers: { "worker.echo" => ->(args, job) { { "echo" => args, "attempt" => job.attempt } } },
                   concurrency: 2)
      job = echo_id = nil
      ActiveRecord::Base.transaction do
        connection.execute("INSERT INTO #{PEOPLE} (name) VALUES ('Ada')")
        person = connection.select_value("SELECT MAX(id) FROM #{PEOPLE}")
        job = WorkerGreetingJob.perform_later(person)
        echo_id = OJS.enqueue_after_commit("worker.echo", [1, "x"], queue: QUEUE)
        assert_nil backend_job(job.provider_job_id), "nothing reaches the backend before the commit"
      end

      done = wait_for_state(job.provider_job_id, "completed")
      assert_equal "worker_greeting_job", done["type"]
      greeted = WorkerLog.of(:greeted)
      assert_equal 1, greeted.length
      assert_equal "Ada", greeted[0][:name], "the job sees the committed row"
      assert_equal job.provider_job_id, greeted[0][:provider_job_id], "provider_job_id is the OJS job id"
      assert_equal job.provider_job_id, greeted[0][:current], "OJS::Worker.current_job is the job"
      # The same worker runs a plain job with its registered handler, acked with its result.
      assert_equal({ "echo" => [1, "x"], "attempt" => 0 }, wait_for_state(echo_id, "completed")["result"])
      # The relay settles the row after the backend answered; the job may run before that.
      TestSupport.wait_until("the job's row settled as sent") do
        OJS.outbox_rows([job.provider_job_id]).dig(job.provider_job_id, "status") == "sent"
      end
    end
  end

  # --- failures ------------------------------------------------------------------------------

  # An exception out of ActiveJob's execute is nacked failed: the backend retries the same job
  # under its default policy (no retry options: 3 attempts) and discards it after the last.
  def test_a_failing_active_job_is_retried_by_the_backend_policy_then_discarded
    prepare(:sqlite)
    start_worker
    job = WorkerBrokenJob.perform_later("card declined")
    done = wait_for_state(job.provider_job_id, "discarded")
    runs = WorkerLog.of(:broken)
    assert_equal done["attempt"], runs.length, "one run per attempt the backend counted"
    assert_operator runs.length, :>, 1, "retried by the backend"
    assert_equal [job.provider_job_id], runs.map { |run| run[:provider_job_id] }.uniq, "the same OJS job each time"
    assert_equal "ArgumentError", done.dig("error", "type")
    assert_includes done.dig("error", "message"), "card declined"
    assert_match(/job #{job.provider_job_id} \(worker_broken_job\) attempt \d failed: ArgumentError: card declined/, @log.string)
  end

  def test_a_plain_handler_failure_follows_the_job_retry_policy
    prepare(:sqlite)
    start_worker(handlers: { "worker.fail" => ->(args) { raise args.first } })
    id = OJS.enqueue_after_commit("worker.fail", ["card declined"], queue: QUEUE,
                                                                     retry: { max_attempts: 2, initial_interval: "PT0.1S" })
    done = wait_for_state(id, "discarded")
    assert_equal 2, done["attempt"]
    assert_equal "RuntimeError", done.dig("error", "type")
    assert_includes done.dig("error", "message"), "card declined"
  end

  # retry_on: ActiveJob enqueues a new job through the adapter (a new outbox row, a new OJS
  # job, due at once for `wait: 0`) and this run ends normally: each OJS job is acked completed.
  def test_retry_on_enqueues_a_new_job_and_acks_the_current_one
    prepare(:sqlite)
    start_worker(concurrency: 2)
    job = WorkerFlakyJob.perform_later(2)
    runs = TestSupport.wait_until("three executions") do
      runs = WorkerLog.of(:flaky)
      runs if runs.length >= 3
    end
    assert_equal [1, 2, 3], runs.map { |run| run[:executions] }
    ids = runs.map { |run| run[:provider_job_id] }
    assert_equal job.provider_job_id, ids.first
    assert_equal 3, ids.uniq.length, "every retry is a new OJS job"
    ids.each { |id| wait_for_state(id, "completed") }
    assert_equal 3, OJS.outbox_rows(ids).length, "every retry went through the outbox"
    assert_equal ids.sort, jobs_of_type("worker_flaky_job").map { |stored| stored["id"] }.sort
  end

  # retry_on with its attempts spent re-raises: that escapes execute and is the OJS job's failure.
  def test_retry_on_out_of_attempts_fails_the_last_job
    prepare(:sqlite)
    start_worker(concurrency: 2)
    WorkerFlakyJob.perform_later(10)
    third = TestSupport.wait_until("the third execution") { WorkerLog.of(:flaky).find { |run| run[:executions] == 3 } }
    failed = wait_for_state(third[:provider_job_id], "retryable", "discarded")
    assert_equal "WorkerFlakyError", failed.dig("error", "type")
    assert_includes failed.dig("error", "message"), "flaky execution 3"
  end

  # discard_on: ActiveJob swallows the error: the job is acked completed, nothing is enqueued.
  def test_discard_on_swallows_the_error_and_acks_the_job
    prepare(:sqlite)
    start_worker
    job = WorkerDiscardedJob.perform_later
    wait_for_state(job.provider_job_id, "completed")
    assert_equal 1, WorkerLog.of(:discarded).length
    sentinel = OJS.enqueue_after_commit("worker.sentinel", [0], queue: "other")
    TestSupport.devserver.wait_for([sentinel])
    assert_equal [job.provider_job_id], jobs_of_type("worker_discarded_job").map { |stored| stored["id"] }
  end

  # A class this process does not have (a job staged by a newer deploy) and a type no handler
  # knows are both unknown_type: retryable, never discarded by this worker; logged at warn.
  def test_unknown_classes_and_types_are_retried_not_discarded
    prepare(:sqlite)
    start_worker
    retry_policy = { max_attempts: 5, initial_interval: "PT1M" }
    payload = { "job_class" => "WorkerGhostJob", "job_id" => SecureRandom.uuid, "provider_job_id" => nil,
                "queue_name" => QUEUE, "priority" => nil, "arguments" => [1], "executions" => 0,
                "exception_executions" => {}, "locale" => "en", "timezone" => "UTC",
                "enqueued_at" => Time.now.utc.iso8601 }
    ghost = OJS.enqueue_after_commit("worker_ghost_job", [payload], queue: QUEUE, retry: retry_policy)
    nobody = OJS.enqueue_after_commit("worker.nobody", [1], queue: QUEUE, retry: retry_policy)
    [ghost, nobody].each do |id|
      job = wait_for_state(id, "retryable")
      assert_equal 1, job["attempt"]
      assert_equal "unknown_type", job.dig("error", "type")
    end
    warnings = @log.string.lines.grep(/WARN/)
    assert(warnings.any? { |line| line.include?(ghost) && line.include?("WorkerGhostJob is not defined") }, @log.string)
    assert(warnings.any? { |line| line.include?(nobody) && line.include?("worker.nobody") }, @log.string)
  end

  # --- timeout_ms and stopping ------------------------------------------------------------------

  # The loop nacks the job `timeout` while its handler still runs; the handler's outcome, when
  # it comes, is dropped (the job stays as the policy left it) and logged.
  def test_timeout_ms_nacks_the_job_while_the_handler_runs
    prepare(:sqlite)
    slow = gate
    start_worker(handlers: { "worker.slow" => lambda do |_args|
      WorkerLog.add(:slow_started)
      slow.wait
      WorkerLog.add(:slow_ended)
      { "done" => true }
    end })
    id = OJS.enqueue_after_commit("worker.slow", [], queue: QUEUE, timeout_ms: 300, retry: { max_attempts: 1 })
    job = wait_for_state(id, "discarded")
    assert_equal "timeout", job.dig("error", "type")
    assert_equal 1, WorkerLog.of(:slow_started).length
    assert_empty WorkerLog.of(:slow_ended), "the handler still runs"
    slow.open
    TestSupport.wait_until("the dropped outcome logged") { @log.string.include?("job #{id} (worker.slow) ended after") }
    assert_equal "discarded", backend_job(id)["state"], "the late outcome changes nothing"
  end

  # A graceful stop fetches nothing more and waits for the job in flight, which is acked; the
  # job not fetched stays available.
  def test_a_graceful_stop_lets_the_job_in_flight_finish
    prepare(:sqlite)
    slow = gate
    handlers = { "worker.slow" => ->(_args) { WorkerLog.add(:slow_started) && slow.wait && { "finished" => true } },
                 "worker.echo" => ->(args) { { "echo" => args } } }
    first = OJS.enqueue_after_commit("worker.slow", [], queue: QUEUE)
    second = OJS.enqueue_after_commit("worker.echo", [2], queue: QUEUE)
    TestSupport.devserver.wait_for([first, second])
    worker = start_worker(handlers: handlers, concurrency: 1)
    wait_for_state(first, "active")
    TestSupport.wait_until("the handler running") { WorkerLog.of(:slow_started).any? }
    stopper = Thread.new { worker.stop(deadline_ms: TestSupport::PATIENCE * 1000) }
    TestSupport.wait_until("the stop begun") { worker.stopping? }
    assert stopper.alive?, "the stop waits for the job in flight"
    assert_equal 1, worker.in_flight
    slow.open
    assert stopper.join(TestSupport::PATIENCE), "the stop returns once the job finished"
    assert_equal({ "finished" => true }, wait_for_state(first, "completed")["result"])
    assert_equal "available", backend_job(second)["state"], "the job not fetched stays available"
    assert worker.join(TestSupport::PATIENCE), "every slot thread ends"
  end

  # A stop with deadline 0 gives the job in flight back at once (no attempt used); the handler's
  # late outcome is dropped.
  def test_a_stop_without_time_gives_the_job_in_flight_back
    prepare(:sqlite)
    slow = gate
    worker = start_worker(handlers: { "worker.slow" => ->(_args) { WorkerLog.add(:slow_started) && slow.wait && 1 } })
    id = OJS.enqueue_after_commit("worker.slow", [], queue: QUEUE)
    TestSupport.wait_until("the handler running") { WorkerLog.of(:slow_started).any? }
    worker.stop(deadline_ms: 0)
    assert_match(/INFO -- : ojs worker: job #{id}: job given back unfinished \(the worker stops\)/, @log.string,
                 "the loop's record, logged once the stop returned")
    job = wait_for_state(id, "available")
    assert_equal 0, job["attempt"], "given back without using an attempt"
    slow.open
    TestSupport.wait_until("the dropped outcome logged") { @log.string.include?("job #{id} (worker.slow) ended after") }
    assert worker.join(TestSupport::PATIENCE)
    assert_equal "available", backend_job(id)["state"]
  end

  # A #stop that names no deadline gives the jobs in flight the worker's stop_deadline_ms (the
  # core's default, 25000, when not given), then gives them back.
  def test_a_stop_without_a_deadline_takes_the_workers
    prepare(:sqlite)
    slow = gate
    handlers = { "worker.slow" => ->(_args) { WorkerLog.add(:slow_started) && slow.wait && 1 } }
    default = start_worker
    assert_equal 25_000, default.stop_deadline_ms, "the core's default"
    default.stop(deadline_ms: 0) # before the job is staged: only the next worker can take it
    worker = start_worker(handlers: handlers, stop_deadline_ms: 100)
    assert_equal 100, worker.stop_deadline_ms
    id = OJS.enqueue_after_commit("worker.slow", [], queue: QUEUE)
    TestSupport.wait_until("the handler running") { WorkerLog.of(:slow_started).any? }
    worker.stop
    assert_match(/job #{id}: job given back unfinished \(the worker stops\)/, @log.string)
    assert_equal 0, wait_for_state(id, "available")["attempt"], "given back without using an attempt"
    slow.open
    assert worker.join(TestSupport::PATIENCE)
  end

  # A backend outage during the worker's life: the loop waits it out (backing off) and says so
  # on the worker's logger, once when it begins (WARN) and once when it ends (INFO);
  # backend_down? tells it meanwhile. A job committed after the outage runs.
  def test_a_backend_outage_is_logged_and_waited_out
    prepare(:sqlite)
    worker = start_worker(handlers: { "worker.echo" => ->(args) { { "echo" => args } } }, idle_poll_ms: 50)
    refute worker.backend_down?
    TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 503, "applies_to" => "all" })
    TestSupport.wait_until("the outage logged") { @log.string.include?("the OJS backend is unavailable") }
    assert worker.backend_down?
    assert_match(/WARN -- : ojs worker: the OJS backend is unavailable, retrying with backoff until it answers/,
                 @log.string)
    TestSupport.devserver.call(:delete, "/_dev/faults")
    TestSupport.wait_until("the outage's end logged") { @log.string.include?("the OJS backend answers again") }
    assert_match(/INFO -- : ojs worker: the OJS backend answers again/, @log.string)
    refute worker.backend_down?
    assert_equal 1, @log.string.scan("the OJS backend is unavailable").length, "the outage is logged once"
    id = OJS.enqueue_after_commit("worker.echo", [7], queue: QUEUE)
    assert_equal({ "echo" => [7] }, wait_for_state(id, "completed")["result"])
  ensure
    TestSupport.devserver.call(:delete, "/_dev/faults")
  end

  # --- trace context, the error reporter ---------------------------------------------------------

  # The traceparent of the request that staged a job reaches the job (OJS::Worker.current_job,
  # a handler's job argument) and every job it enqueues.
  def test_the_trace_context_reaches_the_job_and_the_jobs_it_enqueues
    prepare(:sqlite)
    handlers = { "worker.parent" => lambda do |_args, job|
      child = OJS.enqueue_after_commit("worker.child", [job.id], queue: "other")
      { "traceparent" => job.traceparent, "current" => OJS::Worker.current_job.traceparent, "child" => child }
    end }
    start_worker(handlers: handlers)
    parent = greeting = nil
    OJS.with_context(traceparent: TRACEPARENT, tracestate: "vendor=1") do
      parent = OJS.enqueue_after_commit("worker.parent", [], queue: QUEUE)
      ActiveRecord::Base.connection.execute("INSERT INTO #{PEOPLE} (name) VALUES ('Grace')")
      greeting = WorkerGreetingJob.perform_later(ActiveRecord::Base.connection.select_value("SELECT MAX(id) FROM #{PEOPLE}"))
    end
    result = wait_for_state(parent, "completed")["result"]
    assert_equal TRACEPARENT, result["traceparent"]
    assert_equal TRACEPARENT, result["current"]
    child = TestSupport.devserver.wait_for([result["child"]]).first
    assert_equal TRACEPARENT, child.dig("meta", "traceparent"), "a job the job enqueues carries its trace"
    assert_equal "vendor=1", child.dig("meta", "tracestate")
    wait_for_state(greeting.provider_job_id, "completed")
    assert_equal [TRACEPARENT], WorkerLog.of(:greeted).map { |run| run[:traceparent] }
    assert_nil OJS::Worker.current_job, "no current job outside a run"
  end

  # Rails 7+ (Rails.error is ActiveSupport's error reporter): a job's exception is reported
  # once, unhandled, with the job in its context. Rails 6.1 has no reporter: the failure still
  # reaches the backend.
  def test_a_job_exception_goes_to_the_error_reporter_where_there_is_one
    prepare(:sqlite)
    start_worker
    reports = Queue.new
    subscriber = Object.new
    subscriber.define_singleton_method(:report) do |error, handled:, severity:, context:, source: nil|
      reports << { error: error, handled: handled, severity: severity, context: context, source: source }
    end
    reporter = ActiveSupport.respond_to?(:error_reporter) ? ActiveSupport.error_reporter : nil
    reporter&.subscribe(subscriber)
    begin
      job = WorkerBrokenJob.perform_later("reported")
      TestSupport.wait_until("the first failure at the backend") do
        failed = backend_job(job.provider_job_id)
        failed if failed&.dig("error", "message")&.include?("reported")
      end
      unless reporter
        refute ActiveSupport.respond_to?(:error_reporter), "ActiveSupport #{ActiveSupport::VERSION::STRING} has no reporter"
        return
      end

      # Reported before the nack was sent, so before the backend showed the failure.
      refute reports.empty?, "the error reporter got nothing"
      report = reports.pop
      assert reports.empty?, "reported once"
      assert_instance_of ArgumentError, report[:error]
      assert_equal "reported", report[:error].message
      assert_equal false, report[:handled]
      assert_equal "job.ojs", report[:source]
      assert_equal job.provider_job_id, report[:context][:job_id]
      assert_equal "worker_broken_job", report[:context][:job_type]
    ensure
      reporter&.unsubscribe(subscriber)
    end
  end

  # --- the GVL, bad input -----------------------------------------------------------------------

  # Idle slots wait for a job in native code without the GVL: the other threads keep running.
  def test_idle_slots_leave_the_gvl_to_other_threads
    prepare(:sqlite)
    worker = start_worker(concurrency: 4)
    window = (OJS::Worker.const_get(:POLL_MS) * 3) / 1000.0 # each slot waits natively at least twice
    gaps = []
    last = TestSupport.monotonic
    finish = last + window
    while (now = TestSupport.monotonic) < finish
      gaps << (now - last)
      last = now
      Thread.pass
    end
    assert_equal 4, worker.concurrency
    # A slot that held the GVL through its native wait would stop this thread for that wait
    # (POLL_MS), one slot after another: most of the window. A busy machine may stall a thread
    # now and then, never for most of it: the verdict is the share of the window stalled.
    long = gaps.select { |gap| gap > (OJS::Worker.const_get(:POLL_MS) / 2) / 1000.0 }
    assert_operator long.sum, :<, window / 2,
                    "a slot held the GVL during its wait (stalls of #{long.map { |g| (g * 1000).round }} ms in #{window} s)"
  end

  def test_bad_options_and_handlers_are_refused_naming_them
    prepare(:sqlite)
    error = assert_raises(OJS::InvalidConfig) { OJS.worker(queues: [QUEUE], concurency: 2).start }
    assert_equal "concurency", error.field
    assert_includes error.message, "concurrency"
    error = assert_raises(OJS::InvalidConfig) { OJS.worker(handlers: {}).start }
    assert_equal "queues", error.field
    error = assert_raises(OJS::InvalidConfig) { OJS.worker(queues: [QUEUE], concurrency: 0).start }
    assert_equal "concurrency", error.field
    error = assert_raises(OJS::InvalidConfig) { OJS.worker(queues: [QUEUE], handlers: { "a.b" => 42 }) }
    assert_equal "handlers", error.field
    assert_includes error.message, 'handlers["a.b"]'
    error = assert_raises(OJS::InvalidConfig) { OJS.handle("a.b") }
    assert_equal "handlers", error.field
  end

  # OJS.handle registers what OJS.worker (and rake ojs:work) runs by default.
  def test_registered_handlers_are_the_default
    prepare(:sqlite)
    saved = OJS.handlers
    OJS.handle("worker.registered") { |args, job| { "sum" => args.sum, "queue" => job.queue } }
    worker = OJS.worker(queues: [QUEUE], logger: @logger)
    @workers << worker
    assert_includes worker.handlers.keys, "worker.registered"
    worker.start
    id = OJS.enqueue_after_commit("worker.registered", [1, 2], queue: QUEUE)
    assert_equal({ "sum" => 3, "queue" => QUEUE }, wait_for_state(id, "completed")["result"])
  ensure
    OJS.instance_variable_set(:@handlers, saved)
  end
end

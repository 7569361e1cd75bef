# frozen_string_literal: true

# The Ruby runner of the language-neutral conformance cases (conformance-tests/cases/*.json,
# format in conformance-tests/README.md; runner-rust/src/lib.rs is the reference). Every case
# runs on SQLite, on PostgreSQL and on MariaDB (ActiveRecord's mysql2 adapter) through the real
# adapter (OJS.enqueue_after_commit, ..., on ActiveRecord's connection and transactions) against
# the real ojs-devserver. Prints the matrix (case x database: PASS / FAIL / SKIP with reason)
# and writes it per ActiveRecord version: target/ruby-conformance-matrix-rails-<MAJOR.MINOR>.txt
# for people, and target/matrix/rails-<MAJOR.MINOR>.tsv
# (`case<TAB>sqlite|postgresql|mariadb<TAB>PASS|FAIL|SKIP`) for scripts/matrix.sh.

require_relative "test_helper"

module Conformance
  DIR = File.join(TestSupport::ROOT, "conformance-tests")

  # Cases this runner cannot run yet, with the reason (README "Skip policy"). Each one names
  # what the core's binding surface (bridge::Adapter) lacks; see docs/rails.md.
  SKIPS = {}.freeze

  MATRIX = []

  class << self
    def cases
      Dir[File.join(DIR, "cases", "*.json")].sort.map { |path| JSON.parse(File.read(path)) }
    end

    # The suite defaults: the `default` annotation of every config key in the case schema.
    def suite_defaults
      schema = JSON.parse(File.read(File.join(DIR, "schema", "case.schema.json")))
      %w[outbox relay].to_h do |section|
        keys = schema.dig("$defs", "config", "properties", section, "properties")
        [section, keys.each_with_object({}) { |(key, spec), out| out[key] = spec["default"] if spec.key?("default") }]
      end
    end

    def merge(base, patch)
      base.merge(patch) { |_key, old, new| old.is_a?(Hash) && new.is_a?(Hash) ? merge(old, new) : new }
    end
  end

  unknown = SKIPS.keys - cases.map { |kase| kase["id"] }
  raise "SKIPS names cases that do not exist: #{unknown}" unless unknown.empty?

  # A step failed: the message says why.
  class StepFailed < StandardError; end

  # Runs one case on one database.
  class Run
    def initialize(kase, database)
      @case = kase
      @database = database
      @backend = TestSupport.devserver
      @refs = {}
      @levels = 0 # open ActiveRecord transactions (1 = outermost, more = savepoints)
      @last_commit_us = 0
      slug = kase["id"].downcase.gsub(/[^a-z0-9]/, "_")
      @table = "rb_case_#{slug[0, 40]}"
      @slug = slug
      @subscriptions = {} # name => Subscription (events_subscribe)
      @race = nil # the background transaction of race_enqueue (a Race), until race_join
      @worker = nil # the binding's worker (OJS::Worker), from worker_start to worker_stop
    end

    def call
      # The previous test's relay first (a test that leaves its relay running, flushed when the
      # configuration is replaced), then an empty backend for this case.
      OJS.stop_relay
      @backend.reset
      connection = TestSupport.connect(@database, "case_#{@slug}", table: @table)
      @connection = connection
      config = Conformance.merge(Conformance.suite_defaults, @case["config"] || {})
      OJS.configure do |c|
        c.url = @backend.url
        c.outbox_table = @table
        c.outbox_options = config["outbox"]
        c.relay_options = config["relay"]
        c.encryption = config["encryption"] # the key ring, as the case has it (nil: none)
        c.auto_start = false # the case says when the relay runs
      end
      OJS::Migration.create_outbox_table(connection)
      OJS.clear_context
      OJS.start_relay unless @case["relay"] == "stopped"
      @case["steps"].each_with_index do |step, index|
        run_step(step)
      rescue StepFailed, OJS::Error, ActiveRecord::ActiveRecordError => e
        raise StepFailed, "step #{index} (#{step['op']}): #{e.class}: #{e.message}"
      end
    ensure
      teardown
    end

    private

    def teardown
      stop_worker(0) if @worker
      @subscriptions.each_value { |subscription| subscription.stream.close }
      @connection&.rollback_transaction while @connection&.transaction_open?
      abandon_race
      @backend.call(:delete, "/_dev/faults")
      OJS.stop_relay
      OJS.clear_context
    end

    def now_us
      Process.clock_gettime(Process::CLOCK_REALTIME, :microsecond)
    end

    def fail_step(message)
      raise StepFailed, message
    end

    def id_of(ref)
      @refs.fetch(ref) { fail_step("ref #{ref.inspect} was never enqueued") }
    end

    def run_step(step)
      op = step.fetch("op")
      timeout = (step["timeout_ms"] || 10_000) / 1000.0
      case op
      when "begin"
        fail_step("a transaction is already open") if @levels.positive?
        open_level
      when "savepoint"
        fail_step("no transaction is open") if @levels.zero?
        open_level
      when "release_savepoint"
        fail_step("no savepoint is open") if @levels < 2
        close_level(:commit)
      when "rollback_savepoint"
        fail_step("no savepoint is open") if @levels < 2
        close_level(:rollback)
      when "commit"
        fail_step("commit needs exactly the outermost transaction open") unless @levels == 1
        if step["crash_before_hook"]
          OJS::Testing.crash_before_hook { close_level(:commit) }
        else
          close_level(:commit)
        end
        @last_commit_us = now_us
      when "rollback"
        fail_step("rollback needs exactly the outermost transaction open") unless @levels == 1
        close_level(:rollback)
      when "enqueue_after_commit" then stage(step, [[step["ref"], job_of(step)]], single: true)
      when "enqueue_bulk" then stage(step, bulk_jobs(step), single: false)
      when "enqueue" then enqueue_now(step)
      when "set_context" then OJS.context = step["context"].transform_keys(&:to_sym)
      when "clear_context" then OJS.clear_context
      when "backend_fault" then @backend.call(:post, "/_dev/faults", step.except("op"))
      when "backend_clear_faults" then @backend.call(:delete, "/_dev/faults")
      when "backend_manifest" then @backend.call(:post, "/_dev/manifest", { "batch_enqueue" => step["batch_enqueue"] })
      when "relay_start" then OJS.start_relay
      when "relay_stop" then OJS.stop_relay
      when "relay_kill" then OJS.client.kill_relay
      when "prune" then OJS.prune(older_than: step["older_than"] || "PT0S")
      when "dead_replay" then OJS.dead_replay(tenant: step["tenant_id"])
      when "dead_purge" then OJS.dead_purge(tenant: step["tenant_id"])
      when "sleep" then sleep(step["ms"] / 1000.0)
      when "race_enqueue" then race_enqueue(step)
      when "race_join" then race_join(step, timeout)
      when "wait_delivered" then wait_delivered(step, timeout)
      when "wait_outbox" then wait_outbox(step, timeout)
      when "expect_backend" then expect_backend(step)
      when "expect_requests" then expect_requests(step)
      when "expect_outbox" then expect_outbox(step)
      when "events_subscribe" then events_subscribe(step)
      when "wait_events" then wait_events(step, timeout)
      when "expect_events" then expect_events(step)
      when "worker_start" then worker_start(step)
      when "worker_stop" then worker_stop(step)
      when "wait_jobs" then wait_jobs(step, timeout)
      else fail_step("unknown op #{op.inspect} (this runner is out of date)")
      end
    end

    # ActiveRecord's transaction manager, as `transaction(requires_new: true) { }` drives it:
    # the first level is the real transaction, every nested one a savepoint. (The block form
    # cannot stay open across steps; test/savepoint_test.rb covers the block form itself.)
    def open_level
      @connection.begin_transaction(joinable: true)
      @levels += 1
    end

    def close_level(how)
      how == :commit ? @connection.commit_transaction : @connection.rollback_transaction
      @levels -= 1
    end

    def job_of(step)
      { type: step["type"], args: step["args"], options: step["options"] }
    end

    def bulk_jobs(step)
      if (generate = step["generate"])
        return Array.new(generate["count"]) do |i|
          ["#{generate['ref_prefix']}#{i}", { type: generate["type"], args: [i] }]
        end
      end
      step["jobs"].map { |job| [job["ref"], job_of(job)] }
    end

    # Calls the adapter and checks `expect_error`: returns the ids, or nil after the expected error.
    def expecting_error(step)
      expected = step["expect_error"]
      begin
        ids = yield
      rescue OJS::Error => e
        fail_step("unexpected error #{e.code}: #{e.message}") unless expected
        fail_step("expected error #{expected}, got #{e.code}: #{e.message}") unless e.code == expected
        klass = OJS::Error::CLASSES.fetch(expected)
        fail_step("#{expected} raised as #{e.class}, expected #{klass}") unless e.is_a?(klass)
        return nil
      end
      fail_step("expected error #{expected}, the call succeeded") if expected
      ids
    end

    def stage(step, jobs, single:)
      autocommit = @levels.zero?
      ids = expecting_error(step) do
        if single && (jobs.first[1][:options].nil? || jobs.first[1][:options].is_a?(Hash))
          job = jobs.first[1]
          [OJS.enqueue_after_commit(job[:type], job[:args], **(job[:options] || {}))]
        else
          OJS.enqueue_bulk(jobs.map(&:last))
        end
      end
      return unless ids

      if (same = step["same_as"])
        fail_step("returned #{ids.first}, expected #{same.inspect}'s id #{id_of(same)}") unless ids.first == id_of(same)
      end
      jobs.map(&:first).zip(ids).each { |ref, id| @refs[ref] = id if ref }
      @last_commit_us = now_us if autocommit
    end

    # --- race_enqueue / race_join (README "Steps") -------------------------------------------

    # A second transaction in the background: a thread, its outcome (the job id or the
    # OJS::Error) and the step's ref.
    Race = Struct.new(:thread, :ref)

    # In a thread, on a SECOND connection of ActiveRecord's pool (never the case's one, which
    # holds the open transaction): ActiveRecord::Base.transaction around the real
    # OJS.enqueue_after_commit, committed also when the enqueue raised (its savepoint is rolled
    # back: the transaction stays usable). Its INSERT waits for the main transaction (a
    # PostgreSQL row lock; SQLite's write lock, see waiting_for_sqlite_lock), so the step
    # returns at once.
    def race_enqueue(step)
      fail_step("race_enqueue needs an open transaction") if @levels.zero?
      fail_step("race_enqueue: a race is already running") if @race

      pool = ActiveRecord::Base.connection_pool
      # The main connection is checked out; the thread needs another one (the relay has its own).
      fail_step("race_enqueue: the pool has #{pool.size} connection(s), needs 2") if pool.size < 2
      job = job_of(step)
      context = OJS.context
      thread = Thread.new do
        Thread.current.report_on_exception = false
        OJS.with_context(context) { stage_alone(pool, job) }
      ensure
        # The thread's connection goes back to the pool, even when something leased it for
        # good (ActiveRecord 7.2's Base.connection inside with_connection makes the lease sticky).
        pool.release_connection
      end
      @race = Race.new(thread, step["ref"])
    end

    # The racing transaction's body: returns [:ok, id] or [:error, the OJS::Error].
    def stage_alone(pool, job)
      pool.with_connection do |connection|
        fail_step("race_enqueue got the case's own connection") if connection.equal?(@connection)

        waiting_for_sqlite_lock(connection, pool) do
          ActiveRecord::Base.transaction do
            [:ok, OJS.enqueue_after_commit(job[:type], job[:args], **(job[:options] || {}))]
          rescue OJS::Error => e
            [:error, e] # committed all the same
          end
        end
      end
    end

    RACE_LOCK_WAIT = 10 # seconds the racing transaction waits for SQLite's write lock

    # SQLite: the racing INSERT must wait for the main transaction's write lock, not fail with
    # "database is locked". The pool's busy timeout (`timeout:` in TestSupport.connect) waits
    # inside sqlite3_step, and the sqlite3 gem holds Ruby's GVL there: the main thread could
    # not run its commit meanwhile, and the wait would always end in BusyException. So on this
    # connection only, while the race runs, a Ruby busy handler waits instead (its sleep lets
    # the main thread run); the pool's busy timeout is restored before the connection goes back.
    def waiting_for_sqlite_lock(connection, pool)
      return yield unless connection.adapter_name.match?(/sqlite/i)

      raw = connection.raw_connection
      deadline = TestSupport.monotonic + RACE_LOCK_WAIT
      raw.busy_handler { |_count| TestSupport.monotonic < deadline && (sleep(0.005) || true) }
      begin
        yield
      ensure
        timeout = pool.db_config.configuration_hash[:timeout]
        timeout ? raw.busy_timeout(Integer(timeout)) : raw.busy_handler
      end
    end

    def race_join(step, timeout)
      race = @race or fail_step("race_join: no race running")
      fail_step("race_join: the racing transaction did not end within #{timeout}s") unless race.thread.join(timeout)

      @race = nil
      outcome, value = race.thread.value # re-raises what the thread raised (a database error)
      leased = ActiveRecord::Base.connection_pool.connections.count(&:in_use?)
      fail_step("the racing thread's connection was not returned to the pool (#{leased} in use)") if leased > 1
      expected = step["expect_error"]
      if outcome == :error
        fail_step("the racing enqueue failed: #{value.code}: #{value.message}") unless expected
        fail_step("the racing enqueue: expected #{expected}, got #{value.code}: #{value.message}") unless value.code == expected
        klass = OJS::Error::CLASSES.fetch(expected)
        fail_step("#{expected} raised as #{value.class}, expected #{klass}") unless value.is_a?(klass)
      else
        fail_step("the racing enqueue: expected error #{expected}, it succeeded (#{value})") if expected
        @refs[race.ref] = value if race.ref
      end
    end

    # Teardown: the main transaction is rolled back by now, so the racing one can end; wait for
    # it, and kill it (its transaction rolled back, its connection returned) if it hangs.
    def abandon_race
      race = @race or return
      @race = nil
      return if race.thread.join(15)

      race.thread.kill
      race.thread.join(5)
    end

    def enqueue_now(step)
      ids = expecting_error(step) do
        [OJS.enqueue(step["type"], step["args"], **(step["options"] || {}))]
      end
      @refs[step["ref"]] = ids.first if ids && step["ref"]
    end

    def stored_jobs(received)
      received["jobs"] || []
    end

    def wait_delivered(step, timeout)
      wanted = step["refs"].map { |ref| [ref, id_of(ref)] }
      deadline = TestSupport.monotonic + timeout
      loop do
        stored = stored_jobs(@backend.received).to_h { |job| [job["id"], job["received_at_us"].to_i] }
        missing = wanted.reject { |_, id| stored.key?(id) }.map(&:first)
        if missing.empty?
          if (min_elapsed = step["min_elapsed_ms"])
            last = wanted.map { |_, id| stored[id] }.max
            elapsed_ms = (last - @last_commit_us) / 1000
            if elapsed_ms < min_elapsed
              fail_step("delivered #{elapsed_ms} ms after commit, expected at least #{min_elapsed} ms")
            end
          end
          return
        end
        fail_step("not delivered within #{timeout}s: #{missing}; outbox #{OJS.status}") if TestSupport.monotonic > deadline
        sleep 0.01
      end
    end

    def wait_outbox(step, timeout)
      deadline = TestSupport.monotonic + timeout
      loop do
        problem = row_problem(step["rows"])
        return if problem.nil?
        fail_step("wait_outbox timed out: #{problem}") if TestSupport.monotonic > deadline

        sleep 0.02
      end
    end

    # Row statuses as the application sees them: through its open transaction when there is one
    # (its own uncommitted rows included), else as committed (the core's rows_json).
    def row_statuses(ids)
      return {} if ids.empty?

      if @levels.positive?
        list = ids.map { |id| @connection.quote(id) }.join(", ")
        @connection.select_rows("SELECT job_id, status FROM #{@table} WHERE job_id IN (#{list})")
                   .to_h { |id, status| [id.to_s, status] }
      else
        OJS.outbox_rows(ids).transform_values { |row| row["status"] }
      end
    end

    def row_problem(rows)
      return nil unless rows

      states = row_statuses(rows.keys.map { |ref| id_of(ref) })
      rows.each do |ref, expected|
        actual = states.fetch(id_of(ref), "absent")
        allowed = Array(expected)
        return "row #{ref.inspect} is #{actual}, expected #{expected}" unless allowed.include?(actual)
      end
      nil
    end

    def expect_outbox(step)
      problem = row_problem(step["rows"])
      fail_step(problem) if problem
      absent = (step["absent"] || []).map { |ref| [ref, id_of(ref)] }
      states = row_statuses(absent.map(&:last))
      absent.each { |ref, id| fail_step("outbox still has a row for #{ref.inspect}") if states.key?(id) }
      return unless step.key?("total")

      actual = @connection.select_value("SELECT COUNT(*) FROM #{@table}").to_i
      fail_step("expected #{step['total']} outbox rows, found #{actual}") unless actual == step["total"]
    end

    def expect_requests(step)
      received = @backend.received
      %w[batch single].each do |kind|
        next unless step.key?(kind)

        actual = received.dig("requests", kind).to_i
        fail_step("expected #{step[kind]} #{kind} requests, the backend got #{actual}") unless actual == step[kind]
      end
    end

    def subset?(expected, actual)
      if expected.is_a?(Hash) && actual.is_a?(Hash)
        expected.all? { |key, value| actual.key?(key) && subset?(value, actual[key]) }
      else
        expected == actual
      end
    end

    # --- events (README "Events (the relay's event stream)") ----------------------------------

    # One subscriber of the relay's events: its native stream (OJS::RelayStream, the bridge's
    # relay_events), the events read so far (envelopes, in order), their ids, and whether the
    # stream has ended.
    Subscription = Struct.new(:stream, :events, :ids, :ended)

    def subscription(name)
      @subscriptions.fetch(name) { fail_step("subscription #{name.inspect} was never opened") }
    end

    def events_subscribe(step)
      name = step.fetch("subscription")
      fail_step("subscription #{name.inspect} is already open") if @subscriptions.key?(name)
      request = step.slice("types", "queues", "job_types", "tenant")
      if (from = step["last_event_id"])
        source = subscription(from.fetch("subscription"))
        read_events(source, 0)
        job_id = id_of(from.fetch("ref"))
        event = source.events.find { |e| e["subject"] == job_id && e["type"] == from.fetch("type") } or
          fail_step("subscription #{from['subscription'].inspect} has no #{from['type']} event about #{from['ref'].inspect}")
        request["last_event_id"] = event["id"]
      end
      @subscriptions[name] = Subscription.new(OJS.client.relay_events(request), [], {}, false)
    end

    # Reads the frames waiting (and, with `wait_ms`, waits that long for the first), checking
    # each as an envelope (RFC-0005 §2). A frame that is none fails the case.
    def read_events(subscription, wait_ms)
      until subscription.ended
        frame = subscription.stream.next_frame(wait_ms)
        wait_ms = 0
        if frame.nil?
          subscription.ended = true
        elsif frame.empty?
          break
        else
          subscription.events << envelope_of(subscription, frame)
        end
      end
    end

    def envelope_of(subscription, frame)
      data = frame.lines.filter_map { |line| line.chomp.delete_prefix("data:").delete_prefix(" ") if line.start_with?("data:") }
      fail_step("a frame without a data line: #{frame.inspect}") if data.empty?
      event = begin
        JSON.parse(data.join("\n"))
      rescue JSON::ParserError => e
        fail_step("a frame whose data is not JSON (#{e.message}): #{frame.inspect}")
      end
      fail_step("not a CloudEvents envelope: #{frame.inspect}") unless event.is_a?(Hash)
      fail_step("specversion #{event['specversion'].inspect}, expected \"1.0\": #{frame.inspect}") unless event["specversion"] == "1.0"
      id = event["id"]
      fail_step("an event without an id: #{frame.inspect}") unless id.is_a?(String) && !id.empty?
      fail_step("event id #{id} received twice by this subscription") if subscription.ids.key?(id)
      subscription.ids[id] = true
      source = "/ojs/outbox/#{@table}"
      fail_step("source #{event['source'].inspect}, expected #{source.inspect}") unless event["source"] == source
      if event["type"].to_s.start_with?("job.") && event["subject"] != event.dig("data", "job_id")
        fail_step("#{event['type']}: subject #{event['subject'].inspect} is not data.job_id #{event.dig('data', 'job_id').inspect}")
      end
      event
    end

    # The subscription's relevant events (about a listed ref, or of a type an entry without ref
    # names) against the list: :done when they are exactly the list, :more while a prefix;
    # fails at once on a mismatch or on more relevant events than listed.
    def compare_events(subscription, expected)
      ids = expected.filter_map { |entry| entry["ref"] && id_of(entry["ref"]) }
      types = expected.reject { |entry| entry["ref"] }.map { |entry| entry["type"] }
      relevant = subscription.events.select { |e| ids.include?(e["subject"]) || types.include?(e["type"]) }
      relevant.each_with_index do |event, index|
        entry = expected[index] or
          fail_step("more relevant events than the #{expected.length} listed: #{summary(relevant)}")
        next if event_matches?(entry, event)

        fail_step("relevant event #{index} does not match #{entry}: #{event}; so far #{summary(relevant)}")
      end
      relevant.length == expected.length ? :done : :more
    end

    def event_matches?(entry, event)
      return false unless event["type"] == entry["type"]
      return false if entry["ref"] && event["subject"] != id_of(entry["ref"])

      data = event["data"].is_a?(Hash) ? event["data"] : {}
      (entry["data"] || {}).all? { |key, value| data.key?(key) && data[key] == value }
    end

    def summary(events)
      refs = @refs.invert
      events.map { |e| "#{e['type']}(#{refs[e['subject']] || e['subject']})" }.join(", ")
    end

    def wait_events(step, timeout)
      subscription = subscription(step.fetch("subscription"))
      deadline = TestSupport.monotonic + timeout
      loop do
        read_events(subscription, 20)
        return if compare_events(subscription, step.fetch("events")) == :done
        fail_step("the subscription ended (#{summary(subscription.events)})") if subscription.ended
        if TestSupport.monotonic > deadline
          fail_step("wait_events timed out; received #{summary(subscription.events)}")
        end
      end
    end

    def expect_events(step)
      subscription = subscription(step.fetch("subscription"))
      read_events(subscription, 0)
      (step["absent"] || []).each do |ref|
        about = subscription.events.select { |e| e["subject"] == id_of(ref) }
        fail_step("events about #{ref.inspect}, which must have none: #{summary(about)}") unless about.empty?
      end
      return unless step.key?("total")

      actual = subscription.events.length
      fail_step("#{actual} events received, expected #{step['total']}: #{summary(subscription.events)}") unless actual == step["total"]
    end

    # --- workers (README "Workers") ----------------------------------------------------------

    # The suite handlers, as plain handlers of OJS.worker (the cases stage plain jobs); a job of
    # any other type is unknown to the worker.
    SUITE_HANDLERS = {
      "conf.echo" => ->(args) { { "echo" => args } },
      "conf.fail" => ->(args) { raise args.first.to_s },
      "conf.sleep" => lambda do |args|
        sleep(args.first / 1000.0) # the handler's specification: it sleeps this long
        { "slept" => args.first }
      end,
      "conf.trace" => ->(_args, job) { { "traceparent" => job.traceparent } }
    }.freeze

    # The gem's worker on the queue "default" with the suite handlers (OJS.worker: the one
    # `rake ojs:work` runs), the step's options passed to the core as they are.
    def worker_start(step)
      fail_step("a worker runs already") if @worker
      options = step.slice("concurrency", "visibility_timeout_ms").transform_keys(&:to_sym)
      worker = OJS.worker(queues: ["default"], handlers: SUITE_HANDLERS, logger: Logger.new(nil), **options)
      worker.start
      @worker = worker
    end

    def worker_stop(step)
      fail_step("no worker runs") unless @worker
      stop_worker(step.fetch("deadline_ms"))
    end

    # Stops the worker gracefully within `deadline_ms`; returns once the loop stopped and every
    # slot thread ended (a slot in a handler whose job was given back finishes the handler).
    def stop_worker(deadline_ms)
      worker = @worker
      @worker = nil
      worker.stop(deadline_ms: deadline_ms)
      fail_step("the worker's slot threads did not end") unless worker.join(TestSupport::PATIENCE)
    end

    # Until the backend's view of every listed job (GET /ojs/v1/jobs/{id}) matches.
    def wait_jobs(step, timeout)
      deadline = TestSupport.monotonic + timeout
      loop do
        problem = step.fetch("jobs").each_with_object([]) do |(ref, expected), out|
          job = @backend.call(:get, "/ojs/v1/jobs/#{id_of(ref)}")&.dig("job")
          why = job ? job_mismatch(expected, job) : "not at the backend"
          out << "#{ref}: #{why}" if why
        end.first
        return if problem.nil?
        fail_step("wait_jobs timed out: #{problem}") if TestSupport.monotonic > deadline

        sleep 0.02
      end
    end

    # Why the backend's job does not match `expected` (state, attempt, result, error), or nil.
    def job_mismatch(expected, job)
      if expected.key?("state") && !Array(expected["state"]).include?(job["state"])
        return "state #{job['state'].inspect}, expected #{expected['state'].inspect}"
      end
      return "attempt #{job['attempt']}, expected #{expected['attempt']}" if expected.key?("attempt") && job["attempt"] != expected["attempt"]
      if expected.key?("result") && !json_equal?(expected["result"], job["result"])
        return "result #{job['result'].inspect}, expected #{expected['result'].inspect}"
      end

      error = expected["error"] or return nil
      actual = job["error"].is_a?(Hash) ? job["error"] : {}
      return "last error #{actual}, expected type #{error['type'].inspect}" if error.key?("type") && actual["type"] != error["type"]
      if error.key?("message_contains") && !actual["message"].to_s.include?(error["message_contains"])
        return "last error #{actual}, expected a message with #{error['message_contains'].inspect}"
      end

      nil
    end

    # JSON equality: numbers by value (1 equals 1.0), objects regardless of key order.
    def json_equal?(expected, actual)
      case expected
      when Numeric then actual.is_a?(Numeric) && expected == actual
      when Array then actual.is_a?(Array) && expected.length == actual.length &&
                      expected.zip(actual).all? { |e, a| json_equal?(e, a) }
      when Hash then actual.is_a?(Hash) && expected.keys.sort == actual.keys.sort &&
                     expected.all? { |key, value| json_equal?(value, actual[key]) }
      else expected == actual
      end
    end

    # The encryption extension's envelope as the backend stored it: args one object
    # {"ojs_encoded": true, "encoding": "binary/encrypted", "data": text}, and the codec meta.
    def expect_encrypted(ref, job)
      args = job["args"]
      envelope = args.is_a?(Array) && args.length == 1 && args.first.is_a?(Hash) ? args.first : nil
      unless envelope && envelope["ojs_encoded"] == true && envelope["encoding"] == "binary/encrypted" &&
             envelope["data"].is_a?(String)
        fail_step("#{ref.inspect}: args are not the encrypted envelope: #{args.inspect}")
      end
      meta = job["meta"] || {}
      unless meta["ojs.codec.encodings"] == ["binary/encrypted"] && meta["ojs.codec.key_id"].is_a?(String)
        fail_step("#{ref.inspect}: meta lacks the codec keys: #{meta.inspect}")
      end
    end

    def expect_backend(step)
      received = @backend.received
      jobs = stored_jobs(received)
      position = jobs.each_with_index.to_h { |job, index| [job["id"], index] }
      expected = (step["received"] || []).map { |ref| [ref, id_of(ref)] }
      expected.each { |ref, id| fail_step("the backend did not receive #{ref.inspect}") unless position.key?(id) }
      if step["order"] == "exact"
        expected.each_cons(2) do |(first, first_id), (second, second_id)|
          fail_step("#{second.inspect} arrived before #{first.inspect}") if position[first_id] > position[second_id]
        end
      end
      (step["absent"] || []).each do |ref|
        fail_step("the backend received #{ref.inspect}, which must not be sent") if position.key?(id_of(ref))
      end
      if step.key?("total") && jobs.length != step["total"]
        fail_step("the backend stored #{jobs.length} jobs, expected #{step['total']}")
      end
      deliveries = ->(ref) { received.dig("deliveries", id_of(ref)).to_i }
      (step["deliveries_at_least"] || {}).each do |ref, minimum|
        n = deliveries.call(ref)
        fail_step("#{ref.inspect} was delivered #{n} times, expected at least #{minimum}") if n < minimum
      end
      (step["deliveries_exactly"] || {}).each do |ref, exactly|
        n = deliveries.call(ref)
        fail_step("#{ref.inspect} was delivered #{n} times, expected #{exactly}") unless n == exactly
      end
      (step["encrypted"] || []).each do |ref|
        job = jobs.find { |stored| stored["id"] == id_of(ref) } or fail_step("#{ref.inspect} not stored")
        expect_encrypted(ref, job)
      end
      (step["jobs"] || {}).each do |ref, want|
        job = jobs.find { |stored| stored["id"] == id_of(ref) } or fail_step("#{ref.inspect} not stored")
        fields = want.except("meta_absent")
        fail_step("#{ref.inspect}: expected #{fields}, stored #{job}") unless subset?(fields, job)
        (want["meta_absent"] || []).each do |key|
          fail_step("#{ref.inspect}: meta must not have #{key.inspect}, stored #{job['meta']}") if job["meta"]&.key?(key)
        end
      end
    end
  end
end

class ConformanceTest < Minitest::Test
  # The schema's defaults include keys whose default is null (relay.event_retention: tier 2
  # off): the merge keeps them, and the core takes null as unset.
  def test_suite_defaults_pass_null_defaults_through
    relay = Conformance.suite_defaults.fetch("relay")
    assert relay.key?("event_retention"), "relay.event_retention is in the suite defaults"
    assert_nil relay["event_retention"]
    merged = Conformance.merge(Conformance.suite_defaults, { "relay" => { "event_retention" => "PT1H" } })
    assert_equal "PT1H", merged["relay"]["event_retention"]
    config = OJS::Configuration.new
    config.url = "http://127.0.0.1:9"
    config.relay_options = relay
    config.relay = :external
    assert_nil JSON.parse(config.to_core_json).dig("adapter", "relay").fetch("event_retention")
    OJS::Client.new(config) # the core accepts it
  end

  Conformance.cases.each do |kase|
    TestSupport.databases.each do |database|
      define_method("test_#{database}_#{kase['id']}") do
        if (reason = Conformance::SKIPS[kase["id"]])
          Conformance::MATRIX << [kase["id"], database, "SKIP (#{reason})"]
          skip(reason)
        end
        begin
          Conformance::Run.new(kase, database).call
          Conformance::MATRIX << [kase["id"], database, "PASS"]
          pass
        rescue Conformance::StepFailed => e
          Conformance::MATRIX << [kase["id"], database, "FAIL"]
          flunk("#{kase['id']} [#{database}]: #{kase['title']}\n  #{e.message}")
        end
      end
    end
  end
end

TestSupport.before_summary do
  rows = Conformance::MATRIX.sort_by { |id, database, _| [id, database.to_s] }
  next if rows.empty?

  width = rows.map { |id, _, _| id.length }.max
  lines = rows.map { |id, database, result| format("%-#{width}s  ruby  %-8s  %s", id, database, result) }
  counts = rows.group_by { |_, _, result| result[/\A\w+/] }.transform_values(&:count)
  summary = "ruby conformance: #{counts.map { |k, v| "#{v} #{k}" }.join(', ')} of #{rows.length}"
  summary += " (ruby #{RUBY_VERSION}, ActiveRecord #{ActiveRecord::VERSION::STRING})"
  text = (lines + [summary]).join("\n")
  target = File.join(TestSupport::ROOT, "target")
  File.write(File.join(target, "ruby-conformance-matrix-rails-#{TestSupport::RAILS}.txt"), "#{text}\n")
  FileUtils.mkdir_p(File.join(target, "matrix"))
  tsv = rows.map do |id, database, result|
    "#{id}\t#{database == :postgres ? 'postgresql' : database}\t#{result[/\A\w+/]}\n"
  end
  File.write(File.join(target, "matrix", "rails-#{TestSupport::RAILS}.tsv"), tsv.join)
  puts "\n\n#{text}"
end

# frozen_string_literal: true

module OJS
  # The running side: fetches jobs from the OJS backend and runs them, on the core worker loop
  # (`ojs_bridge::worker::Worker`, reached through `src/worker.rs`). The loop owns every rule:
  # fetching for free slots only, heartbeats, acks and nacks, backoff while the backend is down,
  # the job's `timeout_ms` (it nacks `timeout`; a later finish is dropped), graceful stop, trace
  # context, decryption, unknown types (nacked retryable, never discarded by this worker) and
  # clipping long messages. This class runs `concurrency` Ruby threads, each looping: wait for a
  # job (the native wait releases the GVL) -> run it -> hand the loop its outcome.
  #
  # What runs a job, by its type:
  # - a registered handler (`handlers:`, else OJS.handlers): `handler.call(args, job)` (a
  #   one-argument lambda gets `args` only). Its return value is the job's result (a JSON value;
  #   anything else is logged and the job acked without one);
  # - an ActiveJob job (what OJS::ActiveJobAdapter staged: the type derived from the class name,
  #   args `[job.serialize]`): `ActiveJob::Base.execute`, so `retry_on`, `discard_on` and the
  #   callbacks are ActiveJob's own (docs/rails.md, "Running jobs"). A class this process does not
  #   have (a rolling deploy) is `unknown_type`, as is any other type.
  #
  # Each job runs inside `Rails.application.reloader.wrap` (which runs the executor: connections
  # go back to the pool, and code reloads in development) when Rails has an application; outside
  # Rails the thread's ActiveRecord connections are released after each job. An exception is
  # nacked `failed` (code: the exception's class, message, backtrace in details; the OJS retry
  # policy decides what follows) and reported to `Rails.error` (ActiveSupport's error reporter)
  # where there is one, with `handled: false, source: "job.ojs"`.
  #
  # While a job runs, OJS::Worker.current_job is it (its id, attempt, traceparent, ...), and its
  # trace context is the request context of every job it enqueues.
  #
  # What the loop itself says (the backend down and back, a timeout nack, a job given back, an
  # ack or nack not delivered, a job whose args could not be decoded: texts and levels the
  # core's) goes to the logger after each wait of a slot and after #stop.
  #
  #   worker = OJS.worker(queues: %w[default email], concurrency: 5).start
  #   ...
  #   worker.stop(deadline_ms: 25_000) # graceful: the jobs in flight have 25 s to finish
  class Worker
    # One job as a handler gets it (the second argument; OJS::Worker.current_job while it runs).
    # `timeout_ms`: what was left of the job's timeout_ms when the loop handed it out (nil: none),
    # `deadline`: when that runs out on Process.clock_gettime(Process::CLOCK_MONOTONIC) (nil:
    # none); `envelope`: the whole job as fetched (args decoded).
    class Job
      attr_reader :id, :type, :queue, :args, :meta, :attempt, :timeout_ms, :deadline, :traceparent, :tracestate,
                  :envelope

      # The job of the loop's JSON (`ojs_bridge::worker`'s module doc).
      def self.from_json(text)
        new(JSON.parse(text))
      end

      def initialize(fields)
        @id = fields["id"]
        @type = fields["type"]
        @queue = fields["queue"]
        @args = fields["args"] || []
        @meta = fields["meta"] || {}
        @attempt = fields["attempt"]
        @timeout_ms = fields["timeout_ms"]
        @deadline = @timeout_ms && (Process.clock_gettime(Process::CLOCK_MONOTONIC) + (@timeout_ms / 1000.0))
        @traceparent = fields["traceparent"]
        @tracestate = fields["tracestate"]
        @envelope = fields["job"] || {}
        freeze
      end

      def inspect
        "#<OJS::Worker::Job #{type} id=#{id} attempt=#{attempt} queue=#{queue.inspect}>"
      end
    end

    # How long one native wait for a job lasts before control comes back to Ruby (what bounds
    # how late Thread#kill or Thread#raise takes effect on an idle slot). Not a fetch setting:
    # the loop hands a job over as soon as it has one.
    POLL_MS = 500
    # Rails.error's `source:` for a job's exception.
    ERROR_SOURCE = "job.ojs"
    CURRENT_KEY = :ojs_worker_current_job
    ISOLATED = defined?(ActiveSupport::IsolatedExecutionState) ? true : false
    private_constant :CURRENT_KEY, :ISOLATED

    class << self
      # The job this thread (fiber, with Rails 7's fiber isolation) runs now, else nil.
      def current_job
        storage[CURRENT_KEY]
      end

      # Runs the block with `job` as current_job and its trace context as the request context
      # (so jobs it enqueues carry it), then restores both.
      def running(job, &block)
        previous = storage[CURRENT_KEY]
        storage[CURRENT_KEY] = job
        trace = { traceparent: job.traceparent, tracestate: job.tracestate }.compact
        Context.with(trace.empty? ? nil : trace, &block)
      ensure
        storage[CURRENT_KEY] = previous
      end

      private

      def storage
        ISOLATED ? ActiveSupport::IsolatedExecutionState : Thread.current
      end
    end

    attr_reader :handlers, :logger

    # `handlers`: { "type" => callable } (default: OJS.handlers, what OJS.handle registered);
    # `logger`: default OJS.logger; `client`: default OJS.client (the configured backend and
    # encryption keys). Every other keyword is the core's worker option, passed on as it is:
    # `queues` (a list, or one name), `concurrency`, `visibility_timeout_ms`, `worker_id`,
    # `idle_poll_ms`. The core checks them (and names an unknown one) when #start runs.
    def initialize(handlers: nil, logger: nil, client: nil, **options)
      @handlers = Worker.checked_handlers(handlers.nil? ? OJS.handlers : handlers)
      @logger = logger
      @client = client
      @options = options
      @options[:queues] = [@options[:queues]] if @options[:queues].is_a?(String) || @options[:queues].is_a?(Symbol)
      @native = nil
      @threads = []
      @lock = Mutex.new
      @log_lock = Mutex.new
    end

    # Starts the core's worker loop and the slot threads; returns self. Raises the core's error
    # for bad options (OJS::InvalidConfig naming the field). Once per Worker.
    def start
      @lock.synchronize do
        return self if @native

        client = @client || OJS.client
        json = JSONValue.dump(@options, "config", "worker")
        @native = client.bridge.start_worker(json)
        # Returns at once: a job the loop fetches before a slot waits stays in the loop's hands,
        # and the loop hands it out to the next slot that asks, also once a stop began.
        @threads = Array.new(@native.facts["concurrency"]) do |index|
          thread = Thread.new { slot }
          thread.name = "ojs-worker-#{index}" if thread.respond_to?(:name=)
          thread
        end
      end
      self
    end

    # Graceful stop: the loop fetches nothing more and hands out nothing more, the jobs in flight
    # have up to `deadline_ms` (nil: #stop_deadline_ms, the option `stop_deadline_ms:` or the
    # core's default) to finish, the rest is given back (`requeue`: no attempt used).
    # Returns once the loop stopped and every ack and nack went; the GVL is released meanwhile,
    # so the jobs keep running. A slot still in a handler whose job was given back ends when the
    # handler returns (#join waits for that). Called again while a stop runs, with a shorter
    # deadline (0: give back at once), it gives back what is still in flight and returns.
    def stop(deadline_ms: nil)
      return nil unless @native

      @native.stop(deadline_ms.nil? ? stop_deadline_ms : Integer(deadline_ms))
      forward_log
      nil
    end

    # Waits until every slot thread ended (after #stop), at most `timeout` seconds (nil: no
    # limit); true when they all did.
    def join(timeout = nil)
      deadline = timeout && (monotonic + timeout)
      @threads.all? { |thread| thread.join(deadline ? [deadline - monotonic, 0].max : nil) }
    end

    def started?
      !@native.nil?
    end

    # How long a #stop without `deadline_ms` waits for the jobs in flight (once started).
    def stop_deadline_ms
      @native&.facts&.fetch("stop_deadline_ms")
    end

    # Whether a stop began.
    def stopping?
      @native ? @native.facts["stopping"] : false
    end

    # The worker id sent with every fetch (given, or made up by the core).
    def worker_id
      @native&.facts&.fetch("worker_id")
    end

    # The number of slot threads (the core's `concurrency`).
    def concurrency
      @native&.facts&.fetch("concurrency")
    end

    # Jobs handed out and not finished.
    def in_flight
      @native ? @native.facts["in_flight"] : 0
    end

    # Whether the backend did not answer the loop's last request: an outage the loop waits out
    # (backing off), which it logs once when it begins and once when it ends.
    def backend_down?
      @native ? @native.facts["backend_down"] : false
    end

    # The handlers, checked: String types (a Symbol is its name), callables.
    def self.checked_handlers(handlers)
      unless handlers.respond_to?(:each_pair)
        raise InvalidConfig.new("handlers: must be a Hash of job type => callable, got #{handlers.class}",
                                field: "handlers")
      end
      handlers.each_pair.to_h do |type, handler|
        name = type.is_a?(Symbol) ? type.name : type
        unless name.is_a?(String)
          raise InvalidConfig.new("handlers: a job type is a String, got #{type.inspect}", field: "handlers")
        end
        unless handler.respond_to?(:call)
          raise InvalidConfig.new("handlers[#{name.inspect}]: must respond to call(args, job), got #{handler.class}",
                                  field: "handlers")
        end
        [name.dup.freeze, handler]
      end.freeze
    end

    private

    def log
      @logger || OJS.logger
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # One handler slot: until the loop stops, wait for a job (without the GVL), run it, hand the
    # loop its outcome.
    def slot
      while (job = next_job)
        outcome = perform(job)
        unless finish(job.id, outcome)
          log.warn("ojs worker: job #{job.id} (#{job.type}) ended after the worker loop gave it up " \
                   "(its timeout_ms ran out, or the worker stopped and gave it back); its outcome is dropped")
        end
        raise outcome[:reraise] if outcome[:reraise]
      end
    rescue OJS::Error, Native::InternalError => e
      log.error("ojs worker: a handler slot ended: #{e.class}: #{e.message}")
    ensure
      forward_log
    end

    # The next job, or nil once the worker stops. After each wait, what the loop said goes to
    # the logger.
    def next_job
      loop do
        text = @native.next(POLL_MS)
        forward_log
        return nil if text.nil?
        return Job.from_json(text) unless text.empty?
      end
    end

    # Logs what the loop said since the last drain (`Worker::drain_log`: the backend down and
    # back, a timeout, a job given back, an ack or nack not delivered, a job whose args could
    # not be decoded; every text and level is the core's) on the worker's logger, one slot at a
    # time so the records keep their order. A failing logger does not end a slot.
    def forward_log
      @log_lock.synchronize do
        @native.drain_log.each do |record|
          about = record.job_id ? "job #{record.job_id}: " : ""
          log.add(RelayLog::LEVELS.fetch(record.level, ::Logger::WARN), "ojs worker: #{about}#{record.message}")
        end
      end
    rescue StandardError => e
      warn("ojs worker: logging a worker record failed: #{e.class}: #{e.message}")
    end

    # Whether the loop settles the job with this outcome (false: it no longer held the job).
    def finish(job_id, outcome)
      @native.finish(job_id, JSON.generate(outcome.except(:reraise)))
    end

    # Runs the job; its outcome for the loop (`ojs_bridge::worker`'s JSON, with `:reraise` for an
    # exception that must end the slot after the job is settled: a signal, `exit`).
    def perform(job)
      Worker.running(job) { wrap { run(job) } }
    rescue Exception => e # rubocop:disable Lint/RescueException -- the executor's own hooks failed
      failed(job, e)
    end

    def run(job)
      handler = @handlers[job.type]
      return run_handler(job, handler) if handler

      payload = active_job_payload(job)
      return run_active_job(job, payload) if payload

      log.warn("ojs worker: job #{job.id}: no handler knows the type #{job.type.inspect}; given back as " \
               "unknown_type (retryable: a worker that knows it runs it)")
      { outcome: "unknown_type" }
    end

    def run_handler(job, handler)
      value = args_only?(handler) ? handler.call(job.args) : handler.call(job.args, job)
      completed(job, value)
    rescue Exception => e # rubocop:disable Lint/RescueException -- every failure of a job is its nack
      failed(job, e)
    end

    # A lambda or method taking exactly one argument gets the args alone.
    def args_only?(handler)
      return false if handler.is_a?(Proc) && !handler.lambda?

      handler.respond_to?(:arity) && handler.arity == 1
    end

    # ActiveJob's payload when the job is what OJS::ActiveJobAdapter staged (args: one Hash from
    # `job.serialize`, and the type the class name gives), else nil.
    def active_job_payload(job)
      return nil unless defined?(::ActiveJob::Base)

      data = job.args.length == 1 ? job.args.first : nil
      return nil unless data.is_a?(Hash) && data["job_class"].is_a?(String) && data.key?("job_id") &&
                        data.key?("arguments")

      require_relative "active_job_adapter" unless defined?(OJS::ActiveJobAdapter)
      ActiveJobAdapter.type_of_name(data["job_class"]) == job.type ? data : nil
    end

    # `ActiveJob::Base.execute`, as ActiveJob's own backends run a job: its callbacks,
    # `retry_on` (a new job through this adapter, then this run ends normally) and `discard_on`
    # (swallowed) happen inside it. What escapes it is this job's failure.
    def run_active_job(job, payload)
      unless ActiveSupport::Inflector.safe_constantize(payload["job_class"])
        log.warn("ojs worker: job #{job.id} (#{job.type}): the ActiveJob class #{payload['job_class']} is not " \
                 "defined in this process (a deploy in progress?); given back as unknown_type (retryable)")
        return { outcome: "unknown_type" }
      end
      ::ActiveJob::Base.execute(payload.merge("provider_job_id" => job.id))
      { outcome: "completed" }
    rescue Exception => e # rubocop:disable Lint/RescueException -- every failure of a job is its nack
      failed(job, e)
    end

    def completed(job, value)
      return { outcome: "completed" } if value.nil?

      { outcome: "completed", result: JSONValue.checked(value, "args", "result") }
    rescue OJS::Error => e
      log.warn("ojs worker: job #{job.id} (#{job.type}): the handler's return value is not a JSON value " \
               "(#{e.message}); acked without a result")
      { outcome: "completed" }
    end

    def failed(job, error)
      report(job, error)
      code = error.class.name || error.class.ancestors.find(&:name)&.name || "Exception"
      log.warn("ojs worker: job #{job.id} (#{job.type}) attempt #{job.attempt} failed: #{code}: #{error.message}")
      outcome = { outcome: "failed", code: code, message: text(error.message),
                  details: { "backtrace" => text(Array(error.backtrace).join("\n")) } }
      outcome[:reraise] = error if error.is_a?(SignalException) || error.is_a?(SystemExit)
      outcome
    end

    # To Rails.error (ActiveSupport's error reporter: Rails 7+), where there is one.
    def report(job, error)
      reporter = if defined?(::Rails) && ::Rails.respond_to?(:error)
                   ::Rails.error
                 elsif ActiveSupport.respond_to?(:error_reporter)
                   ActiveSupport.error_reporter
                 end
      return unless reporter

      context = { job_id: job.id, job_type: job.type, queue: job.queue, attempt: job.attempt,
                  traceparent: job.traceparent }.compact
      reporter.report(error, handled: false, source: ERROR_SOURCE, context: context)
    rescue StandardError => e
      log.error("ojs worker: reporting the error of job #{job.id} failed: #{e.class}: #{e.message}")
    end

    def text(value)
      string = value.to_s
      string = string.encode(Encoding::UTF_8, invalid: :replace, undef: :replace) unless string.encoding == Encoding::UTF_8
      string.valid_encoding? ? string : string.scrub
    end

    # Runs a job the Rails way where Rails has an application: inside the reloader (which runs
    # the executor: the connections a job checked out go back to the pool, and in development the
    # code reloads between jobs, not during one). Outside Rails: the thread's ActiveRecord
    # connections are released after each job.
    def wrap(&block)
      app = defined?(::Rails) && ::Rails.respond_to?(:application) ? ::Rails.application : nil
      return app.reloader.wrap(&block) if app

      begin
        yield
      ensure
        ::ActiveRecord::Base.connection_handler.clear_active_connections! if defined?(::ActiveRecord::Base)
      end
    end
  end

  class << self
    # Registers the handler of plain jobs of `type` (staged with OJS.enqueue_after_commit),
    # which OJS.worker and `rake ojs:work` run:
    #   OJS.handle("email.welcome") { |args, job| UserMailer.welcome(User.find(args[0])).deliver_now }
    #   OJS.handle("report.build", ReportBuilder) # anything with call(args, job)
    def handle(type, callable = nil, &block)
      handler = callable || block
      checked = Worker.checked_handlers({ type => handler })
      @handlers_lock.synchronize { @handlers = @handlers.merge(checked).freeze }
      handler
    end

    # The registered handlers: { "type" => callable }.
    def handlers
      @handlers
    end

    # A worker (OJS::Worker, not started: call #start) running `handlers` (default: the
    # registered ones) and ActiveJob jobs. Keywords: see OJS::Worker.new.
    def worker(**options)
      Worker.new(**options)
    end
  end

  @handlers = {}.freeze
  @handlers_lock = Mutex.new
end

# frozen_string_literal: true

require "json"

module OJS
  # `rake ojs:work` (or `bin/rails ojs:work`): an OJS::Worker as the process's only job, running
  # ActiveJob jobs and the handlers registered with OJS.handle, until SIGINT or SIGTERM.
  #
  #   QUEUES=default,email CONCURRENCY=5 bin/rails ojs:work
  #
  # The worker options come from the environment and are passed to the core as given (it checks
  # them and names a bad one): QUEUES (comma-separated), CONCURRENCY, VISIBILITY_TIMEOUT_MS,
  # WORKER_ID, IDLE_POLL_MS, STOP_DEADLINE_MS (how long the jobs in flight have to finish after
  # the first signal); a variable left unset leaves the option unset (the core's default;
  # `queues` has none: the core asks for one).
  #
  # Signals: the first SIGINT/SIGTERM stops gracefully (no more fetches; the jobs in flight have
  # STOP_DEADLINE_MS to finish; the rest is given back), then the process exits 0. A second one
  # gives the jobs in flight back at once and the command returns without waiting for their
  # handlers (exit status 0; at exit Ruby ends the threads still running one). A signal while
  # the application loads (after this file is loaded) ends the command before the worker
  # starts, with status 0.
  module WorkCommand
    TASK = "ojs:work"
    SIGNALS = %w[INT TERM].freeze
    # The environment variables that give worker options, and the option each gives.
    ENV_OPTIONS = {
      "QUEUES" => :queues, "CONCURRENCY" => :concurrency, "VISIBILITY_TIMEOUT_MS" => :visibility_timeout_ms,
      "WORKER_ID" => :worker_id, "IDLE_POLL_MS" => :idle_poll_ms, "STOP_DEADLINE_MS" => :stop_deadline_ms
    }.freeze

    class << self
      # Whether `application` (a Rake application) was asked to run ojs:work.
      def invoked?(application)
        application.top_level_tasks.any? { |task| task.sub(/\[.*\z/m, "") == TASK }
      end

      # Installs the traps (they only queue the signal), once; says so on stdout.
      def arm
        return if @events

        @events = Queue.new
        SIGNALS.each { |signal| trap(signal) { @events << [:signal, signal] } }
        say("ojs:work: starting; SIGINT or SIGTERM stops it")
      end

      # The task's body, once the environment is loaded: runs until a signal, then stops.
      def run(env = ENV)
        arm
        return say("ojs:work: stopped before the worker started") unless @events.empty?

        worker = OJS.worker(logger: logger, **options(env)).start
        say("ojs:work: running worker #{worker.worker_id} on #{options(env)[:queues]&.join(', ')} " \
            "(concurrency #{worker.concurrency}); SIGINT or SIGTERM stops it")
        _, signal = @events.pop
        say("ojs:work: SIG#{signal}: stopping; the jobs in flight have #{worker.stop_deadline_ms} ms to finish " \
            "(a second signal gives them back at once)")
        stopper = Thread.new do
          worker.stop
          @events << [:stopped]
        end
        event, signal = @events.pop
        if event == :signal
          # The second stop gives back what is still in flight and ends the first one's wait.
          say("ojs:work: SIG#{signal} again: giving the jobs in flight back now")
          worker.stop(deadline_ms: 0)
          stopper.join
          return say("ojs:work: stopped (the jobs in flight were given back)")
        end
        stopper.join
        say("ojs:work: stopped")
      rescue OJS::Error => e
        $stderr.puts("error [#{e.code}]: #{e.message}")
        $stderr.flush
        exit(Native.relay_exit_code(e.code.to_s))
      end

      # The worker options the environment gives (only those set).
      def options(env)
        ENV_OPTIONS.each_with_object({}) do |(name, option), out|
          value = env[name]
          next if value.nil?

          out[option] = case option
                        when :queues then value.split(",").map(&:strip).reject(&:empty?)
                        when :worker_id then value
                        else Integer(value, exception: false) || value # the core refuses it, naming it
                        end
        end
      end

      private

      # OJS.logger, and stderr too when that does not write to the terminal (Rails logs to
      # log/<env>.log): the worker's warnings (failures, unknown types) show where it runs.
      def logger
        logger = OJS.logger
        RelayLog.console?(logger) ? logger : Echo.new(logger, "ojs:work")
      end

      def say(line)
        $stdout.puts(line)
        $stdout.flush
        nil
      end
    end

    # A logger that also writes warnings and errors to stderr, prefixed.
    class Echo
      LABELS = { ::Logger::WARN => "WARN", ::Logger::ERROR => "ERROR", ::Logger::FATAL => "FATAL" }.freeze

      def initialize(logger, prefix, stream = $stderr)
        @logger = logger
        @prefix = prefix
        @stream = stream
      end

      def add(severity, message = nil, progname = nil, &block)
        message = block ? block.call : progname if message.nil?
        @logger.add(severity, message)
        if (label = LABELS[severity])
          @stream.puts("#{@prefix}: #{label} #{message}")
          @stream.flush
        end
        true
      end

      { debug: ::Logger::DEBUG, info: ::Logger::INFO, warn: ::Logger::WARN, error: ::Logger::ERROR,
        fatal: ::Logger::FATAL }.each do |name, severity|
        define_method(name) { |message = nil, &block| add(severity, message, &block) }
      end
    end
  end
end

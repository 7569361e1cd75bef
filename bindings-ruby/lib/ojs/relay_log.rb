# frozen_string_literal: true

module OJS
  # The relay's log records, through OJS.logger (`config.logger`; Rails.logger by default).
  #
  # The core writes each relay event once (a pause, a resume, a dead letter, a refusal by the
  # backend, a database or prune failure: every text and level is the core's) into a bounded
  # queue of this process. A thread drains it every 250 ms into the logger at the record's level
  # (INFO, WARN, ERROR), the message naming the job id when there is one. Nothing of Ruby runs
  # on the core's threads.
  #
  # The thread starts with the first relay of the process (OJS.start_relay, `rake ojs:relay`)
  # and again in a forked child that starts its own (threads do not survive a fork); a last
  # drain follows every relay stop, so the records of the flush are not left behind.
  module RelayLog
    INTERVAL = 0.25
    LEVELS = { "info" => ::Logger::INFO, "warning" => ::Logger::WARN, "error" => ::Logger::ERROR }.freeze
    LABELS = { "info" => "INFO", "warning" => "WARN", "error" => "ERROR" }.freeze
    LOCK = Mutex.new

    class << self
      # Turns the core's feed on and starts the draining thread in this process, once: called
      # before every start of the relay (OJS::Client#start_relay, `rake ojs:relay`). In a forked
      # child the parent's thread is gone (threads do not survive a fork): it starts again.
      def start
        return if @thread&.alive?

        LOCK.synchronize do
          return if @thread&.alive?

          Native.enable_log_feed
          thread = Thread.new { run }
          thread.name = "ojs-relay-log" if thread.respond_to?(:name=)
          @thread = thread
        end
      end

      # Drains the core's queue into OJS.logger now (and to the echo, when one is set).
      def forward
        Native.drain_log_feed.each do |record|
          OJS.logger.add(LEVELS.fetch(record.level, ::Logger::WARN), record.message)
          @echo&.call(record)
        end
        nil
      end

      # While the block runs, every record is also written to `stream` as
      # "<prefix>: LEVEL message" (the relay command, when OJS.logger does not write to the
      # terminal itself: Rails logs to log/<env>.log).
      def echo(prefix, stream = $stderr)
        @echo = lambda do |record|
          stream.puts("#{prefix}: #{LABELS.fetch(record.level, record.level.upcase)} #{record.message}")
          stream.flush
        end
        yield
      ensure
        @echo = nil
      end

      # Whether `logger` writes to $stdout or $stderr (itself, or one it broadcasts to).
      def console?(logger)
        loggers = logger.respond_to?(:broadcasts) ? logger.broadcasts : [logger]
        loggers.any? do |one|
          device = one.instance_variable_get(:@logdev)
          device = device.dev if device.respond_to?(:dev)
          [$stdout, $stderr, STDOUT, STDERR].include?(device)
        end
      end

      private

      def run
        loop do
          sleep INTERVAL
          begin
            forward
          rescue StandardError => e
            # A failing logger must not end the thread; say so where it can still be seen.
            warn("ojs: logging a relay record failed: #{e.class}: #{e.message}")
          end
        end
      end
    end
  end
end

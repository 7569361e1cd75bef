# frozen_string_literal: true

# ojs-adapter-rails: transactional job enqueue for ActiveRecord (the OJS Framework Adapter
# extension). A job staged with OJS.enqueue_after_commit is an outbox row written in the
# application's own transaction; the relay (the Rust core, in this process by default) sends it
# to the OJS backend after the outermost commit, and never loses it after that commit.
#
# This gem owns only the Ruby side: settings, running the core's SQL on ActiveRecord's
# connection, the commit hook, the request context, exceptions and the Rails glue. Every rule
# (validation, SQL, ids, retries, defaults) is the core's (`crates/ojs-outbox`).

require "json"
require "logger"
require "monitor"
require "active_record"

require_relative "ojs/version"
require_relative "ojs/native"
require_relative "ojs/errors"
require_relative "ojs/json"
require_relative "ojs/context"
require_relative "ojs/configuration"
require_relative "ojs/transaction_hook"
require_relative "ojs/relay_log"
require_relative "ojs/events"
require_relative "ojs/facade"
require_relative "ojs/migration"
require_relative "ojs/schema_dumper"
require_relative "ojs/middleware"
require_relative "ojs/mount"
require_relative "ojs/worker"

module OJS
  class << self
    # Configures the adapter (spec §8.1); see OJS::Configuration. A running relay of the
    # previous configuration is stopped first.
    def configure
      config = Configuration.new
      yield config if block_given?
      replacement = Client.new(config) # validates now: bad settings raise OJS::InvalidConfig
      @lock.synchronize do
        @client&.stop_relay
        @configuration = config
        @client = replacement
      end
      replacement
    end

    def configuration
      @configuration || @lock.synchronize { @configuration ||= Configuration.new }
    end

    def configured?
      !@configuration.nil?
    end

    # The configured client (built from the default configuration if OJS.configure was not
    # called: the core's defaults then apply).
    def client
      @client || @lock.synchronize { @client ||= Client.new(configuration) }
    end

    attr_writer :logger

    # Whether this process's client needs the backend URL (the core's `config::Host`
    # `needs_backend`): yes, except in a run of rake tasks that never talk to the backend
    # (lib/ojs/tasks/ojs.rake sets it false before the application configures OJS). Then a
    # missing URL is no error, and the relay does not start by itself without one.
    attr_writer :needs_backend

    def needs_backend?
      @needs_backend != false
    end

    # Where the adapter logs (the relay's records, OJS::RelayLog; the development-URL notice):
    # `config.logger` of OJS.configure, else one set with OJS.logger=, else Rails.logger when
    # Rails has one, else a Logger on $stderr.
    def logger
      logger_for(@configuration)
    end

    # The logger of `configuration` by the same rule: a configuration being built logs to its
    # own, never to that of the one it replaces.
    def logger_for(configuration)
      configuration&.logger || @logger || default_logger
    end

    # --- enqueue -------------------------------------------------------------------------

    # Stages a job in the current ActiveRecord transaction; it is sent after the outermost
    # commit, or at once when no transaction is open. Returns the job id (UUIDv7).
    #   OJS.enqueue_after_commit("email.welcome", [user.id], queue: "email", meta: {...})
    def enqueue_after_commit(type, args, meta: nil, **options)
      (@client || client).enqueue_job(type, args, options.empty? ? nil : options, meta)
    end

    # Stages several jobs with one INSERT (all or none), with the semantics of
    # enqueue_after_commit. `jobs`: hashes `{type:, args:, options: {...}, meta: {...}}`.
    # Returns their ids in order.
    def enqueue_bulk(jobs)
      client.enqueue_after_commit(jobs)
    end

    # Spec §5.1 `enqueue`: sends the job to the backend now, without the outbox and without
    # regard to any open transaction (a rollback does not undo it). Returns the job id.
    def enqueue(type, args, meta: nil, **options)
      client.enqueue_now(job(type, args, options, meta))
    end

    # --- request context (FA-R001) ---------------------------------------------------------

    def with_context(context, &block)
      Context.with(context, &block)
    end

    def context=(context)
      Context.set(context)
    end

    def context
      Context.current
    end

    def clear_context
      Context.clear
    end

    # --- relay (FA-R003) ---------------------------------------------------------------------

    def start_relay
      client.start_relay
    end

    def stop_relay
      @client&.stop_relay
    end

    # Flushes and stops this process's relay (registered with at_exit once a relay starts).
    def shutdown
      stop_relay
    rescue StandardError => e
      logger.warn("ojs: stopping the relay failed: #{e.message}")
    end

    def install_exit_hook
      return if @exit_hook_installed

      @exit_hook_installed = true
      at_exit { OJS.shutdown }
    end

    def run_relay_until_signal
      client.run_relay_until_signal
    end

    # From now on SIGINT and SIGTERM stop OJS.run_relay_until_signal gracefully instead of
    # killing the process, also one that arrives before the relay runs (the core's
    # `ojs_bridge::arm_stop_signals`; `rake ojs:relay` calls it first thing). Idempotent.
    def arm_stop_signals
      Native.arm_stop_signals
    end

    def status
      client.status
    end

    # --- events (issue 15) -------------------------------------------------------------------

    # Subscribes to an OJS event stream: the configured backend's `/v1/events/stream` unless
    # `url:` names another (a relay's own, e.g. an OJS::EventsApp mount). Filters: `types:`
    # (a trailing `*` matches a prefix: "job.*"), `queues:`, `job_types:` (lists, or one
    # String), `tenant:`; replay: `since:` (a Time or RFC 3339 text), `last_event_id:`; `token:`
    # is sent as `Authorization: Bearer`. The core reconnects after a dropped connection and
    # resumes with Last-Event-ID, never handing over an id twice.
    #
    # With a block: yields each OJS::Event until the subscription ends (`break` ends it too),
    # then closes it. Without one: an OJS::EventEnumerator (an Enumerator with `close`).
    #   OJS.subscribe_events(types: ["job.dead_lettered"]) { |event| page(event.subject) }
    #   events = OJS.subscribe_events(queues: ["email"]); events.next; events.close
    # A setting that does not exist raises OJS::InvalidConfig naming it.
    def subscribe_events(types: nil, queues: nil, job_types: nil, tenant: nil, since: nil, last_event_id: nil,
                         url: nil, token: nil, **unknown, &block)
      unless unknown.empty?
        accepted = method(:subscribe_events).parameters.filter_map { |kind, name| name.to_s if kind == :key }
        raise OJS::Error.from_json(Native.unknown_option_error(unknown.keys.first.to_s, accepted))
      end
      since = JSONValue.timestamp(since) if since.is_a?(Time) || since.is_a?(DateTime)
      subscription = client.subscribe_events(
        { "url" => url, "token" => token, "types" => event_list(types), "queues" => event_list(queues),
          "job_types" => event_list(job_types), "tenant" => tenant, "since" => since,
          "last_event_id" => last_event_id }
      )
      return EventEnumerator.new(subscription) unless block

      subscription.each(&block)
      nil
    end

    # The Prometheus exposition of this process's relay (nil when none runs here).
    def metrics_text
      client.metrics_text
    end

    # The core's readiness verdict: { "ready" => bool, "database" => "ok" | why, "backend" =>
    # "ok" | why }.
    def readiness
      JSON.parse(client.readiness_json)
    end

    def metrics
      client.metrics
    end

    def dead_list(tenant: nil, limit: nil)
      client.dead_list(tenant: tenant, limit: limit)
    end

    def dead_replay(tenant: nil)
      client.dead_replay(tenant: tenant)
    end

    def dead_purge(tenant: nil)
      client.dead_purge(tenant: tenant)
    end

    def prune(older_than:)
      client.prune(older_than: older_than)
    end

    # Committed state of these jobs' outbox rows: { job_id => { "status", "attempts", "error" } }.
    def outbox_rows(job_ids)
      client.outbox_rows(job_ids)
    end

    # An operator command by the core's rules and words (OJS::Client#admin): the report's
    # `stdout`, `stderr` and `exit_code`. The rake tasks print it.
    def admin(command)
      client.admin(command)
    end

    private

    # A filter list of subscribe_events: one String (or Symbol) is a list of one.
    def event_list(value)
      value.nil? || value.is_a?(Array) ? value : [value]
    end

    def default_logger
      return ::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger) && ::Rails.logger

      @stderr_logger ||= Logger.new($stderr)
    end

    def job(type, args, options, meta)
      { type: type, args: args, options: options.empty? ? nil : options, meta: meta }
    end
  end

  @lock = Monitor.new
  @configuration = nil
  @client = nil
end

require_relative "ojs/railtie" if defined?(::Rails::Railtie)
require_relative "ojs/active_job_adapter" if defined?(::ActiveJob::Base)

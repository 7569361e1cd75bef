# frozen_string_literal: true

module OJS
  # One configured client: the core's handle (`OJS::Native::Bridge`, which owns the relay, its
  # runtime and every rule) plus what only Ruby can do: run the core's statements on
  # ActiveRecord's connection inside the application's transaction, and register the wake-up
  # on its outermost commit (OJS::TransactionHook).
  class Client
    attr_reader :configuration, :bridge

    def initialize(configuration)
      @configuration = configuration
      needs_backend = OJS.needs_backend?
      @bridge = Native::Bridge.new(configuration.to_core_json, configuration.development?,
                                   Configuration::URL_SETTING, needs_backend)
      @bridge_pointer = @bridge.pointer
      notice = @bridge.notice
      OJS.logger_for(configuration).warn(notice) if notice
      # Without a URL (a backend-free rake task) no relay starts by itself: staged rows wait
      # for the application's relay.
      @auto_start = configuration.auto_start && (needs_backend || !configuration.url.to_s.empty?) ? true : false
      @relay_in_process = @bridge.relay_in_process
      @dialects = {}
      @stagers = {}
      @stager_lock = Mutex.new
    end

    def table_name
      bridge.table_name
    end

    def relay_in_process?
      @relay_in_process
    end

    # Whether the relay starts by itself (config.auto_start).
    def auto_start?
      @auto_start
    end

    # --- staging -------------------------------------------------------------------------

    # One job (OJS.enqueue_after_commit), the per-call hot path: args, options and meta become
    # JSON texts here; the core validates them and makes the id and the row's parameters
    # (`ojs_ruby_stager_stage_job`, see OJS::Native); the row is written on `connection` with
    # the core's INSERT (its text fetched once per connection kind). Returns the job id.
    # Anything but a String/Symbol type and an Array of args takes the general path
    # (enqueue_after_commit), so the core's own message names what is wrong. A job with an
    # ordering key or a unique key comes back as the core's statements (`Staged`), run as a
    # bulk of one (write_staged).
    def enqueue_job(type, args, options, meta, connection = configuration.connection_class.connection)
      type = type.name if type.instance_of?(Symbol)
      unless type.instance_of?(String) && args.instance_of?(Array) &&
             (type.ascii_only? || (type.encoding == Encoding::UTF_8 && type.valid_encoding?))
        return enqueue_after_commit([{ type: type, args: args, options: options, meta: meta }],
                                    connection: connection).first
      end

      ensure_relay if @auto_start
      args_json = (Thread.current[JSON_STATE_KEY] ||= JSON::State.new).generate(
        JSONValue.plain?(args) ? args : JSONValue.checked(args, "args")
      )
      options_json = options.nil? ? nil : JSONValue.dump(JSONValue.time_options(options), "options")
      meta_json = meta.nil? ? nil : JSONValue.dump(meta, "meta")
      params = stage_job(@stagers[connection.adapter_name] || stager_of(connection),
                         type, args_json, options_json, meta_json, Context.json)
      return write_staged(connection, params).first if params.is_a?(Hash)

      sql = params.pop
      begin
        if binds_inline?(connection)
          connection.exec_query(with_binds_inline(connection, sql, params), "OJS")
        else
          # The core's single-row INSERT is one text per connection kind: prepared once per
          # connection, it skips ActiveRecord's compile on every call (about 19 µs on SQLite).
          connection.exec_query(sql, "OJS", params, prepare: true)
        end
      rescue ::ActiveRecord::StatementInvalid => e
        raise database_error(e)
      end
      transaction = connection.current_transaction
      if transaction.open?
        TransactionHook.register(connection, self, [params[0]], transaction)
      else
        TransactionHook::Wakeup.fire(self, [params[0]])
      end
      params[0]
    end

    # Validates `jobs` (hashes with :type, :args, :options, :meta), writes their rows on
    # `connection` and returns their ids. Inside a transaction the relay is woken when the
    # outermost transaction commits (nothing if it rolls back; rows of a savepoint rolled back
    # are discarded with their wake-up); outside one the rows are committed and the relay is
    # woken at once.
    def enqueue_after_commit(jobs, connection: configuration.connection_class.connection)
      ensure_relay if @auto_start
      json = jobs_json(jobs)
      stager = stager_of(connection)
      context = Context.json
      out = Native.out
      staged = Native.json(Native.ojs_ruby_stager_stage(stager[0], json, json.bytesize, context, Native.len(context),
                                                        out), out)
      write_staged(connection, staged)
    end

    # Runs the core's statements (`Staged`: a bulk, or one keyed job) on `connection` and
    # registers the wake-up of the ids they staged; returns the ids to report, in job order.
    # A unique job's id is what the core's `held_outcome` says (the held job's for "ignore"),
    # and that id is also the one the wake-up records.
    def write_staged(connection, staged)
      job_ids = write_rows(connection, staged)
      if connection.transaction_open?
        TransactionHook.register(connection, self, job_ids)
      else
        TransactionHook::Wakeup.fire(self, job_ids)
      end
      job_ids
    end

    # The core's parameters for one job's row, JSON texts in, nothing written (what
    # enqueue_job writes; the benchmark's raw INSERT uses them too):
    # `[job_id, job_type, job_args, job_options, job_meta, tenant_id, insert_sql]`. A job with
    # an ordering key or a unique key has statements of its own: then the parsed `Staged` Hash
    # (the answer's first field is empty: a NUL, then its JSON), never split as the row's
    # parameters nor taken as the per-job INSERT text.
    def stage_job(stager, type, args_json, options_json, meta_json, context_json)
      sql = stager[1]
      out = Native.out
      text = Native.text(Native.ojs_ruby_stager_stage_job(
        stager[0], type, type.bytesize, args_json, args_json.bytesize,
        options_json, options_json ? options_json.bytesize : 0, meta_json, meta_json ? meta_json.bytesize : 0,
        context_json, context_json ? context_json.bytesize : 0, sql ? 0 : 1, out
      ), out)
      return JSON.parse(text.byteslice(1, text.bytesize - 1)) if text.getbyte(0).zero?

      params = Client.decode_staged_job(text, sql.nil?)
      stager[1] = params[6].freeze if sql.nil?
      params[6] = stager[1]
      params
    end

    # The one decoder of `StagedJob::encode`: NUL-separated `[sql]`, job_id, type, args,
    # options, meta, `[tenant]` (no tenant field: NULL). Returns
    # `[job_id, job_type, job_args, job_options, job_meta, tenant_id, sql or nil]`.
    def self.decode_staged_job(text, with_sql)
      fields = text.split("\0", -1)
      sql = with_sql ? fields.shift : nil
      fields << nil if fields.length == 5
      fields << sql
    end

    # `[stager (its native pointer), INSERT text or nil until the first call]` for the
    # connection's kind.
    def stager_of(connection)
      name = connection.adapter_name
      @stagers[name] || @stager_lock.synchronize do
        @stagers[name] ||= [bridge.stager(*dialect_of(connection)), nil]
      end
    end

    # The after-commit wake-up (never blocks on I/O; a failure, which would be a bug, is
    # logged: the poller still finds the rows).
    def notify_committed(job_ids)
      ids = job_ids.join("\n") # ojs_bridge::encode_ids
      out = Native.out
      status = Native.ojs_ruby_bridge_notify_committed(@bridge_pointer, ids, ids.bytesize, out)
      return if status.zero?

      begin
        Native.failed(status, out)
      rescue StandardError => e
        OJS.logger.warn("ojs: waking the relay failed (#{e.message}); the poller sends the rows")
      end
      nil
    end

    # Spec §5.1 `enqueue`: one job straight to the backend, no outbox row, not tied to any
    # transaction. Returns when the backend has answered.
    def enqueue_now(job)
      bridge.enqueue_now(job_json(job), Context.json)
    end

    # The core's DDL for the outbox table in the dialect of `connection`, one statement each.
    def create_table_sql(connection)
      dialect, = dialect_of(connection)
      bridge.create_table_sql(dialect)
    end

    # --- relay lifecycle (FA-R003) -------------------------------------------------------

    # Starts the in-process relay of this process (no-op in `:external` mode): once per
    # process, and again in a forked child (the core's `Bridge::ensure_relay`, which releases
    # the GVL while it connects; one atomic load once it runs). The log thread starts first.
    def start_relay
      RelayLog.start if @relay_in_process
      out = Native.out
      Native.done(Native.ojs_ruby_bridge_ensure_relay(@bridge_pointer, out), out)
      OJS.install_exit_hook
    end

    # start_relay for config.auto_start: a relay that cannot start does not fail the enqueue
    # or the request: the row is written anyway and waits in the outbox; the start is tried
    # again on the next use.
    def ensure_relay
      start_relay
    rescue OJS::Error => e
      OJS.logger.warn("ojs: the in-process relay did not start [#{e.code}] #{e.message}; " \
                      "rows wait in the outbox until a relay runs")
    end

    # Graceful stop: flushes what the hot queue holds (within relay.shutdown_timeout).
    def stop_relay
      bridge.run("stop_relay")
      RelayLog.forward # the records of the stop's flush
    end

    # Abrupt stop, as a crash would: no flush, leases stay until they expire. For tests of
    # crash recovery; applications use stop_relay.
    def kill_relay
      bridge.run("kill_relay")
    end

    # Runs the relay as this process's only job until SIGINT/SIGTERM (`rake ojs:relay`).
    def run_relay_until_signal
      RelayLog.start
      bridge.run("run_relay_until_signal")
    ensure
      RelayLog.forward
    end

    # --- administration (through the relay's own connection) ---------------------------

    # The relay's counters in this process (nil when no relay runs here).
    def metrics
      JSON.parse(bridge.run("metrics_json"))
    end

    def status
      JSON.parse(bridge.run("status_json"))
    end

    def dead_list(tenant: nil, limit: nil)
      limit = Integer(limit) unless limit.nil?
      JSON.parse(bridge.outbox("dead_list_json", tenant, limit: limit))
    end

    def dead_replay(tenant: nil)
      bridge.outbox("dead_replay", tenant, text: false)
    end

    def dead_purge(tenant: nil)
      bridge.outbox("dead_purge", tenant, text: false)
    end

    # Deletes sent rows older than an ISO-8601 duration ("PT24H"); returns how many.
    def prune(older_than:)
      bridge.outbox("prune", String(older_than), text: false)
    end

    # Committed state of these jobs' rows: { job_id => { "status", "attempts", "error" } }.
    def outbox_rows(job_ids)
      ids = job_ids.to_a.join("\n") # ojs_bridge::encode_ids
      JSON.parse(bridge.outbox("rows_json", ids))
    end

    # Creates the outbox table through the relay's connection (`OJS::Migration` uses the
    # application's connection instead).
    def migrate
      bridge.run("migrate")
      nil
    end

    # An operator command (`admin::Command`: "command" status | dead | migrate, "action" list |
    # replay | purge, "tenant", "limit", "json", "yes"), run by the core's rules and in its
    # words: the report's `stdout`, `stderr` and `exit_code` are the rake task's.
    def admin(command)
      command = command.to_h { |key, value| [key.to_s, value] }
      command["create_table_with"] = CREATE_TABLE_WITH
      Native.report(JSON.parse(bridge.outbox("admin", JSON.generate(command.compact))))
    end

    # --- events, metrics, health (issue 15) ------------------------------------------------

    # A subscriber of this process's relay events as SSE frames (`Bridge::relay_events`).
    # `request`: the stream request's keys, as `GET /v1/events/stream` has them ("types",
    # "queues", "job_types": comma-separated text; "tenant", "since", "last_event_id"); nil
    # values are left out. Raises OJS::RelayShutDown when no relay runs in this process, and the
    # core's error for a bad request (a `since` that is no RFC 3339 time: OJS::InvalidConfig,
    # field `since`).
    def relay_events(request)
      json = JSONValue.dump(request.compact, "config", "stream request")
      RelayStream.new(bridge.relay_events(json))
    end

    # An event client of an OJS event stream (`Bridge::subscribe_events`): `options` are the
    # core's `EventSubscription` keys ("url" (nil: the configured backend's stream), "token",
    # "types", "queues", "job_types" (lists), "tenant", "since", "last_event_id"). Returns an
    # OJS::EventSubscription; blocks without the GVL while the bridge opens its runtime.
    def subscribe_events(options)
      json = JSONValue.dump(options.compact, "config", "subscribe_events")
      EventSubscription.new(bridge.subscribe_events(json))
    end

    # One request of a mount (OJS::EventsApp), answered by the core's HTTP surface
    # (`Bridge::surface`): `request` holds "method", "path" (under the mount), "query" (raw),
    # "last_event_id", "access" (the app's authorize decision), "access_field", "keep_alive_ms",
    # "body". Returns the core's answer (Native::SurfaceAnswer: `status`, `headers` ([name,
    # value] pairs), `body`, `stream`: a Native::RelayFrames or nil); waits without the GVL
    # (`/readyz` asks the database and the backend). A decision that is none is the core's
    # OJS::InvalidConfig naming `authorize`.
    def surface(request)
      bridge.surface(JSON.generate(request))
    end

    # The Prometheus exposition of this process's relay (`Bridge::metrics_text`), the table's
    # figures alone without one, nil when the table cannot be read either. Reads the table's counts (the GVL is released meanwhile).
    def metrics_text
      bridge.run("metrics_text")
    end

    # The core's readiness verdict as JSON text (`Bridge::readiness_json`: "ready", "database",
    # "backend"); a database and a backend round trip, the GVL released meanwhile.
    def readiness_json
      bridge.run("readiness_json")
    end

    # How a Rails user creates a missing outbox table (named by the core's admin reports).
    CREATE_TABLE_WITH = "bin/rails db:migrate"

    private

    # The core's dialect and placeholder style for an ActiveRecord connection. Unknown
    # adapters are passed on by name and refused by the core. ActiveRecord's MySQL adapters
    # (`Mysql2`, `Trilogy`) speak the core's "mysql" dialect, MariaDB included.
    def dialect_of(connection)
      name = connection.adapter_name
      @dialects[name] ||= case name
                          when /postg/i then %w[postgresql dollar].freeze
                          when /sqlite/i then %w[sqlite question].freeze
                          when /mysql|trilogy/i then %w[mysql question].freeze
                          else [name.downcase, "question"].freeze
                          end
    end

    # The statements of `Staged::to_json`, inside a savepoint of their own exactly when the
    # core says they must be all or nothing (`needs_savepoint`; an error raised in it, such as
    # OJS::DuplicateJob, rolls the savepoint back and leaves the host transaction usable).
    # Returns the job ids to report: the staged ids, each unique job's replaced by what the
    # core's `held_outcome` makes of the id its statement returned (`returns`).
    def write_rows(connection, staged)
      statements = staged["statements"]
      job_ids = staged["job_ids"]
      if staged["needs_savepoint"]
        connection.transaction(requires_new: true) do
          statements.each { |statement| run_statement(connection, statement, job_ids) }
        end
      else
        statements.each { |statement| run_statement(connection, statement, job_ids) }
      end
      job_ids
    end

    # One statement. One with `returns` is a query: the first column of its first row (nil:
    # no row) goes to the core's `held_outcome` with the statement's token, whose answer is
    # the id of job `returns.job` (or its error, OJS::DuplicateJob, raised). Any other
    # statement may return a row too (PostgreSQL's advisory lock and pg_notify SELECTs, whose
    # `void` column ActiveRecord's result would warn about): it runs as exec_update, which
    # reads no rows.
    def run_statement(connection, statement, job_ids)
      returns = statement["returns"]
      unless returns
        execute(connection, statement["sql"], statement["params"], :exec_update)
        return
      end

      result = execute(connection, statement["sql"], statement["params"])
      returned = result.rows.first&.first
      returned = returned.to_s unless returned.nil?
      job_ids[returns["job"]] = bridge.held_outcome(returns["token"], returned)
    end

    # A statement on the application's connection, in its current transaction, through
    # ActiveRecord's own parameterized path (logged as "OJS"); returns its result. A driver
    # error is classified by the core: a missing table is OJS::OutboxTableMissing, anything
    # else OJS::DatabaseError (the ActiveRecord exception is the cause).
    def execute(connection, sql, params, call = :exec_query)
      if binds_inline?(connection)
        connection.public_send(call, with_binds_inline(connection, sql, params), "OJS")
      else
        connection.public_send(call, sql, "OJS", params)
      end
    rescue ::ActiveRecord::StatementInvalid => e
      raise database_error(e)
    end

    # Whether ActiveRecord would drop the binds of a statement on `connection`. Its MySQL
    # adapters send binds only as server-side prepared statements, and use those only with
    # `prepared_statements: true` in the database configuration (off by default for mysql2;
    # trilogy has none): otherwise they run the text as it is, `?` and all. PostgreSQL and
    # SQLite always send them.
    def binds_inline?(connection)
      !connection.prepared_statements && dialect_of(connection)[0] == "mysql"
    end

    # The core's statement with its parameters in the text, put there the way ActiveRecord puts
    # the binds of its own queries when prepared statements are off: its SubstituteBinds
    # collector, which quotes each value with `connection.quote` (the driver's escaping, for the
    # connection's character set). The core's `?` are its placeholders ("question" style),
    # one per parameter.
    def with_binds_inline(connection, sql, params)
      parts = sql.split("?", -1)
      unless parts.length == params.length + 1
        raise ArgumentError, "the core's statement has #{parts.length - 1} placeholders for #{params.length} parameters: #{sql}"
      end

      collector = ::Arel::Collectors::SubstituteBinds.new(connection, ::Arel::Collectors::SQLString.new)
      parts.each_with_index do |part, index|
        collector << part
        collector.add_bind(params[index]) if index < params.length
      end
      collector.value
    end

    # The driver's SQLSTATE (PostgreSQL's result field, mysql2's `sql_state`), which the core
    # classifies with the message.
    def database_error(error)
      driver = error.cause || error
      result = driver.respond_to?(:result) ? driver.result : nil
      sqlstate = result.respond_to?(:error_field) ? result.error_field(::PG::PG_DIAG_SQLSTATE) : nil
      sqlstate ||= driver.sql_state if driver.respond_to?(:sql_state)
      code = Native.database_error_code(sqlstate, driver.message.to_s)
      code = Native.database_error_code(sqlstate, error.message.to_s) if code == "DATABASE"
      OJS::Error.for_code(code, "writing the outbox row failed: #{error.message}")
    end

    # This fiber's JSON generator (`JSON.generate` builds one per call). Only plain values reach
    # it, so it never runs application code that could switch fibers mid-generation.
    JSON_STATE_KEY = :ojs_json_state
    private_constant :JSON_STATE_KEY

    # The jobs as the core's JSON array; the core refuses anything else than an Array of job
    # objects, naming it.
    def jobs_json(jobs)
      # Plain JSON values throughout (the common case): as they are; nil options/meta are
      # null, which the core reads as unset.
      if jobs.is_a?(Array)
        return JSON.generate(jobs) if jobs.all? { |job| job.is_a?(Hash) && JSONValue.plain?(job) }

        return JSON.generate(jobs.map { |job| job_object(job) })
      end
      JSON.generate(JSONValue.checked(jobs, "args", "jobs"))
    end

    def job_json(job)
      JSON.generate(job_object(job))
    end

    # The parts of a job whose unencodable values the core names (`ojs_bridge::unencodable`);
    # any other key's value counts as args (and the core refuses the key itself).
    PARTS = %w[type args options meta].freeze
    private_constant :PARTS

    # One job as the core's JSON object. nil options/meta are left out (unset); Time values of
    # options become RFC 3339 text (JSONValue.time_options); any other key is passed on, and the
    # core refuses it.
    def job_object(job)
      return JSONValue.checked(job, "args", "job") unless job.is_a?(Hash) # the core refuses it

      job.each_with_object({}) do |(key, value), out|
        name = key.to_s
        next if value.nil? && (name == "options" || name == "meta")

        value = JSONValue.time_options(value) if name == "options"
        out[name] = JSONValue.checked(value, PARTS.include?(name) ? name : "args", name)
      end
    end
  end
end

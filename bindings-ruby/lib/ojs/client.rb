# frozen_string_literal: true

module OJS
  # One configured adapter: the core's handle (`OJS::Native::NativeAdapter`, which owns the
  # relay, its runtime and every rule) plus what only Ruby can do: run the core's statements
  # on ActiveRecord's connection inside the application's transaction, and register the
  # wake-up on its outermost commit (OJS::TransactionHook).
  class Adapter
    attr_reader :configuration, :native

    def initialize(configuration)
      @configuration = configuration
      @native = OJS.native_call do
        Native::NativeAdapter.new(configuration.to_core_json, configuration.development?,
                                  Configuration::URL_SETTING, true)
      end
      notice = @native.notice
      (configuration.logger || OJS.logger).warn(notice) if notice
      @relay_lock = Mutex.new
      @relay_pid = nil
      @registry_id = @native.registry_id
      @dialects = {}
      @stagers = {}
      @stager_lock = Mutex.new
    end

    def table_name
      native.table_name
    end

    def relay_in_process?
      native.relay_in_process
    end

    # --- staging -------------------------------------------------------------------------

    # One job (OJS.enqueue_after_commit), the per-call hot path: args, options and meta become
    # JSON texts here; the core validates them and makes the id and the row's parameters
    # (`ojs_ruby_stage_job`, see OJS::NativeStaging); the row is written on `connection` with
    # the core's INSERT (its text fetched once per connection kind). Returns the job id.
    # Anything but a String/Symbol type and an Array of args takes the general path
    # (enqueue_after_commit), so the core's own message names what is wrong.
    def enqueue_job(type, args, options, meta, connection = configuration.connection_class.connection)
      type = type.name if type.instance_of?(Symbol)
      unless type.instance_of?(String) && args.instance_of?(Array) &&
             (type.ascii_only? || (type.encoding == Encoding::UTF_8 && type.valid_encoding?))
        return enqueue_after_commit([{ type: type, args: args, options: options, meta: meta }],
                                    connection: connection).first
      end

      ensure_relay
      args_json = (Thread.current[JSON_STATE_KEY] ||= JSON::State.new).generate(
        JSONValue.plain?(args) ? args : JSONValue.checked(args, code: "INVALID_ARGS", field: "args")
      )
      options_json = options.nil? ? nil : JSONValue.dump(JSONValue.time_options(options), code: "INVALID_OPTIONS", field: "options")
      meta_json = meta.nil? ? nil : JSONValue.dump(meta, code: "INVALID_META", field: "meta")
      params = stage_job(@stagers[connection.adapter_name] || stager_of(connection),
                         type, args_json, options_json, meta_json, Context.json)
      sql = params.pop
      begin
        connection.exec_query(sql, "OJS", params)
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
      ensure_relay
      json = jobs_json(jobs)
      stager = stager_of(connection)
      context = Context.json
      buffer = Thread.current[BUFFER_KEY] || staging_buffer(4096)
      while (written = NativeStaging.stage(stager[0], json, json.bytesize, context, context ? context.bytesize : 0,
                                           buffer, buffer.size)).negative?
        buffer = staging_failed(written, buffer)
      end
      staged = JSON.parse(buffer.get_bytes(0, written).force_encoding(Encoding::UTF_8))
      job_ids = staged["job_ids"]
      write_rows(connection, staged["statements"])
      if connection.transaction_open?
        TransactionHook.register(connection, self, job_ids)
      else
        TransactionHook::Wakeup.fire(self, job_ids)
      end
      job_ids
    end

    # The core's parameters for one job's row, JSON texts in, nothing written (what
    # enqueue_job writes; the benchmark's raw INSERT uses them too):
    # `[job_id, job_type, job_args, job_options, job_meta, tenant_id, insert_sql]`.
    def stage_job(stager, type, args_json, options_json, meta_json, context_json)
      sql = stager[1]
      buffer = Thread.current[BUFFER_KEY] || staging_buffer(4096)
      while (written = NativeStaging.stage_job(
        stager[0], type, type.bytesize, args_json, args_json.bytesize,
        options_json, options_json ? options_json.bytesize : 0, meta_json, meta_json ? meta_json.bytesize : 0,
        context_json, context_json ? context_json.bytesize : 0, sql ? 0 : 1, buffer, buffer.size
      )).negative?
        buffer = staging_failed(written, buffer)
      end
      if written == ID_ONLY_BYTES
        return [buffer.get_bytes(0, ID_ONLY_BYTES).force_encoding(Encoding::UTF_8), type, args_json,
                EMPTY_OBJECT, EMPTY_OBJECT, nil, sql]
      end

      data = buffer.get_bytes(0, written)
      sql_length, id_length, type_length, args_length, options_length, meta_length, tenant_length =
        data.unpack(ANSWER_HEADER)
      data.force_encoding(Encoding::UTF_8)
      offset = ANSWER_HEADER_BYTES
      if sql_length >= 0
        sql = stager[1] = data.byteslice(offset, sql_length).freeze
        offset += sql_length
      end
      job_id = data.byteslice(offset, id_length)
      offset += id_length
      if type_length == ECHO
        job_type = type
      else
        job_type = data.byteslice(offset, type_length)
        offset += type_length
      end
      if args_length == ECHO
        job_args = args_json
      else
        job_args = data.byteslice(offset, args_length)
        offset += args_length
      end
      job_options = data.byteslice(offset, options_length)
      job_meta = data.byteslice(offset += options_length, meta_length)
      tenant_id = tenant_length.negative? ? nil : data.byteslice(offset + meta_length, tenant_length)
      [job_id, job_type, job_args, job_options, job_meta, tenant_id, sql]
    end

    # `[stager id, INSERT text or nil until the first call]` for the connection's kind.
    def stager_of(connection)
      name = connection.adapter_name
      @stagers[name] || @stager_lock.synchronize do
        @stagers[name] ||= [native.stager(*dialect_of(connection)), nil]
      end
    end

    # The after-commit wake-up (never blocks on I/O, never fails).
    def notify_committed(job_ids)
      ids = job_ids.join("\n")
      NativeStaging.notify_committed(@registry_id, ids, ids.bytesize)
      nil
    end

    # Spec §5.1 `enqueue`: one job straight to the backend, no outbox row, not tied to any
    # transaction. Returns when the backend has answered.
    def enqueue_now(job)
      json = job_json(job)
      OJS.native_call { Native.adapter_enqueue_now(native, json, Context.json) }
    end

    # The core's DDL for the outbox table in the dialect of `connection`, one statement each.
    def create_table_sql(connection)
      dialect, = dialect_of(connection)
      OJS.native_call { native.create_table_sql(dialect) }
    end

    # --- relay lifecycle (FA-R003) -------------------------------------------------------

    # Starts the in-process relay of this process (no-op in `:external` mode). Idempotent;
    # after a fork the child starts its own (the core gives it a fresh runtime).
    def start_relay
      @relay_lock.synchronize do
        return if @relay_pid == Process.pid

        RelayLog.start if relay_in_process?
        OJS.native_call { Native.adapter_start_relay(native) }
        @relay_pid = Process.pid
      end
      OJS.install_exit_hook
    end

    # Starts the relay on first use in this process (unless start_relay_on_first_use is
    # false). A relay that cannot start does not fail the enqueue: the row is written anyway
    # and waits in the outbox; the start is tried again on the next use.
    def ensure_relay
      return if @relay_pid == Process.pid || !configuration.start_relay_on_first_use

      start_relay
    rescue OJS::Error => e
      OJS.logger.warn("ojs: the in-process relay did not start [#{e.code}] #{e.message}; " \
                      "rows wait in the outbox until a relay runs")
    end

    # Graceful stop: flushes what the hot queue holds (within relay.shutdown_timeout).
    def stop_relay
      @relay_lock.synchronize do
        return unless @relay_pid == Process.pid

        Native.adapter_stop_relay(native)
        @relay_pid = nil
      end
      RelayLog.forward # the records of the stop's flush
    end

    # Abrupt stop, as a crash would: no flush, leases stay until they expire. For tests of
    # crash recovery; applications use stop_relay.
    def kill_relay
      @relay_lock.synchronize do
        return unless @relay_pid == Process.pid

        native.kill_relay
        @relay_pid = nil
      end
    end

    def relay_running?
      @relay_pid == Process.pid
    end

    # Runs the relay as this process's only job until SIGINT/SIGTERM (`rake ojs:relay`).
    def run_relay_until_signal
      RelayLog.start
      OJS.native_call { Native.adapter_run_relay_until_signal(native) }
    ensure
      RelayLog.forward
    end

    # --- administration (through the relay's own connection) ---------------------------

    def metrics
      JSON.parse(native.metrics_json)
    end

    def status
      JSON.parse(OJS.native_call { Native.adapter_status_json(native) })
    end

    def dead_list(tenant: nil, limit: nil)
      limit = Integer(limit) unless limit.nil?
      JSON.parse(OJS.native_call { Native.adapter_dead_list_json(native, tenant, limit) })
    end

    def dead_replay(tenant: nil)
      OJS.native_call { Native.adapter_dead_replay(native, tenant) }
    end

    def dead_purge(tenant: nil)
      OJS.native_call { Native.adapter_dead_purge(native, tenant) }
    end

    # Deletes sent rows older than an ISO-8601 duration ("PT24H"); returns how many.
    def prune(older_than:)
      OJS.native_call { Native.adapter_prune(native, String(older_than)) }
    end

    # Committed state of these jobs' rows: { job_id => { "status", "attempts", "error" } }.
    def rows(job_ids)
      JSON.parse(OJS.native_call { Native.adapter_rows_json(native, job_ids.to_a) })
    end

    # Creates the outbox table through the relay's connection (`OJS::Migration` uses the
    # application's connection instead).
    def migrate
      OJS.native_call { Native.adapter_migrate(native) }
    end

    private

    # The core's dialect and placeholder style for an ActiveRecord connection. Unknown
    # adapters are passed on by name and refused by the core.
    def dialect_of(connection)
      name = connection.adapter_name
      @dialects[name] ||= case name
                          when /postg/i then %w[postgresql dollar].freeze
                          when /sqlite/i then %w[sqlite question].freeze
                          else [name.downcase, "question"].freeze
                          end
    end

    def write_rows(connection, statements)
      if statements.length == 1
        execute(connection, statements.first["sql"], statements.first["params"])
      else
        # Several INSERTs (a bulk past the core's rows-per-statement limit): all or none.
        connection.transaction(requires_new: true) do
          statements.each { |statement| execute(connection, statement["sql"], statement["params"]) }
        end
      end
    end

    # The INSERT on the application's connection, in its current transaction, through
    # ActiveRecord's own parameterized path (logged as "OJS"). A driver error is classified by
    # the core: a missing table is OJS::OutboxTableMissing, anything else OJS::DatabaseError
    # (the ActiveRecord exception is the cause).
    def execute(connection, sql, params)
      connection.exec_query(sql, "OJS", params)
    rescue ::ActiveRecord::StatementInvalid => e
      raise database_error(e)
    end

    def database_error(error)
      driver = error.cause || error
      result = driver.respond_to?(:result) ? driver.result : nil
      sqlstate = result.respond_to?(:error_field) ? result.error_field(::PG::PG_DIAG_SQLSTATE) : nil
      code = Native.database_error_code(sqlstate, driver.message.to_s)
      code = Native.database_error_code(sqlstate, error.message.to_s) if code == "DATABASE"
      OJS::Error.for_code(code, "writing the outbox row failed: #{error.message}")
    end

    # The one-job answer (`ojs_ruby_stage_job`): 7 native-endian int32 lengths (the INSERT's
    # SQL, then the 6 parameters; -1: absent; ECHO: the text passed in), then the bytes they
    # measure.
    ANSWER_HEADER = "l7"
    ANSWER_HEADER_BYTES = 28
    ECHO = -2
    # An answer of this length is the job id alone (the usual job: the type and args passed in,
    # options and meta EMPTY_OBJECT, no tenant), see `ojs_ruby_stage_job`.
    ID_ONLY_BYTES = 36
    EMPTY_OBJECT = "{}"
    KEPT_BUFFER_BYTES = 1024 * 1024
    BUFFER_KEY = :ojs_staging_buffer
    # This fiber's JSON generator (`JSON.generate` builds one per call). Only plain values reach
    # it, so it never runs application code that could switch fibers mid-generation.
    JSON_STATE_KEY = :ojs_json_state
    private_constant :ANSWER_HEADER, :ANSWER_HEADER_BYTES, :ECHO, :ID_ONLY_BYTES, :EMPTY_OBJECT, :KEPT_BUFFER_BYTES, :BUFFER_KEY, :JSON_STATE_KEY

    # This fiber's answer buffer for the staging entry points, at least `size` bytes. Kept for
    # the next call up to 1 MiB (the answer of a bulk of about 5,000 jobs); a larger one serves
    # this call only.
    def staging_buffer(size)
      buffer = FFI::MemoryPointer.new(:char, [size, 4096].max)
      Thread.current[BUFFER_KEY] = buffer if buffer.size <= KEPT_BUFFER_BYTES
      buffer
    end

    # A negative answer of a staging entry point: returns a larger buffer when the answer did
    # not fit (the caller calls again), else raises the core's error written in `buffer`.
    def staging_failed(written, buffer)
      raise OJS::Error, "the native staging call panicked (a bug in ojs-adapter-rails)" if written == NativeStaging::PANICKED
      return staging_buffer(-written) if -written > buffer.size

      failure = JSON.parse(buffer.get_bytes(0, -written).force_encoding(Encoding::UTF_8))
      raise OJS::Error.for_code(failure["code"], failure["message"], field: failure["field"],
                                                                     retryable: failure["retryable"])
    end

    def jobs_json(jobs)
      unless jobs.is_a?(Array)
        raise InvalidArgs.new("jobs: must be an Array of jobs, got #{jobs.class}", field: "jobs")
      end

      # Plain JSON values throughout (the common case): as they are; nil options/meta are
      # null, which the core reads as unset.
      return JSON.generate(jobs) if jobs.all? { |job| job.is_a?(Hash) && JSONValue.plain?(job) }

      JSON.generate(jobs.map { |job| job_object(job) })
    end

    def job_json(job)
      JSON.generate(job_object(job))
    end

    FIELD_CODES = {
      "type" => "INVALID_JOB_TYPE",
      "args" => "INVALID_ARGS",
      "options" => "INVALID_OPTIONS",
      "meta" => "INVALID_META"
    }.freeze
    private_constant :FIELD_CODES

    # One job as the core's JSON object. nil options/meta are left out (unset); Time values of
    # options become RFC 3339 text (JSONValue.time_options); any other key is passed on, and the
    # core refuses it.
    def job_object(job)
      unless job.is_a?(Hash)
        raise InvalidArgs.new("job: must be a Hash with :type and :args, got #{job.class}", field: "job")
      end

      job.each_with_object({}) do |(key, value), out|
        name = key.to_s
        next if value.nil? && (name == "options" || name == "meta")

        value = JSONValue.time_options(value) if name == "options"
        out[name] = JSONValue.checked(value, code: FIELD_CODES.fetch(name, "INVALID_ARGS"), field: name)
      end
    end
  end
end

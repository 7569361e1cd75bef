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
      @native = OJS.native_call { Native::NativeAdapter.new(configuration.to_core_json) }
      @relay_lock = Mutex.new
      @relay_pid = nil
      @dialects = {}
    end

    def table_name
      native.table_name
    end

    def relay_in_process?
      native.relay_in_process
    end

    # --- staging -------------------------------------------------------------------------

    # Validates `jobs` (hashes with :type, :args, :options, :meta), writes their rows on
    # `connection` and returns their ids. Inside a transaction the relay is woken when the
    # outermost transaction commits (nothing if it rolls back; rows of a savepoint rolled back
    # are discarded with their wake-up); outside one the rows are committed and the relay is
    # woken at once.
    def enqueue_after_commit(jobs, connection: configuration.connection_class.connection)
      ensure_relay
      dialect, placeholder = dialect_of(connection)
      staged = JSON.parse(OJS.native_call { native.stage(dialect, placeholder, jobs_json(jobs), Context.json) })
      job_ids = staged["job_ids"]
      if connection.transaction_open?
        write_rows(connection, staged["statements"])
        TransactionHook.register(connection, self, job_ids)
      else
        write_rows(connection, staged["statements"])
        TransactionHook::Wakeup.fire(self, job_ids)
      end
      job_ids
    end

    # The after-commit wake-up (never blocks on I/O, never fails).
    def notify_committed(job_ids)
      native.notify_committed(job_ids)
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
      OJS.native_call { Native.adapter_run_relay_until_signal(native) }
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
        execute(connection, statements.first)
      else
        # Several INSERTs (a bulk past the core's rows-per-statement limit): all or none.
        connection.transaction(requires_new: true) do
          statements.each { |statement| execute(connection, statement) }
        end
      end
    end

    def execute(connection, statement)
      connection.exec_query(statement["sql"], "OJS", statement["params"])
    rescue ::ActiveRecord::StatementInvalid => e
      raise DatabaseError.new("writing the outbox row failed: #{e.message}", field: nil)
    end

    def jobs_json(jobs)
      unless jobs.is_a?(Array)
        raise InvalidArgs.new("jobs: must be an Array of jobs, got #{jobs.class}", field: "jobs")
      end

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

    # One job as the core's JSON object. nil options/meta are left out (unset); any other
    # key is passed on, and the core refuses it.
    def job_object(job)
      unless job.is_a?(Hash)
        raise InvalidArgs.new("job: must be a Hash with :type and :args, got #{job.class}", field: "job")
      end

      job.each_with_object({}) do |(key, value), out|
        name = key.to_s
        next if value.nil? && (name == "options" || name == "meta")

        out[name] = JSONValue.checked(value, code: FIELD_CODES.fetch(name, "INVALID_ARGS"), field: name)
      end
    end
  end
end

# frozen_string_literal: true

require "ffi"
require "json"

module OJS
  # The native library shipped beside this file (`native/libojs_ruby_native.so`, the crate in
  # `src/`), bound with the ffi gem. One protocol for every function (`src/lib.rs`):
  # - text in as (String, bytesize) pairs (`buffer_in`: the String's own bytes; nil is none);
  #   lists and records cross as JSON text;
  # - the last argument is this thread's out-parameter (`Native.out`, the Rust struct
  #   `OjsRubyOut`: a text and a number); the return value is the status: 0 done, 1 the core's
  #   error (the text is `Error::to_json`, raised as the OJS::Error of its code), 2 a panic
  #   (raised as Native::InternalError). A text of at most INLINE bytes is in the
  #   out-parameter itself; a longer one is Rust-owned, copied into a Ruby String and freed at
  #   once with `ojs_ruby_free`;
  # - objects (Bridge, Stager, RelayFrames, EventFeed, Worker) are opaque pointers held in an
  #   FFI::AutoPointer, freed by their `ojs_ruby_<object>_free` when the Ruby object is collected;
  # - calls that wait (the relay's start and stop, database and backend round trips, the next
  #   frame, event or job) are bound with `blocking: true`: the GVL is released meanwhile. The
  #   native side never calls Ruby.
  # test/native_signature_test.rb checks every `attach_function` below against the Rust
  # declarations (`src/*.rs`).
  module Native
    extend FFI::Library
    ffi_lib File.join(__dir__, "native", "libojs_ruby_native.so")

    # A panic in the native library (a bug), with its message.
    class InternalError < StandardError; end

    # The status codes (`src/lib.rs`: DONE, FAILED, PANICKED).
    DONE = 0
    FAILED = 1
    PANICKED = 2

    # The most bytes of a text the out-parameter holds itself (`src/lib.rs`: INLINE).
    INLINE = 4096
    # The length of no text (nil; `src/lib.rs`: NO_TEXT, usize::MAX).
    NO_TEXT = 2**64 - 1

    # `OjsRubyOut` (`src/lib.rs`); read by offset (the per-job path makes no Struct).
    class Out < FFI::Struct
      layout :len, :size_t, :text, :pointer, :value, :uint64, :inline, [:uint8, INLINE]
    end
    LEN_AT = Out.offset_of(:len)
    TEXT_AT = Out.offset_of(:text)
    VALUE_AT = Out.offset_of(:value)
    INLINE_AT = Out.offset_of(:inline)
    raise LoadError, "ojs-adapter-rails needs a 64-bit platform" unless FFI.type_size(:size_t) == 8

    # --- the protocol -------------------------------------------------------------------------
    # (text, len): frees a Rust-owned text of the out-parameter
    attach_function :ojs_ruby_free, %i[pointer size_t], :void
    # (out) -> status; the panic channel's test
    attach_function :ojs_ruby_panic_for_test, %i[pointer], :int32

    # --- errors (`src/error.rs`) ----------------------------------------------------------------
    # (out) -> status; text: the core's codes as JSON
    attach_function :ojs_ruby_error_codes_json, %i[pointer], :int32
    # (sqlstate, message, out) -> status; text: the code
    attach_function :ojs_ruby_database_error_code, %i[buffer_in size_t buffer_in size_t pointer], :int32
    # (part, path, why, out) -> status; text: the error JSON
    attach_function :ojs_ruby_unencodable, %i[buffer_in size_t buffer_in size_t buffer_in size_t pointer], :int32
    # (key, accepted JSON, out) -> status; text: the error JSON
    attach_function :ojs_ruby_unknown_option_error, %i[buffer_in size_t buffer_in size_t pointer], :int32

    # --- the process (`src/lib.rs`, `src/facade.rs`) --------------------------------------------
    # (out) -> status; text: the workspace version
    attach_function :ojs_ruby_version, %i[pointer], :int32
    # (out) -> status
    attach_function :ojs_ruby_enable_log_feed, %i[pointer], :int32
    # (out) -> status; text: the relay's log records (JSON)
    attach_function :ojs_ruby_drain_log_feed, %i[pointer], :int32
    # (parts JSON, out) -> status; text: the relay's database URL
    attach_function :ojs_ruby_database_url_from_parts, %i[buffer_in size_t pointer], :int32
    # (out) -> status; text: the context header names (JSON)
    attach_function :ojs_ruby_context_header_names, %i[pointer], :int32
    # (out) -> status
    attach_function :ojs_ruby_arm_stop_signals, %i[pointer], :int32
    # (error code, out) -> status; value: the exit code
    attach_function :ojs_ruby_relay_exit_code, %i[buffer_in size_t pointer], :int32
    # (args JSON, framework JSON, run, out) -> status; text: the check (run 0) or the report
    # (run 1: the relay runs until SIGINT/SIGTERM)
    attach_function :ojs_ruby_relay_command, %i[buffer_in size_t buffer_in size_t uint8 pointer], :int32,
                    blocking: true

    # --- Bridge and Stager (`src/facade.rs`) ----------------------------------------------------
    # (config JSON, development, url setting, needs backend, out) -> status; value: a Bridge
    attach_function :ojs_ruby_bridge_new, %i[buffer_in size_t uint8 buffer_in size_t uint8 pointer], :int32
    # (bridge)
    attach_function :ojs_ruby_bridge_free, %i[pointer], :void
    # (bridge, out) -> status; text: {"table_name", "relay_in_process", "notice"}
    attach_function :ojs_ruby_bridge_facts, %i[pointer pointer], :int32
    # (bridge, dialect, out) -> status; text: the DDL statements (JSON)
    attach_function :ojs_ruby_bridge_create_table_sql, %i[pointer buffer_in size_t pointer], :int32
    # (bridge, dialect, placeholder, out) -> status; value: a Stager
    attach_function :ojs_ruby_bridge_stager, %i[pointer buffer_in size_t buffer_in size_t pointer], :int32
    # (stager)
    attach_function :ojs_ruby_stager_free, %i[pointer], :void
    # (stager, type, args, options, meta, context, with_sql, out) -> status; text: StagedJob::encode
    attach_function :ojs_ruby_stager_stage_job,
                    %i[pointer buffer_in size_t buffer_in size_t buffer_in size_t buffer_in size_t buffer_in size_t
                       uint8 pointer], :int32
    # (stager, jobs JSON, context, out) -> status; text: Staged::to_json
    attach_function :ojs_ruby_stager_stage, %i[pointer buffer_in size_t buffer_in size_t pointer], :int32
    # (bridge, token, returned, out) -> status; text: the job id to report
    attach_function :ojs_ruby_bridge_held_outcome, %i[pointer buffer_in size_t buffer_in size_t pointer], :int32
    # (bridge, out) -> status: starts the relay once per process (a start connects)
    attach_function :ojs_ruby_bridge_ensure_relay, %i[pointer pointer], :int32, blocking: true
    # (bridge, job ids as encode_ids text, out) -> status
    attach_function :ojs_ruby_bridge_notify_committed, %i[pointer buffer_in size_t pointer], :int32
    # (bridge, verb, out) -> status; text or nothing: a Bridge call without arguments
    attach_function :ojs_ruby_bridge_run, %i[pointer buffer_in size_t pointer], :int32, blocking: true
    # (bridge, job JSON, context, out) -> status; text: the job id
    attach_function :ojs_ruby_bridge_enqueue_now, %i[pointer buffer_in size_t buffer_in size_t pointer], :int32,
                    blocking: true
    # (bridge, verb, argument, limit, out) -> status; text or value: an outbox call of the relay's connection
    attach_function :ojs_ruby_bridge_outbox, %i[pointer buffer_in size_t buffer_in size_t int64 pointer], :int32,
                    blocking: true

    # --- events (`src/events.rs`) ---------------------------------------------------------------
    # (bridge, request JSON, out) -> status; value: a RelayFrames
    attach_function :ojs_ruby_bridge_relay_events, %i[pointer buffer_in size_t pointer], :int32
    # (relay frames, timeout ms, out) -> status; text: a frame, "" (idle) or none (the end)
    attach_function :ojs_ruby_relay_frames_next, %i[pointer uint64 pointer], :int32, blocking: true
    # (relay frames, out) -> status
    attach_function :ojs_ruby_relay_frames_close, %i[pointer pointer], :int32
    # (relay frames)
    attach_function :ojs_ruby_relay_frames_free, %i[pointer], :void
    # (bridge, options JSON, out) -> status; value: an EventFeed
    attach_function :ojs_ruby_bridge_subscribe_events, %i[pointer buffer_in size_t pointer], :int32, blocking: true
    # (event feed, timeout ms, out) -> status; text: an event's JSON, "" (idle) or none (closed)
    attach_function :ojs_ruby_event_feed_next, %i[pointer uint64 pointer], :int32, blocking: true
    # (event feed, out) -> status
    attach_function :ojs_ruby_event_feed_close, %i[pointer pointer], :int32
    # (event feed)
    attach_function :ojs_ruby_event_feed_free, %i[pointer], :void
    # (path, out) -> status; value: 1 when the path answers every caller
    attach_function :ojs_ruby_surface_is_open, %i[buffer_in size_t pointer], :int32
    # (bridge, request JSON, out) -> status; text: {"status", "headers", "body"}; value: a
    # RelayFrames for a stream (0: none)
    attach_function :ojs_ruby_bridge_surface, %i[pointer buffer_in size_t pointer], :int32, blocking: true

    # --- the worker (`src/worker.rs`) -----------------------------------------------------------
    # (bridge, options JSON, out) -> status; value: a Worker
    attach_function :ojs_ruby_bridge_start_worker, %i[pointer buffer_in size_t pointer], :int32, blocking: true
    # (worker)
    attach_function :ojs_ruby_worker_free, %i[pointer], :void
    # (worker, timeout ms, out) -> status; text: a job's JSON, "" (idle) or none (stopped)
    attach_function :ojs_ruby_worker_next, %i[pointer uint64 pointer], :int32, blocking: true
    # (worker, job id, outcome JSON, out) -> status; value: 1 settled, 0 no longer held
    attach_function :ojs_ruby_worker_finish, %i[pointer buffer_in size_t buffer_in size_t pointer], :int32
    # (worker, deadline ms, out) -> status: graceful stop, returns once stopped
    attach_function :ojs_ruby_worker_stop, %i[pointer uint64 pointer], :int32, blocking: true
    # (worker, out) -> status; text: {"worker_id", "concurrency", "in_flight", "stopping", "backend_down"}
    attach_function :ojs_ruby_worker_facts, %i[pointer pointer], :int32
    # (worker, out) -> status; text: the loop's log records (JSON)
    attach_function :ojs_ruby_worker_drain_log, %i[pointer pointer], :int32

    OUT_KEY = :ojs_native_out
    private_constant :OUT_KEY

    # One record of a log feed (the relay's, a worker's).
    LogRecord = Struct.new(:level, :message, :job_id, :table)
    # An operator command's or the relay command's report.
    Report = Struct.new(:exit_code, :stdout, :stderr)
    # What the relay command line asks before anything runs: `exit` (a Report to print and exit
    # with: --help, a usage error) or the outbox `table`.
    RelayCheck = Struct.new(:exit, :table)
    # A mount's answer: `status`, `headers` ([name, value] pairs), `body`, `stream` (a
    # RelayFrames or nil).
    SurfaceAnswer = Struct.new(:status, :headers, :body, :stream)

    class << self
      # This fiber's out-parameter (reused by every call it makes).
      def out
        Thread.current[OUT_KEY] ||= FFI::MemoryPointer.new(:uint8, Out.size)
      end

      # The text a call answered (nil: none), or its failure raised.
      def text(status, out)
        failed(status, out) unless status.zero?
        take(out)
      end

      # The number a call answered, or its failure raised.
      def value(status, out)
        failed(status, out) unless status.zero?
        out.get_uint64(VALUE_AT)
      end

      # The JSON a call answered, parsed.
      def json(status, out)
        JSON.parse(text(status, out))
      end

      # Nothing, or the call's failure raised.
      def done(status, out)
        failed(status, out) unless status.zero?
        nil
      end

      # A new native object a call answered (its `value`), held by an AutoPointer that frees
      # it with `free` (`:ojs_ruby_<object>_free`); nil for none (0).
      def object(status, out, free)
        address = value(status, out)
        address.zero? ? nil : FFI::AutoPointer.new(FFI::Pointer.new(address), method(free))
      end

      # The out-parameter's text as a Ruby String (a Rust-owned one freed); nil for none.
      def take(out)
        length = out.get_uint64(LEN_AT)
        return out.get_bytes(INLINE_AT, length).force_encoding(Encoding::UTF_8) if length <= INLINE
        return nil if length == NO_TEXT

        pointer = out.get_pointer(TEXT_AT)
        text = pointer.get_bytes(0, length)
        ojs_ruby_free(pointer, length)
        text.force_encoding(Encoding::UTF_8)
      end

      # Raises what a failed call reports.
      def failed(status, out)
        text = take(out)
        raise OJS::Error.from_json(text) if status == FAILED

        raise InternalError, text || "the native call failed with status #{status}"
      end

      # --- the process's calls ----------------------------------------------------------------

      def version
        text(ojs_ruby_version(o = out), o)
      end

      def error_codes_json
        text(ojs_ruby_error_codes_json(o = out), o)
      end

      # The core's code (OUTBOX_TABLE_MISSING or DATABASE) for a driver's error.
      def database_error_code(sqlstate, message)
        text(ojs_ruby_database_error_code(sqlstate, len(sqlstate), message, message.bytesize, o = out), o)
      end

      # The error JSON for a value with no JSON form.
      def unencodable(part, path, why)
        text(ojs_ruby_unencodable(part, part.bytesize, path, path.bytesize, why, why.bytesize, o = out), o)
      end

      # The error JSON for a setting that is none of `accepted` (its near miss named).
      def unknown_option_error(key, accepted)
        list = JSON.generate(accepted)
        text(ojs_ruby_unknown_option_error(key, key.bytesize, list, list.bytesize, o = out), o)
      end

      def database_url_from_parts(parts_json)
        text(ojs_ruby_database_url_from_parts(parts_json, parts_json.bytesize, o = out), o)
      end

      def context_header_names
        json(ojs_ruby_context_header_names(o = out), o)
      end

      def arm_stop_signals
        done(ojs_ruby_arm_stop_signals(o = out), o)
      end

      def enable_log_feed
        done(ojs_ruby_enable_log_feed(o = out), o)
      end

      # The relay's log records queued since the last call (LogRecord), oldest first.
      def drain_log_feed
        log_records(json(ojs_ruby_drain_log_feed(o = out), o))
      end

      def log_records(list)
        list.map { |record| LogRecord.new(*record.values_at("level", "message", "job_id", "table")) }
      end

      def relay_exit_code(code)
        value(ojs_ruby_relay_exit_code(code, code.bytesize, o = out), o)
      end

      # Parses the relay command line without running anything: a RelayCheck.
      def relay_command_check(args, framework_json)
        check = relay_command_call(args, framework_json, 0)
        RelayCheck.new(check["exit"] && report(check["exit"]), check["table"])
      end

      # Runs the relay command until SIGINT/SIGTERM (the GVL released); its Report.
      def relay_command(args, framework_json)
        report(relay_command_call(args, framework_json, 1))
      end

      def report(hash)
        Report.new(*hash.values_at("exit_code", "stdout", "stderr"))
      end

      def surface_is_open(path)
        value(ojs_ruby_surface_is_open(path, path.bytesize, o = out), o) == 1
      end

      # The bytesize of a text argument that may be nil.
      def len(text)
        text ? text.bytesize : 0
      end

      private

      def relay_command_call(args, framework_json, run)
        list = JSON.generate(args)
        json(ojs_ruby_relay_command(list, list.bytesize, framework_json, framework_json.bytesize, run, o = out), o)
      end
    end

    # One configured `ojs_bridge::Bridge` per application (`src/facade.rs`).
    class Bridge
      # The native pointer (what the per-job calls take).
      attr_reader :pointer

      # `needs_backend` false: a DDL-only handle. No I/O.
      def initialize(config_json, development, url_setting, needs_backend)
        o = Native.out
        status = Native.ojs_ruby_bridge_new(config_json, config_json.bytesize, development ? 1 : 0,
                                            url_setting, url_setting.bytesize, needs_backend ? 1 : 0, o)
        @pointer = Native.object(status, o, :ojs_ruby_bridge_free)
        @facts = Native.json(Native.ojs_ruby_bridge_facts(@pointer, o), o)
      end

      def table_name
        @facts["table_name"]
      end

      def relay_in_process
        @facts["relay_in_process"]
      end

      # The line to log once (warn) when the development default URL was taken, else nil.
      def notice
        @facts["notice"]
      end

      def create_table_sql(dialect)
        Native.json(Native.ojs_ruby_bridge_create_table_sql(@pointer, dialect, dialect.bytesize, o = Native.out), o)
      end

      # The Stager for a dialect and placeholder style.
      def stager(dialect, placeholder)
        o = Native.out
        status = Native.ojs_ruby_bridge_stager(@pointer, dialect, dialect.bytesize, placeholder, placeholder.bytesize, o)
        Native.object(status, o, :ojs_ruby_stager_free)
      end

      # The id a unique job's enqueue reports once its statement returned `returned` (nil: no
      # row), or the core's OJS::DuplicateJob.
      def held_outcome(token, returned)
        o = Native.out
        Native.text(Native.ojs_ruby_bridge_held_outcome(@pointer, token, token.bytesize, returned,
                                                        Native.len(returned), o), o)
      end

      # A call without arguments (`ojs_ruby_bridge_run`): its text answer, or nil.
      def run(verb)
        Native.text(Native.ojs_ruby_bridge_run(@pointer, verb, verb.bytesize, o = Native.out), o)
      end

      # An outbox call of the relay's connection (`ojs_ruby_bridge_outbox`): its text answer
      # (`text: true`) or its number.
      def outbox(verb, argument, limit: nil, text: true)
        o = Native.out
        status = Native.ojs_ruby_bridge_outbox(@pointer, verb, verb.bytesize, argument, Native.len(argument),
                                               limit.nil? ? -1 : limit, o)
        text ? Native.text(status, o) : Native.value(status, o)
      end

      def enqueue_now(job_json, context_json)
        o = Native.out
        Native.text(Native.ojs_ruby_bridge_enqueue_now(@pointer, job_json, job_json.bytesize, context_json,
                                                       Native.len(context_json), o), o)
      end

      # A subscriber of this process's relay events (RelayFrames).
      def relay_events(request_json)
        o = Native.out
        status = Native.ojs_ruby_bridge_relay_events(@pointer, request_json, request_json.bytesize, o)
        RelayFrames.new(Native.object(status, o, :ojs_ruby_relay_frames_free))
      end

      # An event client (EventFeed); the GVL is released while the bridge opens its runtime.
      def subscribe_events(options_json)
        o = Native.out
        status = Native.ojs_ruby_bridge_subscribe_events(@pointer, options_json, options_json.bytesize, o)
        EventFeed.new(Native.object(status, o, :ojs_ruby_event_feed_free))
      end

      # One request of a mount, answered by the core (a SurfaceAnswer); waits without the GVL.
      def surface(request_json)
        o = Native.out
        status = Native.ojs_ruby_bridge_surface(@pointer, request_json, request_json.bytesize, o)
        head = Native.json(status, o)
        stream = Native.object(status, o, :ojs_ruby_relay_frames_free)
        SurfaceAnswer.new(head["status"], head["headers"], head["body"], stream && RelayFrames.new(stream))
      end

      # Starts the core's worker loop (a Worker); waits without the GVL while it builds it.
      def start_worker(options_json)
        o = Native.out
        status = Native.ojs_ruby_bridge_start_worker(@pointer, options_json, options_json.bytesize, o)
        Worker.new(Native.object(status, o, :ojs_ruby_worker_free))
      end
    end

    # A subscriber of this process's relay events as SSE frames (`src/events.rs`).
    class RelayFrames
      def initialize(pointer)
        @pointer = pointer
      end

      # The next frame, "" when none came within `timeout_ms`, nil at the end. Without the GVL.
      def next(timeout_ms)
        Native.text(Native.ojs_ruby_relay_frames_next(@pointer, timeout_ms, o = Native.out), o)
      end

      # Ends the subscription (a `next` waiting in another thread returns within its timeout).
      def close
        Native.done(Native.ojs_ruby_relay_frames_close(@pointer, o = Native.out), o)
      end
    end

    # An event client of an OJS event stream (`src/events.rs`).
    class EventFeed
      def initialize(pointer)
        @pointer = pointer
      end

      # The next event's JSON, "" when none came within `timeout_ms`, nil once closed; a refusal
      # by the server raises the core's error. Without the GVL.
      def next(timeout_ms)
        Native.text(Native.ojs_ruby_event_feed_next(@pointer, timeout_ms, o = Native.out), o)
      end

      def close
        Native.done(Native.ojs_ruby_event_feed_close(@pointer, o = Native.out), o)
      end
    end

    # A running worker loop (`src/worker.rs`).
    class Worker
      def initialize(pointer)
        @pointer = pointer
      end

      # The next job's JSON for a slot, "" when none came within `timeout_ms`, nil once the
      # worker stops. Without the GVL.
      def next(timeout_ms)
        Native.text(Native.ojs_ruby_worker_next(@pointer, timeout_ms, o = Native.out), o)
      end

      # Whether the loop settles the job with this outcome (false: it no longer held the job).
      def finish(job_id, outcome_json)
        o = Native.out
        Native.value(Native.ojs_ruby_worker_finish(@pointer, job_id, job_id.bytesize, outcome_json,
                                                   outcome_json.bytesize, o), o) == 1
      end

      # Graceful stop; returns once stopped. Without the GVL.
      def stop(deadline_ms)
        Native.done(Native.ojs_ruby_worker_stop(@pointer, deadline_ms, o = Native.out), o)
      end

      # {"worker_id", "concurrency", "in_flight", "stopping", "backend_down"}
      def facts
        Native.json(Native.ojs_ruby_worker_facts(@pointer, o = Native.out), o)
      end

      # What the loop said since the last call (LogRecord), oldest first.
      def drain_log
        Native.log_records(Native.json(Native.ojs_ruby_worker_drain_log(@pointer, o = Native.out), o))
      end
    end
  end
end

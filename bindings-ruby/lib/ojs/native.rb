# frozen_string_literal: true

# Loads the uniffi bindings generated at build time (`native/ojs_ruby_native.rb`) and the
# native library shipped beside them (`native/libojs_ruby_native.so`).
#
# On Ruby 3.1 `io/wait` must be loaded before the bindings: their async calls wait on a pipe
# with IO#wait_readable (docs/toolchain.md).
require "io/wait"
require "ffi"
require_relative "native/ojs_ruby_native"

module OJS
  # The generated module: the `Bridge` and `Stager` objects (cheap synchronous calls) and the
  # `bridge_*` async functions (blocking work on a core thread; the GVL is released while Ruby
  # waits).
  Native = ::OjsRubyNative

  # The calls made per job or per commit (`src/hot.rs`): C functions of the same library that
  # take the uniffi handles of Native::Bridge / Native::Stager and uniffi's RustCallStatus, so
  # a core error arrives as the uniffi side's NativeError (the Error::to_json text) and a panic
  # as its InternalError. Only the arguments differ: Ruby strings go in as (pointer, length)
  # instead of uniffi's per-byte lowering, which cost more per call than the INSERT itself
  # (docs/rails.md, "Performance"); the staging answers come back in a buffer the caller owns.
  # test/native_signature_test.rb checks these declarations against src/hot.rs.
  module HotCalls
    extend FFI::Library
    ffi_lib File.join(__dir__, "native", "libojs_ruby_native.so")

    # uniffi's call status (the generated bindings' own struct).
    Status = Native.const_get(:RustCallStatus)

    # (stager, type, args, options, meta, context, with_sql, out, out_capacity, status) -> answer length
    attach_function :ojs_ruby_bridge_stage_job,
                    %i[uint64 buffer_in size_t buffer_in size_t buffer_in size_t buffer_in size_t buffer_in size_t
                       int8 pointer size_t pointer], :uint64
    # (stager, jobs_json, context, out, out_capacity, status) -> answer length
    attach_function :ojs_ruby_bridge_stage,
                    %i[uint64 buffer_in size_t buffer_in size_t pointer size_t pointer], :uint64
    # (bridge, status) -> 1 (0: see the status): starts the relay once per process; releases
    # the GVL (a start connects)
    attach_function :ojs_ruby_bridge_ensure_relay, %i[uint64 pointer], :int8, blocking: true
    # (bridge, job ids as encode_ids text, status) -> 1 (0: see the status)
    attach_function :ojs_ruby_bridge_notify_committed, %i[uint64 buffer_in size_t pointer], :int8

    # The event surface (`src/events.rs`): calls that wait, all bound with `blocking: true` (the
    # GVL is released while they wait). Answers are uniffi's own lowered values (a RustBuffer by
    # value: a String, an Option<String>, a record), read with the generated code (`read_text`,
    # `read_record`).
    typedef Native.const_get(:RustBuffer).by_value, :rust_buffer
    # (bridge, request JSON, status) -> SurfaceAnswer: status, headers, body, stream (a
    # Native::RelayFrames or nil): one request of a mount, answered by the core's policy
    attach_function :ojs_ruby_bridge_surface, %i[uint64 buffer_in size_t pointer], :rust_buffer, blocking: true
    # (relay frames, timeout ms, status) -> Option<String>: a frame, "" (idle) or nil (the end)
    attach_function :ojs_ruby_relay_frames_next, %i[uint64 uint64 pointer], :rust_buffer, blocking: true
    # (event feed, timeout ms, status) -> Option<String>: an event's JSON, "" (idle) or nil (closed)
    attach_function :ojs_ruby_event_feed_next, %i[uint64 uint64 pointer], :rust_buffer, blocking: true
    # (bridge, options JSON, status) -> the uniffi handle of a new Native::EventFeed
    attach_function :ojs_ruby_bridge_subscribe_events, %i[uint64 buffer_in size_t pointer], :uint64, blocking: true
    # (bridge, status) -> Option<String>: the Prometheus exposition, nil when no relay runs here
    attach_function :ojs_ruby_bridge_metrics_text, %i[uint64 pointer], :rust_buffer, blocking: true
    # (bridge, status) -> String: {"ready", "database", "backend"}
    attach_function :ojs_ruby_bridge_readiness_json, %i[uint64 pointer], :rust_buffer, blocking: true

    # The worker (`src/worker.rs`): the waits are bound with `blocking: true` as the event
    # surface's are; finish never waits (a short lock and a queue push) and keeps the GVL.
    # (bridge, options JSON, status) -> the uniffi handle of a new Native::Worker
    attach_function :ojs_ruby_bridge_start_worker, %i[uint64 buffer_in size_t pointer], :uint64, blocking: true
    # (worker, timeout ms, status) -> Option<String>: a job's JSON, "" (idle) or nil (stopped)
    attach_function :ojs_ruby_worker_next, %i[uint64 uint64 pointer], :rust_buffer, blocking: true
    # (worker, job id, outcome JSON, status) -> 1 settled, 0 no longer held (or: see the status)
    attach_function :ojs_ruby_worker_finish, %i[uint64 buffer_in size_t buffer_in size_t pointer], :int8
    # (worker, deadline ms, status) -> 1: graceful stop, returns once stopped
    attach_function :ojs_ruby_worker_stop, %i[uint64 uint64 pointer], :int8, blocking: true

    STATUS_KEY = :ojs_call_status
    private_constant :STATUS_KEY

    class << self
      # This thread's call status, zeroed (reused: a call that fails gets a fresh one).
      def status
        Thread.current[STATUS_KEY] ||= Status.new
      end

      # The text a `:rust_buffer` call answered (`optional`: an Option<String>, nil for None),
      # or what its status reports, raised.
      def read_text(buffer, status, optional:)
        raise_failure(status) unless status.code.zero?

        optional ? buffer.consume_into_Optionalstring : buffer.consume_into_string
      end

      # The record of uniffi type `type` (`:SurfaceAnswer`) a `:rust_buffer` call answered, or
      # what its status reports, raised.
      def read_record(buffer, status, type)
        raise_failure(status) unless status.code.zero?

        buffer.public_send(:"consume_into_Type#{type}")
      end

      # Raises what the status of the call just made reports, as uniffi's own calls do: an
      # error as OJS::Error (from NativeError's JSON), a panic as Native::InternalError.
      def raise_failure(status)
        Thread.current[STATUS_KEY] = nil # the failed status is consumed here
        case status.code
        when 1
          failure = nil
          status.error_buf.consumeWithStream { |stream| failure = stream.read_TypeNativeError }
          raise OJS::Error.from_json(failure.json)
        when 2
          message = status.error_buf.len.positive? ? status.error_buf.consume_into_string : "Rust panic"
          raise Native::InternalError, message
        else
          raise Native::InternalError, "Unknown call status: #{status.code}"
        end
      end
    end
  end

  # The raw uniffi handle of a generated object (what the hot calls take), checked by class.
  def self.native_handle(object, klass)
    raise TypeError, "expected a #{klass}, got #{object.class}" unless object.is_a?(klass)

    object.instance_variable_get(:@handle)
  end
end

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
  # The generated module: `NativeAdapter` (cheap synchronous calls) and the `adapter_*` async
  # functions (blocking work on a core thread; the GVL is released while Ruby waits).
  Native = ::OjsRubyNative

  # The calls made per job or per commit, plain C functions of the same library
  # (`src/hot.rs`), bound with the ffi gem: Ruby strings go in as pointers and the answer comes
  # back in a buffer the caller owns, instead of uniffi's per-byte lowering in Ruby, which cost
  # more per call than the INSERT itself (docs/rails.md, "Performance"). They hold the GVL:
  # they never block and never call Ruby. OJS::Adapter#stage_job and #enqueue_after_commit
  # read the answers.
  module NativeStaging
    extend FFI::Library
    ffi_lib File.join(__dir__, "native", "libojs_ruby_native.so")

    # A text argument: (pointer to the String's bytes or nil, bytesize).
    TEXT = %i[buffer_in size_t].freeze

    # (stager, type, args, options, meta, context, with_sql, out, out_capacity) -> int64
    attach_function :stage_job, :ojs_ruby_stage_job,
                    [:uint64, *TEXT, *TEXT, *TEXT, *TEXT, *TEXT, :int, :pointer, :size_t], :int64
    # (stager, jobs_json, context, out, out_capacity) -> int64
    attach_function :stage, :ojs_ruby_stage, [:uint64, *TEXT, *TEXT, :pointer, :size_t], :int64
    # (adapter registry id, job ids joined by "\n") -> 0, or -1 for an unknown id
    attach_function :notify_committed, :ojs_ruby_notify_committed, [:uint64, *TEXT], :int

    # The answer of a call that panicked (a bug): nothing was written.
    PANICKED = -(2**63)
  end
end

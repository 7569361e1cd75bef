# frozen_string_literal: true

# Loads the uniffi bindings generated at build time (`native/ojs_ruby_native.rb`) and the
# native library shipped beside them (`native/libojs_ruby_native.so`).
#
# On Ruby 3.1 `io/wait` must be loaded before the bindings: their async calls wait on a pipe
# with IO#wait_readable (docs/toolchain.md).
require "io/wait"
require_relative "native/ojs_ruby_native"

module OJS
  # The generated module: `NativeAdapter` (cheap synchronous calls) and the `adapter_*` async
  # functions (blocking work on a core thread; the GVL is released while Ruby waits).
  Native = ::OjsRubyNative
end

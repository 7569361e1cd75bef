# frozen_string_literal: true

# The C functions are declared twice: in Rust (`src/hot.rs`, `src/events.rs` and `src/worker.rs`, `extern "C"`) and for the
# ffi gem (`lib/ojs/native.rb`, `attach_function`). Nothing in ffi checks one against the other:
# a mismatch would corrupt memory instead of failing. This test parses both files and compares
# every function's name, argument types and return type.

require_relative "test_helper"

class NativeSignatureTest < Minitest::Test
  # The Rust files that declare `extern "C"` functions.
  C_SOURCES = %w[hot.rs events.rs worker.rs].map { |name| File.join(TestSupport::ROOT, "bindings-ruby", "src", name) }

  # The ffi type each Rust FFI type must be declared as.
  RUST_TO_FFI = {
    "u64" => "uint64", "i64" => "int64", "u32" => "uint32", "i32" => "int32", "u8" => "uint8", "i8" => "int8",
    "usize" => "size_t", "*const u8" => "buffer_in", "*mut u8" => "pointer",
    "&mut RustCallStatus" => "pointer", "()" => "void",
    # uniffi's buffer by value (a lowered String / Option<String>), typedef'd in native.rb
    "RustBuffer" => "rust_buffer"
  }.freeze

  # name => [argument ffi types, return ffi type] of the `extern "C"` functions in `source`.
  def self.rust_declarations(source)
    source.scan(/pub\s+unsafe\s+extern\s+"C"\s+fn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^{]+?))?\s*\{/m).to_h do |name, args, ret|
      types = args.split(",").map(&:strip).reject(&:empty?).map do |arg|
        rust = arg.split(":", 2).last.strip
        RUST_TO_FFI.fetch(rust) { raise "#{name}: no ffi type for the Rust type #{rust.inspect}" }
      end
      [name, [types, RUST_TO_FFI.fetch((ret || "()").strip) { raise "#{name}: no ffi type for #{ret.inspect}" }]]
    end
  end

  # name => [argument ffi types, return ffi type] of the `attach_function` calls in `source`.
  def self.ruby_declarations(source)
    source.scan(/attach_function\s+:(\w+),\s*%i\[([^\]]*)\],\s*:(\w+)/m).to_h do |name, args, ret|
      [name, [args.split, ret]]
    end
  end

  def native_rb
    path = $LOADED_FEATURES.grep(%r{/lib/ojs/native\.rb\z}).first
    assert path, "lib/ojs/native.rb is loaded"
    path
  end

  def test_every_attach_function_matches_its_rust_declaration
    rust = C_SOURCES.map { |path| self.class.rust_declarations(File.read(path)) }.reduce(:merge)
    ruby = self.class.ruby_declarations(File.read(native_rb))
    refute_empty rust, "src/hot.rs, src/events.rs and src/worker.rs declare the C functions"
    assert_equal rust.keys.sort, ruby.keys.sort, "the same functions on both sides"
    rust.each do |name, (args, ret)|
      assert_equal [args, ret], ruby.fetch(name), "#{name}: native.rb's attach_function differs from src/hot.rs"
    end
  end

  # The comparison itself fails on a difference (a changed type, one argument less).
  def test_a_difference_is_seen
    rust = self.class.rust_declarations(<<~RUST)
      #[unsafe(no_mangle)]
      pub unsafe extern "C" fn f(a: u64, b: *const u8, n: usize, status: &mut RustCallStatus) -> u64 {
      }
    RUST
    assert_equal({ "f" => [%w[uint64 buffer_in size_t pointer], "uint64"] }, rust)
    ruby = self.class.ruby_declarations("attach_function :f, %i[uint64 buffer_in int pointer], :uint64")
    refute_equal rust["f"], ruby["f"]
    ruby = self.class.ruby_declarations("attach_function :f, %i[uint64 buffer_in size_t], :uint64")
    refute_equal rust["f"], ruby["f"]
  end

  # The handles the C functions take are the uniffi objects' own.
  def test_the_hot_calls_take_the_uniffi_handles
    bridge = OJS::Native::Bridge.new('{"adapter": {}}', false, "config.url", false)
    assert_raises(TypeError) { OJS.native_handle(bridge, OJS::Native::Stager) }
    assert_equal bridge.instance_variable_get(:@handle), OJS.native_handle(bridge, OJS::Native::Bridge)
    stager = bridge.stager("sqlite", "question")
    assert_kind_of Integer, OJS.native_handle(stager, OJS::Native::Stager)
  end

  # One version: the gem's is the workspace's (`[workspace.package] version`, which the native
  # library is built with).
  def test_the_gem_version_is_the_workspace_version
    assert_equal OJS::Native.version, OJS::VERSION
    cargo = File.read(File.join(TestSupport::ROOT, "Cargo.toml"))[/\[workspace\.package\].*?^version\s*=\s*"([^"]+)"/m, 1]
    assert_equal cargo, OJS::VERSION
  end
end

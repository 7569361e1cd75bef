# frozen_string_literal: true

# The C functions of the native library are declared twice: in Rust (`src/*.rs`,
# `extern "C"`) and for the ffi gem (`lib/ojs/native.rb`, `attach_function`). Nothing in ffi
# checks one against the other: a mismatch would corrupt memory instead of failing. This test
# parses both sides and compares every function's name, argument types, return type and
# whether it releases the GVL (`blocking: true` exactly where the Rust doc says it is bound
# so); then it drives the protocol's channels (an answer, an error, a panic, a freed object).

require_relative "test_helper"

class NativeSignatureTest < Minitest::Test
  # The Rust files that declare `extern "C"` functions.
  C_SOURCES = Dir[File.join(TestSupport::ROOT, "bindings-ruby", "src", "*.rs")].sort.freeze

  # The native objects, passed as opaque pointers.
  OBJECTS = %w[Bridge Stager RelayFrames EventFeed Worker].freeze

  # The ffi type each Rust FFI type must be declared as.
  RUST_TO_FFI = {
    "u64" => "uint64", "i64" => "int64", "u32" => "uint32", "i32" => "int32", "u8" => "uint8", "i8" => "int8",
    "usize" => "size_t", "*const u8" => "buffer_in", "*mut u8" => "pointer", "*mut OjsRubyOut" => "pointer",
    "()" => "void"
  }.merge(OBJECTS.flat_map { |name| [["*const #{name}", "pointer"], ["*mut #{name}", "pointer"]] }.to_h).freeze

  RUST_FN = /
    ((?:^[ \t]*\/\/\/[^\n]*\n)*)             # the doc comment
    [ \t]*\#\[unsafe\(no_mangle\)\]\s*\n
    (?:[ \t]*\#\[[^\n]*\]\s*\n)*             # other attributes
    [ \t]*pub\s+(?:unsafe\s+)?extern\s+"C"\s+fn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^{]+?))?\s*\{
  /mx

  # name => [argument ffi types, return ffi type, blocking] of the `extern "C"` functions in
  # `source`; blocking when the doc comment says "Bound with `blocking: true`".
  def self.rust_declarations(source)
    source.scan(RUST_FN).to_h do |doc, name, args, ret|
      types = args.split(",").map(&:strip).reject(&:empty?).map do |arg|
        rust = arg.split(":", 2).last.strip
        RUST_TO_FFI.fetch(rust) { raise "#{name}: no ffi type for the Rust type #{rust.inspect}" }
      end
      returns = RUST_TO_FFI.fetch((ret || "()").strip) { raise "#{name}: no ffi type for #{ret.inspect}" }
      [name, [types, returns, doc.gsub(%r{^\s*///}, "").gsub(/\s+/, " ").include?("Bound with `blocking: true`")]]
    end
  end

  # name => [argument ffi types, return ffi type, blocking] of the `attach_function` calls in
  # `source`.
  def self.ruby_declarations(source)
    source.scan(/attach_function\s+:(\w+),\s*%i\[([^\]]*)\],\s*:(\w+)(,\s*blocking:\s*true)?/m).to_h do |name, args, ret, blocking|
      [name, [args.split, ret, !blocking.nil?]]
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
    assert_operator rust.length, :>, 40, "src/*.rs declare the C functions"
    assert_equal rust.keys.sort, ruby.keys.sort, "the same functions on both sides"
    rust.each do |name, declaration|
      assert_equal declaration, ruby.fetch(name), "#{name}: native.rb's attach_function differs from src/*.rs " \
                                                  "(argument types, return type, blocking)"
    end
    # What the library exports is what the sources declare (a function added without
    # `#[unsafe(no_mangle)]` would not be exported; one exported but not parsed, not checked).
    library = File.join(File.dirname(native_rb), "native", "libojs_ruby_native.so")
    exported = begin
      IO.popen(["nm", "-D", "--defined-only", library], &:read).scan(/ T (ojs_ruby_\w+)$/).flatten
    rescue Errno::ENOENT # no binutils (the Rails 7.2 root): the source comparison still ran
      []
    end
    assert_equal rust.keys.sort, exported.sort unless exported.empty?
  end

  # The comparison itself fails on a difference (a changed type, one argument less, a wait
  # bound without `blocking: true`).
  def test_a_difference_is_seen
    rust = self.class.rust_declarations(<<~RUST)
      /// Waits. Bound with `blocking: true`.
      #[unsafe(no_mangle)]
      pub unsafe extern "C" fn f(a: *const Bridge, b: *const u8, n: usize, out: *mut OjsRubyOut) -> i32 {
      }
    RUST
    assert_equal({ "f" => [%w[pointer buffer_in size_t pointer], "int32", true] }, rust)
    same = "attach_function :f, %i[pointer buffer_in size_t pointer], :int32, blocking: true"
    assert_equal rust["f"], self.class.ruby_declarations(same)["f"]
    ruby = self.class.ruby_declarations("attach_function :f, %i[pointer buffer_in int pointer], :int32, blocking: true")
    refute_equal rust["f"], ruby["f"]
    ruby = self.class.ruby_declarations("attach_function :f, %i[pointer buffer_in size_t], :int32, blocking: true")
    refute_equal rust["f"], ruby["f"]
    ruby = self.class.ruby_declarations("attach_function :f, %i[pointer buffer_in size_t pointer], :int32")
    refute_equal rust["f"], ruby["f"]
  end

  # An answer, the core's error and a panic, each through the one out-parameter.
  def test_the_protocol_channels
    assert_equal OJS::VERSION, OJS::Native.version
    error = assert_raises(OJS::InvalidConfig) do
      OJS::Native::Bridge.new('{"adapter": {"relay": {"batch_size": "many"}}}', false, "config.url", false)
    end
    assert_equal "INVALID_CONFIG", error.code
    panic = assert_raises(OJS::Native::InternalError) do
      out = OJS::Native.out
      OJS::Native.done(OJS::Native.ojs_ruby_panic_for_test(out), out)
    end
    assert_includes panic.message, "a panic asked for by a test"
    # Not UTF-8: the core's error for the part, no crash.
    bad = "\xff\xfe".b
    error = assert_raises(OJS::Error) { OJS::Native.database_url_from_parts(bad) }
    assert_equal "config", error.field
    assert_includes error.message, "UTF-8"
    # The thread's out-parameter is usable after each of them.
    assert_equal OJS::VERSION, OJS::Native.version
  end

  # The out-parameter's layout and constants are the Rust struct's (`src/lib.rs`).
  def test_the_out_parameter_is_the_rust_struct
    lib = File.read(File.join(TestSupport::ROOT, "bindings-ruby", "src", "lib.rs"))
    fields = lib[/pub struct OjsRubyOut \{(.*?)^\}/m, 1].scan(/^\s*pub (\w+):/).flatten.map(&:to_sym)
    assert_equal fields, OJS::Native::Out.members
    assert_equal Integer(lib[/pub const INLINE: usize = (\d+);/, 1]), OJS::Native::INLINE
    assert_includes lib, "pub const NO_TEXT: usize = usize::MAX;"
    assert_equal 2**64 - 1, OJS::Native::NO_TEXT
    assert_equal 24 + OJS::Native::INLINE, OJS::Native::Out.size
  end

  # A text longer than the out-parameter holds crosses Rust-owned, and is freed; one that fits,
  # inline; none is nil.
  def test_texts_inline_rust_owned_and_none
    long = "x" * (OJS::Native::INLINE + 10)
    error = JSON.parse(OJS::Native.unencodable("args", long, "why"))
    assert_equal "#{long}: why", error["message"]
    short = JSON.parse(OJS::Native.unencodable("args", "p", "why"))
    assert_equal "p: why", short["message"]
    bridge = OJS::Native::Bridge.new('{"adapter": {}}', false, "config.url", false)
    assert_nil bridge.notice
  end

  # Objects are opaque pointers freed once by their AutoPointer (here at once, by #free).
  def test_objects_are_freed_by_their_auto_pointer
    bridge = OJS::Native::Bridge.new('{"adapter": {}}', false, "config.url", false)
    assert_kind_of FFI::AutoPointer, bridge.pointer
    stager = bridge.stager("sqlite", "question")
    assert_kind_of FFI::AutoPointer, stager
    bridge.pointer.free # the Stager holds its own reference to the core's bridge
    out = OJS::Native.out
    text = OJS::Native.text(OJS::Native.ojs_ruby_stager_stage_job(stager, "t", 1, "[1]", 3, nil, 0, nil, 0, nil, 0, 1,
                                                                   out), out)
    assert_match(/\AINSERT INTO /, text)
    stager.free
  end

  # One version: the gem's is the workspace's (`[workspace.package] version`, which the native
  # library is built with).
  def test_the_gem_version_is_the_workspace_version
    assert_equal OJS::Native.version, OJS::VERSION
    cargo = File.read(File.join(TestSupport::ROOT, "Cargo.toml"))[/\[workspace\.package\].*?^version\s*=\s*"([^"]+)"/m, 1]
    assert_equal cargo, OJS::VERSION
  end
end

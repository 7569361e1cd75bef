# frozen_string_literal: true

require_relative "lib/ojs/version"

Gem::Specification.new do |spec|
  spec.name = "ojs-adapter-rails"
  spec.version = OJS::VERSION
  spec.summary = "Transactional job enqueue for Rails / ActiveRecord (OJS Framework Adapter)"
  spec.description = "OJS.enqueue_after_commit writes an outbox row in your ActiveRecord " \
                     "transaction; a relay in Rust sends it to the OJS backend after the " \
                     "outermost commit, at least once, never before and never if it rolls back."
  spec.license = "Apache-2.0"
  spec.authors = ["OJS adapter authors"]
  spec.homepage = "https://openjobspec.org"
  spec.required_ruby_version = ">= 3.1"
  # A platform gem: it ships the native library built for this platform.
  spec.platform = Gem::Platform.local
  spec.files = Dir["lib/**/*.rb", "lib/**/*.rake", "lib/ojs/native/*.so", "README.md"]
  spec.require_paths = ["lib"]
  spec.add_dependency "activerecord", ">= 6.1", "< 9"
  spec.add_dependency "ffi", "~> 1.15"
end

# frozen_string_literal: true

# Bundler's and RubyGems' autorequire use the gem's name: load the adapter.
require_relative "ojs"

# frozen_string_literal: true

module OJS
  # The workspace version (Cargo.toml `workspace.package.version`); test.sh checks they agree.
  VERSION = "0.1.0"
end

#!/usr/bin/env bash
# Builds the gem ojs-adapter-rails and installs it into a fresh GEM_HOME under target/.
#   bindings-ruby/build.sh [debug|release]
# Prints nothing but progress on stderr; the last line on stdout is the GEM_HOME.
# Idempotent: Ruby, ActiveRecord 6.1 and friends come from Debian packages (scripts/install.sh;
# RubyGems is not reachable here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
profile=${1:-debug}
cd "$root"

"$root/scripts/install.sh" >&2

# The devserver and the relay are tools: always debug. The native library: the profile asked.
echo "build: cargo build (native library: $profile)" >&2
cargo build --quiet -p ojs-devserver -p ojs-relay >&2
if [[ $profile == release ]]; then
  cargo build --quiet --release -p ojs-ruby-native >&2
else
  cargo build --quiet -p ojs-ruby-native >&2
fi
lib="$root/target/$profile/libojs_ruby_native.so"

# One version across Cargo and the gemspec.
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version *= *"\(.*\)"/\1/p}' Cargo.toml)
gem_version=$(ruby -r "$here/lib/ojs/version" -e 'print OJS::VERSION')
if [[ $cargo_version != "$gem_version" ]]; then
  echo "build: version mismatch: Cargo $cargo_version, gem $gem_version (lib/ojs/version.rb)" >&2
  exit 1
fi

stage="$root/target/ruby-gem-build"
rm -rf "$stage"
mkdir -p "$stage/lib/ojs/native"
cp -r "$here/lib" "$here/ojs-adapter-rails.gemspec" "$here/README.md" "$stage/"
# The native library beside lib/ojs/native.rb, which binds its C functions with the ffi gem.
cp "$lib" "$stage/lib/ojs/native/"
(cd "$stage" && gem build --quiet ojs-adapter-rails.gemspec >&2)
gem_file=$(ls "$stage"/ojs-adapter-rails-*.gem)

gem_home="$root/target/ruby-gems/$profile"
rm -rf "$gem_home"
mkdir -p "$gem_home"
system_path=$(ruby -e 'print Gem.path.join(":")')
GEM_HOME="$gem_home" GEM_PATH="$gem_home:$system_path" \
  gem install --local --no-document --quiet "$gem_file" >&2
echo "build: installed $(basename "$gem_file") into $gem_home" >&2
echo "$gem_home"

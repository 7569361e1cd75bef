#!/usr/bin/env bash
# The whole Ruby suite of test.sh (conformance included) on Ruby 3.3 and ActiveRecord/ActiveJob/
# Railties 7.2, inside the Debian 13 root of scripts/trixie-root.sh (built once, cached outside
# the repository). test.sh runs the same suite on the host's ActiveRecord 6.1.
#   OJS_TEST_DATABASE_URL=postgres://... OJS_TEST_MYSQL_URL=mysql://... \
#     bindings-ruby/test-rails72.sh [minitest options]
# The root has no cargo: the native library, the devserver and the gem file are built on the
# host (build.sh); inside the root the gem is installed into target/ruby-gems/rails-7.2 with the
# root's Ruby and the suite runs against it, the host's PostgreSQL and MariaDB reached on
# 127.0.0.1 (the root shares the network). Conformance matrix: target/matrix/rails-7.2.tsv. The last line is
# minitest's summary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

if [[ ${1:-} == --inside-root ]]; then
  # Second stage, inside the root (the repository is mounted at the same path).
  shift
  gem_file=$(ls "$root"/target/ruby-gem-build/ojs-adapter-rails-*.gem)
  version=$(ruby -ractive_record -e 'print ActiveRecord::VERSION::MAJOR, ".", ActiveRecord::VERSION::MINOR')
  gem_home="$root/target/ruby-gems/rails-$version"
  rm -rf "$gem_home"
  mkdir -p "$gem_home"
  GEM_HOME="$gem_home"
  GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')"
  export GEM_HOME GEM_PATH OJS_REQUIRE_INSTALLED_GEM=1
  gem install --local --no-document --quiet "$gem_file" >&2
  echo "test-rails72: installed $(basename "$gem_file") into $gem_home (ruby $(ruby -e 'print RUBY_VERSION'))" >&2
  cd "$here"
  exec ruby -Itest -e 'Dir["test/*_test.rb"].sort.each { |file| require File.expand_path(file) }' "$@"
fi

if [[ -z ${OJS_TEST_DATABASE_URL:-} ]]; then
  echo "test-rails72.sh: OJS_TEST_DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:55432/postgres)" >&2
  exit 2
fi
if [[ -z ${OJS_TEST_MYSQL_URL:-} ]]; then
  echo "test-rails72.sh: OJS_TEST_MYSQL_URL is required (a MariaDB server, e.g. mysql://ojs@127.0.0.1:33073/ojs_test; scripts/mariadb.sh)" >&2
  exit 2
fi
"$here/build.sh" debug >/dev/null          # native library, devserver, gem file (on the host)
"$root/scripts/trixie-root.sh" ensure >/dev/null
# Puma in the root too (test/events_server_test.rb), checked by its package state there.
"$root/scripts/trixie-root.sh" run -- sh -c '
  [ "$(dpkg-query -W -f="\${Status}" puma 2>/dev/null)" = "install ok installed" ] && exit 0
  echo "test-rails72: apt-get install puma in the root" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends puma \
      && apt-get clean; } >/tmp/install-puma.log 2>&1 || { tail -n 20 /tmp/install-puma.log >&2; exit 1; }'
exec "$root/scripts/trixie-root.sh" run -- env OJS_TEST_DATABASE_URL="$OJS_TEST_DATABASE_URL" \
  OJS_TEST_MYSQL_URL="$OJS_TEST_MYSQL_URL" "$here/test-rails72.sh" --inside-root "$@"

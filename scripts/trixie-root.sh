#!/usr/bin/env bash
# A Debian 13 (trixie) root with Ruby 3.3 and Rails 7.2 from Debian packages, in which the
# Rails adapter is tested next to Debian 12's Rails 6.1 (docs/rails.md, "Tests").
#   scripts/trixie-root.sh [ensure]          build the root once, repair it, print its path
#   scripts/trixie-root.sh run [--] CMD...   run CMD inside the root (ensures it first)
#   scripts/trixie-root.sh path              print the root's path
# The root lives outside the repository: $OJS_TRIXIE_ROOT, default /var/cache/ojs-trixie-root.
# The mirror is this machine's own (its apt sources), never written here. Its state is checked
# by package state (dpkg-query inside the root), so a half-built root is repaired, not trusted.
# `run` works in a private mount namespace: /proc, /dev, /dev/pts and the repository (at the
# same path as on the host) are bind-mounted for CMD only and unmounted in reverse order when
# it ends, also on failure; nothing stays mounted on the host. The network is shared, so
# servers on 127.0.0.1 and binaries built on the host work from inside.
# Quiet: debootstrap and apt write to target/trixie-root.log; on failure its tail is printed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
script="$repo/scripts/trixie-root.sh"
root=${OJS_TRIXIE_ROOT:-/var/cache/ojs-trixie-root}
root=${root%/}
suite=trixie
# What the Ruby suite needs in the root (Ruby 3.3, ActiveRecord/ActiveJob/Railties 7.2,
# ffi, sqlite3, pg, minitest, rack, rake). `gem build` runs on the host, so no ruby-dev.
packages=(ruby ruby-ffi ruby-activerecord ruby-activejob ruby-railties ruby-sqlite3 ruby-pg ruby-mysql2
  ruby-minitest ruby-rack rake)
log="$repo/target/trixie-root.log"

say() { echo "trixie-root: $*" >&2; }
die() { say "$*"; exit 1; }

case "$root" in
  "" | / | /var | /var/cache | /usr | /home | /tmp) die "refusing OJS_TRIXIE_ROOT=$root" ;;
esac
case "$root/" in "$repo"/*) die "the root must live outside the repository ($root)" ;; esac

# The main archive's URI from this machine's apt sources (deb822 first, then the one-line
# format), skipping the security archive.
mirror() {
  local uri=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '
      /^[[:space:]]*$/ { if (u != "" && s !~ /security/) { print u; exit } u = ""; s = ""; next }
      /^URIs:/ { u = $2 } /^Suites:/ { s = $0 }
      END { if (u != "" && s !~ /security/) print u }' /etc/apt/sources.list.d/debian.sources | head -n 1)
  fi
  if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {
      for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
  echo "$uri"
}

# Runs a command with its output appended to the log, the mirror's address masked.
logged() {
  local host
  host=$(mirror | sed -E 's#^[a-z]+://([^/:]+).*#\1#')
  set +e
  "$@" 2>&1 | sed -u "s#$host#<mirror>#g" >>"$log"
  local status=${PIPESTATUS[0]}
  set -e
  return "$status"
}

fail_with_log() {
  tail -n 30 "$log" >&2 || true
  die "$1 (full log: $log)"
}

installed_in_root() {
  [ "$(chroot "$root" dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# Nothing of the host may be mounted under the root before it is removed or rebuilt.
assert_unmounted() {
  if awk -v r="$root" '$2 == r || index($2, r "/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    die "something is mounted under $root; unmount it first (findmnt -R $root)"
  fi
}

# Inside a private mount namespace (see `run`): bind-mounts, runs, unmounts in reverse order.
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  mounted=()
}
bind() {
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}
with_mounts() {
  trap unmount_all EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  bind /proc /proc
  bind /dev /dev
  if mountpoint -q /dev/pts; then bind /dev/pts /dev/pts; fi
  if [ "${OJS_TRIXIE_MOUNT_REPO:-1}" = 1 ]; then bind "$repo" "$repo"; fi
  # Name resolution as on the host (the mirror, localhost).
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true
  local status=0
  "$@" || status=$?
  unmount_all
  trap - EXIT
  return "$status"
}

build_base() {
  assert_unmounted
  if [ -e "$root" ]; then
    say "the base system in $root is incomplete: rebuilding it"
    rm -rf --one-file-system "$root"
  fi
  mkdir -p "$(dirname "$root")"
  say "debootstrap --variant=minbase $suite into $root (a few minutes; log: $log)"
  logged debootstrap --variant=minbase "$suite" "$root" "$(mirror)" \
    || fail_with_log "debootstrap failed"
}

install_packages() {
  local missing=("$@")
  say "apt-get install ${missing[*]} in the root (log: $log)"
  logged env OJS_TRIXIE_MOUNT_REPO=0 unshare --mount --propagation private -- \
    "$script" __in-namespace chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" && apt-get clean' sh "${missing[@]}" \
    || fail_with_log "apt-get install in the root failed"
}

ensure() {
  mkdir -p "$repo/target" "$(dirname "$root")"
  "$repo/scripts/install.sh" >&2 # debootstrap is in its package list
  exec 9>"$root.lock"
  flock 9
  if ! installed_in_root apt || ! installed_in_root dpkg; then
    build_base
    installed_in_root apt || fail_with_log "debootstrap left no working apt in $root"
  fi
  local missing=() package
  for package in "${packages[@]}"; do installed_in_root "$package" || missing+=("$package"); done
  if [ ${#missing[@]} -gt 0 ]; then
    install_packages "${missing[@]}"
    for package in "${missing[@]}"; do
      installed_in_root "$package" || fail_with_log "$package is still not installed in the root"
    done
  fi
  exec 9>&-
}

command=${1:-ensure}
[ $# -gt 0 ] && shift
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
case "$command" in
  ensure)
    ensure
    echo "$root"
    ;;
  path)
    echo "$root"
    ;;
  run)
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "usage: scripts/trixie-root.sh run [--] CMD..."
    ensure
    workdir=$PWD
    case "$workdir/" in "$repo"/*) ;; *) workdir=$repo ;; esac
    exec unshare --mount --propagation private -- "$script" __in-namespace \
      chroot "$root" /usr/bin/env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      sh -c 'cd "$1" && shift && exec "$@"' sh "$workdir" "$@"
    ;;
  __in-namespace)
    with_mounts "$@"
    ;;
  *)
    die "unknown command $command (ensure | run -- CMD... | path)"
    ;;
esac

#!/usr/bin/env bash
# Builds the ojs-adapter-django wheel into target/py-wheels-<profile> and prints its path (used by
# test.sh, demo.sh, bench.sh). Installs what is missing: Debian packages
# (scripts/install.sh), maturin (pip, into target/py-venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

# System packages (the extension links the system SQLite; its bindings need libclang).
"$repo/scripts/install.sh" >&2

# The build tool (maturin) in target/py-venv, installed only if missing.
tools="$repo/target/py-venv"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
"$tools/bin/python" -m pip show -q maturin >/dev/null 2>&1 \
  || "$tools/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2" >&2

# The wheel, built in the workspace's target dir. The core links the system libsqlite3 (the one
# Python's own sqlite3 module uses): two SQLite copies in one process do not see each other's
# file locks and lose committed rows (docs/django.md, "SQLite"). No auditwheel repair: it would
# vendor a renamed copy of libsqlite3 into the wheel, the very thing to avoid.
# OJS_WHEEL_PROFILE=release builds optimised (bench.sh); the default is a debug build (tests).
profile=${OJS_WHEEL_PROFILE:-dev}
wheels="$repo/target/py-wheels-$profile"
# One build at a time into this folder (test.sh, demo.sh and bench.sh may run side by side).
exec 9>"$wheels.lock"
flock 9
rm -rf "$wheels"
release=(); [ "$profile" = release ] && release=(--release)
"$tools/bin/maturin" build -q "${release[@]}" -m "$here/Cargo.toml" --out "$wheels" \
    --compatibility linux --auditwheel skip >&2
ls "$wheels"/ojs_adapter_django-*.whl


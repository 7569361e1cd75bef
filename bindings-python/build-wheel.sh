#!/usr/bin/env bash
# Builds the ojs-adapter-django wheel into target/py-wheels-<profile> and prints its path (used by
# test.sh, demo.sh, bench.sh). Installs what is missing: Debian packages
# (scripts/install.sh), maturin (pip, into target/py-venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

# System packages (the extension links the system SQLite; its bindings need libclang).
"$repo/scripts/install.sh" >&2

# Build tools (maturin) in target/py-venv, each installed only if missing.
tools="$repo/target/py-venv"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
wanted=("maturin>=1.16,<2" "django==5.2.*" "psycopg[binary]" "pytest" "pytest-django")
names=(maturin django psycopg pytest pytest-django)
to_install=()
for i in "${!names[@]}"; do
  "$tools/bin/python" -m pip show -q "${names[$i]}" >/dev/null 2>&1 || to_install+=("${wanted[$i]}")
done
[ ${#to_install[@]} -eq 0 ] || "$tools/bin/python" -m pip install -q "${to_install[@]}" >&2

# The wheel, built in the workspace's target dir. The core links the system libsqlite3 (the one
# Python's own sqlite3 module uses): two SQLite copies in one process do not see each other's
# file locks and lose committed rows (docs/django.md, "SQLite"). No auditwheel repair: it would
# vendor a renamed copy of libsqlite3 into the wheel, the very thing to avoid.
# OJS_WHEEL_PROFILE=release builds optimised (bench.sh); the default is a debug build (tests).
profile=${OJS_WHEEL_PROFILE:-dev}
wheels="$repo/target/py-wheels-$profile"
rm -rf "$wheels"
release=(); [ "$profile" = release ] && release=(--release)
"$tools/bin/maturin" build -q "${release[@]}" -m "$here/Cargo.toml" --out "$wheels" \
    --compatibility linux --auditwheel skip >&2
ls "$wheels"/ojs_adapter_django-*.whl


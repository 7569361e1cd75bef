#!/usr/bin/env bash
# Tests ojs-adapter-django as a user gets it: builds the wheel (maturin), installs THAT wheel
# into a fresh virtualenv under target/, and runs the pytest suite (conformance matrix on
# SQLite and PostgreSQL, bad input, Django integration) against the installed package and a
# real ojs-devserver. Idempotent; installs only what is missing.
#
#   OJS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres bindings-python/test.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
: "${OJS_TEST_DATABASE_URL:?OJS_TEST_DATABASE_URL must name a PostgreSQL server (scripts/test.sh starts one), e.g. postgres://postgres@127.0.0.1:55432/postgres}"

cargo build -q -p ojs-devserver
export OJS_DEVSERVER_BIN="$repo/target/debug/ojs-devserver"
wheel=$("$here/build-wheel.sh")

# A fresh environment holding the wheel and the test dependencies, nothing from the source tree.
venv="$repo/target/py-test-venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "$wheel" "django==5.2.*" "psycopg[binary]" pytest pytest-django

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
"$venv/bin/python" -c 'import ojs_adapter_django as m; print("testing the installed wheel:", m.__file__)'
OJS_PY_TEST_DIR="$work" "$venv/bin/python" -m pytest -q -rs tests "$@"

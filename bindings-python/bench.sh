#!/usr/bin/env bash
# Staging benchmark of ojs-adapter-django (bench/bench.py): per job, enqueue_after_commit vs a
# raw INSERT of the same row on the same Django cursor, and bulk of 1,000 vs 1,000 single
# calls, on a SQLite file and on PostgreSQL when OJS_TEST_DATABASE_URL is set. Uses the release
# build of the wheel.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
wheel=$(OJS_WHEEL_PROFILE=release "$here/build-wheel.sh")
venv="$repo/target/py-bench-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip show -q django >/dev/null 2>&1 || "$venv/bin/python" -m pip install -q "django==5.2.*" "psycopg[binary]"
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
"$venv/bin/python" "$here/bench/bench.py"

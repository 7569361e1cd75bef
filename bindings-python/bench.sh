#!/usr/bin/env bash
# Staging benchmark of ojs-adapter-django (bench/bench.py), issue 16's two ratios, on a SQLite
# file and on PostgreSQL when OJS_TEST_DATABASE_URL is set: per job, enqueue_after_commit vs a
# raw parameterized INSERT of the same row on the same Django cursor (target <= 1.10x), and
# enqueue_bulk of 1,000 vs ONE raw multi-row INSERT of the same 1,000 rows (the core's bulk
# statement, same columns and literals) on the same connection (target <= 1.25x per job).
# Variants interleaved, rotating order, medians of BENCH_ROUNDS (15). Release build of the wheel.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
wheel=$(OJS_WHEEL_PROFILE=release "$here/build-wheel.sh")
venv="$repo/target/py-bench-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip show -q django >/dev/null 2>&1 || "$venv/bin/python" -m pip install -q "django==5.2.*" "psycopg[binary]"
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
"$venv/bin/python" "$here/bench/bench.py"

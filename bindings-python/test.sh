#!/usr/bin/env bash
# Tests ojs-adapter-django as a user gets it, on every Django version it supports: builds the
# wheel once (maturin, abi3), installs THAT wheel into one virtualenv per Django version under
# target/, and runs the pytest suite (conformance matrix on SQLite and PostgreSQL, bad input,
# Django integration) in each against the installed package and a real ojs-devserver.
# Each run writes its conformance column to target/matrix/django-<MAJOR.MINOR>.tsv.
# Idempotent: a venv gets packages only when one is missing or at another version.
#
#   OJS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres \
#   OJS_TEST_MYSQL_URL=mysql://ojs@127.0.0.1:33071/ojs_test bindings-python/test.sh [pytest args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
: "${OJS_TEST_DATABASE_URL:?OJS_TEST_DATABASE_URL must name a PostgreSQL server (scripts/test.sh starts one), e.g. postgres://postgres@127.0.0.1:55432/postgres}"
: "${OJS_TEST_MYSQL_URL:?OJS_TEST_MYSQL_URL must name a MariaDB or MySQL server whose user may create databases (scripts/test.sh starts one), e.g. mysql://ojs@127.0.0.1:33071/ojs_test}"

# What is tested, in one place: "<Django version> <Python version>" per run. The first is the
# declared floor of pyproject.toml (Django >= 5.2 LTS on Python >= 3.10, the oldest Python the
# abi3 wheel supports); the second the newest Django release on the newest Python here.
# A run may name requirements of its own after the Python version: Django 5.2 has no
# django.tasks, so its run gets the backport the tasks backend uses there (docs/django-tasks.md).
RUNS=(
  "5.2.19 3.10 django-tasks==0.12.0 django-stubs-ext==6.0.9"
  "6.1.3 3.13"
)
# The other test dependencies, the same in every venv.
# prometheus-client parses the /metrics exposition of the Django mount, and uvicorn (with h11
# and click) serves the test project over ASGI (tests/test_events.py).
# opentelemetry-api and -sdk make the app's own spans (tests/test_tracing.py).
# mysqlclient is the driver of Django's MySQL backend (the "my" database, MariaDB); it builds
# from source against libmariadb-dev with pkg-config and a C compiler.
TEST_DEPS=("psycopg==3.3.9" "psycopg-binary==3.3.9" "mysqlclient==2.3.2" "pytest==9.2.0"
           "pytest-django==4.14.0" "prometheus-client==0.26.0" "uvicorn==0.54.0" "h11==0.16.0"
           "click==8.5.1" "opentelemetry-api==1.45.2" "opentelemetry-sdk==1.45.2")

say() { echo "py-test: $*"; }
logs="$repo/target/py-test-logs"
mkdir -p "$logs"
# One run at a time: the venvs, the wheel and target/matrix are shared.
exec 8>"$repo/target/py-test.lock"
flock -n 8 || { say "waiting for another bindings-python/test.sh to finish"; flock 8; }

# The interpreter of a Python version: pyenv's (highest patch release), else pythonX.Y on PATH.
find_python() {
  local version=$1 candidate
  candidate=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".*/bin/python"$version" 2>/dev/null \
              | sort -V | tail -n 1 || true)
  [ -n "$candidate" ] || candidate=$(command -v "python$version" || true)
  [ -n "$candidate" ] && "$candidate" -c 'import venv' 2>/dev/null || return 1
  echo "$candidate"
}

# The requirements of $1 (a venv's python) that are missing or at another version.
missing() {
  local python=$1; shift
  "$python" - "$@" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, _, wanted = spec.partition("==")
    try:
        if version(name) == wanted:
            continue
    except PackageNotFoundError:
        pass
    print(spec)
PY
}

# Runs a step quietly: its whole output goes to $log, shown only when it fails.
quietly() {
  if ! "$@" >>"$log" 2>&1; then
    echo "py-test: FAILED: $*" >&2
    cat "$log" >&2
    return 1
  fi
}

say "building ojs-devserver and the wheel (once, for every run)"
log="$logs/build.log"; : >"$log"
quietly cargo build -q -p ojs-devserver
export OJS_DEVSERVER_BIN="$repo/target/debug/ojs-devserver"
quietly "$here/build-wheel.sh"
wheel=$(tail -n 1 "$log")
[ -f "$wheel" ] || { echo "py-test: build-wheel.sh printed no wheel" >&2; cat "$log" >&2; exit 1; }
wheel_sum=$(sha256sum "$wheel" | cut -d' ' -f1)

# Sets up the venv of one run (idempotent) and prints nothing but progress lines.
prepare_venv() {
  local django=$1 python_version=$2 venv=$3 python wanted have
  shift 3   # the run's own requirements
  python=$(find_python "$python_version") \
    || { echo "py-test: Python $python_version not found (pyenv install $python_version)" >&2; return 1; }
  have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
  if [ "$have" != "$python_version" ]; then
    say "  creating $venv (Python $python_version)"
    rm -rf "$venv"
    quietly "$python" -m venv "$venv"
  fi
  mapfile -t wanted < <(missing "$venv/bin/python" "django==$django" "${TEST_DEPS[@]}" "$@")
  if [ ${#wanted[@]} -gt 0 ]; then
    say "  installing ${wanted[*]}"
    quietly "$venv/bin/python" -m pip install --disable-pip-version-check "${wanted[@]}"
  fi
  # The wheel's own version does not change between builds: its checksum says whether this
  # venv holds the one just built.
  if [ "$(cat "$venv/.ojs-wheel.sha256" 2>/dev/null)" != "$wheel_sum" ]; then
    say "  installing $(basename "$wheel")"
    quietly "$venv/bin/python" -m pip install --disable-pip-version-check --force-reinstall \
      --no-deps "$wheel"
    echo "$wheel_sum" >"$venv/.ojs-wheel.sha256"
  fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for run in "${RUNS[@]}"; do
  read -r django python_version extra <<<"$run"
  minor=${django%.*}
  venv="$repo/target/py-test-django-$minor"
  log="$logs/django-$minor.log"; : >"$log"
  say "Django $django on Python $python_version: venv $venv (pip output in $log)"
  # shellcheck disable=SC2086 # $extra: the run's requirements, one word each
  prepare_venv "$django" "$python_version" "$venv" $extra
  "$venv/bin/python" -c 'import django, ojs_adapter_django as m, sys; print("py-test:   testing the installed wheel", m.__file__, "with Django", django.get_version(), "on Python", sys.version.split()[0])'
  # Each run has its own SQLite directory and PostgreSQL and MariaDB test databases: nothing
  # of one run is seen by the next, even if one was interrupted.
  dir="$work/django-$minor"
  mkdir -p "$dir"
  if (cd "$here" && OJS_PY_TEST_DIR="$dir" OJS_PY_PG_TEST_DB="ojs_py_test_django_${minor/./_}" \
        OJS_PY_MY_TEST_DB="ojs_py_test_django_${minor/./_}" \
        "$venv/bin/python" -m pytest -q -rs tests "$@"); then
    say "Django $django: passed"
  else
    say "Django $django: FAILED"
    failed+=("$django")
  fi
  rm -rf "$dir"
done
if [ ${#failed[@]} -gt 0 ]; then
  say "failed on Django ${failed[*]}"
  exit 1
fi
say "passed on Django $(for run in "${RUNS[@]}"; do printf '%s ' "${run%% *}"; done)"

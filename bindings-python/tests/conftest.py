"""Fixtures shared by every test: one ojs-devserver per session, the PostgreSQL and MariaDB
requirements, and the default ``ojs`` pointed at the devserver."""

from __future__ import annotations

import os

import pytest

from support import Devserver

DATABASES = {"sqlite": "default", "postgres": "pg", "mariadb": "my"}
#: The database column names of target/matrix/*.tsv (scripts/matrix.sh).
MATRIX_DATABASE = {"sqlite": "sqlite", "postgres": "postgresql", "mariadb": "mariadb"}


def pytest_configure(config):
    if not os.environ.get("OJS_TEST_DATABASE_URL"):
        raise pytest.UsageError(
            "OJS_TEST_DATABASE_URL is unset: the tests need PostgreSQL "
            "(e.g. postgres://postgres@127.0.0.1:55432/postgres); bindings-python/test.sh passes it on"
        )
    if not os.environ.get("OJS_TEST_MYSQL_URL"):
        raise pytest.UsageError(
            "OJS_TEST_MYSQL_URL is unset: the tests need MariaDB or MySQL "
            "(e.g. mysql://ojs@127.0.0.1:33071/ojs_test); bindings-python/test.sh passes it on"
        )


@pytest.fixture(scope="session")
def devserver():
    server = Devserver()
    yield server
    server.stop()


@pytest.fixture(autouse=True, scope="session")
def _ojs_points_at_devserver(devserver):
    """The settings' OJS_CONFIG (used by the default ``ojs``) sends to the session devserver."""
    from django.conf import settings

    from ojs_adapter_django import ojs

    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "ojs_url": devserver.url}
    ojs.reset()
    yield
    ojs.reset()


@pytest.fixture
def backend(devserver):
    devserver.reset()
    return devserver


@pytest.fixture(params=list(DATABASES), ids=list(DATABASES))
def alias(request):
    """Runs a test once per database: yields the Django alias."""
    return DATABASES[request.param]


def pytest_terminal_summary(terminalreporter):
    """The conformance matrix (case x database) of this Django version: printed, and written to
    target/matrix/django-<MAJOR.MINOR>.tsv (``case<TAB>sqlite|postgresql|mariadb<TAB>PASS|FAIL|SKIP``,
    joined with the other runners' by scripts/matrix.sh) with a readable copy next to it (.txt)."""
    import sys

    import django

    module = sys.modules.get("test_conformance")
    if module is None or not module.RESULTS:
        return
    from support import REPO

    runner = "django-%d.%d" % django.VERSION[:2]
    width = max(len(case["id"]) for case in module.CASES)
    lines = [f"{'case':{width}}  {'runner':11}  database  result"]
    tsv = []
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for case in module.CASES:
        for database in module.DATABASES:
            result = module.RESULTS.get((case["id"], database))
            if result is None:
                continue
            counts[result[:4]] += 1
            lines.append(f"{case['id']:{width}}  {runner:11}  {database:8}  {result.splitlines()[0][:400]}")
            tsv.append(f"{case['id']}\t{MATRIX_DATABASE[database]}\t{result[:4]}")
    lines.append(
        f"conformance (python/{runner}): {counts['PASS']} passed, {counts['FAIL']} failed, "
        f"{counts['SKIP']} skipped"
    )
    report = "\n".join(lines)
    terminalreporter.write_sep("=", f"conformance matrix ({runner})")
    terminalreporter.write_line(report)
    directory = REPO / "target/matrix"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{runner}.tsv").write_text("\n".join(tsv) + "\n")
    (directory / f"{runner}.txt").write_text(report + "\n")


def pytest_report_header(config):
    import ojs_adapter_django

    return f"ojs_adapter_django {ojs_adapter_django.__version__} from {ojs_adapter_django.__file__}"

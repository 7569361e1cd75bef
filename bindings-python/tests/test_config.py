"""The backend URL has no silent default (issue 11): without ``OJS_CONFIG["ojs_url"]`` the
adapter refuses to start, naming the setting, unless ``settings.DEBUG`` is on; then the core's
development URL is used and said once, at WARNING, on the ``ojs_adapter_django`` logger."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from ojs_adapter_django import OJS
from ojs_adapter_django.errors import ConfigurationError
from support import Devserver

SETTING = 'OJS_CONFIG["ojs_url"]'
DEVELOPMENT_URL = "http://localhost:8080"


@pytest.mark.parametrize("config", [None, {"outbox": {"table_name": "py_outbox"}},
                                    {"ojs_url": None}])
def test_a_missing_url_fails_at_start_up_naming_the_setting(settings, config):
    settings.DEBUG = False
    settings.OJS_CONFIG = config
    with pytest.raises(ConfigurationError) as raised:
        OJS().check()
    assert raised.value.code == "INVALID_CONFIG"
    assert raised.value.field == "adapter.ojs_url"
    assert SETTING in str(raised.value)
    # The system check (runserver, migrate, check) says the same.
    with pytest.raises(SystemCheckError, match=r'OJS_CONFIG\["ojs_url"\]'):
        call_command("check")


def test_an_explicit_configuration_without_url_names_its_key(settings):
    settings.DEBUG = False
    with pytest.raises(ConfigurationError, match=r'"ojs_url" key of OJS\(config\)'):
        OJS({"outbox": {"table_name": "py_outbox"}}).check()


def test_the_migration_ddl_needs_no_backend_url(settings):
    settings.DEBUG = False
    settings.OJS_CONFIG = {"outbox": {"table_name": "py_ddl_no_url"}}
    from django.db import connections

    statements = OJS()._ddl("default", "create_table_sql", connections["default"].vendor)
    assert any("py_ddl_no_url" in sql for sql in statements)


@pytest.mark.django_db(transaction=True)
def test_development_mode_uses_the_default_url_and_logs_it_once(settings, caplog):
    settings.DEBUG = True
    settings.OJS_CONFIG = {"outbox": {"table_name": "py_outbox"}}
    call_command("check")  # no error in development
    # A backend where the development default points: the job must land there.
    backend = Devserver(port=8080)
    try:
        assert backend.url.endswith(":8080"), backend.url
        adapter = OJS(auto_start=False)
        with caplog.at_level(logging.WARNING, logger="ojs_adapter_django"):
            adapter.check()
            job_id = adapter.enqueue("dev.default", [1])
            adapter.check()
        assert backend.job(job_id)["type"] == "dev.default"
        lines = [r for r in caplog.records if r.name == "ojs_adapter_django"]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        assert lines[0].levelno == logging.WARNING
        assert DEVELOPMENT_URL in lines[0].getMessage()
        assert SETTING in lines[0].getMessage()
        adapter.reset()
    finally:
        backend.stop()


def test_the_spellings_of_the_spec_example_are_accepted(settings):
    """Spec §8.2 writes ``'url'`` and ``'outbox': {'table': ...}``: the same keys as
    ``ojs_url`` and ``table_name``."""
    settings.DEBUG = False
    settings.OJS_CONFIG = {"url": "http://ojs.example:9000",
                           "outbox": {"enabled": True, "table": "py_spec_spelling"}}
    from django.db import connections

    adapter = OJS()
    adapter.check()
    statements = adapter._ddl("default", "create_table_sql", connections["default"].vendor)
    assert any("py_spec_spelling" in sql for sql in statements)


@pytest.mark.parametrize("config, field, other", [
    ({"ojs_url": "http://a:9000", "url": "http://b:9000"}, "adapter.ojs_url", "adapter.url"),
    ({"url": "http://a:9000", "outbox": {"table_name": "one", "table": "two"}},
     "adapter.outbox.table_name", "adapter.outbox.table"),
])
def test_both_spellings_with_different_values_are_refused_naming_both(settings, config, field,
                                                                      other):
    settings.DEBUG = False
    with pytest.raises(ConfigurationError) as raised:
        OJS(config).check()
    assert raised.value.code == "INVALID_CONFIG"
    assert raised.value.field == field
    assert other in str(raised.value)


def test_the_old_lifecycle_option_is_an_error_not_ignored():
    with pytest.raises(TypeError, match="autostart_relay"):
        OJS({"ojs_url": "http://x"}, autostart_relay=False)
    assert OJS({"ojs_url": "http://x"}, auto_start=False)._auto_start is False


def test_the_relay_database_url_is_the_core_derivation_of_databases(settings, tmp_path):
    """``database_url`` absent: built by the core (``database_url_from_parts``) from
    ``DATABASES[alias]``; a relative SQLite file is relative to ``settings.BASE_DIR``."""
    from ojs_adapter_django.conf import database_url
    from ojs_adapter_django.errors import InvalidDatabaseUrlError

    settings.BASE_DIR = tmp_path
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}
    assert database_url(sqlite) == f"sqlite://{tmp_path}/db.sqlite3"
    assert database_url({**sqlite, "NAME": "/abs/x.db"}) == "sqlite:///abs/x.db"
    pg = {"ENGINE": "django.db.backends.postgresql", "NAME": "app", "USER": "u", "PASSWORD": "p w",
          "HOST": "db.internal", "PORT": 5433, "OPTIONS": {"sslmode": "require"}}
    assert database_url(pg) == "postgres://u:p%20w@db.internal:5433/app?sslmode=require"
    assert database_url({**pg, "HOST": "/var/run/postgresql", "PORT": "", "OPTIONS": {}}) == \
        "postgres://u:p%20w@localhost/app?host=/var/run/postgresql"
    mysql = {"ENGINE": "django.db.backends.mysql", "NAME": "app", "USER": "u", "PASSWORD": "p w",
             "HOST": "db.internal", "PORT": "3307"}
    assert database_url(mysql) == "mysql://u:p%20w@db.internal:3307/app"
    assert database_url({**mysql, "HOST": "/run/mysqld/mysqld.sock", "PORT": ""}) == \
        "mysql://u:p%20w@localhost/app?socket=/run/mysqld/mysqld.sock"
    for bad in ({**sqlite, "NAME": ":memory:"}, {"ENGINE": "django.db.backends.oracle", "NAME": "x"}):
        with pytest.raises(InvalidDatabaseUrlError) as raised:
            database_url(bad)
        assert isinstance(raised.value, ConfigurationError)
        assert raised.value.code == "INVALID_DATABASE_URL"
        assert 'OJS_CONFIG["database_url"]' in str(raised.value)


def test_the_version_is_the_workspace_version():
    """One version: the workspace's [workspace.package] (root Cargo.toml), which maturin gives
    the wheel (pyproject's version is dynamic) and the native module carries."""
    import re
    from importlib.metadata import version

    import ojs_adapter_django
    from support import REPO

    cargo = (REPO / "Cargo.toml").read_text()
    workspace = re.search(r'\[workspace\.package\][^\[]*?\nversion = "([^"]+)"', cargo).group(1)
    assert ojs_adapter_django.__version__ == workspace
    assert version("ojs-adapter-django") == workspace
    pyproject = (REPO / "bindings-python/pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'(?m)^version\s*=', pyproject), "no second version in pyproject.toml"

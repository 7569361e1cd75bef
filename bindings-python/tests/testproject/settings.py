"""Settings of the minimal Django project the tests run in: three databases, a SQLite file
(``default``), PostgreSQL (``pg``, from OJS_TEST_DATABASE_URL) and MariaDB/MySQL (``my``, from
OJS_TEST_MYSQL_URL, Django's MySQL backend on mysqlclient), the adapter app, the request
context middleware. ``OJS_PY_TEST_DIR`` places the SQLite file (shared with subprocesses)."""

import os
import tempfile
from urllib.parse import unquote, urlparse

BASE_DIR = os.environ.setdefault(
    "OJS_PY_TEST_DIR", os.path.join(tempfile.gettempdir(), f"ojs-py-tests-{os.getpid()}")
)
os.makedirs(BASE_DIR, exist_ok=True)

SECRET_KEY = "ojs-adapter-django-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "ojs_adapter_django",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "ojs_adapter_django.middleware.RequestContextMiddleware",
]

_sqlite = os.path.join(BASE_DIR, "default.db")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _sqlite,
        # The relay opens the same file from its own connection: no in-memory test database.
        "TEST": {"NAME": _sqlite},
        # WAL lets the relay's connection read and write while a request's transaction is
        # open (docs/django.md, SQLite).
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    },
}
if os.environ.get("OJS_TEST_SQLITE_IMMEDIATE"):
    # A request whose transaction reads (the session, the user for the tenant resolver) before
    # it stages fails with "database is locked" when a relay commits in between; the remedy
    # docs/django.md gives (SQLite), for the tests that serve requests beside running relays.
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"

_pg_url = os.environ.get("OJS_TEST_DATABASE_URL")
if _pg_url:
    _pg = urlparse(_pg_url)
    DATABASES["pg"] = {
        "ENGINE": "django.db.backends.postgresql",
        # A subprocess of a test (a worker) names the test database the test runs on.
        "NAME": os.environ.get("OJS_TEST_PG_NAME", "ojs_py"),
        "USER": unquote(_pg.username or "postgres"),
        "PASSWORD": unquote(_pg.password or ""),
        "HOST": _pg.hostname or "127.0.0.1",
        "PORT": str(_pg.port or 5432),
        "TEST": {"NAME": os.environ.get("OJS_PY_PG_TEST_DB", "ojs_py_test")},
    }

_my_url = os.environ.get("OJS_TEST_MYSQL_URL")
if _my_url:
    _my = urlparse(_my_url)
    DATABASES["my"] = {
        "ENGINE": "django.db.backends.mysql",
        # A subprocess of a test (a worker) names the test database the test runs on; other
        # subprocesses get the URL's database, which exists: Django's system checks on MySQL
        # connect (to ask the server's version), PostgreSQL's do not.
        "NAME": os.environ.get("OJS_TEST_MY_NAME", unquote(_my.path.lstrip("/")) or "ojs_py"),
        "USER": unquote(_my.username or "root"),
        "PASSWORD": unquote(_my.password or ""),
        "HOST": _my.hostname or "127.0.0.1",
        "PORT": str(_my.port or 3306),
        # No OPTIONS: Django's defaults (READ COMMITTED, utf8mb4), as an application has them.
        "TEST": {"NAME": os.environ.get("OJS_PY_MY_TEST_DB", "ojs_py_test")},
    }

# The tests point ojs_url at their devserver (OJS_TEST_OJS_URL) or build OJS(...) themselves;
# a `manage.py ojs_relay` they start relays the table named by OJS_TEST_OUTBOX_TABLE.
OJS_CONFIG = {
    "ojs_url": os.environ.get("OJS_TEST_OJS_URL", "http://127.0.0.1:9"),
    "outbox": {"table_name": os.environ.get("OJS_TEST_OUTBOX_TABLE", "py_outbox"),
               "poll_interval": "PT0.2S"},
    "relay": {"request_timeout": "PT0.5S", "lease": "PT2S", "initial_backoff": "PT0.05S",
              "max_backoff": "PT0.5S"},
}
# A production deploy without a backend URL (`ojs_outbox` and migrations need none).
if os.environ.get("OJS_TEST_NO_OJS_URL"):
    del OJS_CONFIG["ojs_url"]

# A `manage.py ojs_worker` a test starts runs the tasks of testproject/worker_tasks.py
# enqueued through an OJSBackend on the database OJS_TEST_TASKS_DATABASE.
if os.environ.get("OJS_TEST_TASKS_DATABASE"):
    TASKS = {"default": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "QUEUES": [],
                         "OPTIONS": {"DATABASE": os.environ["OJS_TEST_TASKS_DATABASE"]}}}

# The tenant of a request's jobs in a server the tests start (testproject/tenancy.py), and
# whether that server trusts X-OJS-Tenant (as behind a gateway). Unset: neither, the defaults.
if os.environ.get("OJS_TEST_TENANT_RESOLVER"):
    OJS_TENANT_RESOLVER = os.environ["OJS_TEST_TENANT_RESOLVER"]
if os.environ.get("OJS_TEST_TRUST_TENANT_HEADER"):
    OJS_CONFIG["trust_tenant_header"] = True

# Who may read the mount (ojs_adapter_django.urls) in a server the tests start: bearer tokens
# (testproject/access.py). Unset: staff only, the default.
if os.environ.get("OJS_TEST_HTTP_ACCESS"):
    OJS_HTTP_ACCESS = os.environ["OJS_TEST_HTTP_ACCESS"]

# OJS_TEST_NO_LOGGING: no handler for the adapter's loggers, as in a project without LOGGING.
if not os.environ.get("OJS_TEST_NO_LOGGING"):
    LOGGING = {
        "version": 1,
        "handlers": {"console": {"class": "logging.StreamHandler"}},
        "loggers": {"ojs_adapter_django": {"handlers": ["console"], "level": "WARNING"}},
    }

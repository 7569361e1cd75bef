"""A minimal Django project using ojs-adapter-django: a signup view that creates a User and
enqueues the Django task ``exampleapp.tasks.send_welcome`` in its transaction (sent after the
commit), which ``manage.py ojs_worker`` runs. ``OJS_URL`` names the OJS backend,
``EXAMPLE_DATA_DIR`` where the SQLite database lives."""

import os

DATA_DIR = os.environ.get("EXAMPLE_DATA_DIR", os.path.dirname(os.path.abspath(__file__)))

SECRET_KEY = "example-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "exampleapp.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "ojs_adapter_django",
]
try:  # Django >= 6.0 has django.tasks; on 5.2 the django-tasks backport is an app
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")

# The tasks of this project are OJS jobs staged in the transaction of "default"
# (docs/django-tasks.md); `manage.py ojs_worker` runs them.
TASKS = {
    "default": {
        "BACKEND": "ojs_adapter_django.tasks.OJSBackend",
        "QUEUES": ["default", "email"],
        "OPTIONS": {"DATABASE": "default"},
    }
}

MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    "ojs_adapter_django.middleware.RequestContextMiddleware",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(DATA_DIR, "example.db"),
        # WAL: the relay reads and writes the outbox while requests hold transactions open.
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20},
    }
}

# Spec §5.2. database_url is derived from DATABASES["default"]; the relay runs in this process.
OJS_CONFIG = {
    "ojs_url": os.environ.get("OJS_URL", "http://localhost:8080"),
    "outbox": {"table_name": "ojs_outbox", "poll_interval": "PT1S"},
}

# Who may read ojs/... (exampleapp/ojs_access.py): the bearer token of EXAMPLE_OJS_TOKEN.
OJS_HTTP_ACCESS = "exampleapp.ojs_access.bearer_token"

LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"ojs_adapter_django": {"handlers": ["console"], "level": "INFO"}},
}

"""The Django app: a system check of OJS_CONFIG, a reset of the adapters when tests change the
settings, and the in-process relay started when a serving process is ready (so the first request
does not pay for it). Other processes (``migrate``, ``shell``, tests, the ``ojs_*`` commands)
start none here; any process still starts its own on first enqueue."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class OJSAdapterConfig(AppConfig):
    name = "ojs_adapter_django"
    label = "ojs_adapter_django"
    verbose_name = "OJS transactional enqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        checks.register(check_config, checks.Tags.compatibility)
        checks.register(check_settings, checks.Tags.compatibility)
        setting_changed.connect(_settings_changed)
        if serving():
            from .facade import ojs

            ojs.start_at_boot()


#: The programs that serve a Django project (WSGI/ASGI servers), by name.
SERVERS = frozenset({"gunicorn", "uwsgi", "daphne", "uvicorn", "hypercorn", "granian",
                     "waitress-serve", "mod_wsgi"})


def serving(argv: Optional[Sequence[str]] = None,
            environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process serves requests: a known server program, or ``manage.py runserver``
    in the process that serves (the autoreloader's child, or ``--noreload``). Everything else,
    every other management command included, is not; an unknown server still gets its relay,
    on first enqueue."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if not argv:
        return False
    program = Path(argv[0])
    names = {program.stem, program.name, program.parent.name}
    if names & {"manage", "manage.py", "django-admin", "django"}:
        if len(argv) < 2 or argv[1] != "runserver":
            return False
        return environ.get("RUN_MAIN") == "true" or "--noreload" in argv
    return bool(names & SERVERS)


def _settings_changed(setting: str, **kwargs: object) -> None:
    if setting in ("OJS_CONFIG", "DATABASES"):
        from .facade import ojs

        ojs.reset()


#: Management commands that never talk to the OJS backend: a deploy runs them (often in a
#: build step without the app's secrets) before any URL is set, so its absence is no error
#: there. The server, ``ojs_relay``, ``ojs_worker`` and ``check`` itself still require it.
BACKEND_FREE_COMMANDS = frozenset({"migrate", "makemigrations", "showmigrations", "sqlmigrate",
                                   "collectstatic", "ojs_outbox"})


def backend_free_command(argv: Optional[Sequence[str]] = None) -> bool:
    """Whether this process is ``manage.py`` / ``django-admin`` running one of
    BACKEND_FREE_COMMANDS."""
    argv = sys.argv if argv is None else argv
    if len(argv) < 2:
        return False
    program = os.path.basename(argv[0])
    return (program in ("manage.py", "django-admin", "django-admin.py", "__main__.py")
            and argv[1] in BACKEND_FREE_COMMANDS)


def check_config(app_configs: object = None, **kwargs: object) -> list:
    """Builds the core configuration of the default database (without caching it) so that a
    bad OJS_CONFIG shows up in ``manage.py check`` with the core's message."""
    from django.conf import settings
    from django.db import DEFAULT_DB_ALIAS, connections

    from . import _native
    from .conf import config_json

    from .facade import URL_SETTING

    from .errors import OJSError, from_native

    try:
        text = config_json(getattr(settings, "OJS_CONFIG", None),
                           connections[DEFAULT_DB_ALIAS].settings_dict, DEFAULT_DB_ALIAS)
        _native.Bridge(text, bool(getattr(settings, "DEBUG", False)), URL_SETTING,
                       not backend_free_command())
    except OJSError as error:
        return [checks.Error(f"OJS_CONFIG: [{error.code}] {error}", id="ojs_adapter_django.E001")]
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="ojs_adapter_django.E001")]
    except _native.NativeError as native:
        error = from_native(native)
        return [checks.Error(f"OJS_CONFIG: [{error.code}] {error}", id="ojs_adapter_django.E001")]
    return []


def check_settings(app_configs: object = None, **kwargs: object) -> list:
    """``ojs_adapter_django.E002``: a setting named ``OJS_*`` that this package does not have
    (a misspelling would leave a default in force), or an ``OJS_HTTP_ACCESS`` or
    ``OJS_TENANT_RESOLVER`` that does not name a callable. ``E003``: an
    ``OJS_TENANT_RESOLVER`` that nothing calls (``RequestContextMiddleware`` is not in
    ``MIDDLEWARE``)."""
    from .conf import TENANT_SETTING, access_policy, tenant_resolver, unknown_settings
    from .errors import OJSError

    errors = [checks.Error(f"[{error.code}] {error}", id="ojs_adapter_django.E002")
              for error in unknown_settings()]
    try:
        access_policy()
    except OJSError as error:
        errors.append(checks.Error(f"[{error.code}] {error}", id="ojs_adapter_django.E002"))
    try:
        resolver = tenant_resolver()
    except OJSError as error:
        errors.append(checks.Error(f"[{error.code}] {error}", id="ojs_adapter_django.E002"))
        resolver = None
    if resolver is not None and not _context_middleware_installed():
        errors.append(checks.Error(
            f"{TENANT_SETTING} is set, but ojs_adapter_django.middleware."
            "RequestContextMiddleware is not in MIDDLEWARE: no job would get its tenant",
            hint="add it to MIDDLEWARE after django.contrib.auth.middleware."
                 "AuthenticationMiddleware",
            id="ojs_adapter_django.E003"))
    return errors


def _context_middleware_installed() -> bool:
    """Whether ``MIDDLEWARE`` holds ``RequestContextMiddleware`` or a subclass of it."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    from .middleware import RequestContextMiddleware

    for path in getattr(settings, "MIDDLEWARE", None) or ():
        try:
            entry = import_string(path)
        except ImportError:
            continue  # Django reports it when it loads the middleware
        if isinstance(entry, type) and issubclass(entry, RequestContextMiddleware):
            return True
    return False

"""Settings glue: ``OJS_CONFIG`` (spec §5.2) plus the database URL of a Django alias.

``OJS_CONFIG`` is passed to the core unchanged (the core takes ``{"adapter": {...}}`` or the
inner object alone), except for one piece of Django glue: ``database_url`` is filled in from
``DATABASES[alias]`` when it is absent, because the relay reads the outbox through a connection
of its own. The URL is the core's (``database_url_from_parts``); every key and value is
checked by the core.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Mapping, Optional

from django.core.exceptions import ImproperlyConfigured

from . import _native
from .errors import from_native

#: How a user sets the relay's database URL themselves (named by the core's messages).
DATABASE_URL_SETTING = 'OJS_CONFIG["database_url"]'


def _text(value: Any) -> Optional[str]:
    return None if value is None or value == "" else str(value)


def database_url(settings_dict: Mapping[str, Any]) -> str:
    """The URL of a Django database for the core's relay connection, from its connection
    settings by the core's rule (``ConfigurationError`` when it cannot be derived)."""
    from django.conf import settings

    port = settings_dict.get("PORT")
    parts = {
        "engine": str(settings_dict.get("ENGINE") or ""),
        "database": _text(settings_dict.get("NAME")),
        "host": _text(settings_dict.get("HOST")),
        "port": port if isinstance(port, int) else _text(port),
        "user": _text(settings_dict.get("USER")),
        "password": _text(settings_dict.get("PASSWORD")),
        "sslmode": _text((settings_dict.get("OPTIONS") or {}).get("sslmode")),
        "base_dir": str(getattr(settings, "BASE_DIR", None) or os.getcwd()),
        "setting": DATABASE_URL_SETTING,
    }
    try:
        return _native.database_url_from_parts(json.dumps(parts))
    except _native.NativeError as native:
        raise from_native(native) from None


def config_json(config: Optional[Mapping[str, Any]], settings_dict: Mapping[str, Any],
                alias: str) -> str:
    """The JSON text handed to the core for one database alias."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ImproperlyConfigured(f"OJS_CONFIG must be a dict, got {type(config).__name__}")
    config = copy.deepcopy(dict(config))
    adapter = config.get("adapter", config)
    if isinstance(adapter, dict) and adapter.get("database_url") is None:
        adapter["database_url"] = database_url(settings_dict)
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"OJS_CONFIG is not JSON-serializable: {exc}") from None


# -- the settings of the HTTP mount (ojs_adapter_django.urls) and of the request context -----

#: Who may read the mount: a callable ``(request) -> True | False | None | "tenant id"`` or
#: the dotted path of one. Absent (or None): staff only (``request.user.is_staff``).
ACCESS_SETTING = "OJS_HTTP_ACCESS"

#: The tenant of a request's jobs: a callable ``(request) -> "tenant id" | None`` or the dotted
#: path of one, called by ``RequestContextMiddleware`` when a job is staged. Absent (or None):
#: no tenant from the request (``X-OJS-Tenant`` counts only under ``OJS_CONFIG
#: ["trust_tenant_header"]``: a client sends that header).
TENANT_SETTING = "OJS_TENANT_RESOLVER"

#: Every setting of this package. Any other setting whose name starts with ``OJS_`` is
#: reported by ``manage.py check`` (``ojs_adapter_django.E002``), with the near miss it
#: probably means, so a misspelled setting never leaves a default silently in force.
SETTINGS = ("OJS_CONFIG", ACCESS_SETTING, TENANT_SETTING)


def invalid_setting(field: str, message: str) -> Exception:
    from .errors import InvalidConfigError

    return InvalidConfigError(message, code="INVALID_CONFIG", field=field)


def unknown_settings() -> list:
    """An ``InvalidConfigError`` per setting named ``OJS_*`` that this package does not have
    (worded by the core's rule for unknown keys: the near miss, or what is accepted)."""
    from django.conf import settings

    from .errors import decode

    return [decode(_native.unknown_option(name, list(SETTINGS)))
            for name in dir(settings) if name.startswith("OJS_") and name not in SETTINGS]


def _callable_setting(name: str, expected: str) -> Optional[Any]:
    """The callable a setting names (a dotted path or the callable itself), or None when the
    setting is absent or None. A dotted path that does not import, or a value that is not
    callable, is an ``InvalidConfigError`` naming the setting."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    value = getattr(settings, name, None)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise invalid_setting(name, f"{name}: cannot import {value!r}: {exc}") from None
    if not callable(value):
        raise invalid_setting(name, f"{name}: expected a callable {expected}, or its dotted "
                                    f"path; got {type(value).__name__}")
    return value


def access_policy() -> Optional[Any]:
    """The callable of ``OJS_HTTP_ACCESS``, or None when the setting is absent or None (staff
    only)."""
    return _callable_setting(ACCESS_SETTING, "(request) -> True | False | tenant id")


def tenant_resolver() -> Optional[Any]:
    """The callable of ``OJS_TENANT_RESOLVER``, or None when the setting is absent or None."""
    return _callable_setting(TENANT_SETTING, "(request) -> tenant id | None")


def resolved_tenant(resolver: Any, request: Any) -> Optional[str]:
    """What ``resolver`` (``OJS_TENANT_RESOLVER``) says the tenant of ``request`` is: a
    non-empty string, or None (no tenant). Anything else is an ``InvalidConfigError`` naming
    the setting."""
    tenant = resolver(request)
    if tenant is None or (isinstance(tenant, str) and tenant):
        return tenant
    raise invalid_setting(TENANT_SETTING,
                          f"{TENANT_SETTING} returned {tenant!r} ({type(tenant).__name__}); "
                          "expected a tenant id (a non-empty string) or None")

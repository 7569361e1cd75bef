"""Settings glue: ``OJS_CONFIG`` (spec §5.2) plus the database URL of a Django alias.

``OJS_CONFIG`` is passed to the core unchanged (the core takes ``{"adapter": {...}}`` or the
inner object alone), except for one piece of Django glue: ``database_url`` is filled in from
``DATABASES[alias]`` when it is absent, because the relay reads the outbox through a connection
of its own. Every key and value is checked by the core.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Mapping, Optional
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured


def database_url(settings_dict: Mapping[str, Any], alias: str = "default") -> str:
    """The URL of a Django database for the core's relay connection (sqlx syntax)."""
    engine = settings_dict.get("ENGINE", "")
    name = settings_dict.get("NAME") or ""
    if engine.endswith("sqlite3"):
        name = str(name)
        if not name or name == ":memory:" or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which the OJS relay "
                "cannot open from its own connection; use a database file (for tests: "
                "DATABASES[alias]['TEST']['NAME'] = '/path/test.db')"
            )
        return "sqlite://" + os.path.abspath(name)
    if "postgresql" in engine or "postgis" in engine:
        user = quote(str(settings_dict.get("USER") or ""), safe="")
        password = quote(str(settings_dict.get("PASSWORD") or ""), safe="")
        host = str(settings_dict.get("HOST") or "")
        port = str(settings_dict.get("PORT") or "")
        credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        query = []
        if host.startswith("/"):
            query.append("host=" + quote(host, safe="/"))
            host = "localhost"
        netloc = (host or "localhost") + (f":{port}" if port else "")
        sslmode = (settings_dict.get("OPTIONS") or {}).get("sslmode")
        if sslmode:
            query.append("sslmode=" + quote(str(sslmode), safe=""))
        url = f"postgres://{credentials}{netloc}/{quote(str(name), safe='')}"
        return url + ("?" + "&".join(query) if query else "")
    raise ImproperlyConfigured(
        f"DATABASES[{alias!r}] uses {engine!r}; the OJS adapter supports the sqlite3 and "
        "postgresql backends (or set OJS_CONFIG['adapter']['database_url'] yourself)"
    )


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
        adapter["database_url"] = database_url(settings_dict, alias)
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"OJS_CONFIG is not JSON-serializable: {exc}") from None

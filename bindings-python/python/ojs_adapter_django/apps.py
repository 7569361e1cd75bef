"""The Django app: a system check of OJS_CONFIG, and a reset of the adapters when tests change
the settings. No relay starts here: each process starts its own on first enqueue."""

from __future__ import annotations

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
        setting_changed.connect(_settings_changed)


def _settings_changed(setting: str, **kwargs: object) -> None:
    if setting in ("OJS_CONFIG", "DATABASES"):
        from .client import ojs

        ojs.reset()


def check_config(app_configs: object = None, **kwargs: object) -> list:
    """Builds the core configuration of the default database (without caching it) so that a
    bad OJS_CONFIG shows up in ``manage.py check`` with the core's message."""
    from django.conf import settings
    from django.db import DEFAULT_DB_ALIAS, connections

    from . import _native
    from .conf import config_json

    from .client import URL_SETTING

    try:
        text = config_json(getattr(settings, "OJS_CONFIG", None),
                           connections[DEFAULT_DB_ALIAS].settings_dict, DEFAULT_DB_ALIAS)
        _native.Adapter(text, bool(getattr(settings, "DEBUG", False)), URL_SETTING)
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="ojs_adapter_django.E001")]
    except _native.NativeError as native:
        code, field, message, _ = native.args
        return [checks.Error(f"OJS_CONFIG: [{code}] {message}", id="ojs_adapter_django.E001")]
    return []

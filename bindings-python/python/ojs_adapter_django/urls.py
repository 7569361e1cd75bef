"""The relay's HTTP surface, to ``include()`` in a project's URLconf (docs/django.md, "Events,
metrics and health"):

    path("ojs/", include("ojs_adapter_django.urls"))

serves ``ojs/events/stream``, ``ojs/metrics``, ``ojs/healthz``, ``ojs/readyz`` and the
dashboard ``ojs/dashboard/`` for the default database's relay; ``include(...), {"using":
"other"}`` serves another alias's, and
``{"keepalive": 5}`` sets the seconds between keep-alive comments on an idle stream.
"""

from django.urls import path

from . import mount

app_name = "ojs"

urlpatterns = [
    path("events/stream", mount.events_stream, name="events-stream"),
    path("metrics", mount.metrics, name="metrics"),
    path("healthz", mount.healthz, name="healthz"),
    path("readyz", mount.readyz, name="readyz"),
    path("dashboard", mount.dashboard, name="dashboard-root"),
    path("dashboard/", mount.dashboard, {"rest": ""}, name="dashboard"),
    path("dashboard/<path:rest>", mount.dashboard, name="dashboard-path"),
]

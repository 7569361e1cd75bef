from django.urls import include, path

from . import views

urlpatterns = [
    path("signup", views.signup),
    # The relay's events, metrics and health: ojs/events/stream, ojs/metrics, ojs/healthz, ojs/readyz.
    path("ojs/", include("ojs_adapter_django.urls")),
]

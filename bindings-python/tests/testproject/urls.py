from django.urls import include, path

from . import views

urlpatterns = [
    path("signup", views.signup),
    path("signup-async", views.signup_async),
    path("signup-and-login", views.signup_and_login),
    # The relay's HTTP surface (events, metrics, health), as a project mounts it; the tests'
    # streams write a keep-alive comment every 0.2 s, so a reader checks its deadline often.
    path("ojs/", include("ojs_adapter_django.urls"), {"keepalive": 0.2}),
    path("ojs-pg/", include("ojs_adapter_django.urls", namespace="ojs-pg"),
         {"using": "pg", "keepalive": 0.2}),
    path("ojs-my/", include("ojs_adapter_django.urls", namespace="ojs-my"),
         {"using": "my", "keepalive": 0.2}),
]

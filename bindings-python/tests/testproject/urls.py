from django.urls import path

from . import views

urlpatterns = [
    path("signup", views.signup),
    path("signup-async", views.signup_async),
]

"""The example's Django task: a welcome email, enqueued by the signup view in the signup's
transaction (``OJSBackend``) and run by ``manage.py ojs_worker``."""

from django.contrib.auth.models import User

try:  # Django 6's framework, else the django-tasks backport (Django 5.2)
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task(queue_name="email")
def send_welcome(user_id):
    """Stands in for the email: prints the line the demo waits for."""
    user = User.objects.get(pk=user_id)
    print(f"welcome email sent to {user.email}", flush=True)
    return user.email

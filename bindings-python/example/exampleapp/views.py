"""POST /signup email=... creates a user and enqueues its welcome email (the Django task
``send_welcome``) in one transaction. With ``fail=1`` the view raises after enqueueing, so the
transaction (user and job) rolls back."""

from django.contrib.auth.models import User
from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .tasks import send_welcome


class SignupFailed(Exception):
    pass


@csrf_exempt
@require_POST
def signup(request):
    email = request.POST["email"]
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=email, email=email)
            job_id = send_welcome.enqueue(user.id).id
            if request.POST.get("fail"):
                raise SignupFailed("simulated failure after the enqueue")
    except SignupFailed as exc:
        return JsonResponse({"error": str(exc), "job_id": job_id, "committed": False}, status=500)
    return JsonResponse({"user_id": user.id, "job_id": job_id, "committed": True}, status=201)

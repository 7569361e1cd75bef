"""Views that stage jobs the way an application would, for the middleware tests. ``?using=``
names the database alias the job is staged on (default: ``default``)."""

from asgiref.sync import sync_to_async
from django.contrib.auth import login
from django.contrib.auth.models import User
from django.db import transaction
from django.http import JsonResponse

from ojs_adapter_django import ojs


def _stage(request):
    using = request.GET.get("using")
    with transaction.atomic(using=using):
        job_id = ojs.enqueue_after_commit("email.welcome", [request.GET.get("n", "1")],
                                          using=using)
    return job_id


def signup(request):
    return JsonResponse({"job_id": _stage(request)}, status=201)


async def signup_async(request):
    job_id = await sync_to_async(_stage)(request)
    return JsonResponse({"job_id": job_id}, status=201)


def signup_and_login(request):
    """Creates the user ``?username=``, logs it in, then stages its welcome job: the job
    carries the new user (and its tenant), read when the job is staged."""
    user = User.objects.create_user(request.GET["username"])
    login(request, user)
    return JsonResponse({"job_id": _stage(request), "user_id": user.pk}, status=201)

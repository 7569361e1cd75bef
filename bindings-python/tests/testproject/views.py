"""Views that stage jobs the way an application would, for the middleware tests."""

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import JsonResponse

from ojs_adapter_django import ojs


def _stage(request):
    with transaction.atomic():
        job_id = ojs.enqueue_after_commit("email.welcome", [request.GET.get("n", "1")])
    return job_id


def signup(request):
    return JsonResponse({"job_id": _stage(request)}, status=201)


async def signup_async(request):
    job_id = await sync_to_async(_stage)(request)
    return JsonResponse({"job_id": job_id}, status=201)

"""``RequestContextMiddleware`` (FA-R001): puts the request's headers the core reads (trace
context, request id, tenant, language) and its user into the request context that every job
staged during the request carries; the core maps the headers to the context's fields.

Place it after ``AuthenticationMiddleware`` so ``request.user`` exists. The user is read only
when a job is staged (a signup view that logs the new user in passes that user's id). Works in
sync and async stacks.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from . import _native
from .context import reset_request_context, set_request_context


def _user_id(request: Any) -> Optional[str]:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


#: The request headers the core reads for the context (``context_header_names``), lowercase.
HEADER_NAMES: tuple[str, ...] = tuple(_native.context_header_names())


def context_from_request(request: Any) -> Callable[[], dict]:
    """The context source of one request: the headers the core reads (it maps them: trimmed,
    the first Accept-Language tag, X-Request-Id, X-OJS-Tenant), now; the user when a job is
    staged."""
    found = request.headers
    headers = {name: found[name] for name in HEADER_NAMES if name in found}

    def build() -> dict:
        context: dict = {"headers": headers} if headers else {}
        user_id = _user_id(request)
        if user_id is not None:
            context["user_id"] = user_id
        return context

    return build


class RequestContextMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self.__acall__(request)
        token = set_request_context(context_from_request(request))
        try:
            return self.get_response(request)
        finally:
            reset_request_context(token)

    async def __acall__(self, request: Any) -> Any:
        token = set_request_context(context_from_request(request))
        try:
            return await self.get_response(request)
        finally:
            reset_request_context(token)

"""``RequestContextMiddleware`` (FA-R001): puts the request's trace context, request id, user,
tenant and locale into the request context that every job staged during the request carries.

Place it after ``AuthenticationMiddleware`` so ``request.user`` exists. The user is read only
when a job is staged (a signup view that logs the new user in passes that user's id). Works in
sync and async stacks.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from .context import reset_request_context, set_request_context


def _first_language_tag(header: str) -> Optional[str]:
    """``fr-CA,fr;q=0.9`` -> ``fr-CA``; ``*`` and empty give None."""
    tag = header.split(",", 1)[0].split(";", 1)[0].strip()
    return tag if tag and tag != "*" else None


def _user_id(request: Any) -> Optional[str]:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def context_from_request(request: Any) -> Callable[[], dict]:
    """The context source of one request: headers now, the user when a job is staged."""
    meta = request.META
    headers = {
        "traceparent": meta.get("HTTP_TRACEPARENT") or None,
        "tracestate": meta.get("HTTP_TRACESTATE") or None,
        "request_id": meta.get("HTTP_X_REQUEST_ID") or None,
        "tenant_id": meta.get("HTTP_X_OJS_TENANT") or None,
        "locale": _first_language_tag(meta.get("HTTP_ACCEPT_LANGUAGE", "")),
    }

    def build() -> dict:
        return {**headers, "user_id": _user_id(request)}

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

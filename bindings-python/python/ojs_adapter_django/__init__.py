"""ojs-adapter-django: transactional job enqueue for Django (OJS Framework Adapter).

    from django.db import transaction
    from ojs_adapter_django import ojs

    with transaction.atomic():
        user = User.objects.create(email=email)
        ojs.enqueue_after_commit("email.welcome", [user.id])

The job is written as an outbox row in the same transaction and sent to the OJS backend by the
relay after the commit; a rollback leaves nothing. See docs/django.md.
"""

from .facade import OJS, enqueue, enqueue_after_commit, enqueue_bulk, ojs, subscribe_events
from .context import (
    clear_request_context,
    get_request_context,
    request_context,
    set_request_context,
)
from . import _native
from .events import Event, EventSubscription
from .errors import (
    BackendError,
    BackendRejectedError,
    BackendUnavailableError,
    ConfigurationError,
    DatabaseError,
    DuplicateJobError,
    InvalidArgsError,
    InvalidConfigError,
    InvalidDatabaseUrlError,
    InvalidJobTypeError,
    InvalidMetaError,
    InvalidOptionsError,
    InvalidQueueError,
    NoTransactionError,
    OJSError,
    OutboxTableMissingError,
    PayloadTooLargeError,
    RelayShutDownError,
    ValidationError,
)

#: The workspace's version (root Cargo.toml), the one the native module was built with.
__version__: str = _native.__version__

__all__ = [
    "OJS",
    "ojs",
    "enqueue",
    "enqueue_after_commit",
    "enqueue_bulk",
    "subscribe_events",
    "Event",
    "EventSubscription",
    "request_context",
    "set_request_context",
    "get_request_context",
    "clear_request_context",
    "OJSError",
    "ValidationError",
    "InvalidJobTypeError",
    "InvalidQueueError",
    "InvalidArgsError",
    "InvalidOptionsError",
    "InvalidMetaError",
    "PayloadTooLargeError",
    "ConfigurationError",
    "InvalidConfigError",
    "InvalidDatabaseUrlError",
    "DatabaseError",
    "OutboxTableMissingError",
    "BackendError",
    "BackendUnavailableError",
    "BackendRejectedError",
    "NoTransactionError",
    "RelayShutDownError",
    "DuplicateJobError",
]

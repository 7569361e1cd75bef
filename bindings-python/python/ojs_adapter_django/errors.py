"""One exception hierarchy for every failure the core reports (docs/errors.md).

The codes, messages, fields and the retryable flag all come from the core; this module only
chooses a Python class for each code family. Callers test ``.code``, never the message.
"""

from __future__ import annotations

from typing import Optional

from django.core.exceptions import ImproperlyConfigured

from . import _native

#: code -> retryable, as the core defines it (ErrorCode::retryable).
RETRYABLE: dict[str, bool] = dict(_native.ERROR_CODES)


class OJSError(Exception):
    """Base of every adapter error. ``code`` is the core's stable string code."""

    code: str
    field: Optional[str]
    retryable: bool

    def __init__(self, message: str, *, code: str, field: Optional[str] = None,
                 retryable: Optional[bool] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.retryable = RETRYABLE.get(code, False) if retryable is None else retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, field={self.field!r}, message={self.message!r})"


class InvalidJobError(OJSError):
    """The job is invalid: INVALID_JOB_TYPE, INVALID_QUEUE, INVALID_ARGS, INVALID_OPTIONS,
    INVALID_META. Nothing was staged; the transaction is still usable."""


class PayloadTooLargeError(InvalidJobError):
    """PAYLOAD_TOO_LARGE: the job's wire form exceeds 1 MiB."""


class ConfigurationError(OJSError, ImproperlyConfigured):
    """INVALID_CONFIG, INVALID_DATABASE_URL: fix OJS_CONFIG or DATABASES. Also a Django
    ImproperlyConfigured."""


class OutboxTableMissingError(OJSError):
    """OUTBOX_TABLE_MISSING: run ``manage.py migrate ojs_adapter_django``."""


class OutboxDatabaseError(OJSError):
    """DATABASE: a database operation failed (retryable). When the host cursor failed, the
    Django exception is ``__cause__``."""


class BackendError(OJSError):
    """The OJS backend did not take a job sent by ``enqueue``."""


class BackendUnavailableError(BackendError):
    """BACKEND_UNAVAILABLE: not reachable, or asked to come back later (retryable)."""


class BackendRejectedError(BackendError):
    """BACKEND_REJECTED: the backend refused the job; the message carries its answer."""


class NoTransactionError(OJSError):
    """NO_TRANSACTION: the operation needs an open transaction."""


class RelayShutDownError(OJSError):
    """RELAY_SHUT_DOWN: the relay could not start or was stopped before its flush ended."""


CLASS_BY_CODE: dict[str, type[OJSError]] = {
    "INVALID_JOB_TYPE": InvalidJobError,
    "INVALID_QUEUE": InvalidJobError,
    "INVALID_ARGS": InvalidJobError,
    "INVALID_OPTIONS": InvalidJobError,
    "INVALID_META": InvalidJobError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "INVALID_CONFIG": ConfigurationError,
    "INVALID_DATABASE_URL": ConfigurationError,
    "OUTBOX_TABLE_MISSING": OutboxTableMissingError,
    "DATABASE": OutboxDatabaseError,
    "BACKEND_UNAVAILABLE": BackendUnavailableError,
    "BACKEND_REJECTED": BackendRejectedError,
    "NO_TRANSACTION": NoTransactionError,
    "RELAY_SHUT_DOWN": RelayShutDownError,
}


def error(code: str, message: str, field: Optional[str] = None,
          retryable: Optional[bool] = None) -> OJSError:
    """The exception for a core code (OJSError itself for a code this version does not know)."""
    return CLASS_BY_CODE.get(code, OJSError)(message, code=code, field=field, retryable=retryable)


def from_native(native: _native.NativeError) -> OJSError:
    code, field, message, retryable = native.args
    return error(code, message, field, retryable)


__all__ = [
    "OJSError", "InvalidJobError", "PayloadTooLargeError", "ConfigurationError",
    "OutboxTableMissingError", "OutboxDatabaseError", "BackendError", "BackendUnavailableError",
    "BackendRejectedError", "NoTransactionError", "RelayShutDownError", "error", "from_native",
]

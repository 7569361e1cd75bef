"""One exception hierarchy for every failure the core reports (docs/errors.md).

An error crosses from the core as one JSON text (``Error::to_json``: code, field, message,
retryable, family, and ``existing_job_id`` for DUPLICATE); ``decode`` turns it into the class
of its code. The codes, messages, fields, the retryable flag and the family all come from the
core; this module only names a Python class for each code and family. Callers test ``.code``,
never the message.
"""

from __future__ import annotations

import json
from typing import Optional

from django.core.exceptions import ImproperlyConfigured

from . import _native


class OJSError(Exception):
    """Base of every adapter error. ``code`` is the core's stable string code."""

    code: str
    field: Optional[str]
    retryable: bool

    def __init__(self, message: str, *, code: str, field: Optional[str] = None,
                 retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.retryable = retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, field={self.field!r}, message={self.message!r})"


# -- validation: the job is invalid; nothing was staged, the transaction is still usable --------

class ValidationError(OJSError):
    """The job or its context is invalid (the validation family)."""


class InvalidJobTypeError(ValidationError):
    """INVALID_JOB_TYPE: the job type breaks the OJS naming rule."""


class InvalidQueueError(ValidationError):
    """INVALID_QUEUE: ``options.queue`` breaks the OJS queue rule."""


class InvalidArgsError(ValidationError):
    """INVALID_ARGS: ``args`` is not JSON, or not a JSON array."""


class InvalidOptionsError(ValidationError):
    """INVALID_OPTIONS: an option is unknown, of the wrong type or out of range."""


class InvalidMetaError(ValidationError):
    """INVALID_META: ``meta`` or the request context is not of the expected shape."""


class PayloadTooLargeError(ValidationError):
    """PAYLOAD_TOO_LARGE: the job's wire form exceeds 1 MiB."""


# -- configuration: fix OJS_CONFIG or DATABASES ------------------------------------------------

class ConfigurationError(OJSError, ImproperlyConfigured):
    """The settings are invalid (the configuration family). Also a Django ImproperlyConfigured."""


class InvalidConfigError(ConfigurationError):
    """INVALID_CONFIG: ``field`` names the key."""


class InvalidDatabaseUrlError(ConfigurationError):
    """INVALID_DATABASE_URL: the relay's database URL cannot be used or derived."""


# -- database ----------------------------------------------------------------------------------

class DatabaseError(OJSError):
    """The database failed or lacks the outbox table (the database family); also the class of
    DATABASE itself (retryable). When Django's cursor failed, the Django exception is
    ``__cause__``."""


class OutboxTableMissingError(DatabaseError):
    """OUTBOX_TABLE_MISSING: run ``manage.py migrate ojs_adapter_django``."""


# -- backend: the OJS backend did not take a job sent by ``enqueue`` ---------------------------

class BackendError(OJSError):
    """The OJS backend failed or refused (the backend family)."""


class BackendUnavailableError(BackendError):
    """BACKEND_UNAVAILABLE: not reachable, or asked to come back later (retryable)."""


class BackendRejectedError(BackendError):
    """BACKEND_REJECTED: the backend refused the job; the message carries its answer."""


# -- the families of one code ------------------------------------------------------------------

class NoTransactionError(OJSError):
    """NO_TRANSACTION: the operation needs an open transaction."""


class RelayShutDownError(OJSError):
    """RELAY_SHUT_DOWN: the relay could not start or was stopped before its flush ended."""


class DuplicateJobError(OJSError):
    """DUPLICATE: ``options.unique`` with ``on_conflict`` ``reject`` met a job of the same
    unique key that the outbox still holds (staged, not yet sent). ``existing_job_id`` names it
    (None when the holding job is being sent right now: try again). Nothing was staged, and the
    open transaction is still usable."""

    existing_job_id: Optional[str]

    def __init__(self, message: str, *, code: str = "DUPLICATE", field: Optional[str] = None,
                 retryable: bool = False, existing_job_id: Optional[str] = None) -> None:
        super().__init__(message, code=code, field=field, retryable=retryable)
        self.existing_job_id = existing_job_id

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code!r}, field={self.field!r}, "
                f"existing_job_id={self.existing_job_id!r}, message={self.message!r})")


#: The class of each code (docs/errors.md).
CLASS_BY_CODE: dict[str, type[OJSError]] = {
    "INVALID_JOB_TYPE": InvalidJobTypeError,
    "INVALID_QUEUE": InvalidQueueError,
    "INVALID_ARGS": InvalidArgsError,
    "INVALID_OPTIONS": InvalidOptionsError,
    "INVALID_META": InvalidMetaError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "INVALID_CONFIG": InvalidConfigError,
    "INVALID_DATABASE_URL": InvalidDatabaseUrlError,
    "OUTBOX_TABLE_MISSING": OutboxTableMissingError,
    "DATABASE": DatabaseError,
    "BACKEND_UNAVAILABLE": BackendUnavailableError,
    "BACKEND_REJECTED": BackendRejectedError,
    "NO_TRANSACTION": NoTransactionError,
    "RELAY_SHUT_DOWN": RelayShutDownError,
    "DUPLICATE": DuplicateJobError,
}

#: The class of each family: the parent of its codes' classes (the class of a code this version
#: does not know yet).
CLASS_BY_FAMILY: dict[str, type[OJSError]] = {
    "validation": ValidationError,
    "configuration": ConfigurationError,
    "database": DatabaseError,
    "backend": BackendError,
    "transaction": NoTransactionError,
    "relay": RelayShutDownError,
    "duplicate": DuplicateJobError,
}


def decode(text: str) -> OJSError:
    """The exception for an error's JSON text (``Error::to_json``)."""
    error = json.loads(text)
    code = error["code"]
    cls = CLASS_BY_CODE.get(code) or CLASS_BY_FAMILY.get(error.get("family"), OJSError)
    extra = {}
    if issubclass(cls, DuplicateJobError):
        extra["existing_job_id"] = error.get("existing_job_id")
    return cls(error["message"], code=code, field=error.get("field"),
               retryable=bool(error.get("retryable")), **extra)


def from_native(native: _native.NativeError) -> OJSError:
    """The exception for a core error raised by the native module."""
    return decode(native.args[0])


__all__ = [
    "OJSError",
    "ValidationError", "InvalidJobTypeError", "InvalidQueueError", "InvalidArgsError",
    "InvalidOptionsError", "InvalidMetaError", "PayloadTooLargeError",
    "ConfigurationError", "InvalidConfigError", "InvalidDatabaseUrlError",
    "DatabaseError", "OutboxTableMissingError",
    "BackendError", "BackendUnavailableError", "BackendRejectedError",
    "NoTransactionError", "RelayShutDownError", "DuplicateJobError",
    "CLASS_BY_CODE", "CLASS_BY_FAMILY", "decode", "from_native",
]

"""JSON for the native calls, in one place: a job's values as the core takes them (Django's
encoder, so a datetime, Decimal or UUID becomes its string; compact; NaN and Infinity refused),
and a value JSON cannot hold refused with the core's code for its part and the value's path
(``jobs[1].args[0]``): Python finds where the value is, the core decides the code
(``_native.unencodable``).

Named like the standard library's module, this one is only ever imported relatively
(``from .json import ...``); ``import json`` everywhere, here too, is the standard library's.
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Callable, Mapping, Optional, Sequence

from django.core.serializers.json import DjangoJSONEncoder

from . import _native
from .errors import OJSError, decode

#: One encoder for every call (building one per call costs more than encoding a small job).
_ENCODER = DjangoJSONEncoder(separators=(",", ":"), allow_nan=False)


def _compact_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, minus the C encoder it builds on every call (that costs more than
    encoding a job's args). Same output and errors; circular data raises RecursionError instead
    of ValueError (no markers). Falls back to ``_ENCODER.encode`` where the C accelerator is
    missing."""
    if c_make_encoder is None:
        return _ENCODER.encode
    iterencode = c_make_encoder(None, _ENCODER.default, encode_basestring_ascii, None,
                                _ENCODER.key_separator, _ENCODER.item_separator,
                                False, False, False)
    return lambda value: "".join(iterencode(value, 0))


encode = _compact_encoder()

#: What a value JSON cannot hold raises while encoding.
UNENCODABLE = (TypeError, ValueError, RecursionError)

#: The key types JSON objects take (the encoder turns the non-string ones into strings).
_KEY_TYPES = (str, int, float, bool, type(None))


def _path(path: str, key: Any, in_list: bool) -> str:
    """``key`` appended to a path: ``[i]`` for an index, ``.name`` for an identifier,
    ``["other key"]`` otherwise."""
    if in_list:
        return f"{path}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(str(key))}]"


def _find_unencodable(value: Any, path: str, ancestors: tuple = ()) -> Optional[tuple[str, str]]:
    """The first value under ``value`` that JSON cannot hold, as ``(path, why)``; None when the
    encoder's failure is not below one value (then the caller names ``path`` itself)."""
    if isinstance(value, (dict, list, tuple)):
        if id(value) in ancestors:
            return path, "refers to an object that contains it (a cycle has no JSON form)"
        ancestors = (*ancestors, id(value))
        is_dict = isinstance(value, dict)
        for key, item in (value.items() if is_dict else enumerate(value)):
            if is_dict and not isinstance(key, _KEY_TYPES):
                return path, f"has a key of type {type(key).__name__}, which JSON cannot hold"
            found = _find_unencodable(item, _path(path, key, not is_dict), ancestors)
            if found is not None:
                return found
        return None
    try:
        encode(value)
    except UNENCODABLE as exc:
        return path, f"cannot be converted to JSON: {exc}"
    return None


def unencodable(part: str, value: Any, path: str, cause: BaseException) -> OJSError:
    """The error for ``value`` (the job's ``part``, at ``path``) that the encoder refused with
    ``cause``: Python finds where the value is, the core decides the code (``unencodable``)."""
    try:
        found = _find_unencodable(value, path)
    except RecursionError:
        found = None
    where, why = found or (path, f"cannot be converted to JSON: {cause}")
    return decode(_native.unencodable(part, where, why))


def jobs_json(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The jobs as the core takes them. A value JSON cannot hold is reported with the core's
    code for its part and its path (``jobs[1].args[0]`` in a bulk of several)."""
    try:
        return encode(jobs)
    except UNENCODABLE as exc:
        cause = exc
    many = len(jobs) > 1
    for index, job in enumerate(jobs):
        path = f"jobs[{index}]" if many else ""
        try:
            encode(job)
            continue
        except UNENCODABLE as exc:
            cause = exc
        if not isinstance(job, Mapping):
            raise unencodable("job", job, path or "job", cause)
        for part, value in job.items():
            try:
                encode(value)
            except UNENCODABLE as exc:
                raise unencodable(str(part), value, _path(path, part, False), exc) from None
    raise unencodable("jobs", jobs, "jobs", cause)


def part_json(value: Any, part: str) -> str:
    """One part of a job (args, options or meta) as JSON text, or the core's error for it."""
    try:
        return encode(value)
    except UNENCODABLE as exc:
        raise unencodable(part, value, part, exc) from None


def json_value(value: Any, path: str) -> Any:
    """``value`` as the job will carry it (``encode``), decoded again, so that what a caller
    keeps (a TaskResult's args) is what a worker will get. A value JSON cannot hold is the
    core's ``INVALID_ARGS`` (field ``args``), its message starting with where it is
    (``args[1]``, ``kwargs.user``)."""
    try:
        text = encode(value)
    except UNENCODABLE as exc:
        raise unencodable("args", value, path, exc) from None
    return json.loads(text)


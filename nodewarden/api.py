"""Project-wide REST API glue: the error body, the JSON parser, pagination.

Every refusal reaches the client as a 4xx with one body shape (``ERROR_SHAPE``), never as a
500: what the database could not store is refused where the input is decoded (see
``nodewarden.bounds`` and ``nodewarden.filters``), bodies are bounded in size and nesting
before they are decoded, and page sizes are clamped.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from rest_framework import exceptions, parsers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

from .bounds import BIGINT_MAX
from .errors import ReasonRequired, TransitionForbidden  # the domain's own refusals

# Every 4xx answer of the REST API (documented in docs/api.md, "Errors", and in the schema):
#   {"detail": "one readable sentence",          always
#    "code": "invalid",                          always; DRF's codes plus conflict, too_large
#    "fields": {"limit": ["message", ...]}}      always; {} unless the input named a field
# A nested field is named by its path: "checks.0.started_at". An endpoint may add keys of its
# own beside these three (the cabling plan import adds "errors", one per bad line).
ERROR_SHAPE = ("detail", "code", "fields")

MAX_PAGE_SIZE = 1000  # a larger ?limit= is clamped to this
MAX_OFFSET = BIGINT_MAX  # a larger ?offset= cannot reach the database: refused
MAX_JSON_DEPTH = 64  # no request body of this API nests deeper than a few levels


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def max_body_bytes() -> int:
    return int(settings.NODEWARDEN_API_MAX_BODY_BYTES)


def read_bounded(stream: BinaryIO | None) -> bytes:
    """The whole body, refusing (413) more than NODEWARDEN_API_MAX_BODY_BYTES.

    DRF's parsers read the stream as it comes; nothing else bounds it.
    """
    if stream is None:
        return b""
    limit = max_body_bytes()
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise BodyTooLarge(f"The request body exceeds {limit} bytes.")
    return body


# A JSON string, escapes included (the "unrolled loop": no backtracking on long strings).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(body: bytes, *, stop_after: int = MAX_JSON_DEPTH) -> int:
    """How deep arrays and objects nest in ``body`` (a JSON text), counted without decoding it:
    brackets inside strings do not count. Stops counting past ``stop_after``."""
    depth = deepest = 0
    for byte in _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET):
        if byte in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_after:
                    break
        else:
            depth -= 1
    return deepest


def check_json_depth(body: bytes) -> None:
    """Refuse (400) JSON nested deeper than MAX_JSON_DEPTH: Python's decoder would recurse
    until RecursionError, a 500."""
    if json_depth(body) > MAX_JSON_DEPTH:
        raise exceptions.ParseError(f"JSON parse error - arrays and objects nest deeper than {MAX_JSON_DEPTH} levels.")


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser behind two bounds checked before decoding: body size and nesting."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        body = read_bounded(stream)
        check_json_depth(body)
        return super().parse(io.BytesIO(body), media_type, parser_context)


class Pagination(LimitOffsetPagination):
    """``?limit=`` and ``?offset=`` as DRF has them, bounded: a limit above MAX_PAGE_SIZE is
    clamped to it (DRF's own cutoff), an offset past MAX_OFFSET is refused (400) since the
    database's bigint cannot hold it."""

    max_limit = MAX_PAGE_SIZE

    def get_offset(self, request: Request) -> int:
        offset = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise exceptions.ValidationError({self.offset_query_param: [f"Ensure this value is at most {MAX_OFFSET}."]})
        return offset


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus clear 409/400/413 answers for lifecycle, model and size errors,
    every 4xx in one body shape (ERROR_SHAPE).

    Anything the domain refuses must reach the client as a 4xx with a message,
    never as a 500.
    """
    from rest_framework.views import exception_handler as drf_exception_handler  # it reads DEFAULT_PARSER_CLASSES

    response: Response | None
    if isinstance(exc, TransitionNotAllowed | ConcurrentTransition):
        response = Response(error_body(str(exc), "conflict"), status=status.HTTP_409_CONFLICT)
    elif isinstance(exc, TransitionForbidden):
        response = Response(error_body(str(exc), "permission_denied"), status=status.HTTP_403_FORBIDDEN)
    elif isinstance(exc, ReasonRequired):
        response = Response(error_body(str(exc), "invalid", {"reason": [str(exc)]}), status=status.HTTP_400_BAD_REQUEST)
    elif isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        response = Response(_reshape(detail, "invalid"), status=status.HTTP_400_BAD_REQUEST)
    elif isinstance(exc, RequestDataTooBig):  # Django's own cap on form bodies
        response = Response(error_body(str(exc), "too_large"), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    else:
        response = drf_exception_handler(exc, context)
        if response is not None and 400 <= response.status_code < 500:
            code = exc.get_codes() if isinstance(exc, exceptions.APIException) else "invalid"
            response.data = _reshape(response.data, code if isinstance(code, str) else _default_code(exc))
    return response


def error_body(detail: str, code: str, fields: dict[str, list[str]] | None = None, **extra: Any) -> dict[str, Any]:
    """The one shape of a 4xx body; views that answer an error themselves build it here."""
    return {"detail": detail, "code": code, "fields": fields or {}, **extra}


def _default_code(exc: Exception) -> str:
    return str(getattr(exc, "default_code", "invalid"))


def _reshape(data: Any, code: str) -> dict[str, Any]:
    """DRF's error data (a dict of fields, a list, or {"detail": ...}) in ERROR_SHAPE."""
    if isinstance(data, dict) and set(data) == {"detail"}:
        return error_body(str(data["detail"]), code)
    fields: dict[str, list[str]] = {}
    general: list[str] = []
    for path, message in _flatten(data, ""):
        if path in ("", "non_field_errors", "__all__", "detail"):
            general.append(message)
        else:
            fields.setdefault(path, []).append(message)
    sentences = general + [f"{path}: {' '.join(messages)}" for path, messages in fields.items()]
    shown = "; ".join(sentences[:5]) + (f"; and {len(sentences) - 5} more" if len(sentences) > 5 else "")
    return error_body(shown or "Invalid input.", code, fields)


def _flatten(data: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _flatten(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list | tuple):
        if all(not isinstance(item, dict | list | tuple) for item in data):
            for item in data:
                yield path, str(item)
        else:
            for index, item in enumerate(data):
                yield from _flatten(item, f"{path}.{index}" if path else str(index))
    else:
        yield path, str(data)

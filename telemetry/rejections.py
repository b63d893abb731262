"""Dead letters: every refused ingest leaves a bounded IngestRejection row behind."""

from __future__ import annotations

import zlib
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from nodewarden.api import error_body

from .models import IngestRejection

EXCERPT_BYTES = 2048
REASON_CHARS = 2000


class BodyTooLarge(Exception):
    """The request body (or what it inflates to) exceeds TELEMETRY_MAX_BODY_BYTES."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Body of {size} bytes exceeds the limit of {limit} bytes; send fewer reports per request.")
        self.size = size


def read_body(request: HttpRequest) -> bytes:
    """The request body, inflated if gzip-encoded, refusing more than the limit.

    Read from the stream rather than ``request.body``: Django's own cap
    (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB) is below a full 500-report batch.
    """
    limit = settings.TELEMETRY_MAX_BODY_BYTES
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > limit:
        raise BodyTooLarge(declared, limit)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise BodyTooLarge(len(body), limit)
    if request.META.get("HTTP_CONTENT_ENCODING", "").lower() == "gzip":  # .headers would build a mapping
        inflater = zlib.decompressobj(wbits=31)
        body = inflater.decompress(body, limit + 1)  # bounded: a zip bomb stops at the limit
        if len(body) > limit or inflater.unconsumed_tail:
            raise BodyTooLarge(len(body), limit)
    return body


def reject(
    request: HttpRequest,
    *,
    status: int,
    source: str,
    error: str,
    detail: str,
    body: bytes = b"",
    node_id: int | None = None,
    hostname: str = "",
    extra: dict[str, Any] | None = None,
) -> JsonResponse:
    """Record the refusal and answer it as the API's error body (nodewarden.api.error_body), with
    ``error`` (the agents' own key) beside it."""
    IngestRejection.objects.create(
        source=source,
        node_id=node_id,
        hostname=hostname[:253],
        status=status,
        reason=detail[:REASON_CHARS].replace("\x00", "\ufffd"),
        # A NUL would make PostgreSQL refuse the very row that records the refusal.
        body_excerpt=body[:EXCERPT_BYTES].decode("utf-8", "replace").replace("\x00", "\ufffd"),
        body_size=len(body) or int(request.META.get("CONTENT_LENGTH") or 0),
        remote_addr=(request.META.get("REMOTE_ADDR") or "")[:64],
    )
    return JsonResponse(error_body(detail, error.replace(" ", "_"), error=error, **(extra or {})), status=status)

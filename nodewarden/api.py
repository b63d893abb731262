"""Project-wide REST API glue."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus clear 409/400 answers for lifecycle and model errors.

    Anything the domain refuses must reach the client as a 4xx with a message,
    never as a 500.
    """
    from nodes.services import ReasonRequired, TransitionForbidden  # the domain's own refusals

    if isinstance(exc, TransitionNotAllowed | ConcurrentTransition):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, TransitionForbidden):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, ReasonRequired):
        return Response({"reason": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        return Response(detail, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)

"""The domain's own refusals, defined below every app so that the edges (the API's exception
handler, views, tasks) can turn them into a 4xx without importing the services that raise them."""

from __future__ import annotations


class ReasonRequired(ValueError):
    """Every change of state and every note needs a human-readable reason."""


class TransitionForbidden(PermissionError):
    """The acting user lacks the permission the transition declares."""

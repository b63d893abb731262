"""Running a block's on-commit callbacks inside a test's transaction, as its commit would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.db import connection

from nodes.services import _Followups


def committed(capture: Callable[..., AbstractContextManager[Any]]) -> Callable[[], AbstractContextManager[Any]]:
    """``with committed(django_capture_on_commit_callbacks)(): ...`` runs the block's callbacks at its end.

    A transaction's transition follow-ups go out as one batch at its commit (``nodes.services``): a
    transition joins the batch already pending. In a test every block shares the test's transaction,
    and a batch left pending by an earlier, uncaptured block would swallow this block's transitions
    and never run (capture sees only callbacks registered inside the block). So pending batches are
    closed first: the block's transitions form a batch of their own, as after a real commit."""

    @contextmanager
    def block() -> Iterator[Any]:
        for _, callback, _ in connection.run_on_commit:
            if isinstance(callback, _Followups):
                callback.ran = True  # its block is over: never joined again (it was never going to run)
        with capture(execute=True) as callbacks:
            yield callbacks

    return block

"""Actions on a selection (node list, alert list): the selection read from a POST, bounded, and
the per-item outcomes summed up in one message.

A bulk action is the one-by-one verb called once per item, each in its own transaction with its
own history row; nothing here changes a row. The bound keeps one POST from holding a worker for
minutes and an operator from acting on a whole fleet by a slip of "select all".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.http import QueryDict

MAX_ITEMS = 200


class SelectionRefused(ValueError):
    """The selection is empty, malformed or larger than ``MAX_ITEMS``: a 400, nothing done."""


@dataclass(frozen=True)
class Outcome:
    """What the verb did to one selected item: done, or refused and why."""

    label: str
    done: bool
    why: str = ""


def selected_ids(post: QueryDict, field: str = "ids") -> list[int]:
    """The selected primary keys, in the order sent, without repeats; SelectionRefused if none,
    if one is not a positive integer, or if there are more than ``MAX_ITEMS``."""
    raw = post.getlist(field)
    if not raw:
        raise SelectionRefused("Select at least one item.")
    if len(raw) > MAX_ITEMS:
        raise SelectionRefused(f"At most {MAX_ITEMS} items per action; {len(raw)} were selected. Nothing was done.")
    ids: dict[int, None] = {}
    for value in raw:
        if not value.isdigit() or not 0 < int(value) < 2**63:
            raise SelectionRefused(f"{value[:40]!r} is not an item id. Nothing was done.")
        ids[int(value)] = None
    return list(ids)


def summary(outcomes: Sequence[Outcome], done_word: str) -> tuple[str, str]:
    """("8 drained", "2 refused: gpu-a-003 (why), ...") for the success and the error message;
    either part is empty when no item falls in it."""
    done = sum(1 for o in outcomes if o.done)
    refused = [o for o in outcomes if not o.done]
    done_text = f"{done} {done_word}." if done else ""
    refused_text = (
        f"{len(refused)} refused: " + "; ".join(f"{o.label} ({o.why})" for o in refused) + "." if refused else ""
    )
    return done_text, refused_text

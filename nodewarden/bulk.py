"""Actions on a selection (node list, alert list): the selection read from a POST, bounded, and
the per-item outcomes summed up in one message.

A bulk action is the one-by-one verb called once per item, each in its own transaction with its
own history row; nothing here changes a row. The bound keeps one POST from holding a worker for
minutes and an operator from acting on a whole fleet by a slip of "select all".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

MAX_ITEMS = 200


class SelectionRefused(ValueError):
    """The selection is empty, malformed or larger than ``MAX_ITEMS``: a 400, nothing done."""


class BulkRefused(ValueError):
    """The action refuses the whole selection before touching any item (a silence too long, say):
    one error message, nothing done."""


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
    """("8 drained: gpu-a-001, ...", "2 refused: gpu-a-003 (why), ...") for the success and the
    error message, every item named with what happened to it; either part is empty when no item
    falls in it."""
    done = [o.label for o in outcomes if o.done]
    refused = [o for o in outcomes if not o.done]
    done_text = f"{len(done)} {done_word}: " + ", ".join(done) + "." if done else ""
    refused_text = (
        f"{len(refused)} refused: " + "; ".join(f"{o.label} ({o.why})" for o in refused) + "." if refused else ""
    )
    return done_text, refused_text


# --- The registry: one declaration per bulk action ------------------------------------------------
# Each list (``"nodes"``, ``"alerts"``) has its actions, declared once by the app that owns the verb
# (in its ``AppConfig.ready``, as ``nodes.whyhere`` facts are): the list's template renders its bar
# from here and ``run`` dispatches from here, so an action cannot be offered and not run, or run
# without its permission and reason rules. nodewarden sits below every app and imports none.

# ``each(ids, user, reason, post)``: the per-item service call, once per id in order, each in its
# own transaction with its own history row, a refusal skipping that item only (``Outcome`` each).
Each = Callable[[list[int], Any, str, QueryDict], list[Outcome]]


@dataclass(frozen=True)
class BulkAction:
    """One action of a list's bulk bar: its form value, its label, who may run it, the verb it
    calls per item, what the summary says of the items it was done to, whether it needs a reason."""

    name: str
    label: str
    permission: str
    each: Each
    done_word: str
    needs_reason: bool = True
    # Extra form fields the bar shows for this action (e.g. "minutes" for a silence).
    fields: tuple[str, ...] = ()


REGISTRY: dict[str, dict[str, BulkAction]] = {}


def register(listname: str, action: BulkAction) -> BulkAction:
    """Declare ``action`` on the list ``listname``; a second declaration of a name replaces it."""
    REGISTRY.setdefault(listname, {})[action.name] = action
    return action


def actions_for(listname: str, user: Any) -> list[BulkAction]:
    """The list's actions this user may run, in declaration order (the bar's options)."""
    return [a for a in REGISTRY.get(listname, {}).values() if user.has_perm(a.permission)]


def each_item(
    ids: list[int],
    labels: dict[int, str],
    call: Callable[[int], object],
    refusals: tuple[type[BaseException], ...],
    missing: tuple[type[BaseException], ...] = (),
) -> list[Outcome]:
    """Call ``call(pk)`` for each id in turn; a refusal (one of ``refusals``) is that item's
    outcome with its message, a row gone meanwhile (``missing``) is "no such item"."""
    outcomes = []
    for pk in ids:
        label = labels.get(pk, f"item {pk}")
        try:
            call(pk)
        except missing:
            outcomes.append(Outcome(label, done=False, why="no such item"))
        except refusals as exc:
            # A ValidationError's str() is a list's repr; its messages read as a sentence.
            why = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            outcomes.append(Outcome(label, done=False, why=why or "changed meanwhile"))
        else:
            outcomes.append(Outcome(label, done=True))
    return outcomes


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain")


def run(
    request: HttpRequest,
    listname: str,
    *,
    visible: Callable[[list[int]], set[int]],
    noun: str,
    back: str,
) -> HttpResponse:
    """The list's bulk POST: the action looked up in the registry (400 if unknown), its permission
    (403), the selection (400), the reason (400 if it needs one and has none), then the action's
    ``each`` on the ids this user may see (``visible``); an id it may not see is reported as "no
    such {noun}", never acted on nor named. One message per outcome kind, then back to the list
    (``next`` if it is this site's, else the URL named ``back``). ``BulkRefused`` (raised before
    any item is touched) becomes one error message: nothing was done."""
    known = REGISTRY.get(listname, {})
    if not any(request.user.has_perm(a.permission) for a in known.values()):
        return HttpResponseForbidden(f"You may not act on {noun}s.")
    action = known.get(request.POST.get("action", ""))
    if action is None:
        return _text(f"Unknown bulk action {request.POST.get('action', '')[:50]!r}.", 400)
    if not request.user.has_perm(action.permission):
        return HttpResponseForbidden(f"You may not {action.label.lower()} {noun}s.")
    try:
        ids = selected_ids(request.POST)
    except SelectionRefused as exc:
        return _text(str(exc), 400)
    reason = (request.POST.get("reason") or "").strip()
    if action.needs_reason and (not reason or "\x00" in reason):
        return _text("A reason is required (and may not contain a NUL character). Nothing was done.", 400)
    seen = visible(ids)
    hidden = [Outcome(f"{noun} {pk}", done=False, why=f"no such {noun}") for pk in ids if pk not in seen]
    try:
        outcomes = action.each([pk for pk in ids if pk in seen], request.user, reason, request.POST)
    except BulkRefused as exc:
        messages.error(request, f"{exc} Nothing was done.")
    else:
        done, refused = summary(outcomes + hidden, action.done_word)
        if done:
            messages.success(request, done)
        if refused:
            messages.error(request, refused)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse(back)
    return redirect(target)

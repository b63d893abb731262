"""What a new finding, and a change of an alert, cause: declared in one place.

``raise_finding`` records a finding in its caller's transaction; once that commits, every
handler registered here gets the ids of the findings that transaction created (remediation
registers "consider them for a remediation" in its ``AppConfig.ready``). Health sits below
remediation and never imports it; no signal handler performs a step of the domain.

Every verb that changes what an alert looks like from outside (opened, escalated,
acknowledged, silenced, unsilenced, resolved) queues the alert's id the same way
(``queue_alert_followups``): health registers "push it to Alertmanager" (``health.tasks``).

Handlers take a list of ids, not one: a burst of findings committed together (an ingest of many
nodes, a fleet-wide XID storm) costs each handler one call (one query, one publish) after the
commit, not one per finding; the commit's caller (an agent's ingest request) waits for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import connection, transaction

Handler = Callable[[Sequence[int]], None]
ON_NEW_FINDING: list[Handler] = []
ON_ALERT_CHANGE: list[Handler] = []


class FollowupBatch:
    """One ``on_commit`` callback for every id queued to ``handlers`` in one transaction. Django
    drops it, ids and all, when a savepoint it was registered under rolls back (so does the
    transaction's rollback); an id queued inside a savepoint that rolls back while the batch
    lives is still handed over: handlers read the rows, and a finding rolled back is not there
    (an alert reads as it is now, which is what its push and report send)."""

    def __init__(self, handlers: list[Handler], first_id: int) -> None:
        self.handlers = handlers
        self.ids: list[int] = [first_id]
        self.ran = False  # a test's captured callbacks run before the (test's) transaction ends

    def __call__(self) -> None:
        self.ran = True
        ids = list(dict.fromkeys(self.ids))  # an alert changed twice in one transaction: once
        for handler in self.handlers:
            handler(ids)


def _queue(handlers: list[Handler], object_id: int) -> None:
    """Add the id to this transaction's batch for ``handlers``, or start one (``on_commit``)."""
    if connection.in_atomic_block:
        # Django keeps (savepoint ids, callback, robust) per on_commit. A batch still there depends
        # only on savepoints still open (the others were released), all of which enclose this id too.
        for entry in connection.run_on_commit:
            callback = entry[1]
            if isinstance(callback, FollowupBatch) and callback.handlers is handlers and not callback.ran:
                callback.ids.append(object_id)
                return
    transaction.on_commit(FollowupBatch(handlers, object_id))


def on_new_finding(fn: Handler) -> Handler:
    """Register ``fn(finding_ids)``, run after the commit of new findings that open or escalate
    an alert (shadow findings cause nothing): once per transaction, with all of its findings."""
    ON_NEW_FINDING.append(fn)
    return fn


def queue_finding_followups(finding_id: int) -> None:
    """Queue the registered handlers to run on the finding once the current transaction commits."""
    _queue(ON_NEW_FINDING, finding_id)


def on_alert_changed(fn: Handler) -> Handler:
    """Register ``fn(alert_ids)``, run after the commit of verbs that changed an alert's state,
    severity, acknowledgement or silence: once per transaction, with all of its alerts."""
    ON_ALERT_CHANGE.append(fn)
    return fn


def queue_alert_followups(alert_id: int) -> None:
    """Queue the alert's registered handlers to run once the current transaction commits."""
    _queue(ON_ALERT_CHANGE, alert_id)

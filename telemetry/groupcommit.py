"""Group commit: concurrent ingest requests of one process share one transaction.

A single-report request costs about a commit (a WAL flush) plus a round trip per statement; an
agent's steady state is one report every 30 s, so at fleet scale nearly every request is that
small. Each request thread hands its decoded, vetted reports to this process's writer thread
and waits. The writer takes whatever has queued (up to NODEWARDEN_INGEST_GROUP_MAX reports;
once NODEWARDEN_INGEST_GROUP_WAIT_MS have passed since the later of the first request's arrival and
the writer's return from its last group, when the group is not full), runs each
request's reports through the existing ``ingest_reports`` inside ONE transaction, commits, and
only then wakes each request with its own result. While it commits, the next group queues.

Guarantees kept: a request learns its result only after the commit that holds it; reports of
the same node in one group are ingested in arrival order (the second sees the first, so a resend
is a duplicate); a request whose reports are refused (``IngestRefused``, a deleted node) gets its
own error and the group goes on. Any other failure (a statement, a deadlock, the commit itself)
rolls the whole group back, and every request of it is then ingested again in a transaction of
its own, so one bad request never costs the others their reports.

A request carrying XID events joins the queue at its head: an XID may be catastrophic, and its
answer waits for its finding's commit (a node's older report queued behind it is then stored as
an out-of-order report, which ingest already handles).

Backpressure: at most NODEWARDEN_INGEST_QUEUE_LIMIT reports may wait per process; past that,
``submit`` raises ``IngestBusy`` at once (the view answers 503 with Retry-After, counted for
/metrics), rather than letting requests pile up until the load balancer times them out.

A caller already inside a transaction (a test's, a management command's) cannot hand its reports
to another connection: it would not see the caller's uncommitted rows, and the caller's answer
would not wait for the caller's own commit. It ingests inline, as does everything on SQLite and
when NODEWARDEN_INGEST_GROUP_WAIT_MS is 0.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections, connection, transaction

from nodes.models import Node

from .ingest import IngestRefused, IngestResult, ingest_many, ingest_reports
from .schema import AgentReport

log = logging.getLogger(__name__)

# How long a request waits for its group before giving up with 503; the report may still be
# committed afterwards, and the agent's resend of it is then answered as a duplicate.
WAIT_SECONDS = 30.0
RETRY_AFTER_SECONDS = 2  # what a refused agent is told to wait: a few groups' worth
BUSY_COUNTER_KEY = "telemetry:ingest-busy-total"  # shared cache: /metrics reads every process's count


class IngestBusy(Exception):
    """The writer is behind: this process holds NODEWARDEN_INGEST_QUEUE_LIMIT waiting reports."""

    retry_after = RETRY_AFTER_SECONDS


@dataclass(eq=False)
class _Request:
    node_id: int
    reports: list[AgentReport]
    source: str
    # Set once the commit (or the failure) is final; only a request thread waiting on the writer
    # has one (``submit``): the ASGI writer gathers its group itself (``ingest_group``).
    done: threading.Event | None = None
    queued_at: float = field(default_factory=time.monotonic)
    result: IngestResult | None = None
    error: BaseException | None = None


class GroupCommitter:
    """One per process: a queue of waiting requests and the writer threads that commit them.

    Several writers (NODEWARDEN_INGEST_WRITERS), each on its own connection: a group's statements
    are round trips, and while one writer waits for PostgreSQL another fills the next group."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[_Request] = deque()
        self._queued_reports = 0
        self._pid = 0  # the process that started the writer: a forked child starts its own
        self._stopping = False
        self._writers: list[threading.Thread] = []

    def submit(self, node_id: int, reports: list[AgentReport], *, source: str) -> IngestResult:
        """Ingest one request's reports in the next group; returns after their commit.

        Raises what ``ingest_reports`` raises for these reports, IngestBusy when the queue is
        full, and DatabaseError when the group and the retry on its own both failed.
        """
        done = threading.Event()
        request = _Request(node_id, reports, source, done=done)
        with self._lock:
            if self._queued_reports + len(reports) > settings.NODEWARDEN_INGEST_QUEUE_LIMIT and self._queue:
                count_busy()
                raise IngestBusy()
            self._ensure_writer()
            if any(report.xid_events for report in reports):
                self._queue.appendleft(request)  # an XID may be catastrophic: its finding goes first
            else:
                self._queue.append(request)
            self._queued_reports += len(reports)
            self._wake.notify()
        if not done.wait(WAIT_SECONDS):
            raise DatabaseError(f"the ingest writer did not answer within {WAIT_SECONDS:.0f} s")
        if request.result is None:
            raise request.error or DatabaseError("the ingest writer gave no result")
        return request.result

    def _ensure_writer(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._writers = [
                threading.Thread(target=self._run, name=f"ingest-writer-{n}", daemon=True)
                for n in range(settings.NODEWARDEN_INGEST_WRITERS)
            ]
            for writer in self._writers:
                writer.start()

    def stop(self, wait: float = 0.0) -> None:
        """Let the writers finish what is queued, close their connections and end (tests); wait
        up to ``wait`` seconds for each of this committer's own writers to be gone."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        for writer in self._writers:
            writer.join(wait)

    def _take(self, returned: float) -> list[_Request] | None:
        """Wait for work; then (briefly) for company; then take a group (None: stopped).
        ``returned``: when this writer came back from its last group (time.monotonic)."""
        wait = settings.NODEWARDEN_INGEST_GROUP_WAIT_MS / 1000
        limit = settings.NODEWARDEN_INGEST_GROUP_MAX
        with self._lock:
            while not self._queue:
                if self._stopping:
                    return None
                self._wake.wait()
            if wait > 0:
                # Give concurrent requests a moment to join, until the group is full or
                # NODEWARDEN_INGEST_GROUP_WAIT_MS have passed since the later of the first request's
                # arrival and this writer's return from its last group: a writer that wakes late
                # does not split what arrived together, and a busy one lets the requests it just
                # answered come back before it takes a half group (as telemetry.api.asgi does).
                deadline = max(self._queue[0].queued_at, returned) + wait
                while self._queued_reports < limit and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)
            group: list[_Request] = []
            size = 0
            while self._queue and (not group or size + len(self._queue[0].reports) <= limit):
                request = self._queue.popleft()
                group.append(request)
                size += len(request.reports)
            self._queued_reports -= size
            return group

    def _run(self) -> None:
        returned = 0.0
        while (group := self._take(returned)) is not None:
            try:
                commit_group(group)
            except BaseException as exc:  # never leave a request waiting on a dead writer
                log.exception("ingest writer failed")
                for request in group:
                    if request.done is not None and not request.done.is_set():
                        request.error = exc
                        request.done.set()
            finally:
                close_old_connections()  # honour CONN_MAX_AGE and drop a broken connection
                returned = time.monotonic()
        connection.close()


def commit_group(group: list[_Request]) -> None:
    """Ingest every request of the group in one transaction, then wake each with its own result."""
    try:
        with transaction.atomic():
            for round_ in _rounds(group):
                batches = [(request.node_id, request.reports) for request in round_]
                for request, outcome in zip(round_, ingest_many(batches, source=round_[0].source), strict=True):
                    if isinstance(outcome, IngestResult):
                        request.result = outcome
                    else:
                        request.error = outcome
    except DatabaseError:
        # Something failed mid-group (a statement, a deadlock with another process, the commit):
        # none of it is stored. Each request again, in a transaction of its own.
        log.warning("ingest group of %d requests rolled back; ingesting each on its own", len(group), exc_info=True)
        for request in group:
            request.result = request.error = None
            try:
                request.result = ingest_reports(request.node_id, request.reports, source=request.source)
            except (IngestRefused, Node.DoesNotExist, DatabaseError) as exc:
                request.error = exc
    for request in group:
        if request.done is not None:
            request.done.set()  # only now: the commit (or the failure) is final


def ingest_group(batches: list[tuple[int, list[AgentReport]]], *, source: str) -> list[IngestResult | Exception]:
    """``commit_group`` for a caller that gathers the group itself (the ASGI endpoint's writer,
    telemetry.api.asgi): each (node id, reports) gets its result or its own error, after the commit.
    Raises what is not ingest's own (the whole group rolled back)."""
    if not batches:
        return []
    group = [_Request(node_id, reports, source) for node_id, reports in batches]
    commit_group(group)
    return [r.result if r.result is not None else _as_exception(r.error) for r in group]


def _as_exception(error: BaseException | None) -> Exception:
    if isinstance(error, Exception):
        return error
    return DatabaseError("the ingest writer gave no result")


def _rounds(group: list[_Request]) -> list[list[_Request]]:
    """The group as rounds in which each node appears once (ingest_many's rule), in arrival order:
    a node's second request goes in the next round and sees the first one's reports. Within a
    round, node order: two processes' writers lock the same rows in the same order."""
    rounds: list[list[_Request]] = []
    seen: dict[tuple[int, str], int] = {}
    for request in group:
        key = (request.node_id, request.source)
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(request)
    # One source per ingest_many call: split a round that mixes them (the agent is the only caller today).
    split = [[r for r in round_ if r.source == source] for round_ in rounds for source in {r.source for r in round_}]
    return [sorted(round_, key=lambda request: request.node_id) for round_ in split if round_]


def count_busy(count: int = 1) -> None:
    """Count IngestBusy answers where /metrics reads them (the shared cache, all processes)."""
    try:
        cache.incr(BUSY_COUNTER_KEY, count)
    except ValueError:  # the first one (or the cache was flushed)
        cache.add(BUSY_COUNTER_KEY, 0, timeout=None)
        cache.incr(BUSY_COUNTER_KEY, count)
    except Exception:  # a count must never turn a 503 into a 500
        log.warning("could not count an ingest 503", exc_info=True)


def busy_total() -> int:
    """IngestBusy answers counted since the shared cache last started."""
    try:
        return int(cache.get(BUSY_COUNTER_KEY) or 0)
    except Exception:
        return 0


COMMITTER = GroupCommitter()


def ingest_request(node_id: int, reports: list[AgentReport], *, source: str = "agent") -> IngestResult:
    """The agent endpoint's road to ingest: grouped with concurrent requests when it may be."""
    if (
        settings.NODEWARDEN_INGEST_GROUP_WAIT_MS <= 0
        or connection.in_atomic_block
        or connection.vendor != "postgresql"  # SQLite (the demo) has one writer anyway; threads would lock it
    ):
        return ingest_reports(node_id, reports, source=source)
    started = time.perf_counter()
    result = COMMITTER.submit(node_id, reports, source=source)
    log.debug("node %s: %d reports grouped in %.1f ms", node_id, len(reports), (time.perf_counter() - started) * 1e3)
    return result

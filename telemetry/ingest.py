"""Ingest: the one road from a decoded batch of reports to the database and the health rules
(the consumer that health registers in ``telemetry.consumers``).

Per batch, whatever its size, a constant number of statements in one transaction. On
PostgreSQL: read the node, its latest state and its firing alerts (1); insert the reports
and upsert the latest GPU and node rows (1); COPY the new reports' GPU rows (1); insert XID
lines (≤1). Elsewhere the reads and writes are separate statements (3 and 3). The health
rules then run in a savepoint that is only opened if they touch the database (a healthy
report: they do not). A resent report is counted as a duplicate and stores nothing; a
report older than the latest one goes to history without rolling the latest state back.

Trust: a report, or an event in it, dated more than NODEWARDEN_REPORT_MAX_FUTURE_SECONDS
ahead of the portal's clock is refused, so no report can pin the latest state in the
future; a latest state already stored beyond that bound is pulled back before it is
compared with. An XID event counts once by its identity (``event_identity``): a resent
event, in a new report or a concurrent request, is neither stored again nor evaluated.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from nodes.models import Node
from nodewarden.bounds import timestamp_problem

from . import consumers, packing, store
from .consumers import ReportContext
from .models import GpuState, IngestRejection
from .schema import AgentReport, GpuReading, XidEvent

log = logging.getLogger(__name__)

_BUS_ID = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.[0-7])?$")


class IngestRefused(ValueError):
    """A batch that decodes but cannot be stored as sent (its message names the field)."""


@dataclass
class IngestResult:
    """What happened to a batch: reports stored, and reports already stored before."""

    accepted: int = 0
    duplicates: int = 0
    accepted_ids: list[str] = field(default_factory=list)


@dataclass
class _Latest:
    """A node's latest state as the rules' ``previous_*`` want it."""

    at: datetime | None = None
    gpus: dict[int, GpuReading] = field(default_factory=dict)  # as stored: the rows' readings, not when
    ib_ports: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    host: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Written:
    """A node's latest state as this process committed it, in forms the garbage collector does not
    track or barely walks (readings of scalars, which msgspec leaves untracked, a tuple of them,
    bytes): holding 20,000 nodes' reports as decoded doubled the request p99 with full collections
    (bench/ingest.py).

    The GPU rows are the readings of the reports that wrote them, as decoded: the rules read a
    previous reading by its fields' names (``GpuReading.get``). Turned into dicts instead, they were
    a seventh of the ingest process's Python at 4,000 reports/s (py-spy). Readings are frozen:
    every state read from this shares them."""

    stored: store.StoredAs
    gpus: tuple[GpuReading, ...]  # the node's GPU rows as stored, index order
    host_and_ports: bytes  # JSON: [host or {}, ib_ports], as written to the health row

    def latest(self) -> _Latest:
        """The state as ``_latest`` reads it back from the database (a test holds the two equal)."""
        host, ports = _decode_host_and_ports(self.host_and_ports)
        return _Latest(
            at=self.stored.last_report_at,
            gpus={gpu.index: gpu for gpu in self.gpus},
            ib_ports={(p["device"], p["port"]): p for p in ports},
            host=host,
        )


_decode_host_and_ports = msgspec.json.Decoder(tuple[dict[str, Any], list[dict[str, Any]]]).decode


class LatestCache:
    """Each node's latest state as this process last committed it (``ingest_many``), up to
    NODEWARDEN_INGEST_LATEST_CACHE_NODES nodes, the least recently written dropped first.

    The next group's node read checks each copy against the node's health row (``store.read_nodes``:
    the row's last_report_at and last_received_at as written) and, where it still holds, reads no
    GPU rows, host or ports (bench/ingest.py: PostgreSQL 0.27 -> 0.23 ms a report; the writer's
    Python about even, as building the rules' dicts from a copy costs about what reading them did).
    Every write of a node's state moves last_received_at, so a copy that no longer holds (another
    process wrote the node, a late report, the simulator) is never used: the full read replaces it.
    Filled after the commit only: a rolled-back group leaves no copy behind."""

    def __init__(self) -> None:
        self._written: dict[int, _Written] = {}
        self._lock = threading.Lock()

    def take(self, node_ids: list[int]) -> list[_Written | None]:
        with self._lock:
            return [self._written.get(node_id) for node_id in node_ids]

    def keep(self, written: list[tuple[int, _Written]]) -> None:
        size = settings.NODEWARDEN_INGEST_LATEST_CACHE_NODES
        with self._lock:
            for node_id, state in written:
                self._written.pop(node_id, None)  # to the end: the most recently written
                self._written[node_id] = state
            while len(self._written) > size:
                del self._written[next(iter(self._written))]

    def clear(self) -> None:
        with self._lock:
            self._written.clear()

    def __len__(self) -> int:
        return len(self._written)


LATEST = LatestCache()


def normalise_bus_id(bus_id: str | None) -> str | None:
    """ "00000000:53:00.0" (NVML) and "0000:53:00" (kernel log) both become "0000:53:00"."""
    match = _BUS_ID.match((bus_id or "").strip().lower())
    if match is None:
        return None
    domain, bus, device = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def vet_reports(reports: list[AgentReport], *, now: datetime | None = None) -> None:
    """What msgspec cannot say: a GPU index appears once per report; every time has a UTC
    offset a clock can have and lies at most NODEWARDEN_REPORT_MAX_FUTURE_SECONDS after
    ``now`` (the portal's clock)."""
    allowance = settings.NODEWARDEN_REPORT_MAX_FUTURE_SECONDS
    now = now or timezone.now()
    limit = now + timedelta(seconds=allowance)
    for r, report in enumerate(reports):
        _vet_time(report.collected_at, limit, now, allowance, f"$.reports[{r}].collected_at")
        for x, event in enumerate(report.xid_events):
            _vet_time(event.observed_at, limit, now, allowance, f"$.reports[{r}].xid_events[{x}].observed_at")
        seen: set[int] = set()
        for g, gpu in enumerate(report.gpus):
            if gpu.index in seen:
                raise IngestRefused(f"Duplicate GPU index {gpu.index} - at `$.reports[{r}].gpus[{g}].index`")
            seen.add(gpu.index)


def _vet_time(value: datetime, limit: datetime, now: datetime, allowance: int, path: str) -> None:
    problem = timestamp_problem(value)  # the offset PostgreSQL refuses, a year 0 in UTC
    if problem is not None:
        raise IngestRefused(f"{problem} - at `{path}`")
    if value > limit:
        raise IngestRefused(
            f"{value.isoformat()} is more than {allowance} s after the portal's clock ({now.isoformat()}):"
            f" the node's clock is wrong (NODEWARDEN_REPORT_MAX_FUTURE_SECONDS is {allowance} s) - at `{path}`"
        )


def ingest_reports(node_id: int, reports: list[AgentReport], *, source: str = "agent") -> IngestResult:
    """Store a batch of one node's reports and evaluate the health rules over the new ones.

    Raises IngestRefused (nothing stored) for a batch that cannot be stored as sent.
    """
    received_at = timezone.now()
    vet_reports(reports, now=received_at)
    unique, duplicates = _unique_in_batch(reports)
    unique, duplicates = _not_packed(node_id, unique, duplicates, received_at)
    with transaction.atomic():
        node, latest, firing = _read_node(node_id)
        _unpin_latest(node_id, latest, received_at)
        new = _store_reports(node_id, unique, latest, received_at, source)
        evaluated = _store_history(node_id, new, latest, source)
        contexts = _contexts(node, evaluated, latest, source)
        _evaluate(node_id, contexts, source, firing)
    duplicates += len(unique) - len(new)
    return IngestResult(accepted=len(new), duplicates=duplicates, accepted_ids=[r.report_id for r in new])


def ingest_many(
    batches: list[tuple[int, list[AgentReport]]], *, source: str = "agent"
) -> list[IngestResult | IngestRefused | Node.DoesNotExist]:
    """Inside the caller's transaction (telemetry.groupcommit): ``ingest_reports`` for several
    nodes' batches, each node at most once. On PostgreSQL one read, one insert of the reports that
    also upserts the node rows (``store.insert_new_reports_of_nodes``), and one COPY of the GPU
    readings with one statement that makes them samples and the latest GPU rows
    (``store.store_gpu_readings``) serve all of them, where
    ``ingest_reports`` sends about three statements per node; XID lines and the
    rules go node by node, as there. Returns, per batch, its result or why it was refused
    (nothing of it stored); a database error propagates and the caller rolls back the whole.
    """
    if connection.vendor != "postgresql":
        return [_ingest_or_refusal(node_id, reports, source) for node_id, reports in batches]
    received_at = timezone.now()
    outcomes: list[IngestResult | IngestRefused | Node.DoesNotExist] = []
    vetted = []
    for node_id, reports in batches:
        try:
            vet_reports(reports, now=received_at)
        except IngestRefused as exc:
            outcomes.append(exc)
            continue
        outcomes.append(IngestResult())
        vetted.append((len(outcomes) - 1, node_id, *_unique_in_batch(reports)))
    packed_before = _packed_before(received_at)
    packed = packing.packed_report_times_of_nodes(
        {node_id: _old_times(unique, packed_before) for _, node_id, unique, _ in vetted}
    )
    work = [
        (index, node_id, *_without_packed(unique, duplicates, packed.get(node_id)))
        for index, node_id, unique, duplicates in vetted
    ]
    consumer = consumers.CONSUMER
    extra = consumer.read_with_node if consumer is not None else None
    node_ids = [w[1] for w in work]
    copies = LATEST.take(node_ids)
    snapshots = store.read_nodes(node_ids, extra, [c.stored if c is not None else None for c in copies])
    nodes = []
    for (index, node_id, unique, duplicates), copy in zip(work, copies, strict=True):
        snapshot = snapshots.get(node_id)
        if snapshot is None:
            outcomes[index] = Node.DoesNotExist(f"Node {node_id} does not exist.")
            continue
        cached = snapshot.cached and copy is not None
        latest = copy.latest() if cached and copy is not None else _latest(snapshot.node, snapshot.gpus)
        _unpin_latest(node_id, latest, received_at)
        firing = consumer.rows_to_objects(snapshot.extra) if consumer is not None and extra is not None else None
        nodes.append((index, node_id, unique, duplicates, snapshot.node, latest, firing))
    rows = [_report_row(n[1], r, received_at, source) for n in nodes for r in n[2]]
    healths = [_health_scalars(n[1], r, received_at, source) for n in nodes for r in n[2]]
    new_keys = store.insert_new_reports_of_nodes(rows, healths)  # and each written node's health row
    news = [sorted((r for r in n[2] if (n[1], r.report_id) in new_keys), key=lambda r: r.collected_at) for n in nodes]
    written = [(n, new) for n, new in zip(nodes, news, strict=True) if new]
    store.store_gpu_readings([gpus for n, new in written for gpus in _gpu_readings(n[1], new, n[5])])
    kept = [(n[1], state) for n, new in written if (state := _written(new[-1], n[5], received_at)) is not None]
    if kept and settings.NODEWARDEN_INGEST_LATEST_CACHE_NODES > 0:
        transaction.on_commit(functools.partial(LATEST.keep, kept))
    for (index, node_id, unique, duplicates, node, latest, firing), new in zip(nodes, news, strict=True):
        evaluated = _store_xids(node_id, new, latest, source)
        _evaluate(node_id, _contexts(node, evaluated, latest, source), source, firing)
        outcomes[index] = IngestResult(
            accepted=len(new), duplicates=duplicates + len(unique) - len(new), accepted_ids=[r.report_id for r in new]
        )
    return outcomes


def _written(newest: AgentReport, latest: _Latest, received_at: datetime) -> _Written | None:
    """The node's state once ``newest`` is stored over ``latest``; None where the rows hold more than
    the two say (a first report: GPU rows of an earlier life may remain) or ``newest`` is not the
    latest (a late report: the stored state stays)."""
    if latest.at is None or newest.collected_at <= latest.at:
        return None
    rows = dict(latest.gpus)  # the rows the newest report does not cover stay as they were
    for reading in newest.gpus:
        rows[reading.index] = reading
    host_and_ports = store.encode((newest.host or {}, newest.ib_ports))  # as _health_row stores them
    gpus = tuple(rows[index] for index in sorted(rows))
    return _Written(store.StoredAs(newest.collected_at, received_at), gpus, host_and_ports)


def _ingest_or_refusal(
    node_id: int, reports: list[AgentReport], source: str
) -> IngestResult | IngestRefused | Node.DoesNotExist:
    try:
        return ingest_reports(node_id, reports, source=source)  # a savepoint in the caller's transaction
    except (IngestRefused, Node.DoesNotExist) as exc:
        return exc


def _unique_in_batch(reports: list[AgentReport]) -> tuple[list[AgentReport], int]:
    # A report_id or an instant seen twice in one batch is a resend within the batch.
    ids: set[str] = set()
    times: set[datetime] = set()
    unique = []
    for report in reports:
        if report.report_id in ids or report.collected_at in times:
            continue
        ids.add(report.report_id)
        times.add(report.collected_at)
        unique.append(report)
    return unique, len(reports) - len(unique)


def _not_packed(
    node_id: int, unique: list[AgentReport], duplicates: int, received_at: datetime
) -> tuple[list[AgentReport], int]:
    """Drop the reports a pack of their hour holds already (``telemetry.packing``): a report resent
    after its hour was packed is a duplicate, as it was while raw (NodeReport's key). Only reports
    of hours the packing beat may have reached are looked up: the steady stream costs nothing."""
    old = _old_times(unique, _packed_before(received_at))
    return _without_packed(unique, duplicates, packing.packed_report_times(node_id, old) if old else None)


def _packed_before(received_at: datetime) -> datetime:
    """The end of the hours the packing beat may have packed by ``received_at``."""
    return packing.floor_hour(received_at - packing.PACK_DELAY)


def _old_times(unique: list[AgentReport], packed_before: datetime) -> list[datetime]:
    """The times of the reports whose hour the packing beat may have packed already."""
    return [r.collected_at for r in unique if r.collected_at < packed_before]


def _without_packed(
    unique: list[AgentReport], duplicates: int, packed: set[datetime] | None
) -> tuple[list[AgentReport], int]:
    if not packed:
        return unique, duplicates
    kept = [r for r in unique if r.collected_at not in packed]
    return kept, duplicates + len(unique) - len(kept)


NODE_COLUMNS = store.NODE_COLUMNS
_node_read = store.CompiledRead(lambda node_id: Node.objects.filter(pk=node_id).values_list(*NODE_COLUMNS))
_gpu_read = store.CompiledRead(
    lambda node_id: GpuState.objects.filter(node_id=node_id).order_by("index").values_list(*store.GPU_READ_COLUMNS)
)


def _read_node(node_id: int) -> tuple[dict[str, Any], _Latest, list[Any] | None]:
    """The node's row, its latest state and the rows the report consumer wants with it (health:
    the firing alerts): one statement on PostgreSQL. Elsewhere two reads, and no such rows
    (None: the consumer reads them itself)."""
    if connection.vendor == "postgresql":
        consumer = consumers.CONSUMER
        extra = consumer.read_with_node if consumer is not None else None
        snapshot = store.read_node(node_id, extra)
        if snapshot is None:
            raise Node.DoesNotExist(f"Node {node_id} does not exist.")
        firing = consumer.rows_to_objects(snapshot.extra) if consumer is not None and extra is not None else None
        return snapshot.node, _latest(snapshot.node, snapshot.gpus), firing
    rows = _node_read.fetch(node_id)
    if not rows:
        raise Node.DoesNotExist(f"Node {node_id} does not exist.")
    node = dict(zip(NODE_COLUMNS, rows[0], strict=True))
    gpus = _gpu_read.fetch(node_id) if node["health__last_report_at"] is not None else []
    return node, _latest(node, [GpuReading(*row) for row in gpus]), None


def _unpin_latest(node_id: int, latest: _Latest, received_at: datetime) -> None:
    """A latest state dated beyond what vet_reports lets in now (stored before that vetting
    existed, or before the portal's clock stepped back) would win every comparison and
    freeze the node's state: pull it back to when the portal last heard from the node.
    Nearly never true: no statement on the normal path."""
    if latest.at is None or latest.at <= received_at:  # the allowance is never negative (settings)
        return
    bound = received_at + timedelta(seconds=settings.NODEWARDEN_REPORT_MAX_FUTURE_SECONDS)
    if latest.at <= bound:
        return
    latest.at = store.unpin_latest(node_id, bound)
    log.warning("node %s: latest state dated beyond %s pulled back to %s", node_id, bound, latest.at)


def _latest(node: dict[str, Any], gpus: list[GpuReading]) -> _Latest:
    latest = _Latest(at=node["health__last_report_at"], host=node["health__host"])
    if latest.at is None:  # no report yet: any GPU rows are not a previous state
        return latest
    latest.gpus = {gpu.index: gpu for gpu in gpus}
    latest.ib_ports = {(p["device"], p["port"]): p for p in node["health__ib_ports"] or []}
    return latest


def _store_reports(
    node_id: int, unique: list[AgentReport], latest: _Latest, received_at: datetime, source: str
) -> list[AgentReport]:
    """Insert the reports and move the latest GPU and node rows on; returns the new reports,
    oldest first. On PostgreSQL the latest rows ride along with the insert (one statement)
    whenever the batch's newest report turns out new, which is nearly always."""
    rows = [_report_row(node_id, r, received_at, source) for r in unique]
    newest = max(unique, key=lambda r: r.collected_at, default=None)
    if newest is not None and connection.vendor == "postgresql":
        gpu_states = _gpu_state_rows(node_id, newest, latest)
        health = _health_scalars(node_id, newest, received_at, source)  # its JSON: the report's summary
        new_ids = store.insert_reports_with_latest(rows, newest.report_id, gpu_states, health)
        written = newest.report_id in new_ids
    else:
        new_ids, written = store.insert_new_reports(rows), False
    new = sorted((r for r in unique if r.report_id in new_ids), key=lambda r: r.collected_at)
    if not written:
        _store_latest(node_id, new, latest, received_at, source)
    return new


def _report_row(node_id: int, report: AgentReport, received_at: datetime, source: str) -> dict[str, Any]:
    # The agent's structs as they are: msgspec encodes them into the same JSON to_builtins would give.
    summary = {
        "agent_version": report.agent_version,
        "driver_version": report.driver_version,
        "host": report.host,
        "ib_ports": report.ib_ports,
        "collector_errors": report.collector_errors,
    }
    return {
        "node_id": node_id,
        "collected_at": report.collected_at,
        "report_id": report.report_id,
        "received_at": received_at,
        "seq": report.seq,
        "source": source,
        "gpu_count": len(report.gpus),
        "xid_count": len(report.xid_events),
        "summary": summary,
    }


def _store_history(node_id: int, new: list[AgentReport], latest: _Latest, source: str) -> list[AgentReport]:
    """GPU samples and XID lines of the new reports. Returns the new reports as the rules
    must see them: with only the XID events stored now (an event stored by an earlier
    request, or earlier in this batch, was already evaluated)."""
    store.store_samples(store.sample_rows([store.NodeGpus(node_id, r.collected_at, r.gpus) for r in new]))
    return _store_xids(node_id, new, latest, source)


def _store_xids(node_id: int, new: list[AgentReport], latest: _Latest, source: str) -> list[AgentReport]:
    if not any(r.xid_events for r in new):
        return new
    known_buses = {normalise_bus_id(g.get("pci_bus_id")): i for i, g in latest.gpus.items()}
    rows = [[_xid_row(node_id, r, x, known_buses, source) for x in r.xid_events] for r in new]
    fresh = store.store_xids([row for report_rows in rows for row in report_rows])
    evaluated = []
    for report, report_rows in zip(new, rows, strict=True):
        events = []
        for event, row in zip(report.xid_events, report_rows, strict=True):
            if row["fingerprint"] in fresh:
                fresh.discard(row["fingerprint"])  # the batch's first copy is the one evaluated
                events.append(event)
        same = len(events) == len(report.xid_events)
        evaluated.append(report if same else msgspec.structs.replace(report, xid_events=events))
    return evaluated


def event_identity(event: XidEvent, boot_id: str | None) -> str:
    """What makes two XID events the same event (a SHA-1, XidIdentity.fingerprint).

    A /dev/kmsg record is (boot, sequence number): the kernel numbers records from 0 at
    each boot, so the pair names one record whatever wall-clock time a restarted agent
    computes for it. An agent that sends no boot id: the sequence number, the line and
    its time to the second (a restart shifts the computed time by microseconds to
    milliseconds). A line without a sequence number (journalctl, dcgm-exporter): the line
    and its time, which come from the journal or the scrape and do not move.
    """
    if event.kmsg_seq is not None and boot_id:
        key = f"kmsg|{boot_id}|{event.kmsg_seq}"
    elif event.kmsg_seq is not None:
        key = f"kmsg|?|{event.kmsg_seq}|{round(event.observed_at.timestamp())}|{event.raw}"
    else:
        key = f"line|{event.kind}|{event.xid}|{event.observed_at.timestamp()!r}|{event.raw}"
    return hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()


def _xid_row(
    node_id: int, report: AgentReport, event: XidEvent, known_buses: dict[str | None, int], source: str
) -> dict[str, Any]:
    bus = normalise_bus_id(event.pci_bus_id)
    buses = {normalise_bus_id(g.pci_bus_id): g.index for g in report.gpus}
    gpu_index = buses.get(bus, known_buses.get(bus)) if bus else None
    return {
        "node_id": node_id,
        "observed_at": event.observed_at,
        "fingerprint": event_identity(event, report.boot_id),
        "gpu_index": gpu_index,
        "xid": event.xid,
        "kind": event.kind,
        "pci_bus_id": event.pci_bus_id or "",
        "pid": event.pid,
        "process": event.process or "",
        "message": event.message,
        "raw": event.raw,
        "kmsg_seq": event.kmsg_seq,
        "report_id": report.report_id,
        "source": source,
    }


def _store_latest(node_id: int, new: list[AgentReport], latest: _Latest, received_at: datetime, source: str) -> None:
    if not new:
        return
    newest = new[-1]
    store.upsert_gpu_states(_gpu_state_rows(node_id, newest, latest))
    # Always written (the CASE in the upsert keeps newer state): last_received_at moves on.
    store.upsert_node_health(_health_row(node_id, newest, received_at, source))


def _gpu_state_rows(node_id: int, newest: AgentReport, latest: _Latest) -> list[store.NodeGpus]:
    """The latest GPU rows of the newest new report; none if the node already sent a newer one."""
    if not _moves_gpus_on(newest, latest):
        return []
    return [store.NodeGpus(node_id, newest.collected_at, newest.gpus)]


def _gpu_readings(node_id: int, new: list[AgentReport], latest: _Latest) -> list[store.NodeGpus]:
    """The new reports' GPU readings (oldest first), for their samples; the newest's marked as the
    node's latest GPU rows where it moves them on (``_gpu_state_rows``)."""
    moves = _moves_gpus_on(new[-1], latest)
    return [store.NodeGpus(node_id, r.collected_at, r.gpus, latest=moves and r is new[-1]) for r in new if r.gpus]


def _moves_gpus_on(newest: AgentReport, latest: _Latest) -> bool:
    return (latest.at is None or newest.collected_at >= latest.at) and bool(newest.gpus)


def _health_row(node_id: int, report: AgentReport, received_at: datetime, source: str) -> dict[str, Any]:
    return {
        **_health_scalars(node_id, report, received_at, source),
        "host": report.host or {},  # structs, as in _report_row
        "ib_ports": report.ib_ports,
        "collector_errors": report.collector_errors,
    }


def _health_scalars(node_id: int, report: AgentReport, received_at: datetime, source: str) -> dict[str, Any]:
    """The health row of ``report`` but its JSON columns (``store.HEALTH_FROM_SUMMARY``)."""
    processes = [g.compute_processes for g in report.gpus]
    # Unknown for one GPU means "idle" cannot be proven: None, not a partial sum.
    known = [n for n in processes if n is not None]
    busy = sum(known) if processes and len(known) == len(processes) else None
    return {
        "node_id": node_id,
        "last_report_at": report.collected_at,
        "last_received_at": received_at,
        "source": source,
        "agent_version": report.agent_version,
        "driver_version": report.driver_version or "",
        "cuda_version": report.cuda_version or "",
        "gpu_count": len(report.gpus),
        "gpu_compute_processes": busy,
    }


def _contexts(node: dict[str, Any], new: list[AgentReport], latest: _Latest, source: str) -> list[ReportContext]:
    """One context per new report, oldest first; each sees the state just before it.

    A report older than what the node already sent (an agent flushing its buffer) has no
    known predecessor: its ``previous_*`` are empty rather than newer data.
    """
    contexts = []
    state = latest
    last = len(new) - 1
    for k, report in enumerate(new):
        newer = state.at is None or report.collected_at > state.at
        before = state if newer else _Latest()
        contexts.append(
            ReportContext(
                node_id=node["id"],
                hostname=node["hostname"],
                hardware_profile_id=node["hardware_profile_id"],
                expected_gpu_count=node["hardware_profile__gpu_count"],
                report=report,
                previous_report_at=before.at,
                previous_gpus=before.gpus,
                previous_ib_ports=before.ib_ports,
                previous_host=before.host,
                source=source,
            )
        )
        if newer and k < last:  # the state after a report matters only to the report after it
            state = _state_of(report)
    return contexts


def _state_of(report: AgentReport) -> _Latest:
    return _Latest(
        at=report.collected_at,
        gpus={g.index: g for g in report.gpus},
        ib_ports={(p.device, p.port): msgspec.to_builtins(p) for p in report.ib_ports},
        host=msgspec.to_builtins(report.host) if report.host else None,
    )


def _quiet(consumer: consumers.ReportConsumer, contexts: list[ReportContext], firing: list[Any] | None) -> bool:
    """The consumer's word that it has nothing to do; a consumer that fails to say is asked
    the long way (``evaluate``, in its savepoint, where a failure costs no telemetry)."""
    quiet = consumers.quiet_of(consumer.evaluate)
    try:
        return quiet is not None and quiet(contexts, firing=firing)
    except Exception:
        log.exception("report consumer's quiet check failed; evaluating")
        return False


def _evaluate(node_id: int, contexts: list[ReportContext], source: str, firing: list[Any] | None) -> None:
    """Run the rules in a savepoint: if they fail, the telemetry is kept, the failure is
    logged and left as an IngestRejection to be found, and the request still succeeds.
    The savepoint opens before the rules' first statement: a healthy report sends none."""
    consumer = consumers.CONSUMER  # health's rules (telemetry.consumers)
    if not contexts or consumer is None:
        return
    if _quiet(consumer, contexts, firing):
        return  # a healthy report of a node with no open alert: nothing for the rules to do
    try:
        with store.savepoint_on_first_statement():
            consumer.evaluate(contexts, firing=firing)
    except Exception as exc:  # any rule bug: it must not cost the node its telemetry
        log.exception("health evaluation failed for node %s", node_id)
        IngestRejection.objects.create(
            source=source,
            node_id=node_id,
            status=200,
            reason=f"evaluation error: {exc!r}"[:2000],
            body_excerpt=", ".join(c.report.report_id for c in contexts)[:2000],
        )

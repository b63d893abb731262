"""Who reads each newly stored batch of reports, declared in one place.

Ingest stores a node's reports, then hands one ``ReportContext`` per new report to the
consumer registered here: the health rules, which ``health`` registers in its
``AppConfig.ready``. Telemetry sits below health (health reads telemetry's reports), so it
never imports it; a back edge would be a design question, not a late import.

A consumer may name rows it wants read with the node in ingest's one statement on
PostgreSQL (health: the node's firing alerts), so that a healthy report costs it no query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import models

from .schema import AgentReport


@dataclass
class ReportContext:
    """A newly stored report with what the portal knew of its node just before it."""

    node_id: int
    hostname: str
    hardware_profile_id: int | None
    expected_gpu_count: int | None  # from the node's hardware profile
    report: AgentReport
    previous_report_at: datetime | None = None  # collected_at of the previous report
    # gpu index -> its reading as of the previous report (a GpuReading; read its fields with
    # ``.get(name)``, as a test's dict of the same names is read)
    previous_gpus: dict[int, Any] = field(default_factory=dict)
    # (device, port) -> {"state", "phys_state", "rate_gbps", "counters": {...}}
    previous_ib_ports: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    previous_host: dict[str, Any] | None = None  # HostVitals fields
    source: str = "agent"  # "agent" or "dcgm-exporter"


@dataclass(frozen=True)
class NodeRows:
    """Rows of ``model`` read with the node (PostgreSQL): its ``columns``, in model order, of the
    node's rows (``node_id``) whose ``state_column`` is ``state``."""

    model: type[models.Model]
    columns: tuple[str, ...]
    state_column: str
    state: str


@dataclass(frozen=True)
class ReportConsumer:
    """``evaluate(contexts, firing=...)`` runs inside the ingest transaction, in a savepoint.
    ``firing`` is ``read_with_node``'s rows made objects by ``rows_to_objects``, or None where
    they were not read with the node (the consumer then reads them itself). ``evaluate`` may
    carry ``evaluate.quiet(contexts, firing=...)`` (``quiet_of``): a cheap word that this very
    function would do nothing with them (no statement, no effect); ingest then calls neither it
    nor opens its savepoint. It belongs to the function, so that a stand-in ``evaluate`` is
    always called."""

    evaluate: Callable[..., None]
    read_with_node: NodeRows | None = None
    rows_to_objects: Callable[[list[tuple[Any, ...]]], list[Any]] = list


def quiet_of(evaluate: Callable[..., None]) -> Callable[..., bool] | None:
    """The quiet check ``evaluate`` carries (see ``ReportConsumer``), if any."""
    quiet: Callable[..., bool] | None = getattr(evaluate, "quiet", None)
    return quiet


CONSUMER: ReportConsumer | None = None


def consumes_reports(consumer: ReportConsumer) -> None:
    """Register the one consumer of ingested reports (health's rules)."""
    global CONSUMER
    if CONSUMER is not None and consumer != CONSUMER:
        raise RuntimeError(f"Ingested reports already have a consumer: {CONSUMER!r}")
    CONSUMER = consumer

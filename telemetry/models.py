"""Telemetry tables. Agent tokens live here: they are what lets a node report."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.expressions import Combinable
from django.utils import timezone

from nodes.models import Node

from .choices import CommandStatus, CommandVerb


class AgentToken(models.Model):
    """A node agent's long-lived credential. Only a SHA-256 of the token is stored; the
    token itself is shown once, when issued (``telemetry.services.issue_agent_token``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The token's first characters, to tell tokens apart.")
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… for node {self.node_id}"


class NodeHealth(models.Model):
    """The latest a node reported, one row per node, kept apart from the history so that
    dashboards, the idle check and the heartbeat rule read one small row."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="health")
    last_report_at = models.DateTimeField(help_text="collected_at of the newest report")
    last_received_at = models.DateTimeField(help_text="when the portal received the newest report")
    source = models.CharField(max_length=20, default="agent")  # "agent" or "dcgm-exporter"
    agent_version = models.CharField(max_length=200, blank=True)
    driver_version = models.CharField(max_length=200, blank=True)
    cuda_version = models.CharField(max_length=200, blank=True)
    gpu_count = models.PositiveSmallIntegerField(null=True, blank=True)
    # Sum over GPUs of running compute processes: 0 means no job is using the GPUs.
    gpu_compute_processes = models.PositiveIntegerField(null=True, blank=True)
    host = models.JSONField(default=dict, blank=True)  # HostVitals
    ib_ports = models.JSONField(default=list, blank=True)  # [IbPortReading]
    collector_errors = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "node health"
        # No index but the primary key: every report rewrites the row, and an index on a column
        # that moves would make each update a non-HOT one (migration 0015).

    def __str__(self) -> str:
        return f"health of node {self.node_id}"


def _float() -> models.FloatField[float | str | Combinable | None, float | None]:
    return models.FloatField(null=True, blank=True)


def _count() -> models.BigIntegerField[float | str | Combinable | None, int | None]:
    # Cumulative hardware counters outgrow 32 bits on long-lived GPUs: always 64-bit.
    return models.BigIntegerField(null=True, blank=True)


def _flag() -> models.BooleanField[bool | Combinable | None, bool | None]:
    return models.BooleanField(null=True, blank=True)


def _text() -> models.CharField[str | int | Combinable | None, str | None]:
    return models.CharField(max_length=200, blank=True, null=True)


class RealField(models.FloatField):  # type: ignore[type-arg]  # FloatField's generics, as _float says
    """A 4-byte float (``real``): a reading stored per GPU every 30 s needs 7 digits, not 15.

    Halves each reading of the history tables (GpuSample, GpuSampleHourly, GpuSampleDaily) against FloatField's
    ``double precision``; SQLite stores every REAL in 8 bytes whatever the declared type."""

    def db_type(self, connection: Any) -> str:
        return "real"


def _real() -> RealField:
    return RealField(null=True, blank=True)


def _int() -> models.IntegerField[float | str | Combinable | None, int | None]:
    # Clocks (MHz) and memory (MiB): 32 bits hold them with room (the schema bounds them to it).
    return models.IntegerField(null=True, blank=True)


def _small() -> models.SmallIntegerField[float | str | Combinable | None, int | None]:
    # PCIe link generation and width: single or double digits (the schema bounds them to 16 bits).
    return models.SmallIntegerField(null=True, blank=True)


class GpuState(models.Model):
    """The latest reading of one GPU, one row per (node, index). Columns carry the same names
    as ``telemetry.schema.GpuReading`` so rules and pages read both alike."""

    # Rewritten by every report (8 rows a node, every 30 s): its only index is the (node, index)
    # constraint, whose columns never change, and its pages keep room (fillfactor 50, migration
    # 0012), so that the update is a HOT one and touches no index.
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_states", db_index=False)
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64)
    updated_at = models.DateTimeField(help_text="collected_at of the report this row comes from")
    # dcgm-exporter's DCGM_FI_DEV_XID_ERRORS gauge as last scraped: it holds the last XID
    # number, not a count, so a new XID is only visible as a change of this value.
    xid_gauge = models.IntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200, blank=True)
    serial = _text()
    vbios_version = _text()
    persistence_mode = _flag()
    temperature_c = _float()
    hbm_temperature_c = _float()
    max_operating_temp_c = _float()
    hbm_max_operating_temp_c = _float()
    slowdown_temp_c = _float()
    shutdown_temp_c = _float()
    power_w = _float()
    power_limit_w = _float()
    sm_clock_mhz = _count()
    mem_clock_mhz = _count()
    clock_event_reasons = _count()
    utilization_pct = _float()
    memory_used_mib = _count()
    memory_total_mib = _count()
    compute_processes = _count()
    ecc_volatile_corrected = _count()
    ecc_volatile_uncorrected = _count()
    ecc_aggregate_corrected = _count()
    ecc_aggregate_uncorrected = _count()
    retired_pages_sbe = _count()
    retired_pages_dbe = _count()
    retired_pages_pending = _flag()
    remapped_rows_correctable = _count()
    remapped_rows_uncorrectable = _count()
    remapped_rows_pending = _flag()
    remapped_rows_failure = _flag()
    nvlink_links_total = _count()
    nvlink_links_up = _count()
    nvlink_crc_errors = _count()
    nvlink_replay_errors = _count()
    nvlink_recovery_errors = _count()
    pcie_link_gen = _count()
    pcie_link_width = _count()
    pcie_max_link_gen = _count()
    pcie_max_link_width = _count()
    pcie_replay_count = _count()
    recovery_action = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpustate_node_index")]

    def __str__(self) -> str:
        return f"GPU {self.index} of node {self.node_id}"


# --- History --------------------------------------------------------------------------
# The history tables are built to be range-partitioned by time on PostgreSQL
# (``manage.py telemetry_partitioning``): the time column is part of every primary key,
# no foreign key points into them, and their own node columns carry no database
# constraint, so COPY does not check 8 rows of Node per report and retention can drop
# whole partitions. Every index leads with (node, time).
def _history_node() -> models.ForeignKey[Node | Combinable, Node]:
    # No index of its own either: each primary key already leads with the node.
    return models.ForeignKey(Node, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")


class NodeReport(models.Model):
    """One report received from a node, without its GPU rows (those are GpuSample).

    A report is identified by (node, collected_at): a resent report (same report_id,
    same instant) conflicts and is counted as a duplicate, never stored twice."""

    pk = models.CompositePrimaryKey("node", "collected_at")
    node = _history_node()
    collected_at = models.DateTimeField()
    report_id = models.CharField(max_length=64)
    received_at = models.DateTimeField()
    seq = models.BigIntegerField(default=0)
    source = models.CharField(max_length=20, default="agent")
    gpu_count = models.PositiveSmallIntegerField(default=0)
    xid_count = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)  # host vitals, IB ports, collector errors

    def __str__(self) -> str:
        return f"report {self.report_id} of node {self.node_id} at {self.collected_at:%Y-%m-%d %H:%M:%S}"


class GpuSample(models.Model):
    """One GPU's numbers from one report: what charts and trends read.

    On PostgreSQL the key is not a constraint: rows come only from reports new in the same
    transaction (NodeReport's primary key is the arbiter), so a unique index on (node, time,
    GPU) would check nothing and cost a B-tree entry per GPU row, about a fifth of the table's
    bytes. Readers (charts, trends, roll-ups) ask for a node's time range:
    ``gpusample_node_time`` serves them, one deduplicated entry per report for its GPUs."""

    pk = models.CompositePrimaryKey("node", "collected_at", "gpu_index")
    node = _history_node()
    collected_at = models.DateTimeField()
    gpu_index = models.PositiveSmallIntegerField()
    temperature_c = _real()
    hbm_temperature_c = _real()
    power_w = _real()
    sm_clock_mhz = _int()
    utilization_pct = _real()
    memory_used_mib = _int()
    ecc_volatile_corrected = _count()
    ecc_volatile_uncorrected = _count()
    ecc_aggregate_corrected = _count()
    ecc_aggregate_uncorrected = _count()
    remapped_rows_correctable = _count()
    remapped_rows_uncorrectable = _count()
    remapped_rows_pending = _flag()
    nvlink_crc_errors = _count()
    nvlink_replay_errors = _count()
    nvlink_recovery_errors = _count()
    pcie_replay_count = _count()
    pcie_link_gen = _small()
    pcie_link_width = _small()
    clock_event_reasons = _count()

    class Meta:
        indexes = [models.Index(fields=["node", "collected_at"], name="gpusample_node_time")]

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} of node {self.node_id} at {self.collected_at:%Y-%m-%d %H:%M:%S}"


class XidRecord(models.Model):
    """Every XID/SXID line a node reported: evidence, kept far longer than raw samples.

    ``fingerprint`` is the event's identity (``telemetry.ingest.event_identity``): a line is
    stored only if its identity was new to ``XidIdentity`` in the same transaction, so the
    same kernel record sent twice (an agent resending after a restart) is stored once."""

    pk = models.CompositePrimaryKey("node", "observed_at", "fingerprint")
    node = _history_node()
    observed_at = models.DateTimeField()
    fingerprint = models.CharField(max_length=40)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    xid = models.PositiveIntegerField()
    kind = models.CharField(max_length=4, default="xid")  # "xid" or "sxid"
    pci_bus_id = models.CharField(max_length=200, blank=True)
    pid = models.BigIntegerField(null=True, blank=True)
    process = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    raw = models.TextField()
    kmsg_seq = models.BigIntegerField(null=True, blank=True)
    report_id = models.CharField(max_length=64)
    source = models.CharField(max_length=20, default="agent")

    def __str__(self) -> str:
        return f"{self.kind.upper()} {self.xid} on node {self.node_id} GPU {self.gpu_index}"


class XidIdentity(models.Model):
    """The identity of every XID/SXID event a node reported: what makes an event count once.

    The identity (``telemetry.ingest.event_identity``) is (boot id, kernel sequence number)
    where the agent knows them, else the line and its kernel time. ``XidRecord`` cannot be
    the arbiter: a resent event can carry a wall-clock time a few milliseconds off (the agent
    recomputes the boot time when it restarts), and its primary key must hold the time to
    be partitioned by it. This small table holds no time in its key: two requests carrying
    the same event, concurrent or years apart, insert one row; only the request that
    inserted it stores the line and hands it to the health rules. Pruned with XidRecord."""

    pk = models.CompositePrimaryKey("node", "fingerprint")
    node = _history_node()
    fingerprint = models.CharField(max_length=40)
    observed_at = models.DateTimeField(help_text="when the event happened, for retention")

    class Meta:
        indexes = [models.Index(fields=["observed_at"], name="xididentity_observed")]

    def __str__(self) -> str:
        return f"XID event {self.fingerprint} of node {self.node_id}"


class GpuRollup(models.Model):
    """The readings of a roll-up row (GpuSampleHourly, GpuSampleDaily): over its ``n`` samples the
    averages, maxima and minima of what GpuSample holds, in the same narrow types."""

    n = models.PositiveIntegerField()
    temperature_avg = _real()
    temperature_max = _real()
    hbm_temperature_max = _real()
    power_avg = _real()
    power_max = _real()
    utilization_avg = _real()
    memory_used_max = _int()
    ecc_volatile_corrected_max = _count()
    ecc_volatile_uncorrected_max = _count()
    ecc_aggregate_corrected_max = _count()
    ecc_aggregate_uncorrected_max = _count()
    remapped_rows_correctable_max = _count()
    remapped_rows_uncorrectable_max = _count()
    nvlink_crc_errors_max = _count()
    nvlink_replay_errors_max = _count()
    nvlink_recovery_errors_max = _count()
    pcie_replay_count_max = _count()
    pcie_link_gen_min = _small()
    pcie_link_width_min = _small()

    class Meta:
        abstract = True


class GpuSampleHourly(GpuRollup):
    """GpuSample rolled up per hour once raw rows pass TELEMETRY_RAW_RETENTION_DAYS; past
    TELEMETRY_HOURLY_RETENTION_DAYS the hours become GpuSampleDaily.

    Averages are over the hour's ``n`` samples; re-running a roll-up over rows of an hour
    already rolled up merges by weighting with ``n``."""

    pk = models.CompositePrimaryKey("node", "hour", "gpu_index")
    node = _history_node()
    hour = models.DateTimeField()
    gpu_index = models.PositiveSmallIntegerField()
    # What the trends read of the hour (temperature under load), sample by sample, as the raw rows
    # gave it: the trends read these instead of decoding the hour's pack. NULL: rolled up before
    # these were counted (readers fall back to the hour's averages, as the daily roll-up does).
    # IntegerField, not Positive...: its CHECK would have PostgreSQL scan the whole table (a year of a
    # fleet's hours) under an exclusive lock when the column is added.
    load_n = models.IntegerField(
        null=True, blank=True, help_text="samples at LOAD_UTILIZATION_PCT or busier, with a temperature"
    )
    load_temperature_avg = _real()

    class Meta:
        verbose_name = "GPU sample (hourly)"
        verbose_name_plural = "GPU samples (hourly)"

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} of node {self.node_id}, hour {self.hour:%Y-%m-%d %H:00}"


# A GPU counts as "under load" in an hour whose average utilisation reaches this: the trends compare
# temperatures only under load (trends.collect), and the daily roll-up keeps those hours' temperature apart.
LOAD_UTILIZATION_PCT = 80.0


class GpuSampleDaily(GpuRollup):
    """GpuSampleHourly rolled up per day (UTC) once hourly rows pass TELEMETRY_HOURLY_RETENTION_DAYS.

    The same figures as the hourly row: minima of minima, maxima of maxima, averages weighted by
    the samples ``n`` behind each hour. ``load_n`` and ``load_temperature_avg`` keep what the trends
    read from hours at ``LOAD_UTILIZATION_PCT`` or more, which a day's average utilisation would
    blur. A day rolled up again (late hourly rows) merges weighted by ``n`` and ``load_n``."""

    pk = models.CompositePrimaryKey("node", "day", "gpu_index")
    node = _history_node()
    day = models.DateTimeField(help_text="midnight UTC of the day")
    gpu_index = models.PositiveSmallIntegerField()
    load_n = models.PositiveIntegerField(default=0, help_text="samples in hours under load")
    load_temperature_avg = _real()

    class Meta:
        verbose_name = "GPU sample (daily)"
        verbose_name_plural = "GPU samples (daily)"

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} of node {self.node_id}, day {self.day:%Y-%m-%d}"


class TelemetryHourPack(models.Model):
    """One node's hour of raw history (its NodeReport and GpuSample rows) packed into one row.

    Written by the packing beat (``telemetry.packing.pack_past_hours``) once the hour is past,
    in the transaction that deletes the hour's raw rows; read back through
    ``telemetry.packing`` by every reader of raw samples. ``blob`` is columnar and compressed
    (``telemetry.packformat``, versioned by its first byte): a few kB where the rows took about
    a hundred. Kept, like the raw rows, for TELEMETRY_RAW_RETENTION_DAYS."""

    pk = models.CompositePrimaryKey("node", "hour")
    node = _history_node()
    hour = models.DateTimeField()
    reports = models.PositiveIntegerField(default=0)
    samples = models.PositiveIntegerField(default=0)
    blob = models.BinaryField()

    class Meta:
        indexes = [models.Index(fields=["hour"], name="telemetryhourpack_hour")]

    def __str__(self) -> str:
        return f"telemetry of node {self.node_id}, hour {self.hour:%Y-%m-%d %H:00}"


# --- Operations -------------------------------------------------------------------------
class IngestRejection(models.Model):
    """A dead letter: something sent to an ingest endpoint that was refused, with why.

    Every refusal writes one, so a misbehaving agent or exporter shows up in the admin
    instead of vanishing. The body is kept as a bounded excerpt."""

    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=20)  # "agent", "dcgm-exporter", "dcgm-scrape", "evaluation"
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    hostname = models.CharField(max_length=253, blank=True)
    status = models.PositiveSmallIntegerField(default=400)
    reason = models.TextField()
    body_excerpt = models.TextField(blank=True)
    body_size = models.PositiveIntegerField(default=0)
    remote_addr = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.source} rejection at {self.received_at:%Y-%m-%d %H:%M:%S}: {self.reason[:60]}"


class DcgmExporterTarget(models.Model):
    """A dcgm-exporter endpoint (``http://host:9400/metrics``) the portal scrapes."""

    url = models.URLField(max_length=500, unique=True)
    site = models.ForeignKey("fleet.Site", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    enabled = models.BooleanField(default=True)
    interval_s = models.PositiveIntegerField(default=30, help_text="Seconds between scrapes.")
    timeout_s = models.PositiveIntegerField(default=10)
    last_scraped_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["url"]

    def __str__(self) -> str:
        return self.url


class AgentCommand(models.Model):
    """One command for a node's agent (reset a GPU, reboot, collect diagnostics).

    Issued by an operator or a component (``telemetry.commands.issue_command``), taken by the
    node's agent on its poll (at most once: ``delivered``), finished by the agent's result or
    expired unclaimed. ``args`` are validated per verb; the agent runs only its fixed verbs,
    never a command line from the portal. Issue and outcome are also NodeEvents (history)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_commands")
    verb = models.CharField(max_length=32, choices=CommandVerb.choices)
    args = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=CommandStatus.choices, default=CommandStatus.QUEUED)
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The actor's name survives the user: history must not lose who asked.
    issued_by_name = models.CharField(max_length=200)
    reason = models.TextField()
    created = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(help_text="Not delivered after this; a queued command then expires.")
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Delivered is not done: an agent that took the command and never answered (it died mid-reset)
    # fails it as unanswered at this time (its ttl again, counted from delivery).
    answer_by = models.DateTimeField(
        null=True, blank=True, help_text="Delivered and not answered by then: failed as unanswered."
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    summary = models.CharField(max_length=300, blank=True)
    result = models.JSONField(
        default=dict, blank=True, help_text="The agent's bounded output (COMMAND_RESULT_MAX_BYTES)."
    )

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            # The agent's poll: this node's queued commands, oldest first.
            models.Index(fields=["node", "status", "created"], name="agentcommand_node_status"),
            # The expiry sweep: queued commands past their date.
            models.Index(fields=["status", "expires_at"], name="agentcommand_status_expires"),
            # The unanswered sweep: delivered commands past their answer date.
            models.Index(fields=["status", "answer_by"], name="agentcommand_status_answer"),
        ]

    def __str__(self) -> str:
        return f"{self.verb} #{self.pk} for node {self.node_id}"

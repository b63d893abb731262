"""Report vocabularies: periods, what "serving" means, downtime attribution, failure components.
One place for the pages, the API, the CSV files and the metrics."""

from __future__ import annotations

from django.db import models

from nodes.choices import STATE_PHASE, NodeState, Phase
from nodes.models import STATE_CHANGE_KINDS as NODE_STATE_CHANGE_KINDS

S = NodeState

# The periods the fleet reports offer, in days; the default when none is asked for.
PERIOD_DAYS: tuple[int, ...] = (7, 30, 90)
DEFAULT_DAYS = 30

# "In production" is the production phase: a node whose drain is pending still serves its job
# (the same reading as remediation.charts.SERVING).
SERVING: tuple[str, ...] = tuple(state for state, phase in STATE_PHASE.items() if phase == Phase.PRODUCTION)
# A stay in one of these during an outage means the hardware was at fault, whoever took the node out.
HARDWARE_STATES: tuple[str, ...] = (S.REMEDIATING, S.REPAIR, S.RMA)
# An outage ends here without a return: the node is no longer anyone's.
GONE: tuple[str, ...] = (S.DECOMMISSIONED,)
STATE_CHANGE_KINDS = NODE_STATE_CHANGE_KINDS  # the partial indexes on NodeEvent cover exactly these


class Attribution(models.TextChoices):
    """Whose downtime an outage is (see reports/README.md, "Downtime attribution")."""

    PROVIDER = "provider", "Provider (findings, remediation, repair, RMA)"
    CUSTOMER = "customer", "Customer or operator request"


# System components that act on someone's request rather than on a fault: a re-role asked for by
# the customer drains the node through system:personas.
REQUESTED_COMPONENTS: tuple[str, ...] = ("system:personas",)

ATTRIBUTION_COLOURS: dict[str, str] = {Attribution.PROVIDER: "#c0392b", Attribution.CUSTOMER: "#4a78c2"}


# Which part of a server a finding's rule is about (rules not listed: "Other").
RULE_COMPONENTS: dict[str, str] = {
    "xid": "GPU",
    "xid_repeated": "GPU",
    "gpu_missing": "GPU",
    "nvml_unavailable": "GPU",
    "active_check": "GPU",
    "ib_fabric": "InfiniBand fabric",
    "host_edac_uncorrected": "Host memory",
    "disk_unhealthy": "Disk",
    "scheduler_daemon_unresponsive": "Host software",
    "heartbeat_missing": "Host software",
    "day0_timeout": "Provisioning",
    "alertmanager": "External monitoring",
}
RULE_PREFIX_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("ib_", "InfiniBand port"),
    ("nvlink_", "NVLink"),
    ("pcie_", "PCIe"),
    ("day1_", "Day 1 validation"),
)


def component_of(rule: str) -> str:
    """The component a finding's rule points at: GPU rules by default, then the tables above."""
    if rule in RULE_COMPONENTS:
        return RULE_COMPONENTS[rule]
    for prefix, component in RULE_PREFIX_COMPONENTS:
        if rule.startswith(prefix):
            return component
    from health.rules import REGISTRY

    spec = REGISTRY.get(rule)
    return "GPU" if spec is not None and spec.scope == "gpu" else "Other"

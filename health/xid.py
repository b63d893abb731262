"""The XID catalog: our severity and first action for every NVIDIA XID, and the hot-path lookup.

``health/data/xid_catalog.csv`` is distilled from the shared reference catalog by
``manage.py build_xid_catalog`` with the mapping below; a data migration seeds
``XidDefinition`` from it, and operators override rows in the admin.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .choices import RecommendedAction as A
from .choices import Severity

CATALOG_CSV = Path(__file__).resolve().parent / "data" / "xid_catalog.csv"
CSV_FIELDS = [
    "xid",
    "name",
    "meaning",
    "nvidia_bucket",
    "investigatory_action",
    "severity",
    "recommended_action",
    "gpu_reset",
]

# The reference catalog's severity (first word) -> ours. CRITICAL means "reset or reboot
# required": the node cannot run work. N/A means NVIDIA marks the XID unused on A100 and
# newer, so seeing one is unexpected: worth a warning, not silence.
SEVERITY_MAP: dict[str, str] = {
    "CRITICAL": Severity.CATASTROPHIC,
    "WARNING": Severity.WARNING,
    "INFO": Severity.INFO,
    "N/A": Severity.WARNING,
}

# NVIDIA's immediate-action bucket -> the first rung we recommend. IGNORE and the two
# "follow the other Xid" buckets (45: preemptive cleanup after another error or a killed
# job; 154: the recovery action is in the line, rules/xid.py reads it) start nothing of
# their own: the XID they accompany carries the severity and the action.
BUCKET_ACTIONS: dict[str, str] = {
    "RESET_GPU": A.RESET_GPU,
    "WORKFLOW_XID_48": A.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": A.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": A.RESET_GPU,
    "RESTART_BM": A.REBOOT,
    "RESTART_VM": A.REBOOT,
    "CHECK_MECHANICALS": A.INSPECT,
    "CONTACT_SUPPORT": A.INSPECT,
    "RESTART_APP": A.CHECK_APPLICATION,
    "CHECK_UVM": A.CHECK_APPLICATION,
    "UPDATE_SWFW": A.REIMAGE,  # driver or firmware update: our reimage rung carries the new image
    "IGNORE": A.NONE,
    "WORKFLOW_XID_45": A.NONE,
    "XID_154": A.NONE,
}

# Per-XID overrides of the bucket mapping, with why. Each agrees with NVIDIA's bucket and
# only pins it down (a test keeps IGNORE and the follow-the-other-Xid buckets at "none").
XID_ACTIONS: dict[int, str] = {
    79: A.REBOOT,  # fallen off the bus: only a reboot (or power cycle) brings it back
    48: A.RESET_GPU,
    64: A.RESET_GPU,
    95: A.RESET_GPU,
    140: A.RESET_GPU,  # memory errors: a reset clears them
    # Application faults: the job did something wrong, the GPU is fine; restart the job.
    13: A.CHECK_APPLICATION,
    31: A.CHECK_APPLICATION,
    68: A.CHECK_APPLICATION,
}
# Whether NVIDIA's recovery for an XID is (or includes) a reset of the one GPU (``XidInfo.gpu_reset``).
# Such an XID recommends the reset (``distil_row``), so its remediation starts at the GPU reset rung,
# unless NVIDIA's bucket says it starts nothing of its own (``NO_ACTION_BUCKETS``: 63, row remap
# recorded, is IGNORE; the ``row_remap_pending`` rule asks for the reset). The buckets whose workflow is a GPU reset, plus two XIDs
# whose own text asks for one though their bucket does not: 63 (a row marked for remapping takes
# effect at the next GPU reset: "row-remap pending") and 94 (a contained ECC error: the
# application restarts now, the GPU is reset when convenient). 79 (fallen off the bus) is not
# among them: only a reboot or power cycle brings the GPU back.
GPU_RESET_BUCKETS = frozenset({"RESET_GPU", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"})
GPU_RESET_XIDS = frozenset({63, 94})


# NVIDIA's buckets for XIDs that start nothing by themselves: IGNORE, and "act on the other XID".
NO_ACTION_BUCKETS = frozenset({"IGNORE", "WORKFLOW_XID_45", "XID_154"})


def calls_for_gpu_reset(xid: int, bucket: str) -> bool:
    """Whether NVIDIA's recovery for this XID (in this immediate-action bucket) resets the GPU."""
    return bucket in GPU_RESET_BUCKETS or xid in GPU_RESET_XIDS


# XIDs that are the application's doing, not the node's: 43 (the application hit a fault and
# was stopped) and 45 (cleanup after it was killed or after another XID) among them, though
# neither asks for an action. Trends leave them out of a node's XID count.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})


def distil_row(row: dict[str, str]) -> dict[str, Any]:
    """One reference-catalog row -> our catalog row."""
    xid = int(row["xid"])
    bucket = (row.get("recommended_action") or "").split(":", 1)[0].strip()
    catalog_severity = (row.get("severity") or "N/A").split()[0]
    severity = SEVERITY_MAP.get(catalog_severity, Severity.WARNING)
    action: str
    if bucket == "NONE_LISTED":  # 162-172: no NVIDIA bucket; inspect what is inferred critical
        action = A.INSPECT if severity == Severity.CATASTROPHIC else A.NONE
    elif catalog_severity == "N/A":
        action = A.INSPECT  # an XID the catalog calls unused: have someone look
    else:
        action = BUCKET_ACTIONS.get(bucket, A.INSPECT)
    reset = calls_for_gpu_reset(xid, bucket)
    if reset and bucket not in NO_ACTION_BUCKETS and catalog_severity != "N/A":
        action = A.RESET_GPU  # 94: the application restarts by itself; the reset is ours to do
    meaning = row.get("meaning", "")
    if catalog_severity == "N/A":
        meaning = f"Unexpected XID: {meaning}"
    return {
        "xid": xid,
        "name": row["name"][:100],
        "meaning": meaning,
        "nvidia_bucket": bucket,
        "investigatory_action": (row.get("investigatory_action") or "")[:200],
        "severity": str(severity),
        "recommended_action": str(XID_ACTIONS.get(xid, action)),
        "gpu_reset": reset,
    }


def write_catalog(source: Path, target: Path = CATALOG_CSV) -> int:
    """Distil the reference catalog ``source`` into our CSV; returns the number of rows."""
    with source.open(newline="", encoding="utf-8") as f:
        rows = [distil_row(r) for r in csv.DictReader(f)]
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: r["xid"]))
    return len(rows)


def read_catalog(path: Path = CATALOG_CSV) -> Iterable[dict[str, Any]]:
    """Our catalog's rows, typed as the model's fields (``gpu_reset`` is written True/False)."""
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            yield {**row, "xid": int(row["xid"]), "gpu_reset": row.get("gpu_reset") == "True"}


@dataclass(frozen=True)
class XidInfo:
    xid: int
    name: str
    meaning: str
    severity: str
    recommended_action: str
    known: bool = True
    gpu_reset: bool = False  # NVIDIA's recovery resets the GPU (see GPU_RESET_BUCKETS)


_cache: dict[int, XidInfo] | None = None
_lock = threading.Lock()


def invalidate_cache() -> None:
    """Called when an XidDefinition is saved, so the next lookup reads the table again."""
    global _cache
    with _lock:
        _cache = None


def _load() -> dict[int, XidInfo]:
    from .models import XidDefinition

    global _cache
    with _lock:
        if _cache is None:
            _cache = {
                d.xid: XidInfo(d.xid, d.name, d.meaning, d.severity, d.recommended_action, gpu_reset=d.gpu_reset)
                for d in XidDefinition.objects.all()
            }
        return _cache


def lookup(xid: int) -> XidInfo:
    """What an XID means and how bad it is; an XID missing from the catalog is a warning to inspect."""
    info = _load().get(xid)
    if info is None:
        return XidInfo(xid, f"XID_{xid}", "Not in the XID catalog", Severity.WARNING, A.INSPECT, known=False)
    return info

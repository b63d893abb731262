"""A new finding that names a GPU makes that GPU suspect, through the declared follow-ups of
new findings (``health.followups``), once the finding has committed."""

from __future__ import annotations

import pytest

from health.choices import Severity
from health.evaluation import evaluate_reports
from health.followups import FollowupBatch
from health.gpus import suspect_named_gpu
from health.models import Finding
from health.services import raise_finding
from nodes.choices import EventKind, GpuHealth
from nodes.models import GPU, NodeEvent
from tests.factories import GPUFactory
from tests.validation.conftest import eager  # noqa: F401  (follow-ups run inline at 'commit')

from .conftest import context, gpu, report
from .test_fatal_xid import xid_event


@pytest.fixture
def gpus(node):
    return [GPUFactory(node=node, index=i, uuid=f"GPU-a01-{i}") for i in range(4)]


def _health(node) -> dict[int, str]:
    return dict(GPU.objects.filter(node=node).values_list("index", "health"))


def test_a_fatal_xid_on_a_gpu_makes_that_gpu_suspect_once_the_finding_commits(node, gpus, eager):  # noqa: F811
    reported = [gpu(i, pci_bus_id=f"00000000:{bus:02X}:00.0") for i, bus in enumerate([0x18, 0x2A, 0x3A, 0x53])]

    with eager():
        evaluate_reports([context(node, report(gpus=reported, xid_events=[xid_event(79)]))])

    finding = Finding.objects.get(node=node, rule="xid")
    assert _health(node) == {0: "healthy", 1: "healthy", 2: "healthy", 3: GpuHealth.SUSPECT}
    event = NodeEvent.objects.get(node=node, kind=EventKind.GPU)
    assert (event.actor_name, event.transition) == ("system:health", "mark_gpu_suspect")
    assert event.details["finding"] == finding.pk and event.details["gpu_index"] == 3
    assert event.details["gpu_uuid"] == "GPU-a01-3" and event.details["xid"] == 79
    assert event.reason.startswith(f"Finding {finding.pk} (xid): ")


@pytest.mark.parametrize(
    ("rule", "severity", "xid", "gpu_index", "suspect"),
    [
        ("gpu_row_remap_pending", Severity.DEGRADED, None, 1, True),
        ("gpu_ecc_uncorrected", Severity.WARNING, None, 1, True),
        ("gpu_temperature", Severity.DEGRADED, None, 1, True),
        ("xid", Severity.WARNING, 13, 1, False),  # the application's fault: the GPU is fine
        ("gpu_temperature", Severity.INFO, None, 1, False),  # recorded only
        ("node_heartbeat", Severity.DEGRADED, None, None, False),  # names no GPU
        ("xid", Severity.CATASTROPHIC, 79, 7, False),  # a GPU the inventory does not hold: no error
    ],
)
def test_which_findings_cast_suspicion_on_their_gpu(node, gpus, eager, rule, severity, xid, gpu_index, suspect):  # noqa: F811
    with eager():
        raise_finding(node.pk, rule=rule, severity=severity, summary="seen", gpu_index=gpu_index, xid=xid)

    suspects = [i for i, health in _health(node).items() if health == GpuHealth.SUSPECT]
    assert suspects == ([gpu_index] if suspect else [])


def test_the_suspicion_waits_for_the_findings_commit(node, gpus, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        raise_finding(node.pk, rule="gpu_ecc_uncorrected", severity=Severity.DEGRADED, summary="x", gpu_index=2)
    assert _health(node)[2] == GpuHealth.HEALTHY  # nothing ran inside the finding's transaction

    for callback in callbacks:
        if isinstance(callback, FollowupBatch):  # the commit: health's own follow-up, on the batch
            suspect_named_gpu(callback.ids)

    assert _health(node)[2] == GpuHealth.SUSPECT

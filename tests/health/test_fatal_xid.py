"""Done when: a fatal XID line in the kernel log is a catastrophic finding on the right node and GPU."""

from __future__ import annotations

import pytest

from health.choices import AlertState, RecommendedAction, Severity
from health.evaluation import evaluate_reports
from health.models import Alert, Finding
from nodes.choices import EventKind
from nodes.models import NodeEvent

from .conftest import T0, context, gpu, report

XID_79_LINE = "NVRM: Xid (PCI:0000:53:00): 79, pid=1912, name=python3, GPU has fallen off the bus."


def xid_event(xid: int = 79, pci: str = "0000:53:00", at=T0, **fields):
    return {
        "xid": xid,
        "observed_at": at.isoformat(),
        "raw": XID_79_LINE,
        "pci_bus_id": pci,
        "pid": 1912,
        "process": "python3",
        "message": "GPU has fallen off the bus.",
        **fields,
    }


def test_it_turns_a_fatal_xid_line_into_a_catastrophic_finding_on_the_right_gpu(node):
    gpus = [
        gpu(i, pci_bus_id=f"00000000:{bus:02X}:00.0")
        for i, bus in enumerate([0x18, 0x2A, 0x3A, 0x53, 0x9A, 0xAB, 0xBA, 0xDB])
    ]

    evaluate_reports([context(node, report(gpus=gpus, xid_events=[xid_event()]))])

    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.gpu_index, finding.xid) == (3, 79)
    assert finding.severity == Severity.CATASTROPHIC
    assert finding.recommended_action == RecommendedAction.REBOOT
    assert finding.evidence["raw"] == XID_79_LINE
    event = NodeEvent.objects.get(node=node, kind=EventKind.FINDING)
    assert event.details["finding_id"] == finding.pk and event.details["gpu_index"] == 3
    assert "XID 79" in event.reason and "GPU 3" in event.reason
    assert finding.event == event
    assert Alert.objects.get(node=node, rule="xid").state == AlertState.FIRING


def test_it_resolves_the_gpu_from_previous_readings_when_the_report_has_no_gpus(node):
    previous = {3: {"index": 3, "pci_bus_id": "00000000:53:00.0"}}

    evaluate_reports([context(node, report(gpus=[], xid_events=[xid_event()]), previous_gpus=previous)])

    assert Finding.objects.get(node=node, rule="xid").gpu_index == 3


def test_it_records_every_xid_event_but_keeps_one_alert_counting_them(node):
    events = [xid_event(at=T0), xid_event(at=T0.replace(second=5))]

    evaluate_reports([context(node, report(xid_events=events))])

    assert Finding.objects.filter(node=node, rule="xid").count() == 2
    alert = Alert.objects.get(node=node, rule="xid")
    assert alert.occurrences == 2


def xid_154(value: int, name: str, pci: str = "0000:53:00", **fields):
    """XID 154 as the driver prints it (R570+), with what the agent reads from it."""
    message = f"GPU recovery action changed from 0x0 (None) to 0x{value:x} ({name})"
    return xid_event(
        154, pci, raw=f"NVRM: Xid (PCI:{pci}): 154, {message}", message=message, pid=None, process=None, **fields
    )


@pytest.mark.parametrize(
    ("value", "name", "severity", "action"),
    [
        (2, "Node Reboot Required", Severity.CATASTROPHIC, RecommendedAction.REBOOT),
        (1, "GPU Reset Required", Severity.DEGRADED, RecommendedAction.RESET_GPU),
        (4, "Drain and Reset", Severity.DEGRADED, RecommendedAction.RESET_GPU),
        (3, "Drain P2P", Severity.WARNING, RecommendedAction.NONE),
        (0, "None", Severity.INFO, RecommendedAction.NONE),
    ],
)
def test_xid_154_acts_on_the_recovery_action_the_driver_names(node, value, name, severity, action):
    evaluate_reports([context(node, report(xid_events=[xid_154(value, name, recovery_action=value)]))])

    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.xid, finding.gpu_index, finding.severity, finding.recommended_action) == (154, 0, severity, action)
    assert finding.evidence["recovery_action"] == value


def test_xid_154_from_an_agent_that_does_not_send_the_field_is_read_from_its_message(node):
    evaluate_reports([context(node, report(xid_events=[xid_154(2, "Node Reboot Required")]))])

    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.severity, finding.recommended_action) == (Severity.CATASTROPHIC, RecommendedAction.REBOOT)


def test_an_xid_154_naming_no_action_we_know_is_inspected_not_ignored(node):
    events = [
        xid_154(9, "Something New", recovery_action=9),
        xid_event(154, raw="NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed", message=""),
    ]
    evaluate_reports([context(node, report(xid_events=events))])

    assert {(f.severity, f.recommended_action) for f in Finding.objects.filter(node=node, rule="xid")} == {
        (Severity.WARNING, RecommendedAction.INSPECT)
    }


def test_xid_43_and_45_start_no_remediation_of_their_own(node):
    """43: the application faulted, the GPU is fine. 45: the driver cleaning up after another
    XID (or a killed job); the XID it accompanies carries the severity and the action."""
    events = [
        xid_event(43, message="Ch 00000008"),
        xid_event(48, at=T0.replace(second=1)),
        xid_event(45, at=T0.replace(second=2), message="Ch 00000010"),
    ]
    evaluate_reports([context(node, report(xid_events=events))])

    findings = {f.xid: (f.severity, f.recommended_action) for f in Finding.objects.filter(node=node, rule="xid")}
    assert findings == {
        43: (Severity.INFO, RecommendedAction.NONE),
        45: (Severity.WARNING, RecommendedAction.NONE),
        48: (Severity.CATASTROPHIC, RecommendedAction.RESET_GPU),
    }


def test_an_xid_on_a_gpu_in_pci_domain_1_lands_on_that_gpu(node):
    gpus = [gpu(i, pci_bus_id=f"0000000{i // 4}:{0x1B + (i % 4) * 0x20:02X}:00.0") for i in range(8)]

    evaluate_reports([context(node, report(gpus=gpus, xid_events=[xid_event(79, "0001:1b:00")]))])

    assert Finding.objects.get(node=node, rule="xid").gpu_index == 4

"""Done when: a fatal XID line in the kernel log is a catastrophic finding on the right node and GPU."""
from __future__ import annotations

from health.choices import AlertState, RecommendedAction, Severity
from health.evaluation import evaluate_reports
from health.models import Alert, Finding
from nodes.choices import EventKind
from nodes.models import NodeEvent

from .conftest import T0, context, gpu, report

XID_79_LINE = ("NVRM: Xid (PCI:0000:53:00): 79, pid=1912, name=python3, GPU has fallen off the bus.")


def xid_event(xid: int = 79, pci: str = "0000:53:00", at=T0, **fields):
    return {"xid": xid, "observed_at": at.isoformat(), "raw": XID_79_LINE, "pci_bus_id": pci, "pid": 1912,
            "process": "python3", "message": "GPU has fallen off the bus.", **fields}


def test_it_turns_a_fatal_xid_line_into_a_catastrophic_finding_on_the_right_gpu(node):
    gpus = [gpu(i, pci_bus_id=f"00000000:{bus:02X}:00.0") for i, bus in enumerate([0x18, 0x2A, 0x3A, 0x53, 0x9A, 0xAB, 0xBA, 0xDB])]

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

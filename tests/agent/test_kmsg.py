"""The kernel-log collector: NVRM Xid/SXid parsing, following /dev/kmsg and resuming."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nodewarden_agent.collectors.kmsg import (
    DevKmsgSource,
    JournalSource,
    KmsgCollector,
    parse_kmsg_record,
    parse_nvidia_event,
)

from .conftest import FIXTURES

BOOT_TIME = 1717100000.0  # the test host "booted" at 2024-05-30T20:13:20Z
BOOT_A, BOOT_B = "7c1f3b5e-0a55-4b55-9a8e-1f0d1e6a2b3c", "c2a8e1d4-3f6b-4d0e-8a7f-95b4c3d2e1f0"


def _cases():
    for line in (FIXTURES / "kmsg" / "nvrm-lines.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        expected, _, message = line.partition("\t")
        yield pytest.param(expected, message, id=message[:60] or "empty")


@pytest.mark.parametrize(("expected", "message"), list(_cases()))
def test_it_parses_real_nvidia_driver_lines(expected, message):
    event = parse_nvidia_event(message)
    if expected == "ignore":
        assert event is None
        return
    kind, xid, rest = expected.split(":", 2)
    domain, bus, device, rest = rest.split(":", 3)  # the process name may hold ":" (VLLM::Worker)
    pci, (pid, process) = f"{domain}:{bus}:{device}", rest.split(":", 1)
    assert event["kind"] == kind and event["xid"] == int(xid) and event["pci_bus_id"] == pci
    assert event.get("pid") == (None if pid == "-" else int(pid))
    assert event.get("process") == (None if process == "-" else process)
    assert event["message"] and event["message"] in message


def _xid154_cases():
    for line in (FIXTURES / "kmsg" / "xid154-lines.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        expected, _, message = line.partition("\t")
        yield pytest.param(int(expected), message, id=message[message.index(" to ") + 4 :])


@pytest.mark.parametrize(("expected", "message"), list(_xid154_cases()))
def test_it_reads_the_recovery_action_an_xid_154_asks_for(expected, message):
    event = parse_nvidia_event(message)
    assert (event["xid"], event["recovery_action"]) == (154, expected)
    assert event["message"] == message.split("154, ", 1)[1]


def test_only_xid_154_carries_a_recovery_action():
    event = parse_nvidia_event(
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus. "
        "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    assert event["xid"] == 79 and "recovery_action" not in event


def test_it_keeps_the_message_after_pid_and_name():
    event = parse_nvidia_event(
        "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert event == {
        "kind": "xid",
        "xid": 79,
        "pci_bus_id": "0000:53:00",
        "pid": None,
        "process": None,
        "message": "GPU has fallen off the bus.",
    }


def test_it_reads_a_kmsg_record_and_converts_monotonic_time_to_wall_clock():
    line = parse_kmsg_record("4,1205,700000250000,-;NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>'", BOOT_TIME)
    assert line.seq == 1205 and line.message.startswith("NVRM: Xid") and line.from_kernel
    assert line.observed_at == pytest.approx(BOOT_TIME + 700000.25)
    assert parse_kmsg_record("not a record", BOOT_TIME) is None
    assert parse_kmsg_record("4,x,1,-;text", BOOT_TIME) is None
    assert parse_kmsg_record("x,1,1,-;text", BOOT_TIME) is None


@pytest.mark.parametrize(
    ("priority", "from_kernel"),
    [
        (0, True),
        (3, True),
        (4, True),
        (7, True),  # facility 0 (LOG_KERN), any level
        (12, False),  # echo > /dev/kmsg: the kernel forces LOG_USER (1) on user space
        (14, False),  # "<6>text" from user space: still LOG_USER, a facility of 0 is not honoured
        (30, False),  # systemd and other daemons: LOG_DAEMON (3)
        (38, False),  # LOG_AUTH (4)
    ],
)
def test_a_kmsg_record_is_the_kernels_only_with_facility_zero(priority, from_kernel):
    """The first field is (facility << 3) | level (Documentation/ABI/testing/dev-kmsg); the kernel
    gives user-space writes LOG_USER unless they name another non-zero facility (devkmsg_write)."""
    line = parse_kmsg_record(
        f"{priority},7,1000,-;NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.", BOOT_TIME
    )
    assert line.from_kernel is from_kernel


def test_what_user_space_writes_to_kmsg_is_never_an_event(tmp_path):
    """A script that echoes an Xid line into /dev/kmsg (a drill, a health check quoting what it
    saw) must not become a catastrophic XID 79 or a reboot-wanted XID 154."""
    kmsg = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg" / "user-space.kmsg", kmsg)
    (tmp_path / "state").mkdir()
    collector = _collector(tmp_path, kmsg)
    assert [(e["xid"], e["kmsg_seq"]) for e in collector.collect().fields["xid_events"]] == [(13, 2206)]
    collector.commit()
    # The cursor still moves past the user-space records: they are read once, not re-read forever.
    assert json.loads((tmp_path / "state" / "kmsg-cursor.json").read_text())["position"] == 2206


def _collector(tmp_path, kmsg_file, boot_id=BOOT_A):
    source = DevKmsgSource(str(kmsg_file), boot_time=lambda: BOOT_TIME)
    return KmsgCollector(source, tmp_path / "state", boot_id=lambda: boot_id)


@pytest.fixture
def kmsg_file(tmp_path):
    path = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg" / "boot1.kmsg", path)
    (tmp_path / "state").mkdir()
    return path


def _append(path: Path, *records: str) -> None:
    with path.open("a") as handle:
        handle.write("".join(r + "\n" for r in records))


def test_it_reports_each_xid_and_sxid_once_with_time_and_seq(tmp_path, kmsg_file):
    collector = _collector(tmp_path, kmsg_file)
    events = collector.collect().fields["xid_events"]
    assert [(e["kind"], e["xid"], e["kmsg_seq"]) for e in events] == [
        ("xid", 13, 1204),
        ("xid", 79, 1205),
        ("sxid", 12028, 1206),
    ]
    assert events[1]["observed_at"] == "2024-06-07T22:40:00.250000+00:00"
    assert (
        events[1]["raw"]
        == "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    collector.commit()
    assert collector.collect().fields["xid_events"] == []


def test_it_follows_new_records_as_the_kernel_writes_them(tmp_path, kmsg_file):
    collector = _collector(tmp_path, kmsg_file)
    collector.collect()
    collector.commit()
    _append(
        kmsg_file,
        "4,1208,700600000000,-;NVRM: Xid (PCI:0000:9d:00): 63, pid='<unknown>', name=<unknown>, "
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
    )
    assert [e["xid"] for e in collector.collect().fields["xid_events"]] == [63]


def test_it_resumes_after_a_restart_without_duplicates_or_losses(tmp_path, kmsg_file):
    first = _collector(tmp_path, kmsg_file)
    assert len(first.collect().fields["xid_events"]) == 3
    first.commit()
    first.source.close()
    # While the agent is down the kernel logs another Xid; the new agent reads the whole
    # ring buffer again (as a fresh open of /dev/kmsg does) and skips what it sent.
    _append(
        kmsg_file,
        "4,1208,700700000000,-;NVRM: Xid (PCI:0000:c3:00): 48, pid='<unknown>', name=<unknown>, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
    )
    second = _collector(tmp_path, kmsg_file)
    assert [(e["xid"], e["kmsg_seq"]) for e in second.collect().fields["xid_events"]] == [(48, 1208)]


def test_it_repeats_events_whose_report_never_reached_the_spool(tmp_path, kmsg_file):
    first = _collector(tmp_path, kmsg_file)
    assert len(first.collect().fields["xid_events"]) == 3  # no commit(): the agent died before spooling
    second = _collector(tmp_path, kmsg_file)
    assert len(second.collect().fields["xid_events"]) == 3


def test_it_reads_everything_again_after_a_reboot(tmp_path, kmsg_file):
    first = _collector(tmp_path, kmsg_file)
    first.collect()
    first.commit()
    # A new boot numbers records from 0: a cursor from the old boot must not hide them.
    kmsg_file.write_text(
        "4,5,9000000,-;NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )
    rebooted = _collector(tmp_path, kmsg_file, boot_id=BOOT_B)
    assert [(e["xid"], e["kmsg_seq"]) for e in rebooted.collect().fields["xid_events"]] == [(79, 5)]


def test_it_says_so_when_the_ring_buffer_overwrote_unread_records(tmp_path, kmsg_file):
    first = _collector(tmp_path, kmsg_file)
    first.collect()
    first.commit()
    kmsg_file.write_text(
        "4,1500,800000000000,-;NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
    )
    contribution = _collector(tmp_path, kmsg_file).collect()
    assert [e["kmsg_seq"] for e in contribution.fields["xid_events"]] == [1500]
    assert contribution.notes["kmsg.lost"] == "kernel records 1208..1499 were overwritten before they were read"


def test_it_caps_events_per_report_and_carries_the_rest_over(tmp_path, kmsg_file):
    collector = KmsgCollector(
        DevKmsgSource(str(kmsg_file), boot_time=lambda: BOOT_TIME),
        tmp_path / "state",
        boot_id=lambda: BOOT_A,
        max_events=2,
    )
    first = collector.collect()
    assert [e["kmsg_seq"] for e in first.fields["xid_events"]] == [1204, 1205]
    assert "1 more events" in first.notes["kmsg"]
    collector.commit()
    restarted = _collector(tmp_path, kmsg_file)  # the carried-over event survives a restart too
    assert [e["kmsg_seq"] for e in restarted.collect().fields["xid_events"]] == [1206]


def _journal_runner(calls, fixture="journal-kernel.jsonl"):
    lines = (FIXTURES / "kmsg" / fixture).read_text().splitlines()

    def run(argv, timeout):
        calls.append(argv)
        after = next((a.split("=", 1)[1] for a in argv if a.startswith("--after-cursor=")), None)
        cursors = [json.loads(line)["__CURSOR"] for line in lines]
        start = cursors.index(after) + 1 if after else 0
        return subprocess.CompletedProcess(argv, 0, "\n".join(lines[start:]) + "\n", "")

    return run


def test_it_falls_back_to_journalctl_and_resumes_from_its_cursor(tmp_path):
    calls = []
    collector = KmsgCollector(JournalSource(runner=_journal_runner(calls)), tmp_path, boot_id=lambda: BOOT_A)
    events = collector.collect().fields["xid_events"]
    assert [(e["kind"], e["xid"]) for e in events] == [("xid", 79), ("sxid", 28002)]
    assert events[0]["observed_at"] == "2024-05-31T10:07:40.500000+00:00" and "kmsg_seq" not in events[0]
    assert events[1]["pci_bus_id"] == "0000:ca:00.0"  # decoded from journald's byte-array MESSAGE
    collector.commit()
    restarted = KmsgCollector(JournalSource(runner=_journal_runner(calls)), tmp_path, boot_id=lambda: BOOT_B)
    assert restarted.collect().fields["xid_events"] == []
    assert calls[0][-1] == "-b" and calls[-1][-1].startswith("--after-cursor=s=6c2b")


def test_journal_entries_are_events_only_when_the_kernel_logged_them(tmp_path):
    """journald files user-space writes to /dev/kmsg under _TRANSPORT=kernel too (with their own
    SYSLOG_FACILITY), so ``journalctl -k`` alone lets them through; ``logger -p kern.warning``
    sends facility 0 over syslog. Only _TRANSPORT=kernel with SYSLOG_FACILITY=0 is the kernel."""
    collector = KmsgCollector(
        JournalSource(runner=_journal_runner([], "journal-user.jsonl")), tmp_path, boot_id=lambda: BOOT_A
    )
    events = collector.collect().fields["xid_events"]
    assert [(e["xid"], e["process"]) for e in events] == [(13, "python3")]
    collector.commit()
    assert json.loads((tmp_path / "journal-cursor.json").read_text())["position"].endswith("x=15")

"""The agent's plain-dict report against the portal's own decoder (telemetry.schema).

The agent cannot import the portal (it installs without Django), so this is where a
drift between the two shows up: a full report built by the real collectors from the
captured fixtures must decode and validate without a single complaint."""

from __future__ import annotations

import json
import shutil
import subprocess

from nodewarden_agent.collectors.host import HostCollector
from nodewarden_agent.collectors.infiniband import InfinibandCollector
from nodewarden_agent.collectors.kmsg import DevKmsgSource, KmsgCollector
from nodewarden_agent.collectors.nvml import NvmlCollector
from nodewarden_agent.report import SeqCounter, build_report
from telemetry.schema import decode_batch

from .conftest import FIXTURES
from .fakes import FakeNvml


def _collectors(tmp_path, ib_root, proc_root, edac_root):
    kmsg = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg" / "boot1.kmsg", kmsg)
    answers = {
        "smartctl --scan -j": json.dumps({"devices": [{"name": "/dev/nvme0"}]}),
        "smartctl -H -j /dev/nvme0": json.dumps({"smart_status": {"passed": True}}),
        "scontrol show slurmd": "Active Steps = NONE\n",
    }

    def runner(argv, timeout):
        return subprocess.CompletedProcess(argv, 0, answers[" ".join(argv)], "")

    return [
        NvmlCollector(FakeNvml(), expected_gpus=8),
        KmsgCollector(DevKmsgSource(str(kmsg), boot_time=lambda: 1717100000.0), tmp_path, boot_id=lambda: "b1"),
        InfinibandCollector(ib_root),
        HostCollector(edac_root, proc_root, runner=runner, which=lambda name: name),
    ]


def test_a_full_agent_report_decodes_with_the_portals_schema(tmp_path, ib_root, proc_root, edac_root):
    report = build_report(
        "gpu-node-01",
        SeqCounter(tmp_path / "seq.json").next(),
        _collectors(tmp_path, ib_root, proc_root, edac_root),
        boot_id=lambda: "3b1e8c52-9d4f-4a1e-b2c7-6f0a9e5d3c21",
    )
    body = json.dumps({"reports": [report]}).encode()
    [decoded] = decode_batch(body)
    assert decoded.hostname == "gpu-node-01" and decoded.seq == 1 and decoded.collected_at.tzinfo is not None
    assert decoded.boot_id == "3b1e8c52-9d4f-4a1e-b2c7-6f0a9e5d3c21"  # with kmsg_seq: an event's identity
    assert len(decoded.gpus) == 7 and decoded.gpus[0].max_operating_temp_c == 87
    assert [(e.kind, e.xid) for e in decoded.xid_events] == [("xid", 13), ("xid", 79), ("sxid", 12028)]
    assert len(decoded.ib_ports) == 8 and decoded.ib_ports[7].phys_state == "Polling"
    assert decoded.host.scheduler.kind == "slurm" and decoded.host.disks[0].healthy is True
    assert decoded.collector_errors["nvml.gpu5"] == "unreadable: GPU is lost"


def test_every_xid_line_shape_the_agent_parses_decodes_with_the_portals_schema(tmp_path):
    """XID 154's recovery action, MIG attribution, pid without name: fields the portal must accept."""
    messages = [
        line.partition("\t")[2]
        for name in ("nvrm-lines.txt", "xid154-lines.txt")
        for line in (FIXTURES / "kmsg" / name).read_text().splitlines()
        if line and not line.startswith("#") and not line.startswith("ignore")
    ]
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("".join(f"4,{seq},{seq * 1000},-;{m}\n" for seq, m in enumerate(messages, start=1)))
    collector = KmsgCollector(DevKmsgSource(str(kmsg), boot_time=lambda: 1717100000.0), tmp_path, boot_id=lambda: "b1")
    [decoded] = decode_batch(json.dumps({"reports": [build_report("gpu-node-03", 1, [collector])]}).encode())
    assert len(decoded.xid_events) == len(messages)
    assert [e.recovery_action for e in decoded.xid_events if e.xid == 154] == [1, 1, 2, 3, 4, 0, 2, 7]


def test_a_report_from_a_node_where_every_collector_failed_still_decodes(tmp_path):
    report = build_report(
        "gpu-node-02", 1, [NvmlCollector(FakeNvml(init_error=9)), InfinibandCollector(tmp_path / "none")]
    )
    [decoded] = decode_batch(json.dumps({"reports": [report]}).encode())
    assert decoded.gpus == [] and decoded.collector_errors == {"nvml": "nvmlInit failed: Driver Not Loaded"}


def test_a_node_whose_boot_id_cannot_be_read_sends_none(tmp_path):
    report = build_report("gpu-node-03", 1, [], boot_id=lambda: "")
    assert "boot_id" not in report
    [decoded] = decode_batch(json.dumps({"reports": [report]}).encode())
    assert decoded.boot_id is None

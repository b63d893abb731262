"""InfiniBand ports from a fake sysfs tree, and host vitals from fake /proc, EDAC, tools."""

from __future__ import annotations

import json
import subprocess

from nodewarden_agent.collectors.host import HostCollector
from nodewarden_agent.collectors.infiniband import InfinibandCollector, parse_rate


def test_it_reads_eight_ndr_ports_with_one_down_and_polling(ib_root):
    contribution = InfinibandCollector(ib_root).collect()
    ports = contribution.fields["ib_ports"]
    assert [(p["device"], p["port"]) for p in ports] == [(f"mlx5_{i}", 1) for i in range(8)]
    assert ports[0]["state"] == "ACTIVE" and ports[0]["phys_state"] == "LinkUp"
    assert ports[0]["rate_gbps"] == 400.0 and ports[0]["link_layer"] == "InfiniBand"
    assert (ports[7]["state"], ports[7]["phys_state"], ports[7]["counters"]["link_downed"]) == ("DOWN", "Polling", 1)
    assert contribution.notes == {}


def test_it_reads_counters_and_hw_counters(ib_root):
    port = InfinibandCollector(ib_root).collect().fields["ib_ports"][3]
    assert port["counters"]["symbol_error"] == 12
    assert port["counters"]["local_ack_timeout_err"] == 3
    assert port["counters"]["port_xmit_data"] == 18446744073 * 4
    assert len(port["counters"]) == 23


def test_it_notes_an_unreadable_counter_instead_of_dropping_it_silently(ib_root):
    (ib_root / "mlx5_1" / "ports" / "1" / "hw_counters" / "roce_adp_retrans").write_text("N/A\n")
    contribution = InfinibandCollector(ib_root).collect()
    assert contribution.notes == {"infiniband.mlx5_1/1": "unreadable counters: hw_counters/roce_adp_retrans"}


def test_it_reports_no_ports_on_a_node_without_infiniband(tmp_path):
    assert InfinibandCollector(tmp_path / "absent").collect().fields == {"ib_ports": []}


def test_it_parses_the_kernels_rate_strings():
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("garbage") is None


def _runner(answers, calls):
    def run(argv, timeout):
        calls.append(argv)
        key = " ".join(argv)
        if key not in answers:
            raise FileNotFoundError(argv[0])
        code, out, err = answers[key]
        return subprocess.CompletedProcess(argv, code, out, err)

    return run


SMART_SCAN = json.dumps({"devices": [{"name": "/dev/nvme0", "type": "nvme"}, {"name": "/dev/sda", "type": "sat"}]})


def test_it_collects_host_vitals_edac_disks_and_slurmd(proc_root, edac_root):
    calls = []
    answers = {
        "smartctl --scan -j": (0, SMART_SCAN, ""),
        "smartctl -H -j /dev/nvme0": (0, json.dumps({"smart_status": {"passed": True}}), ""),
        # smartctl 6.x: no JSON, the classic ATA verdict line; exit bit 3 = disk failing
        "smartctl -H -j /dev/sda": (8, "SMART overall-health self-assessment test result: FAILED!\n", ""),
        "scontrol show slurmd": (0, "Active Steps             = NONE\nActual CPUs              = 224\n", ""),
    }
    tools = {"smartctl", "slurmd", "scontrol"}
    host = (
        HostCollector(
            edac_root,
            proc_root,
            runner=_runner(answers, calls),
            which=lambda name: f"/usr/bin/{name}" if name in tools else None,
        )
        .collect()
        .fields["host"]
    )
    assert host["edac_corrected"] == 4 and host["edac_uncorrected"] == 0
    assert host["uptime_s"] == 350735.47 and host["load1"] == 0.52
    assert host["memory_total_mib"] == 2064107 and host["memory_available_mib"] == 2008583
    assert host["disks"] == [
        {"device": "/dev/nvme0", "healthy": True, "detail": "PASSED"},
        {"device": "/dev/sda", "healthy": False, "detail": "FAILED"},
    ]
    assert host["scheduler"] == {
        "kind": "slurm",
        "daemon": "slurmd",
        "responsive": True,
        "detail": "Active Steps             = NONE",
    }


def test_it_says_slurmd_is_unresponsive_when_it_does_not_answer(proc_root, tmp_path):
    answers = {"scontrol show slurmd": (1, "", "slurm_load_slurmd_status: Unable to contact slurm daemon\n")}
    host = (
        HostCollector(
            tmp_path / "no-edac",
            proc_root,
            runner=_runner(answers, []),
            which=lambda name: name if name in ("slurmd", "scontrol") else None,
        )
        .collect()
        .fields["host"]
    )
    assert host["scheduler"]["responsive"] is False
    assert host["scheduler"]["detail"] == "slurm_load_slurmd_status: Unable to contact slurm daemon"
    assert "edac_corrected" not in host and host["disks"] == []


def test_it_checks_kubelet_health_on_kubernetes_nodes(proc_root, tmp_path):
    host = (
        HostCollector(
            tmp_path,
            proc_root,
            which=lambda name: name if name == "kubelet" else None,
            http_get=lambda url, timeout: "ok",
        )
        .collect()
        .fields["host"]
    )
    assert host["scheduler"] == {"kind": "kubernetes", "daemon": "kubelet", "responsive": True, "detail": "ok"}

    def refused(url, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    host = (
        HostCollector(tmp_path, proc_root, which=lambda name: name if name == "kubelet" else None, http_get=refused)
        .collect()
        .fields["host"]
    )
    assert host["scheduler"]["responsive"] is False


def test_it_reports_no_scheduler_and_no_disks_when_the_tools_are_absent(proc_root, tmp_path):
    host = HostCollector(tmp_path, proc_root, which=lambda name: None).collect().fields["host"]
    assert host["scheduler"] == {"kind": "none"} and host["disks"] == []

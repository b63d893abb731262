"""manage.py enroll_nodes: a CSV or YAML file of nodes, enrolled against the real Redfish emulator;
a bad file enrolls nothing and names every problem by its line in the file."""

from __future__ import annotations

import importlib.util
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from bmc.models import BmcEndpoint
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import _require, fast_bmc_settings  # noqa: F401  (autouse here too)
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory, SiteFactory
from tests.validation import conftest as day1_fixtures

pytestmark = pytest.mark.django_db
eager = day1_fixtures.eager  # the fixture: follow-up tasks run inline when the test 'commits'
PASSWORD_ENV = "NODEWARDEN_TEST_BMC_PASSWORD"
SYSTEMS = [{"name": "bay-01", "bios_version": "1.2.0"}, {"name": "bay-02", "bios_version": "1.2.0"}]
HEADER = "hostname,serial,bmc_address,bmc_system_id,bmc_username,hardware_profile,site,cluster,bmc_verify_tls"


@pytest.fixture(scope="module")
def bmc():
    """One BMC serving two systems (a two-bay chassis)."""
    _require(importlib.util.find_spec("sushy_tools") is not None, "sushy-tools")
    with RedfishEmulator(SYSTEMS, power_delay=0) as emulator:
        yield emulator


@pytest.fixture
def fleet(db, monkeypatch, bmc):
    monkeypatch.setenv(PASSWORD_ENV, bmc.password)
    site = SiteFactory(slug="dc1")
    ClusterFactory(site=site, name="hpc-a")
    HardwareProfileFactory(name="HGX H100 8-GPU")


def row(bmc: RedfishEmulator, index: int, **overrides: Any) -> dict[str, Any]:
    return {
        "hostname": f"gpu-i{index + 1:02d}",
        "serial": f"SN-I{index + 1:04d}",
        "bmc_address": bmc.url,
        "bmc_system_id": bmc.systems[index]["uuid"],
        "bmc_username": bmc.username,
        "hardware_profile": "HGX H100 8-GPU",
        "site": "dc1",
        "cluster": "hpc-a",
        **overrides,
    }


def csv_line(values: dict[str, Any]) -> str:
    return ",".join(str(values.get(name, "")) for name in HEADER.split(","))


def enroll_nodes(path: Path, *args: str, out: StringIO | None = None, err: StringIO | None = None) -> tuple[str, str]:
    """The command with the password from the environment; (stdout, stderr)."""
    out, err = out or StringIO(), err or StringIO()
    call_command("enroll_nodes", str(path), f"--bmc-password-env={PASSWORD_ENV}", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def item_lines(text: str) -> list[int]:
    """The line each top-level list item of a YAML text starts on."""
    return [number for number, line in enumerate(text.splitlines(), 1) if line.startswith("- ")]


def written() -> tuple[int, int, int]:
    return Node.objects.count(), BmcEndpoint.objects.count(), NodeEvent.objects.count()


def test_a_csv_file_enrolls_two_bays_of_one_bmc(tmp_path, bmc, fleet):
    # bmc_verify_tls left empty means the default, verify: never quietly off.
    path = tmp_path / "nodes.csv"
    path.write_text("\n".join([HEADER, csv_line(row(bmc, 0)), csv_line(row(bmc, 1))]) + "\n")

    out, err = enroll_nodes(path, "--no-start")

    assert err == ""
    assert out.splitlines() == [
        f"line 2: enrolled gpu-i01 (id {Node.objects.get(hostname='gpu-i01').pk})",
        f"line 3: enrolled gpu-i02 (id {Node.objects.get(hostname='gpu-i02').pk})",
    ]
    endpoints = BmcEndpoint.objects.order_by("node__hostname")
    assert [(e.system_id, e.password, e.verify_tls) for e in endpoints] == [
        (bmc.systems[0]["uuid"], bmc.password, True),
        (bmc.systems[1]["uuid"], bmc.password, True),
    ]
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.ENROLLED}
    event = NodeEvent.objects.get(hostname="gpu-i01")
    assert (event.actor_name, event.reason.split(" (the BMC")[0]) == (
        "system:import",
        "Enrolled from an import file (nodes.csv, line 2)",
    )
    assert bmc.password not in out


def test_a_yaml_file_enrolls_two_nodes_and_starts_day_0(tmp_path, bmc, fleet, eager):
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump([row(bmc, 0), row(bmc, 1, bmc_verify_tls=False)]))

    with eager():
        out, _ = enroll_nodes(path, "--reason", "Bay 3 racked")

    first, second = item_lines(path.read_text())
    assert [line.split(" (id")[0] for line in out.splitlines()] == [
        f"line {first}: enrolled gpu-i01",
        f"line {second}: enrolled gpu-i02",
    ]
    assert set(Node.objects.values_list("state", flat=True)) == {NodeState.INITIALIZING}
    assert list(BmcEndpoint.objects.order_by("node__hostname").values_list("verify_tls", flat=True)) == [True, False]
    assert [bmc.system(i)["Boot"]["BootSourceOverrideTarget"] for i in (0, 1)] == ["Pxe", "Pxe"]


def test_a_yaml_file_with_bad_rows_names_every_problem_by_line_and_enrolls_nothing(tmp_path, bmc, fleet):
    NodeFactory(hostname="gpu-old", serial="SN-FLEET")
    path = tmp_path / "nodes.yml"
    path.write_text(
        yaml.safe_dump(
            [
                row(bmc, 0, colour="green"),
                {k: v for k, v in row(bmc, 1).items() if k != "hostname"},
                row(bmc, 0, hostname="gpu-i03", serial="SN-I0001", bmc_system_id="third"),
                row(bmc, 1, hostname="gpu-i04", serial="SN-I0004", hardware_profile="Abacus 9000"),
                row(bmc, 1, hostname="gpu-i05", serial="SN-FLEET", bmc_system_id="fifth"),
            ],
            sort_keys=False,
        )
    )
    lines = item_lines(path.read_text())
    before = written()

    with pytest.raises(CommandError) as refused:
        enroll_nodes(path)

    assert str(refused.value).splitlines() == [
        "Nothing was enrolled:",
        f"line {lines[0]}: unknown column(s) colour",
        f"line {lines[1]}: hostname is required",
        f"line {lines[2]}: serial 'SN-I0001' repeats line {lines[0]}",
        f"line {lines[3]}: hardware_profile: No hardware profile 'Abacus 9000'.",
        f"line {lines[4]}: serial: 'SN-FLEET' is already enrolled as gpu-old (Enrolled).",
    ]
    assert lines[1:] != [2, 3, 4, 5]  # the file's lines, not the rows' places in the list
    assert written() == before
    assert bmc.password not in str(refused.value)


def test_csv_problems_carry_the_files_own_line_numbers(tmp_path, bmc, fleet):
    # A quoted value spanning two lines and a blank line: the rows after them keep their real line numbers.
    path = tmp_path / "nodes.csv"
    path.write_text(
        "\ufeff"
        + "\n".join(
            [
                HEADER,
                csv_line(row(bmc, 0, cluster='"hpc-a\nsecond line"')),
                "",
                csv_line(row(bmc, 1, hostname="")),
                csv_line(row(bmc, 1, serial="SN-I0001", bmc_verify_tls="perhaps")) + ",extra",
            ]
        )
        + "\n"
    )

    with pytest.raises(CommandError) as refused:
        enroll_nodes(path)

    assert str(refused.value).splitlines() == [
        "Nothing was enrolled:",
        "line 2: cluster: No cluster 'hpc-a\\nsecond line'.",
        "line 5: hostname is required",
        (
            "line 6: 10 values for 9 columns; bmc_verify_tls 'perhaps' is not one of true, false; "
            "serial 'SN-I0001' repeats line 2"
        ),
    ]
    assert written() == (0, 0, 0)


def test_a_nul_character_or_a_number_for_text_is_handled_not_a_crash(tmp_path, bmc, fleet):
    path = tmp_path / "nodes.csv"
    path.write_text("\n".join([HEADER, csv_line(row(bmc, 0, hostname="gpu\x00"))]) + "\n")
    with pytest.raises(CommandError) as refused:
        enroll_nodes(path)
    assert str(refused.value).splitlines()[1:] == ["line 2: hostname: May not contain a NUL character."]

    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump([row(bmc, 0, serial=12345)]))
    enroll_nodes(path, "--no-start")
    assert Node.objects.get().serial == "12345"


def test_an_unknown_csv_column_is_named_on_every_row(tmp_path, bmc, fleet):
    path = tmp_path / "nodes.csv"
    path.write_text(f"{HEADER},colour\n{csv_line(row(bmc, 0))},green\n{csv_line(row(bmc, 1))},blue\n")
    with pytest.raises(CommandError) as refused:
        enroll_nodes(path)
    assert str(refused.value).splitlines()[1:] == [
        "line 2: unknown column(s) colour",
        "line 3: unknown column(s) colour",
    ]
    assert written() == (0, 0, 0)


def test_an_unreachable_bmc_refuses_its_row_only_and_the_command_fails(tmp_path, bmc, fleet):
    path = tmp_path / "nodes.csv"
    path.write_text(
        "\n".join([HEADER, csv_line(row(bmc, 0, bmc_address="http://127.0.0.1:9")), csv_line(row(bmc, 1))]) + "\n"
    )

    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match=r"^1 of 2 node\(s\) were not enrolled \(see above\)\.$"):
        enroll_nodes(path, "--no-start", out=out, err=err)

    output = out.getvalue() + err.getvalue()
    assert "line 2: gpu-i01: bmc_address: The BMC could not be read: " in output
    assert "Redfish BMC http://127.0.0.1:9" in output and bmc.password not in output
    assert f"line 3: enrolled gpu-i02 (id {Node.objects.get(hostname='gpu-i02').pk})" in output
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gpu-i02"]


def test_a_password_variable_that_is_not_set_is_refused(tmp_path, bmc, fleet, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV)
    path = tmp_path / "nodes.csv"
    path.write_text(f"{HEADER}\n{csv_line(row(bmc, 0))}\n")
    with pytest.raises(CommandError, match=f"Environment variable {PASSWORD_ENV} is not set"):
        enroll_nodes(path)


def test_a_file_without_nodes_is_refused(tmp_path, fleet):
    path = tmp_path / "nodes.yaml"
    path.write_text("# nobody yet\n")
    with pytest.raises(CommandError, match="the file lists no node"):
        enroll_nodes(path)


def test_a_yaml_file_that_is_not_a_list_is_refused(tmp_path, fleet):
    path = tmp_path / "nodes.yaml"
    path.write_text("hostname: gpu-i01\n")
    with pytest.raises(CommandError, match="expected a list of mappings"):
        enroll_nodes(path)

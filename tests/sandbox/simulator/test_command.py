"""manage.py simulate_fleet: each run in a database of its own, reports printed, two policies side by side."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest
from django.core.management import CommandError, call_command

from fleet.models import Site
from tests.conftest import IN_CI


def test_an_unknown_policy_is_refused_with_the_choices(tmp_path):
    with pytest.raises(CommandError, match="Unknown policy 'reckless': one of default, aggressive"):
        call_command("simulate_fleet", "--policy", "reckless", stdout=io.StringIO())
    bad = tmp_path / "rows.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(CommandError, match="expected a JSON list"):
        call_command("simulate_fleet", "--compare-policy", str(bad), stdout=io.StringIO())


@pytest.mark.django_db
def test_two_policies_run_on_the_same_faults_and_print_side_by_side(tmp_path):
    if importlib.util.find_spec("sushy_tools") is None:
        if IN_CI:
            pytest.fail("sushy-tools is required in CI (bin/test installs it)")
        pytest.skip("sushy-tools is not installed")
    out, report = io.StringIO(), tmp_path / "report.json"
    call_command(
        "simulate_fleet",
        "--nodes",
        "16",
        "--days",
        "0.5",
        "--rates",
        "rsc1",
        "--rate-scale",
        "40",
        "--seed",
        "5",
        "--compare-policy",
        "aggressive",
        "--json",
        str(report),
        "--keep-db",
        str(tmp_path / "db"),
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    assert "Two policies on the same fleet and the same faults" in text
    assert "job interruptions (paper, scaled)" in text and "effective training time ratio" in text
    default, aggressive = json.loads(report.read_text())
    assert (default["config"]["policy"], aggressive["config"]["policy"]) == ("default", "aggressive")
    assert default["config"]["rate_scale"] == pytest.approx(40 * 6.50 / 3.79)  # Meta RSC-1's rate, sped up
    assert default["faults"]["injected"] > 0
    assert (
        default["faults"]["by_class"] == aggressive["faults"]["by_class"]
        or abs(default["faults"]["injected"] - aggressive["faults"]["injected"]) <= 2
    )  # same draws, same seed
    for run in (default, aggressive):
        assert run["run"]["agent_errors"] == [] and run["run"]["task_errors"] == []
        assert run["run"]["agent_reports"] >= 16
    assert (tmp_path / "db" / "1-default" / "nodewarden.sqlite3").exists()  # kept for browsing
    assert not Site.objects.filter(slug="sim").exists()  # this database was never touched

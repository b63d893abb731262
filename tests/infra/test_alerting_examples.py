"""The example alerting files under deploy/ (docs/alerting.md) are valid and name only what
Nodewarden serves: the Prometheus rules use metric families /metrics has, promtool accepts them and
their unit tests pass, and amtool accepts the Alertmanager routes and routes as documented.
promtool and amtool come from Debian's prometheus and prometheus-alertmanager (bin/test installs
both); without them those tests skip, and fail in CI."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reports.metrics import registry
from tests.conftest import IN_CI

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "nodewarden-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "nodewarden-rules.test.yml"
ROUTES = DEPLOY / "alertmanager" / "alertmanager.yml"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required in CI (bin/test installs it)")
        pytest.skip(f"{name} is not installed; bin/test installs it")
    return path


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.django_db
def test_the_example_rules_use_only_metrics_nodewarden_serves(settings):
    served = set()
    if not str(settings.CELERY_BROKER_URL).startswith("redis"):
        # Served with a Redis broker only (tests/reports/test_metrics.py reads it from a real Redis).
        served.add("nodewarden_celery_queue_length")
    for family in text_string_to_metric_families(_scrape()):
        served |= {family.name, *(sample.name for sample in family.samples)}
        if family.type == "counter":
            served.add(f"{family.name}_total")
    groups = yaml.safe_load(RULES.read_text())["groups"]
    used = {name for g in groups for rule in g["rules"] for name in re.findall(r"\bnodewarden_\w+", rule["expr"])}
    assert used, "the rules name no Nodewarden metric"
    assert used <= served, f"not on /metrics: {sorted(used - served)}"


def _scrape() -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry()).decode()


def test_promtool_accepts_the_example_rules_and_their_unit_tests_pass():
    promtool = tool("promtool")
    assert "SUCCESS" in run(promtool, "check", "rules", str(RULES))
    run(promtool, "test", "rules", str(RULE_TESTS))


def test_amtool_accepts_the_example_alertmanager_config():
    assert "SUCCESS" in run(tool("amtool"), "check-config", str(ROUTES))


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (
            ["severity=catastrophic", "acknowledged=false", "tenant=acme"],
            "oncall-pagerduty,acme-slack,fleet-slack",
        ),
        (["severity=catastrophic", "acknowledged=true", "tenant=globex"], "fleet-slack"),
        (["severity=warning", "acknowledged=false", "tenant=globex"], "fleet-email"),
    ],
)
def test_the_example_routes_page_for_an_unacknowledged_catastrophic_alert_only(labels, receivers):
    out = run(
        tool("amtool"), "config", "routes", "test", f"--config.file={ROUTES}", "alertname=NodewardenAlert", *labels
    )
    assert out.strip() == receivers

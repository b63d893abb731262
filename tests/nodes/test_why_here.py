"""The node page answers "why here, since when, what next" at the top, and filters its history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from bmc.models import BmcEndpoint
from health.services import raise_finding
from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation, RemediationStep
from tests.factories import ClusterFactory, NodeFactory

S = NodeState
SCHEDULER = services.Actor.system("scheduler")
pytestmark = pytest.mark.django_db


def _header(response) -> str:
    html = response.content.decode()
    start = html.index('id="why-here"')
    return html[start : html.index("</section>", start)]


def _failed_check_to_triage(node) -> None:
    """What a failed burn-in check causes: a finding (as checks records it), then remediation's cordon
    (its follow-up runs after commit; called here as it calls the service)."""
    raise_finding(
        node.pk,
        rule="active_check",
        severity="degraded",
        subject="burn_in",
        summary="Burn-in failed: GPU 3 at 61% of the bandwidth floor",
        source="check",
        every_event=True,
    )
    services.cordon(node.pk, actor=services.Actor.system("remediation"), reason="Remediation 7: burn-in failed")


def _operator_drain(node, operator, reason: str) -> None:
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason=reason)
    services.start_draining(node.pk, actor=SCHEDULER, reason="No customer job running: draining now.")
    services.complete_drain(node.pk, actor=SCHEDULER, reason="The workload scheduler reports the node drained.")


def test_the_header_names_the_finding_that_put_a_node_in_triage(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    _failed_check_to_triage(node)
    client.force_login(operator)
    header = _header(client.get(reverse("node-detail", args=[node.pk])))
    assert "Triage" in header
    assert "cordon" in header and "system:remediation" in header
    assert "active_check" in header and "Burn-in failed: GPU 3 at 61% of the bandwidth floor" in header
    assert 'data-fact="alerts" data-tone="danger"' in header and "1 firing" in header


def test_the_header_names_the_operator_and_reason_of_a_drain_not_the_scheduler(client, operator):
    node = NodeFactory(state=S.PRODUCTION, cluster=ClusterFactory())
    _operator_drain(node, operator, "Swap the PSU in rack B3")
    client.force_login(operator)
    header = _header(client.get(reverse("node-detail", args=[node.pk])))
    assert 'id="why-actor">operator<' in header
    assert "request_drain" in header and "Swap the PSU in rack B3" in header
    assert "complete_drain" in header  # what the scheduler did since, in second place
    assert "No customer job" not in header.split("</dd>")[0].split("(then")[0]
    assert 'data-fact="scheduler"' in header and "No new work (the node runs none)" in header


def test_the_header_shows_the_open_remediation_its_rung_next_step_and_eta(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    _failed_check_to_triage(node)
    services.start_remediation(node.pk, actor=services.Actor.system("remediation"), reason="Remediation: reboot")
    rem = Remediation.objects.create(node=node, status=Status.RUNNING, urgency=Urgency.NOW, rung=Rung.REBOOT)
    deadline = timezone.now() + timedelta(minutes=20)
    RemediationStep.objects.create(remediation=rem, rung=Rung.REBOOT, deadline=deadline)
    client.force_login(operator)
    header = _header(client.get(reverse("node-detail", args=[node.pk])))
    assert f"Remediation {rem.pk}" in header and "rung: Reboot" in header
    assert "If it fails: BMC power cycle" in header
    assert f'Next step due by <time datetime="{timezone.localtime(deadline).isoformat()}"' in header


def test_a_customer_sees_the_header_without_staff_names_or_errors(client, operator, customer, tenant):
    node = NodeFactory(state=S.PRODUCTION, tenant=tenant)
    BmcEndpoint.objects.create(
        node=node,
        address="10.0.0.9",
        username="u",
        last_error="TLS handshake failed",
        last_power_state="off",
        last_power_state_at=timezone.now(),
    )
    _operator_drain(node, operator, "Swap the PSU in rack B3")
    client.force_login(customer)
    header = _header(client.get(reverse("node-detail", args=[node.pk])))
    assert 'id="why-actor">an operator<' in header and "Swap the PSU in rack B3" in header
    assert ">operator<" not in header and "TLS handshake failed" not in header
    assert 'data-fact="bmc" data-tone="info">Power off (read ' in header  # the BMC's view, as last read
    client.force_login(operator)
    assert "TLS handshake failed" in _header(client.get(reverse("node-detail", args=[node.pk])))


def _history_kinds(response) -> list[str]:
    html = response.content.decode()
    body = html[html.index('id="history"') :]
    return [part.split('"', 1)[0] for part in body.split('class="history-row" data-kind="')[1:]]


def test_the_history_filters_by_kind_and_time(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    NodeEvent.objects.create(
        node=node,
        hostname=node.hostname,
        kind=EventKind.NOTE,
        reason="old note",
        actor_kind="system",
        actor_name="system:t",
        created=timezone.now() - timedelta(days=3),
    )
    services.record_event(node.pk, EventKind.NOTE, actor=SCHEDULER, reason="new note")
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason="drain")
    client.force_login(operator)
    url = reverse("node-detail", args=[node.pk])
    assert _history_kinds(client.get(url, {"kind": "note"})) == ["note", "note"]
    assert _history_kinds(client.get(url, {"kind": "transition"})) == ["transition"]
    assert _history_kinds(client.get(url, {"range": "24h"})) == ["transition", "note"]
    assert _history_kinds(client.get(url, {"kind": "note", "range": "24h"})) == ["note"]
    until = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert _history_kinds(client.get(url, {"until": until})) == ["note"]
    more = client.get(reverse("node-history", args=[node.pk]), {"kind": "note", "range": "7d"})
    assert more.status_code == 200 and more.content.decode().count("history-row") == 2


def test_a_bad_history_kind_still_renders_the_page_and_says_why(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    services.record_event(node.pk, EventKind.NOTE, actor=SCHEDULER, reason="a note")
    client.force_login(operator)
    response = client.get(reverse("node-detail", args=[node.pk]), {"kind": "bogus"})
    assert response.status_code == 200 and 'id="history-filter-errors"' in response.content.decode()
    assert _history_kinds(response) == ["note"]  # unfiltered
    assert client.get(reverse("node-history", args=[node.pk]), {"kind": "bogus"}).status_code == 400


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"since": "yesterday"}, "'from' must be a date"),
        ({"range": "1y"}, "Unknown range '1y'"),
        ({"since": "0001-01-01T00:00+05:00"}, "'from'"),
        ({"range": "all", "from": "2026-11-01"}, "not both"),
    ],
)
def test_a_bad_time_range_on_the_node_page_is_a_400_that_says_why(client, operator, params, says):
    """The history's time range is the page's shared one (nodewarden/timerange.py): a bad one is
    refused like on every chart page, the old since/until names included."""
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    for url in (reverse("node-detail", args=[node.pk]), reverse("node-history", args=[node.pk])):
        response = client.get(url, params)
        assert response.status_code == 400 and says in response.content.decode()


def _queries(client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_header_costs_the_same_however_much_history_alerts_and_steps_there_are(client, operator):
    node = NodeFactory(state=S.PRODUCTION, cluster=ClusterFactory())
    BmcEndpoint.objects.create(node=node, address="10.0.0.9", username="u")
    _failed_check_to_triage(node)
    services.start_remediation(node.pk, actor=services.Actor.system("remediation"), reason="Remediation: reboot")
    rem = Remediation.objects.create(node=node, status=Status.RUNNING, urgency=Urgency.NOW, rung=Rung.REBOOT)
    RemediationStep.objects.create(remediation=rem, rung=Rung.REBOOT, deadline=timezone.now())
    client.force_login(operator)
    url = reverse("node-detail", args=[node.pk])
    few = _queries(client, url)
    for i, rung in enumerate([Rung.GPU_RESET, Rung.POWER_CYCLE, Rung.REIMAGE, Rung.REPAIR, Rung.RMA]):
        raise_finding(node.pk, rule="xid", severity="warning", subject=f"x{i}", summary=f"s{i}", every_event=True)
        services.fail_remediation(node.pk, actor=SCHEDULER, reason="r")
        services.start_remediation(node.pk, actor=SCHEDULER, reason="r")
        RemediationStep.objects.create(remediation=rem, rung=rung, deadline=timezone.now())
    assert _queries(client, url) == few
    header = _header(client.get(url))
    assert "6 firing" in header and 'data-fact="remediation"' in header and "fail_remediation" not in header


def test_the_page_says_since_when_once_in_the_portals_format(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    services.cordon(node.pk, actor=SCHEDULER, reason="Cordoned for the test")
    node.refresh_from_db()
    client.force_login(operator)
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    stamp = f"{node.state_changed_at:%Y-%m-%d %H:%M} UTC"
    assert html.count(" since <time") == 1  # the header's, not a second one under the title
    assert f'since <time datetime="{node.state_changed_at.isoformat()}">{stamp}</time>' in _header(
        client.get(reverse("node-detail", args=[node.pk]))
    )
    assert "p.m." not in html and "a.m." not in html

"""Issue 18's "Done when", end to end: a catastrophic XID reaches people and the customers' own
clusters, and all of it clears when the node returns; a customer's bad-node report is handled
end to end.

Real peers: Prometheus Alertmanager (Debian's package: the ``alertmanager`` fixture), Slurm 22.05
(slurmctld + slurmd: ``slurm``), a webhook receiver over HTTP that verifies each batch's
signature (``receiver``, tests/feeds). Kubernetes is kmock's emulator over real HTTP (no
kube-apiserver can run here: ``kube``, tests/schedulers/kube_stand_in). The XID arrives as an
agent report through the real ingest; every change goes through the services with its
follow-ups run inline (Celery eager), as a worker runs them. With no BMC the remediation ladder
climbs to a technician; the node comes back through the repair verbs, and only Day 1's stage
work is fast-forwarded (its verbs called without their follow-ups: a BMC's firmware and an
agent's burn-in have their own tests); the release to production runs everything it causes.
"""

# ruff: noqa: F811  (the fixtures imported below by name are the tests' arguments)
from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from feeds.events import type_of
from feeds.services import subscribe
from feeds.tasks import deliver_events
from health.choices import AlertState
from health.customer_reports import RULE as CUSTOMER_RULE
from health.models import Alert, Finding
from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from repairs.models import RepairTicket
from repairs.services import resolve_repair, start_repair
from schedulers.kubernetes import CONDITION
from schedulers.reactions import follow_drains
from schedulers.slurm import SlurmAdapter
from tests.factories import ClusterFactory, NodeFactory, PersonaFactory
from tests.feeds.conftest import SECRET, receiver  # noqa: F401  (fixture)
from tests.health.conftest import alertmanager  # noqa: F401  (fixture)
from tests.schedulers.kube_stand_in import kube_fixture  # noqa: F401  (the `kube` fixture)
from tests.validation.conftest import eager, idle_report, send  # noqa: F401

pytestmark = pytest.mark.django_db
S = NodeState
STATE_LABEL = "nodewarden.io/state"
KUBE_NODE, SLURM_NODE = "gpu-h-01", "gpu-s-01"
XID_LINE = "NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def xid_79_report(node) -> dict:
    """An idle node's agent report carrying the kernel's XID 79 line for GPU 3."""
    report = idle_report(node)
    pci = report["gpus"][3]["pci_bus_id"][4:-2]  # 00000000:XX:00.0 -> 0000:XX:00, as the driver prints it
    report["xid_events"] = [
        {
            "xid": 79,
            "observed_at": report["collected_at"],
            "raw": XID_LINE.format(pci=pci),
            "pci_bus_id": pci,
            "message": "GPU has fallen off the bus.",
        }
    ]
    return report


@pytest.fixture
def fleet(kube, slurm_cluster, settings, receiver, operator):
    """One production node in a Kubernetes cluster (the stand-in) and one in the Slurm cluster, ten
    more in each (a cluster's blast-radius limit lets one node in ten out), and an operator's
    webhook subscription to the receiver (the feed's settle time at 0: the test's id gaps pass)."""
    settings.NODEWARDEN_FEED_SETTLE_SECONDS = 0
    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": "t0ken"}
    kube.add_node(KUBE_NODE)
    kube_cluster = ClusterFactory(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)
    persona = PersonaFactory(name="llm training")
    nodes = {
        "kubernetes": NodeFactory(
            hostname=f"{KUBE_NODE}.east.example.net", cluster=kube_cluster, state=S.PRODUCTION, persona=persona
        ),
        "slurm": NodeFactory(hostname=f"{SLURM_NODE}.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION),
    }
    for cluster in (kube_cluster, slurm_cluster):
        NodeFactory.create_batch(10, cluster=cluster, site=cluster.site, state=S.PRODUCTION)
    subscribe(operator, url=receiver.url, secret=SECRET, description="the operators' chat bridge")
    return nodes


def bring_back(node, operator, eager) -> None:
    """The technician's repair, Day 1 fast-forwarded, and the release to production run as a worker would."""
    technician = services.Actor(user=operator)
    ticket = RepairTicket.objects.get(node=node)
    start_repair(ticket.pk, actor=technician, reason="reseating GPU 3")
    resolve_repair(ticket.pk, actor=technician, reason="GPU 3 reseated, riser replaced")
    for verb in (services.pass_firmware, services.pass_inventory_check, services.pass_burn_in):
        verb(node.pk, actor=technician, reason="fast-forwarded in this test")
    services.pass_fabric_check(node.pk, actor=technician, reason="fast-forwarded in this test")
    with eager():
        services.release_to_production(node.pk, actor=technician, reason="re-validated: every Day 1 check passed")
    node.refresh_from_db()
    assert node.state == S.PRODUCTION


def test_a_catastrophic_xid_reaches_alertmanager_the_feed_kubernetes_and_slurm_and_clears_on_return(
    fleet,
    alertmanager,
    kube,
    slurm,
    slurm_cluster,
    receiver,
    eager,
    operator,
):
    kube_node, slurm_node = fleet["kubernetes"], fleet["slurm"]
    for node in (kube_node, slurm_node):
        with eager():
            send(node, xid_79_report(node))
        node.refresh_from_db()
        assert node.state == S.REPAIR  # cordoned at once, the ladder climbed (no BMC) to a technician

    # Alertmanager: one active alert per node with Nodewarden's labels.
    for node in (kube_node, slurm_node):
        (seen,) = alertmanager.alerts(node=node.hostname)
        labels = seen["labels"]
        assert (labels["rule"], labels["severity"], labels["component"]) == ("xid", "catastrophic", "gpu3")
        assert labels["cluster"] == node.cluster.name and seen["status"]["state"] == "active"
        assert labels["nodewarden_alert_id"] == str(Alert.objects.get(node=node, rule="xid").pk)
        assert "XID 79" in seen["annotations"]["summary"]

    # The feed: signed CloudEvents at the receiver, the finding among them for each node.
    assert deliver_events()["delivered"] >= 1
    assert receiver.signatures_ok and all(receiver.signatures_ok)
    for node in (kube_node, slurm_node):
        findings = [
            ce
            for ce in receiver.accepted
            if ce["type"] == type_of(EventKind.FINDING) and ce["source"] == f"/nodewarden/nodes/{node.pk}"
        ]
        assert len(findings) == 1 and "XID 79" in findings[0]["data"]["reason"], receiver.accepted
        assert findings[0]["subject"] == node.hostname

    # Kubernetes: the condition, the state label, and Events on the Node naming the XID.
    condition = kube.condition(KUBE_NODE, CONDITION)
    assert (condition["status"], condition["reason"]) == ("False", "Repair") and "XID 79" in condition["message"]
    assert kube.node(KUBE_NODE)["metadata"]["labels"][STATE_LABEL] == "repair"
    events = kube.events(KUBE_NODE)
    finding_event = next(e for e in events if e["reason"] == "NodewardenFinding")
    assert finding_event["type"] == "Warning" and "XID 79" in finding_event["message"]
    assert any(e["reason"] == "NodewardenTransition" and "Production -> Triage" in e["message"] for e in events)
    actions = [e["message"] for e in events if e["reason"] == "NodewardenAction"]  # each rung's outcome too
    assert any(m.startswith("Remediation: reboot failed") for m in actions), actions
    assert any(m.startswith("Repair ticket #") and "opened" in m for m in actions), actions

    # Slurm: drained, and the reason names the finding.
    info = SlurmAdapter(slurm_cluster).show_node(slurm_node)
    assert info.drain_flag and info.reason.startswith("nodewarden: Repair:") and "XID 79" in info.reason, (
        info.describe()
    )

    # The node returns: everything clears.
    seen_before = len(receiver.accepted)
    for node in (kube_node, slurm_node):
        bring_back(node, operator, eager)
        assert Alert.objects.get(node=node, rule="xid").state == AlertState.RESOLVED
        # Alertmanager lists alerts whose endsAt has not passed: the resolved one is gone.
        assert alertmanager.alerts(node=node.hostname) == []

    deliver_events()
    assert all(receiver.signatures_ok)
    back = [ce for ce in receiver.accepted[seen_before:] if ce["data"]["target_state"] == S.PRODUCTION]
    assert sorted(ce["subject"] for ce in back) == sorted([kube_node.hostname, slurm_node.hostname])
    assert {ce["data"]["transition"] for ce in back} == {"release_to_production"}

    condition = kube.condition(KUBE_NODE, CONDITION)
    assert (condition["status"], condition["reason"]) == ("True", "InProduction")
    assert kube.node(KUBE_NODE)["metadata"]["labels"][STATE_LABEL] == "production"
    assert kube.events(KUBE_NODE)[-1]["type"] == "Normal"

    info = SlurmAdapter(slurm_cluster).show_node(slurm_node)
    assert not info.drain_flag and not info.reason, info.describe()


def test_a_customers_bad_node_report_is_drained_when_the_job_ends_answered_and_seen_by_the_customer(
    fleet,
    slurm,
    slurm_cluster,
    receiver,
    eager,
    operator,
    customer,
    tenant,
    settings,
):
    node = fleet["slurm"]
    node.tenant = tenant
    node.save(update_fields=["tenant"])
    # The customer's own webhook (their cluster's automation), allowed to this loopback receiver.
    settings.NODEWARDEN_FEED_PRIVATE_HOSTS = ["127.0.0.1"]
    mine = subscribe(customer, url=receiver.url, secret=SECRET, description="acme's cluster automation")
    assert mine.tenant_id == tenant.pk
    job = slurm.submit(SLURM_NODE, 600, "acme-train")
    slurm.wait_job_running(job)
    as_customer = APIClient()
    as_customer.force_authenticate(customer)

    with eager():
        answer = as_customer.post(
            f"/api/nodes/{node.pk}/report-bad/",
            {"reason": "NCCL all-reduce hangs on this node", "job_id": job},
            format="json",
        )
    assert answer.status_code == 201, answer.content
    finding = Finding.objects.get(pk=answer.json()["finding"])
    assert (finding.rule, finding.source, finding.actor_name) == (CUSTOMER_RULE, "customer", customer.username)
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING  # degraded: the customer's job is let finish
    assert slurm.job_state(job) == "R"
    info = SlurmAdapter(slurm_cluster).show_node(node)
    assert info.drain_flag and "NCCL all-reduce hangs on this node" in info.reason, info.describe()

    slurm.run("scancel", job)  # the job ends
    slurm.wait_job_state(job, "CA", "CD", "")
    with eager():
        follow_drains()
    node.refresh_from_db()
    assert node.state not in (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING), node.state

    bring_back(node, operator, eager)
    alert = Alert.objects.get(node=node, rule=CUSTOMER_RULE)
    assert alert.state == AlertState.RESOLVED
    answered = NodeEvent.objects.get(node=node, kind=EventKind.NOTE, details__alert_id=alert.pk)
    assert "back in production" in answered.reason

    # The customer's own view: the node's history shows the report and its answer.
    history = as_customer.get(f"/api/nodes/{node.pk}/history/?page_size=200")
    assert history.status_code == 200
    rows = {row["id"]: row for row in history.json()["results"]}
    assert finding.event_id in rows and "NCCL all-reduce hangs" in rows[finding.event_id]["reason"]
    assert answered.pk in rows
    page = APIClient()
    page.force_login(customer)
    html = page.get(f"/nodes/{node.pk}/").content.decode()
    assert "NCCL all-reduce hangs on this node" in html and re.search(r"back in production", html)

    # And the customer's own feed got both, signed.
    deliver_events()
    assert all(receiver.signatures_ok)
    ids = [int(ce["id"]) for ce in receiver.accepted]
    assert finding.event_id in ids and answered.pk in ids

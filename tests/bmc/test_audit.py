"""The fleet auditor's BMC power invariant against a real Redfish emulator (sushy-tools): a node
Nodewarden counts as serving must be powered on; reads are bounded per run and go round."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit import invariants as C
from audit.services import context

from .conftest import BmcEndpointFactory

AGO = timezone.now() - timedelta(days=1)


@pytest.fixture(autouse=True)
def no_grace(settings):
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 0
    settings.NODEWARDEN_AUDIT_BMC_TIMEOUT = 2


def audit(**cursors):
    ctx = context(cursors=cursors)
    [outcome] = C.bmc_power(ctx)
    return outcome, ctx.cursors


def serving(endpoint, state="production"):
    type(endpoint.node).objects.filter(pk=endpoint.node_id).update(state=state, state_changed_at=AGO)
    return endpoint


def test_a_production_node_whose_bmc_reports_power_off_is_a_breach(redfish_emulator, redfish_endpoint):
    serving(redfish_endpoint)
    outcome, _ = audit()
    assert (outcome.breaches, outcome.checked) == ([], 1)

    redfish_emulator.set_power(False, 0)
    outcome, _ = audit()
    [breach] = outcome.breaches
    assert (breach.node_id, breach.believed, breach.world) == (
        redfish_endpoint.node_id,
        "production: powered on",
        "BMC reports power off",
    )
    assert breach.evidence["power"] == "off"
    redfish_emulator.set_power(True, 0)


def test_a_node_out_of_production_may_be_off(redfish_emulator, redfish_endpoint):
    serving(redfish_endpoint, state="repair")
    redfish_emulator.set_power(False, 0)
    outcome, _ = audit()
    assert (outcome.breaches, outcome.checked) == ([], 0)
    redfish_emulator.set_power(True, 0)


def test_a_bmc_that_does_not_answer_is_unknown(db):
    serving(BmcEndpointFactory(address="http://127.0.0.1:9"))
    outcome, _ = audit()
    assert (outcome.breaches, outcome.unknown, outcome.checked) == ([], 1, 0)


def test_reads_are_bounded_and_go_round(db, settings, redfish_emulator):
    settings.NODEWARDEN_AUDIT_BMC_READS = 2
    endpoints = [
        serving(
            BmcEndpointFactory(
                address=redfish_emulator.url,
                username=redfish_emulator.username,
                password=redfish_emulator.password,
                system_id=redfish_emulator.systems[0]["uuid"],
            )
        )
        for _ in range(3)
    ]
    ids = [e.node_id for e in endpoints]
    first, cursors = audit()
    assert (first.checked, first.not_reached, cursors["bmc"]) == (2, 1, ids[1])
    second, cursors = audit(**cursors)
    assert (second.checked, cursors["bmc"]) == (2, ids[0])  # the third node, then round to the first
    assert ids[2] not in second.unsure and ids[1] in second.unsure

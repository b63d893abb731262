"""The BMC power poller reaches every endpoint within a bounded number of runs, answering or not.

Real peers: sushy-tools (Redfish) for the BMCs that answer; a closed local port for the ones
that do not (a dead BMC, refused at once).
"""

from __future__ import annotations

import math

import pytest

from bmc import services
from bmc.models import BmcEndpoint
from nodes.whyhere import _bmc_fact

from .conftest import BmcEndpointFactory

pytestmark = pytest.mark.django_db


def test_every_endpoint_polled_within_ceil_n_over_batch_runs(redfish_emulator):
    redfish_emulator.set_power(True, 0)
    # Dead BMCs first by pk: a poller that keeps the same slice (or retries failures first) never
    # gets past them to the ones that answer.
    dead = [BmcEndpointFactory(address="http://127.0.0.1:9") for _ in range(5)]
    alive = [
        BmcEndpointFactory(
            address=redfish_emulator.url,
            username=redfish_emulator.username,
            password=redfish_emulator.password,
            system_id=redfish_emulator.systems[0]["uuid"],
        )
        for _ in range(2)
    ]
    batch = 3
    runs = math.ceil(BmcEndpoint.objects.count() / batch)
    results = [services.poll_power_states(batch=batch, seconds=60) for _ in range(runs)]

    assert all(r.tried == batch for r in results)
    assert results[-1].never_polled == 0
    assert not BmcEndpoint.objects.filter(last_poll_at__isnull=True).exists()
    for endpoint in alive:
        endpoint.refresh_from_db()
        assert endpoint.last_power_state == "on" and endpoint.last_contact_at is not None
    for endpoint in dead:
        endpoint.refresh_from_db()
        assert endpoint.last_error and endpoint.last_contact_at is None

    # The next run takes the least recently polled endpoint, whichever it is.
    before = {e.pk: e.last_poll_at for e in BmcEndpoint.objects.all()}
    services.poll_power_states(batch=1, seconds=60)
    changed = [e.pk for e in BmcEndpoint.objects.all() if e.last_poll_at != before[e.pk]]
    assert changed == [min(before, key=lambda pk: before[pk])]


def test_header_says_what_happens_instead_of_never_contacted():
    endpoint = BmcEndpointFactory(address="http://127.0.0.1:9")
    fact = _bmc_fact(endpoint.node, operator=False)
    assert "Never contacted" not in fact.text and "poller" in fact.text

    services.poll_power_states(batch=1, seconds=60)
    fact = _bmc_fact(endpoint.node, operator=False)
    assert "has not answered yet" in fact.text

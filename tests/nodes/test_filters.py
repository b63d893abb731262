"""The node list's filters: a visible label on every control, "Any" for no choice, search by the
start of a hostname, serial, BMC address or GPU UUID in a fixed number of queries, and the filters
kept in the URL (a GET form), so a filtered list is a link to share."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db


def _filter_form(html: str) -> str:
    match = re.search(r'<form class="filters[^"]*"[^>]*id="node-filters".*?</form>', html, re.DOTALL)
    assert match, "no node filter form"
    return match.group(0)


def test_every_filter_control_has_a_visible_label_and_any_for_no_choice(client, operator):
    NodeFactory()
    client.force_login(operator)
    form = _filter_form(client.get(reverse("node-list")).content.decode())
    assert 'method="get"' in form
    assert "---------" not in form
    labels = {
        re.sub(r"\s+", " ", text).strip()
        for text in re.findall(r'<label class="filter"[^>]*>\s*<span>([^<]+)</span>', form)
    }
    assert labels == {"Search", "State", "Site", "Cluster", "Tenant", "Hardware profile"}
    # Each label names its control, so a screen reader and a click both find it.
    for control_id in re.findall(r'<label class="filter" for="([^"]+)"', form):
        assert f'id="{control_id}"' in form
    assert form.count('<option value="" selected>Any</option>') + form.count('<option value="">Any</option>') == 5


@pytest.mark.parametrize(
    "prefix",
    [
        "rack7-no",  # hostname
        "xz94c2b7",  # serial, any case
        "bmc-r7n4",  # BMC address
        "GPU-7f3a",  # GPU UUID as stored
        "7f3a91c2",  # GPU UUID without nvidia-smi's "GPU-"
    ],
)
def test_the_search_finds_a_node_by_the_first_eight_characters(client, operator, prefix):
    target = NodeFactory(hostname="rack7-node-0042", serial="XZ94C2B7Q1", bmc_address="bmc-r7n42.oob.example")
    GPUFactory(node=target, uuid="GPU-7f3a91c2-55e1-4c3e-9d1a-0b6f2a8e4d11")
    other = NodeFactory(hostname="rack8-node-0001", serial="AB00000001", bmc_address="10.1.1.1")
    GPUFactory(node=other, uuid="GPU-00000000-55e1-4c3e-9d1a-0b6f2a8e4d11")
    client.force_login(operator)
    page = client.get(reverse("node-list"), {"q": prefix}).context["page"]
    assert list(page.object_list) == [target], prefix


def test_the_search_is_a_prefix_not_a_substring(client, operator):
    NodeFactory(hostname="rack7-node-0042", serial="XZ94C2B7Q1")
    client.force_login(operator)
    assert list(client.get(reverse("node-list"), {"q": "node-0042"}).context["page"].object_list) == []


def test_the_search_reads_a_fixed_number_of_queries(client, operator):
    client.force_login(operator)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("node-list"), {"q": "gpu-", "state": "production"}).status_code == 200
        return len(ctx)

    for _ in range(3):
        GPUFactory(node=NodeFactory(state="production"))
    few = queries()
    for _ in range(20):
        GPUFactory(node=NodeFactory(state="production"))
    assert queries() == few


def test_the_filters_stay_in_the_url(client, operator):
    NodeFactory(hostname="rack7-node-0042", state="triage")
    client.force_login(operator)
    html = client.get(reverse("node-list"), {"q": "rack7", "state": "triage"}).content.decode()
    form = _filter_form(html)
    assert 'value="rack7"' in form
    assert '<option value="triage" selected>' in form
    assert "?q=rack7&amp;state=triage" in html or "?q=rack7&state=triage" in html  # export link


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the pattern indexes are PostgreSQL's (migration 0008)")
def test_the_search_reads_the_prefix_indexes_not_every_row(operator, rf):
    from nodes.filters import NodeFilterSet
    from nodes.models import Node

    for _ in range(3):
        GPUFactory(node=NodeFactory())
    request = rf.get("/nodes/")
    request.user = operator
    queryset = NodeFilterSet({"q": "7f3a91c2"}, queryset=Node.objects.all(), request=request).qs
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table is read whole otherwise
        plan = queryset.explain()
    for index in ("hostname", "serial", "bmc_address"):
        assert f"nodes_node_{index}_upper_like" in plan, plan
    assert "nodes_gpu_uuid_upper_like" in plan, plan

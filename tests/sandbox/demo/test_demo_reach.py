"""Where bin/demo's alerts and events go (``manage.py demo_reach``, sandbox.demo.reach): a real
Alertmanager (Debian's package; bin/test installs it) that the workers push to, and the feed
receiver that the seeded webhook subscription points at, which keeps only signed batches."""

from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.request

import pytest
from django.core.management import call_command

from feeds.delivery import SIGNATURE_HEADER, sign
from feeds.models import Subscription
from feeds.tasks import deliver_events
from nodes import services
from sandbox.demo import reach
from sandbox.demo.seed import demo_nodes
from tests.conftest import IN_CI

pytestmark = pytest.mark.django_db
ACTOR = services.Actor.system("test")


@pytest.fixture
def seeded(settings):
    settings.NODEWARDEN_FEED_SETTLE_SECONDS = 0  # the test's own gaps in the ids pass at once
    call_command("seed_demo", "--nodes", "40", "--days", "30", "--seed", "7", stdout=io.StringIO())


def post(url: str, body: bytes, signature: str) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={SIGNATURE_HEADER: signature})  # noqa: S310 - ours
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - our own http:// URL
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def listing(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - our own http:// URL
        return json.loads(answer.read())


def test_the_receiver_keeps_signed_batches_lists_them_and_refuses_the_rest():
    receiver = reach.FeedReceiver("s3cret").start()
    try:
        body = json.dumps([{"id": "1", "type": "io.nodewarden.node.transition"}]).encode()
        now = int(time.time())
        assert post(receiver.hook_url, body, sign("s3cret", body, now)) == 204
        assert post(receiver.hook_url, body, sign("not-the-secret", body, now)) == 401
        assert post(receiver.hook_url, body, sign("s3cret", body, now - 3600)) == 401  # a replayed old batch
        assert post(receiver.hook_url, body, "") == 401

        seen = listing(receiver.url + "/")
        assert (seen["received"], seen["rejected_batches"]) == (1, 3)
        assert seen["events"][0]["cloudevent"] == {"id": "1", "type": "io.nodewarden.node.transition"}
    finally:
        receiver.stop()


def test_the_receiver_counts_every_event_though_it_keeps_only_the_newest():
    """A demo fills the receiver's buffer in minutes: "received" must stay the running total (it
    once was the buffer's size), and ``?limit=`` shortens the list; a bad limit is a 400."""
    receiver = reach.FeedReceiver("s3cret", keep=2).start()
    try:
        for n in range(3):
            body = json.dumps([{"id": str(n), "type": "io.nodewarden.node.note"}]).encode()
            assert post(receiver.hook_url, body, sign("s3cret", body, int(time.time()))) == 204
        seen = listing(receiver.url + "/")
        assert (seen["received"], seen["kept"]) == (3, 2)
        assert [e["cloudevent"]["id"] for e in seen["events"]] == ["2", "1"]
        assert [e["cloudevent"]["id"] for e in listing(receiver.url + "/?limit=1")["events"]] == ["2"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            listing(receiver.url + "/?limit=many")
        assert refused.value.code == 400
    finally:
        receiver.stop()


def test_the_seed_makes_the_receivers_subscription_inactive(seeded):
    subscription = Subscription.objects.get(description=reach.RECEIVER_DESCRIPTION)
    assert not subscription.active and subscription.url == reach.RECEIVER_PLACEHOLDER
    assert subscription.created_by.username == "admin" and subscription.tenant is None


def test_demo_reach_runs_alertmanager_and_the_receiver_gets_the_live_events(seeded, tmp_path):
    if reach.alertmanager_binary() is None:
        if IN_CI:
            pytest.fail("prometheus-alertmanager is required in CI (bin/test installs it)")
        pytest.skip("prometheus-alertmanager is not installed")
    with reach.running_demo_reach(tmp_path) as running:
        am = running.alertmanager
        assert am is not None and am.alive()
        assert running.env_exports() == f"export NODEWARDEN_ALERTMANAGER_URL={am.url}\n"
        assert am.url.startswith("http://127.0.0.1:") and (tmp_path / "alertmanager" / "data").is_dir()
        with urllib.request.urlopen(f"{am.url}/-/ready", timeout=5) as ready:  # noqa: S310 - ours
            assert ready.status == 200
        assert f"Alertmanager: {am.url}/" in running.describe()
        assert f"Feed receiver: {running.receiver.url}/" in running.describe()

        subscription = Subscription.objects.get(description=reach.RECEIVER_DESCRIPTION)
        assert subscription.active and subscription.url == running.receiver.hook_url
        node = demo_nodes().filter(state="production").first()
        services.request_drain(node.pk, actor=ACTOR, reason="a live event for the receiver")
        deliver_events()

        got = listing(running.receiver.url + "/")
        assert got["rejected_batches"] == 0
        # Only what happened since the receiver started: none of the seeded months of history.
        assert [e["cloudevent"]["data"]["reason"] for e in got["events"]] == ["a live event for the receiver"]
        process = am.process
    assert process is not None and process.poll() is not None, "Alertmanager is stopped on exit"
    assert not Subscription.objects.get(description=reach.RECEIVER_DESCRIPTION).active


def test_without_alertmanager_the_demo_says_so_and_pushes_nothing(seeded, tmp_path, monkeypatch):
    monkeypatch.setattr(reach, "alertmanager_binary", lambda: None)
    with reach.running_demo_reach(tmp_path) as running:
        assert running.alertmanager is None
        assert "NODEWARDEN_ALERTMANAGER_URL" not in running.env_exports()
        assert "Alertmanager is not installed" in running.describe()
        assert listing(running.receiver.url + "/")["received"] == 0

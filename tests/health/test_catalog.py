"""The XID catalog: our severity and first action for each XID, and operators' overrides."""
from __future__ import annotations

import pytest

from health import xid
from health.choices import RecommendedAction as A
from health.choices import Severity as S
from health.models import XidDefinition


@pytest.mark.parametrize(("number", "severity", "action"), [
    (79, S.CATASTROPHIC, A.REBOOT),
    (48, S.CATASTROPHIC, A.RESET_GPU),
    (64, S.CATASTROPHIC, A.RESET_GPU),
    (95, S.CATASTROPHIC, A.RESET_GPU),
    (13, S.WARNING, A.CHECK_APPLICATION),
    (31, S.WARNING, A.CHECK_APPLICATION),
    (45, S.WARNING, A.CHECK_APPLICATION),
    (63, S.INFO, A.NONE),
    (154, S.INFO, A.NONE),
    (1, S.WARNING, A.INSPECT),  # unused on A100 and newer: unexpected
])
def test_it_maps_each_xid_to_our_severity_and_action(db, number, severity, action):
    info = xid.lookup(number)

    assert (info.severity, info.recommended_action) == (severity, action)


def test_it_seeds_every_xid_of_the_reference_catalog(db):
    assert XidDefinition.objects.count() == 172
    assert XidDefinition.objects.get(xid=1).meaning.startswith("Unexpected XID")


def test_it_treats_an_xid_missing_from_the_catalog_as_a_warning_to_inspect(db):
    info = xid.lookup(4242)

    assert (info.severity, info.recommended_action, info.known) == (S.WARNING, A.INSPECT, False)


def test_it_sees_an_operator_override_at_once(db):
    assert xid.lookup(13).severity == S.WARNING
    definition = XidDefinition.objects.get(xid=13)
    definition.severity = S.DEGRADED
    definition.save()

    assert xid.lookup(13).severity == S.DEGRADED


def test_the_bucket_mapping_is_documented_for_every_bucket_in_the_catalog(db):
    buckets = set(XidDefinition.objects.values_list("nvidia_bucket", flat=True))

    assert buckets - set(xid.BUCKET_ACTIONS) <= {"NONE_LISTED"}


@pytest.mark.django_db(transaction=True)
def test_the_catalog_and_default_rules_come_back_after_a_flush():
    """A flush (as between transactional tests) empties the tables; post_migrate puts the defaults back."""
    from django.core.management import call_command

    from health.models import HealthRule, XidDefinition

    call_command("flush", "--noinput", verbosity=0)

    assert XidDefinition.objects.get(xid=79).severity == "catastrophic"
    assert HealthRule.objects.filter(key="gpu_temperature", hardware_profile=None).exists()

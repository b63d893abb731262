"""The XID catalog: our severity and first action for each XID, and operators' overrides."""

from __future__ import annotations

import pytest

from health import xid
from health.choices import RecommendedAction as A
from health.choices import Severity as S
from health.models import XidDefinition


@pytest.mark.parametrize(
    ("number", "severity", "action"),
    [
        (79, S.CATASTROPHIC, A.REBOOT),
        (48, S.CATASTROPHIC, A.RESET_GPU),
        (64, S.CATASTROPHIC, A.RESET_GPU),
        (95, S.CATASTROPHIC, A.RESET_GPU),
        (74, S.CATASTROPHIC, A.RESET_GPU),
        (119, S.CATASTROPHIC, A.RESET_GPU),
        (13, S.WARNING, A.CHECK_APPLICATION),
        (31, S.WARNING, A.CHECK_APPLICATION),
        (94, S.WARNING, A.RESET_GPU),  # contained: the application restarts; the reset (when convenient) is ours
        (120, S.CATASTROPHIC, A.RESET_GPU),
        (43, S.INFO, A.NONE),  # NVIDIA: the application faulted, the GPU is healthy; IGNORE
        (45, S.WARNING, A.NONE),  # NVIDIA: follows another XID, act on that one
        (63, S.INFO, A.NONE),
        (154, S.INFO, A.NONE),  # the action is in the line itself (rules/xid.py reads it)
        (1, S.WARNING, A.INSPECT),  # unused on A100 and newer: unexpected
    ],
)
def test_it_maps_each_xid_to_our_severity_and_action(db, number, severity, action):
    info = xid.lookup(number)

    assert (info.severity, info.recommended_action) == (severity, action)


def test_an_xid_nvidia_says_to_ignore_or_to_act_on_another_xid_has_no_action_of_its_own(db):
    """NVIDIA's immediate action decides: IGNORE (43, 63, ...) and "act on the accompanying Xid"
    (45, 154) start nothing by themselves; no per-XID override may turn them into a check.
    (14 and 108 are unused on A100 and newer: seeing one is unexpected, inspected as every such XID.)"""
    rows = [
        row
        for row in xid.read_catalog()
        if row["nvidia_bucket"] in ("IGNORE", "WORKFLOW_XID_45", "XID_154")
        and not row["meaning"].startswith("Unexpected XID")
    ]
    assert {r["xid"] for r in rows} >= {43, 45, 63, 154}
    assert {(r["xid"], r["recommended_action"]) for r in rows} == {(r["xid"], A.NONE) for r in rows}
    assert {xid.lookup(r["xid"]).recommended_action for r in rows} == {A.NONE}


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


def test_a_catalog_change_reaches_installed_rows_an_operator_never_edited(db):
    """Rows seeded before XID 43/45 lost "check the application" get NVIDIA's action at the next
    migrate, with a change-log entry; a row an operator edited stays as the operator left it."""
    from django.utils import timezone

    from health.models import HealthRuleChange
    from health.seed import ensure_health_defaults

    XidDefinition.objects.filter(xid__in=[43, 45]).update(recommended_action=A.CHECK_APPLICATION)
    XidDefinition.objects.filter(xid=13).update(
        severity=S.DEGRADED, edited_reason="our jobs never fault", edited_at=timezone.now()
    )

    ensure_health_defaults()
    ensure_health_defaults()  # a second migrate finds nothing left to change

    assert {x.xid: x.recommended_action for x in XidDefinition.objects.filter(xid__in=[43, 45])} == {
        43: A.NONE,
        45: A.NONE,
    }
    assert xid.lookup(43).recommended_action == A.NONE
    assert XidDefinition.objects.get(xid=13).severity == S.DEGRADED
    changes = {c.target: c.changes for c in HealthRuleChange.objects.filter(xid__in=[43, 45, 13])}
    assert changes == {
        "XID 43": {"recommended_action": ["check_application", "none"]},
        "XID 45": {"recommended_action": ["check_application", "none"]},
    }


RESETS = {48: True, 63: True, 64: True, 74: True, 94: True, 95: True, 119: True, 120: True, 140: True, 149: True}
NO_RESET = {79: False, 13: False, 31: False, 43: False, 45: False, 1: False, 154: False}


@pytest.mark.parametrize(("number", "gpu_reset"), sorted({**RESETS, **NO_RESET}.items()))
def test_it_marks_the_xids_whose_recovery_nvidia_says_is_a_gpu_reset(db, number, gpu_reset):
    """What the GPU reset rung reads: 79 (off the bus) needs a reboot, application XIDs no reset."""
    assert xid.lookup(number).gpu_reset is gpu_reset
    assert XidDefinition.objects.get(xid=number).gpu_reset is gpu_reset


def test_the_catalog_file_holds_the_gpu_reset_column_distilled_from_nvidias_buckets():
    rows = list(xid.read_catalog())

    assert all(row["gpu_reset"] is xid.calls_for_gpu_reset(row["xid"], row["nvidia_bucket"]) for row in rows)
    assert {row["xid"] for row in rows if row["gpu_reset"]} >= set(RESETS)
    reference = {"xid": "48", "name": "ECC_DBE", "severity": "CRITICAL", "recommended_action": "WORKFLOW_XID_48: x"}
    assert xid.distil_row(reference)["gpu_reset"] is True


def test_an_xid_whose_recovery_is_a_gpu_reset_recommends_the_reset_so_it_starts_at_that_rung():
    """Unless NVIDIA's bucket says the XID starts nothing of its own (63, row remap recorded: IGNORE;
    the row_remap_pending rule asks for the reset)."""
    rows = list(xid.read_catalog())
    resets = {r["xid"]: r["recommended_action"] for r in rows if r["gpu_reset"]}
    on_their_own = {n: a for n, a in resets.items() if n != 63}

    assert set(on_their_own.values()) == {A.RESET_GPU} and {48, 64, 74, 94, 95, 119, 120} <= set(on_their_own)
    assert resets[63] == A.NONE
    contained = {"xid": "94", "name": "CONTAINED", "severity": "WARNING", "recommended_action": "RESTART_APP: x"}
    assert xid.distil_row(contained)["recommended_action"] == A.RESET_GPU


def test_an_installed_unedited_row_takes_the_new_recommendation_at_the_next_migrate(db):
    XidDefinition.objects.filter(xid=94).update(recommended_action=A.CHECK_APPLICATION)
    from health.seed import ensure_health_defaults

    ensure_health_defaults()

    assert XidDefinition.objects.get(xid=94).recommended_action == A.RESET_GPU


def test_installed_rows_get_the_gpu_reset_mark_at_the_next_migrate(db):
    XidDefinition.objects.filter(xid=48).update(gpu_reset=False)
    from health.seed import ensure_health_defaults

    ensure_health_defaults()

    assert XidDefinition.objects.get(xid=48).gpu_reset is True

"""The shared time range of the chart pages (nodewarden/timerange.py): presets, custom windows, refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodewarden.timerange import MAX_SPAN, BadRange, parse

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def test_no_parameter_is_the_default_preset():
    chosen = parse({}, default="90d", now=NOW)
    assert (chosen.start, chosen.end, chosen.preset) == (NOW - timedelta(days=90), NOW, "90d")


@pytest.mark.parametrize(
    ("preset", "span"),
    [
        ("1h", timedelta(hours=1)),
        ("24h", timedelta(days=1)),
        ("7d", timedelta(days=7)),
        ("30d", timedelta(days=30)),
        ("90d", timedelta(days=90)),
    ],
)
def test_each_preset_ends_now(preset, span):
    chosen = parse({"range": preset}, now=NOW)
    assert (chosen.start, chosen.end, chosen.params()) == (NOW - span, NOW, {"range": preset})


def test_a_custom_window_is_read_as_utc_and_named_again_in_the_url():
    chosen = parse({"from": "2026-11-01", "to": "2026-11-08T06:30"}, now=NOW)
    assert chosen.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert chosen.end == datetime(2026, 11, 8, 6, 30, tzinfo=UTC)
    assert chosen.preset is None
    assert chosen.query() == "from=2026-11-01T00%3A00&to=2026-11-08T06%3A30"


def test_an_offset_is_honoured():
    chosen = parse({"from": "2026-11-01T10:00+02:00", "to": "2026-11-02T10:00+02:00"}, now=NOW)
    assert chosen.start == datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def test_a_missing_to_means_until_now():
    assert parse({"from": "2026-11-20"}, now=NOW).end == NOW


def test_a_future_to_is_clamped_to_now():
    chosen = parse({"from": "2026-11-20", "to": "2027-01-01"}, now=NOW)
    assert chosen.end == NOW


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"range": "1y"}, "Unknown range '1y'"),
        ({"range": "x" * 500}, "Unknown range"),
        ({"from": "yesterday"}, "'from' must be a date"),
        ({"from": "2026-11-01", "to": "soon"}, "'to' must be a date"),
        ({"from": "2026-02-30"}, "not a real date"),
        ({"from": "2026-11-01T25:00"}, "not a real date"),
        ({"from": "2026-11-08", "to": "2026-11-01"}, "must be before 'to'"),
        ({"from": "2026-11-08", "to": "2026-11-08"}, "must be before 'to'"),
        ({"from": "2026-12-01"}, "is in the future"),
        ({"to": "2026-11-01"}, "'to' needs a 'from'"),
        ({"range": "7d", "from": "2026-11-01"}, "not both"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, f"at most {MAX_SPAN.days} days"),
        ({"from": "2026-11-01T10:00:00", "to": "2026-11-01T10:00:30"}, "at least one minute"),
        ({"from": "0001-01-01T00:00+05:00"}, "out of range"),
        ({"from": "2026-11-01T10:00+19:00"}, "UTC offset +1900"),
        ({"from": "2" * 100}, "too long"),
    ],
)
def test_a_range_that_cannot_be_shown_is_refused_with_the_reason(params, says):
    with pytest.raises(BadRange) as refused:
        parse(params, now=NOW)
    assert says in str(refused.value)

"""The time range every chart page shows, read from the URL in one place.

A range is a preset (``?range=24h``) or a custom window (``?from=2026-11-01&to=2026-11-08T12:00``),
so a chart's window is saved in links and bookmarks. Every chart page parses it here and renders
``_timerange.html``; static/js/live.js turns a zoom on a plotly chart into the same parameters.

Bad input is a :class:`BadRange` with a message for a human, which the views answer with a 400
(never a 500, never a silent default): an unknown preset, an unreadable time, ``from`` after
``to``, or a span past :data:`MAX_SPAN` (queries stay bounded). A ``to`` in the future is
clamped to now: "until now" is what a link made yesterday means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from .bounds import timestamp_problem

PRESETS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "90d": timedelta(days=90),
}
# A page whose data has a beginning (a node's life) also offers "all": from that beginning, at most
# MAX_SPAN back, so it stays bounded like every other range.
ALL = "all"
PARAMS = ("range", "from", "to")  # the URL parameters a range is read from
# The longest window a chart may ask for: the charts read daily snapshots at most this old.
MAX_SPAN = timedelta(days=366)
MIN_SPAN = timedelta(minutes=1)
MAX_INPUT = 40  # characters of one parameter we are willing to parse


class BadRange(ValueError):
    """The URL's time range cannot be used; the message says why, for the 400 answer."""


@dataclass(frozen=True)
class TimeRange:
    """A closed window [start, end] in UTC; ``preset`` is set when it came from ``?range=``."""

    start: datetime
    end: datetime
    preset: str | None = None

    @property
    def span(self) -> timedelta:
        """How long the window is."""
        return self.end - self.start

    @property
    def days(self) -> int:
        """Whole days the window touches, at least one (for the daily charts)."""
        return max(1, (self.end.date() - self.start.date()).days + 1)

    @property
    def label(self) -> str:
        """What the picker says is shown."""
        if self.preset == ALL:
            return f"all, since {self.start:%Y-%m-%d %H:%M} UTC"
        if self.preset:
            return f"last {self.preset}"
        return f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"

    def axis_range(self) -> list[str]:
        """The window as a plotly date axis range (UTC), so the chart shows exactly the range."""
        return [self.start.strftime("%Y-%m-%d %H:%M:%S"), self.end.strftime("%Y-%m-%d %H:%M:%S")]

    def params(self) -> dict[str, str]:
        """The URL parameters that name this range again."""
        if self.preset:
            return {"range": self.preset}
        return {"from": self.start.strftime("%Y-%m-%dT%H:%M"), "to": self.end.strftime("%Y-%m-%dT%H:%M")}

    def query(self) -> str:
        """``params`` as a query string, for links and partial URLs."""
        return urlencode(self.params())


def _parse_moment(name: str, raw: str) -> datetime:
    """A date or a date and time (ISO 8601, as <input type=datetime-local> sends it); naive is UTC."""
    raw = raw.strip()
    if len(raw) > MAX_INPUT:
        raise BadRange(f"'{name}' is too long to be a time (at most {MAX_INPUT} characters).")
    try:
        moment = parse_datetime(raw)
        day = None if moment else parse_date(raw)
    except ValueError:  # well-formed but impossible, e.g. 2026-02-30
        raise BadRange(f"'{name}' is not a real date or time: {raw!r}.") from None
    if moment is None:
        if day is None:
            raise BadRange(f"'{name}' must be a date (2026-11-01) or a date and time (2026-11-01T14:30), not {raw!r}.")
        moment = datetime.combine(day, time.min)
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    problem = timestamp_problem(moment)
    if problem:
        raise BadRange(f"'{name}': {problem}.")
    return moment.astimezone(UTC)


def parse(
    params: Mapping[str, str], *, default: str = "90d", now: datetime | None = None, origin: datetime | None = None
) -> TimeRange:
    """The range ``params`` (a request's GET) asks for, or the ``default`` preset when it names none.

    ``origin`` is where the page's data begins (a node's creation); only a page that gives one
    offers ``all``: from ``origin``, or :data:`MAX_SPAN` back if that is longer ago.

    Raises :class:`BadRange` for anything that cannot be shown as asked.
    """
    now = (now or timezone.now()).astimezone(UTC)
    preset = params.get("range", "")
    raw_from, raw_to = params.get("from", ""), params.get("to", "")
    if preset and (raw_from or raw_to):
        raise BadRange("Give either 'range' or 'from'/'to', not both.")
    if raw_from or raw_to:
        if not raw_from:
            raise BadRange("'to' needs a 'from'.")
        start = _parse_moment("from", raw_from)
        end = _parse_moment("to", raw_to) if raw_to else now
        if end > now:
            end = now  # the future holds no data yet: "until now"
        if start >= end:
            if start > now:
                raise BadRange(f"'from' ({raw_from}) is in the future.")
            raise BadRange(f"'from' ({raw_from}) must be before 'to' ({raw_to or 'now'}).")
        if end - start < MIN_SPAN:
            raise BadRange("The range must be at least one minute long.")
        if end - start > MAX_SPAN:
            raise BadRange(f"The range may span at most {MAX_SPAN.days} days.")
        return TimeRange(start, end)
    preset = preset or default
    if preset == ALL and origin is not None:
        return TimeRange(min(max(origin.astimezone(UTC), now - MAX_SPAN), now - MIN_SPAN), now, ALL)
    if preset not in PRESETS:
        raise BadRange(f"Unknown range {preset[:MAX_INPUT]!r}: choose one of {', '.join(PRESETS)} or give from/to.")
    return TimeRange(now - PRESETS[preset], now, preset)


def from_request(request: HttpRequest, *, default: str = "90d", origin: datetime | None = None) -> TimeRange:
    """The range of ``request``'s URL (see :func:`parse`)."""
    return parse(request.GET, default=default, origin=origin)


def bad_request(exc: BadRange) -> HttpResponse:
    """The 400 a chart page answers a bad range with: the reason, in plain text."""
    return HttpResponse(f"Bad time range: {exc}", status=400, content_type="text/plain")


def picker_context(
    request: HttpRequest, chosen: TimeRange, *, with_all: bool = False, drop: tuple[str, ...] = ()
) -> dict[str, object]:
    """What ``_timerange.html`` needs: the chosen range, presets, and the page's other parameters to keep.

    ``with_all`` offers the ``all`` preset (pages that parse with an ``origin``); ``drop`` names
    further parameters the picker replaces (a page's old names for the range)."""
    keep = [(k, v) for k, values in request.GET.lists() if k not in (*PARAMS, "page", *drop) for v in values]
    return {
        "timerange": chosen,
        "timerange_presets": [*PRESETS, ALL] if with_all else list(PRESETS),
        "timerange_keep": keep,
        "timerange_keep_query": urlencode(keep),
    }

"""The byte format of ``TelemetryHourPack.blob``: one node's hour of reports and GPU samples.

A version byte, then zlib over a msgpack document holding each column as an array:

- ``t``: the hour's distinct instants (reports' and samples' ``collected_at``), microseconds
  after the hour, sorted and delta-encoded;
- ``r``: reports, one array per NodeReport column, each report pointing at its instant; the
  summary JSON only where it differs from the report before (host vitals change rarely);
- ``g``: per GPU index, the instants it has a sample at and one array per GpuSample column.

A column is ``[code, nulls, deltas]``: ``nulls`` the positions holding NULL (delta-encoded),
``deltas`` the other values, each minus the one before. Integers and booleans are exact as
they are. A float column is stored as integers ``round(v * 10**e)`` with the smallest ``e``
(0-4) at which every value decodes back to exactly what the database holds (``code`` says
``e`` and whether the column is a 4-byte ``real``: nvidia-smi prints temperatures as integers
and watts with two decimals, so these compress like integers); a column no scale reproduces
is kept as plain floats (``code`` -1). Decoding gives back exactly what was encoded.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import accumulate, pairwise
from typing import Any

import msgspec

VERSION = 1
_US = timedelta(microseconds=1)
_RAW_FLOATS = -1
_SCALES = range(5)
ZLIB_LEVEL = 6  # 9 took more CPU and left the bench's packs in as many pages

Row = dict[str, Any]


class PackFormatError(ValueError):
    """A blob this code cannot read (unknown version or damaged)."""


def _deltas(values: Sequence[int]) -> list[int]:
    return [values[0], *(b - a for a, b in pairwise(values))] if values else []


def _undelta(deltas: Sequence[int]) -> list[int]:
    return list(accumulate(deltas))


def _float_code(values: list[float], real: bool) -> tuple[int, list[Any]]:
    """The smallest decimal scale that gives ``values`` back exactly, and the scaled integers."""
    for e in _SCALES:
        scale = 10**e
        ints = [round(v * scale) for v in values]
        if _decode_floats(ints, e, real) == values:
            return e * 2 + int(real), ints
    return _RAW_FLOATS, values


def _decode_floats(ints: list[int], e: int, real: bool) -> list[float]:
    scale = 10**e
    floats = [i / scale for i in ints]
    # A ``real`` column holds 4-byte floats: 312.45 is stored (and read back) as 312.45001220703125.
    return array("f", floats).tolist() if real else floats


def encode_column(values: Sequence[Any], kind: str) -> list[Any]:
    """One column (``kind``: "i" integer, "b" boolean, "f" float, "r" 4-byte float, "s" string)."""
    nulls = [i for i, v in enumerate(values) if v is None]
    present = [v for v in values if v is not None] if nulls else list(values)
    code = 0
    if kind in ("f", "r"):
        code, ints = _float_code([float(v) for v in present], kind == "r")
        body = ints if code == _RAW_FLOATS else _deltas(ints)
    elif kind == "s":
        body = present
    else:
        body = _deltas([int(v) for v in present])
    return [code, _deltas(nulls), body]


def decode_column(column: list[Any], kind: str, length: int) -> list[Any]:
    code, nulls_d, body = column
    if kind == "s" or code == _RAW_FLOATS:
        present = list(body)
    elif kind in ("f", "r"):
        present = _decode_floats(_undelta(body), code // 2, bool(code % 2))
    elif kind == "b":
        present = [bool(v) for v in _undelta(body)]
    else:
        present = _undelta(body)
    if not nulls_d:
        return present
    nulls = set(_undelta(nulls_d))
    values = iter(present)
    return [None if i in nulls else next(values) for i in range(length)]


def _offsets(hour: datetime, times: Sequence[datetime]) -> list[int]:
    return [(t - hour) // _US for t in times]


def encode(hour: datetime, reports: Sequence[Row], samples: Sequence[Row], columns: dict[str, dict[str, str]]) -> bytes:
    """The blob of one node-hour. ``reports``/``samples``: rows with ``collected_at`` (and the
    samples' ``gpu_index``) and the columns named in ``columns["r"]``/``columns["g"]`` (name ->
    kind; kind "j" is JSON, stored where it changes; "t" a datetime, stored after collected_at)."""
    times = sorted({r["collected_at"] for r in reports} | {s["collected_at"] for s in samples})
    at = {t: i for i, t in enumerate(times)}
    reports = sorted(reports, key=lambda r: r["collected_at"])
    doc: dict[str, Any] = {"t": _deltas(_offsets(hour, times)), "r": _encode_rows(reports, at, columns["r"])}
    gpus: dict[int, list[Row]] = {}
    for sample in sorted(samples, key=lambda s: (s["gpu_index"], s["collected_at"])):
        gpus.setdefault(sample["gpu_index"], []).append(sample)
    doc["g"] = [[index, _encode_rows(rows, at, columns["g"])] for index, rows in sorted(gpus.items())]
    return bytes([VERSION]) + zlib.compress(msgspec.msgpack.encode(doc), ZLIB_LEVEL)


def _encode_rows(rows: Sequence[Row], at: dict[datetime, int], kinds: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"@": _deltas([at[r["collected_at"]] for r in rows])}
    for name, kind in kinds.items():
        values = [r[name] for r in rows]
        if kind == "j":
            # Only where it changes: [position, value] pairs.
            out[name] = [[i, v] for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
        elif kind == "t":
            out[name] = encode_column([(v - r["collected_at"]) // _US for v, r in zip(values, rows, strict=True)], "i")
        else:
            out[name] = encode_column(values, kind)
    return out


def decode(hour: datetime, blob: bytes, columns: dict[str, dict[str, str]]) -> tuple[list[Row], list[Row]]:
    """(reports, samples) of a blob, as ``encode`` got them; reports by time, samples by GPU and time."""
    doc = _load(blob)
    times = [hour + v * _US for v in _undelta(doc["t"])]
    reports = _decode_rows(doc["r"], times, columns["r"])
    samples = []
    for index, rows in doc["g"]:
        for row in _decode_rows(rows, times, columns["g"]):
            row["gpu_index"] = index
            samples.append(row)
    return reports, samples


def decode_gpu_columns(
    hour: datetime, blob: bytes, kinds: dict[str, str], names: Sequence[str]
) -> list[tuple[int, list[datetime], dict[str, list[Any]]]]:
    """Only ``names`` of the samples, per GPU: (index, instants, name -> values). No row is built:
    a reader wanting a few columns of many hours (trends) pays for those columns only."""
    doc = _load(blob)
    times = [hour + v * _US for v in _undelta(doc["t"])]
    out = []
    for index, rows in doc["g"]:
        at = [times[i] for i in _undelta(rows["@"])]
        out.append((index, at, {name: decode_column(rows[name], kinds[name], len(at)) for name in names}))
    return out


def _load(blob: bytes) -> dict[str, Any]:
    if not blob or blob[0] != VERSION:
        raise PackFormatError(f"unknown telemetry pack version {blob[:1]!r}")
    try:
        doc: dict[str, Any] = msgspec.msgpack.decode(zlib.decompress(blob[1:]))
    except (zlib.error, msgspec.DecodeError) as exc:
        raise PackFormatError(f"damaged telemetry pack: {exc}") from exc
    return doc


def report_times(hour: datetime, blob: bytes) -> list[datetime]:
    """The instants of the blob's reports (what makes a resent report a duplicate)."""
    doc = _load(blob)
    times = [hour + v * _US for v in _undelta(doc["t"])]
    return [times[i] for i in _undelta(doc["r"]["@"])]


def _decode_rows(doc: dict[str, Any], times: list[datetime], kinds: dict[str, str]) -> list[Row]:
    at = [times[i] for i in _undelta(doc["@"])]
    rows: list[Row] = [{"collected_at": t} for t in at]
    for name, kind in kinds.items():
        if kind == "j":
            changes = dict(doc[name])
            value = None
            for i, row in enumerate(rows):
                value = changes.get(i, value)
                row[name] = value
        elif kind == "t":
            offsets = decode_column(doc[name], "i", len(rows))
            for row, offset in zip(rows, offsets, strict=True):
                row[name] = row["collected_at"] + offset * _US
        else:
            for row, value in zip(rows, decode_column(doc[name], kind, len(rows)), strict=True):
                row[name] = value
    return rows

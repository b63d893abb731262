"""The bounded on-disk buffer of reports not yet accepted by the portal.

One JSON file per report, named by its zero-padded ``seq`` so a directory listing is
the sending order, each written atomically (temporary file, fsync, rename). Reports
leave the spool only when the portal accepted them, or into ``rejected/`` when the
portal refused them as malformed. When the spool is over its bound the oldest
reports are dropped; the drop is logged and kept in ``spool-drops.json`` until a
report says so in ``collector_errors["spool"]``, so a loss is never silent.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from .util import atomic_write_bytes, atomic_write_json, fsync_dir, read_json

log = logging.getLogger(__name__)


class Spool:
    """Reports waiting to be sent, oldest first, bounded by count and bytes."""

    def __init__(self, directory: Path, max_reports: int = 20_000, max_bytes: int = 512 * 1024 * 1024):
        self.directory = Path(directory)
        self.rejected_dir = self.directory / "rejected"
        self.drops_path = self.directory.parent / "spool-drops.json"
        self.max_reports, self.max_bytes = max_reports, max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(".tmp-*"):  # a crash mid-write leaves these
            stale.unlink(missing_ok=True)

    def _files(self) -> list[Path]:
        return sorted(self.directory.glob("[0-9]*.json"))

    def __len__(self) -> int:
        return len(self._files())

    def last_seq(self) -> int:
        files = self._files()
        return int(files[-1].stem) if files else 0

    def append(self, report: dict[str, Any]) -> Path:
        """Store ``report`` durably, then enforce the bound (dropping the oldest)."""
        path = self.directory / f"{report['seq']:012d}.json"
        atomic_write_bytes(path, json.dumps(report, separators=(",", ":")).encode())
        self._enforce_bound()
        return path

    def _enforce_bound(self) -> None:
        files = self._files()
        sizes = [p.stat().st_size for p in files]
        total, dropped = sum(sizes), []
        while files and (len(files) > self.max_reports or total > self.max_bytes) and len(files) > 1:
            victim = files.pop(0)
            total -= sizes.pop(0)
            victim.unlink(missing_ok=True)
            dropped.append(int(victim.stem))
        if dropped:
            log.error(
                "spool over its bound (%d reports / %d bytes): dropped %d oldest reports, seq %d..%d",
                self.max_reports,
                self.max_bytes,
                len(dropped),
                dropped[0],
                dropped[-1],
            )
            self._record_drops(dropped)

    def _record_drops(self, seqs: list[int]) -> None:
        drops = read_json(self.drops_path, {}) or {}
        atomic_write_json(self.drops_path, {"seqs": drops.get("seqs", []) + seqs})

    def drop_notice(self) -> tuple[str | None, int]:
        """The text for collector_errors["spool"] and how many drops it covers."""
        seqs = (read_json(self.drops_path, {}) or {}).get("seqs", [])
        if not seqs:
            return None, 0
        return (
            f"{len(seqs)} reports dropped unsent (seq {seqs[0]}..{seqs[-1]}): "
            f"spool over its bound of {self.max_reports} reports / {self.max_bytes} bytes"
        ), len(seqs)

    def forget_drops(self, count: int) -> None:
        """``count`` drops were announced in a spooled report; keep any that came after."""
        left = (read_json(self.drops_path, {}) or {}).get("seqs", [])[count:]
        if left:
            atomic_write_json(self.drops_path, {"seqs": left})
        else:
            self.drops_path.unlink(missing_ok=True)

    def peek(self, limit: int) -> list[tuple[Path, dict[str, Any]]]:
        """Up to ``limit`` oldest reports; an unreadable file is moved aside, not sent."""
        batch: list[tuple[Path, dict[str, Any]]] = []
        for path in self._files():
            if len(batch) >= limit:
                break
            try:
                batch.append((path, json.loads(path.read_text())))
            except (OSError, ValueError) as exc:
                self.reject([path], f"unreadable spool file: {exc}")
        return batch

    def remove(self, paths: list[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)
        fsync_dir(self.directory)

    def reject(self, paths: list[Path], reason: str) -> None:
        """Move reports the portal refused to rejected/, with the reason beside them."""
        self.rejected_dir.mkdir(exist_ok=True)
        for path in paths:
            os.replace(path, self.rejected_dir / path.name)
            (self.rejected_dir / f"{path.stem}.reason.txt").write_text(reason + "\n")
        fsync_dir(self.directory)

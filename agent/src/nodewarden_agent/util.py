"""Small helpers shared by the agent's modules: UTC timestamps and crash-safe files."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def utc_iso(moment: datetime | float | None = None) -> str:
    """An ISO 8601 timestamp with an explicit UTC offset: the portal refuses naive times."""
    if moment is None:
        moment = datetime.now(timezone.utc)
    elif not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    return moment.astimezone(timezone.utc).isoformat()


def clip(text: str, limit: int) -> str:
    """Text cut to the schema's maximum length, marked so a reader knows it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new content after a
    crash or power loss: temporary file, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, json.dumps(value, separators=(",", ":")).encode())


def read_json(path: Path, default: Any = None) -> Any:
    """A small state file, or ``default`` when it is absent or unreadable (logged by callers)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default

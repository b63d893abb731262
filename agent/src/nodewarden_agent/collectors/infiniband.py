"""InfiniBand HCA ports from sysfs: /sys/class/infiniband/<device>/ports/<port>/.

File formats (drivers/infiniband/core/sysfs.c): ``state`` "4: ACTIVE", ``phys_state``
"5: LinkUp", ``rate`` "400 Gb/sec (4X NDR)", ``link_layer`` "InfiniBand"; counters/ and
hw_counters/ hold one decimal number per file. The root is injectable so tests walk a
fake tree written in the real formats.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from . import CollectorError, Contribution

SYSFS_ROOT = Path("/sys/class/infiniband")
_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _after_colon(text: str | None) -> str:
    # "4: ACTIVE" -> "ACTIVE"; a value without a number is kept whole.
    return "" if text is None else text.split(":", 1)[-1].strip()


def parse_rate(text: str | None) -> float | None:
    match = _RATE.search(text or "")
    return float(match.group(1)) if match else None


def _counters(port_dir: Path) -> tuple[dict[str, int], list[str]]:
    counters: dict[str, int] = {}
    unreadable: list[str] = []
    for folder in ("counters", "hw_counters"):
        directory = port_dir / folder
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            value = _read(path)
            if value is None or not value.isdigit():
                unreadable.append(f"{folder}/{path.name}")
            else:
                counters.setdefault(path.name, int(value))
    return counters, unreadable


class InfinibandCollector:
    """One IbPortReading dict per HCA port found under ``root``."""

    name = "infiniband"

    def __init__(self, root: Path = SYSFS_ROOT):
        self.root = Path(root)

    def commit(self) -> None:
        """Nothing to move: sysfs is read fresh each cycle."""

    def collect(self) -> Contribution:
        if not self.root.exists():  # no HCA driver loaded: a node without InfiniBand
            return Contribution(fields={"ib_ports": []})
        try:
            devices = sorted(p for p in self.root.iterdir() if (p / "ports").is_dir())
        except OSError as exc:
            raise CollectorError(f"cannot list {self.root}: {exc}") from exc
        ports: list[dict[str, Any]] = []
        notes: dict[str, str] = {}
        for device in devices:
            for port_dir in sorted((device / "ports").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
                if port_dir.name.isdigit():
                    ports.append(self._port(device.name, port_dir, notes))
        return Contribution(fields={"ib_ports": ports}, notes=notes)

    def _port(self, device: str, port_dir: Path, notes: dict[str, str]) -> dict[str, Any]:
        counters, unreadable = _counters(port_dir)
        if unreadable:
            notes[f"infiniband.{device}/{port_dir.name}"] = "unreadable counters: " + ", ".join(unreadable)[:1900]
        port: dict[str, Any] = {
            "device": device,
            "port": int(port_dir.name),
            "state": _after_colon(_read(port_dir / "state")),
            "phys_state": _after_colon(_read(port_dir / "phys_state")),
            "rate_gbps": parse_rate(_read(port_dir / "rate")),
            "link_layer": _read(port_dir / "link_layer"),
            "counters": counters,
        }
        return {key: value for key, value in port.items() if value is not None}

"""XID (GPU) and SXID (NVSwitch) events from the kernel log.

Sources, in order of preference:

* ``/dev/kmsg``: one record per read, ``priority,seq,timestamp_us,flags;message``
  (Documentation/ABI/testing/dev-kmsg). ``seq`` is the kernel's record number, so a
  persisted ``(boot_id, seq)`` cursor lets a restarted agent skip what it already
  reported, and a jump in ``seq`` tells it the ring buffer overwrote records unread.
* ``journalctl -k -o json`` when /dev/kmsg cannot be opened (containers, hardening);
  its ``__CURSOR`` is the resume point.

Only records the kernel itself logged can be events: user space may write anything to
/dev/kmsg (a script echoing an Xid line it saw, a drill), and those records carry the
facility the writer named or LOG_USER, never LOG_KERN (0), which the kernel keeps for
its own messages (devkmsg_write). So a /dev/kmsg record counts only with facility 0 and
a journal entry only with ``_TRANSPORT=kernel`` and ``SYSLOG_FACILITY=0`` (journald files
user-space /dev/kmsg writes under the kernel transport too, with their own facility).
Of those, only lines the NVIDIA drivers print as events are kept, matched from the
start of the message; everything else is ignored.
The cursor moves in :meth:`KmsgCollector.commit`, after the report holding the events
is on disk, so a crash can repeat events (each carries ``kmsg_seq``) but never loses them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util import atomic_write_json, clip, read_json, utc_iso
from . import CollectorError, Contribution

log = logging.getLogger(__name__)

MAX_EVENTS_PER_REPORT = 1000  # telemetry.schema.MAX_XID_EVENTS
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")

LOG_KERN = 0  # syslog facility of the kernel's own messages

# The driver's format (open-gpu-kernel-modules, kernel_rc.c), anchored at the start of the
# message so that text quoting an Xid line is not one:
#   "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
#   "NVRM: Xid (PCI:0000:9a:00 GPU-I:05 GPU-CI:02): 43, pid=1234, name=python3, Ch 00000008" (MIG)
#   "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: ..."  (pid without name)
# Drivers before R470 print no pid/name; very old ones omit "PCI:". The domain can be non-zero.
_XID = re.compile(
    r"^NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)(?: GPU-I:\d+)?(?: GPU-CI:\d+)?\): "
    r"(?P<xid>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PID_NAME = re.compile(r"pid=(?P<pid>'?<unknown>'?|\d+)(?:, name=(?P<name>.*?))?,\s*(?P<msg>.*)$")
# "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 46 egress ... (First)".
# The driver follows each SXid with detail lines ("12028, Severity 0 Engine ...",
# "12028, Data {...}") that carry no Fatal/Non-fatal word: they are not new events.
_SXID = re.compile(
    r"^nvidia-nvswitch\d*: SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+), "
    r"(?P<msg>(?:Fatal|Non-fatal)\b.*)$",
    re.IGNORECASE,
)
# XID 154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)". The
# number is nvmlGpuRecoveryAction_t (1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and
# reset, ...) and the bracketed text its name for people; the number is what the portal acts on.
XID_RECOVERY_ACTION_CHANGED = 154
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x(?P<value>[0-9A-Fa-f]+)", re.IGNORECASE)


def parse_nvidia_event(message: str) -> dict[str, Any] | None:
    """XidEvent fields (without time and cursor) from one kernel message, or None."""
    match = _XID.match(message)
    if match:
        event: dict[str, Any] = {"kind": "xid", "xid": int(match["xid"]), "pci_bus_id": match["pci"]}
        rest = match["rest"] or ""
        detail = _PID_NAME.match(rest)
        if detail:
            event["pid"] = int(detail["pid"]) if detail["pid"].isdigit() else None
            event["process"] = None if detail["name"] in (None, "<unknown>") else detail["name"]
            event["message"] = detail["msg"].strip()
        else:
            event["message"] = rest.strip()
        if event["xid"] == XID_RECOVERY_ACTION_CHANGED:
            recovery = _RECOVERY.search(event["message"])
            if recovery:
                event["recovery_action"] = int(recovery["value"], 16)
        return event
    match = _SXID.match(message)
    if match:
        return {"kind": "sxid", "xid": int(match["xid"]), "pci_bus_id": match["pci"], "message": match["msg"].strip()}
    return None


@dataclass
class KernelLine:
    """One kernel log message with its wall-clock time and resume position."""

    message: str
    observed_at: float  # epoch seconds
    position: Any  # kmsg seq (int) or journal cursor (str)
    seq: int | None = None
    from_kernel: bool = False  # logged by the kernel itself, not written into the log by user space


def parse_kmsg_record(record: str, boot_time: float) -> KernelLine | None:
    """``6,1234,5678901234,-;message`` (continuation lines " KEY=value" are dropped).

    The first field is ``(facility << 3) | level``: facility 0 is the kernel's own record."""
    header, sep, rest = record.partition(";")
    if not sep:
        return None
    parts = header.split(",")
    try:
        priority, seq, usec = int(parts[0]), int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return None
    message = rest.split("\n", 1)[0]
    return KernelLine(
        message=message,
        observed_at=boot_time + usec / 1e6,
        position=seq,
        seq=seq,
        from_kernel=priority >> 3 == LOG_KERN,
    )


def default_boot_time() -> float:
    """Wall-clock time of boot, as ``dmesg -T`` computes it (CLOCK_BOOTTIME)."""
    clock = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
    return time.time() - time.clock_gettime(clock)


class DevKmsgSource:
    """Follows /dev/kmsg (or any file of kmsg records, one per line) through an open fd."""

    kind = "kmsg"

    def __init__(self, path: str = "/dev/kmsg", boot_time: Callable[[], float] = default_boot_time):
        self.path, self._boot_time = path, boot_time
        self._fd: int | None = None
        self._buffer = b""
        self.overwritten = 0  # times the kernel said records were lost (EPIPE)

    def open(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._buffer = None, b""

    def _chunks(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = os.read(self._fd, 65536)  # /dev/kmsg: one whole record per read
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them
                    self.overwritten += 1
                    continue
                raise
            if not chunk:
                return
            yield chunk

    def read(self, after: Any) -> Iterator[KernelLine]:
        self.open()
        boot_time = self._boot_time()
        for chunk in self._chunks():
            self._buffer += chunk
            *records, self._buffer = self._buffer.split(b"\n")
            for raw in records:
                if raw[:1] in (b" ", b""):  # " SUBSYSTEM=pci" dictionary continuation
                    continue
                line = parse_kmsg_record(raw.decode(errors="replace"), boot_time)
                if line and (after is None or line.seq > after):
                    yield line


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def run_command(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _journal_message(entry: dict[str, Any]) -> str:
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):  # journald sends non-UTF-8 messages as a byte array
        message = bytes(message).decode(errors="replace")
    return message


def journal_entry_from_kernel(entry: dict[str, Any]) -> bool:
    """The kernel logged this entry: journald's trusted ``_TRANSPORT`` says it came from
    /dev/kmsg and ``SYSLOG_FACILITY`` that it was not a user-space write to /dev/kmsg."""
    return entry.get("_TRANSPORT") == "kernel" and str(entry.get("SYSLOG_FACILITY")) == str(LOG_KERN)


class JournalSource:
    """``journalctl -k -o json`` from the last cursor (all boots) or this boot's start."""

    kind = "journal"

    def __init__(self, runner: Runner = run_command, timeout: float = 30.0):
        self.runner, self.timeout = runner, timeout

    def read(self, after: Any) -> Iterator[KernelLine]:
        argv = ["journalctl", "-k", "-o", "json", "--no-pager"]
        argv += [f"--after-cursor={after}"] if after else ["-b"]
        done = self.runner(argv, timeout=self.timeout)
        if done.returncode != 0:
            raise CollectorError(f"journalctl exited {done.returncode}: {done.stderr.strip()[:300]}")
        for text in done.stdout.splitlines():
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            yield KernelLine(
                message=_journal_message(entry),
                position=entry.get("__CURSOR"),
                observed_at=int(entry.get("__REALTIME_TIMESTAMP", 0)) / 1e6,
                from_kernel=journal_entry_from_kernel(entry),
            )

    def close(self) -> None:
        """Nothing held open."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class KmsgCollector:
    """Collects NVIDIA events from a kernel log source and keeps the resume cursor."""

    name = "kmsg"

    def __init__(
        self,
        source: Any,
        state_dir: Path,
        boot_id: Callable[[], str] = read_boot_id,
        max_events: int = MAX_EVENTS_PER_REPORT,
    ):
        self.source, self.boot_id, self.max_events = source, boot_id, max_events
        self.cursor_path = Path(state_dir) / f"{source.kind}-cursor.json"
        self._pending: list[dict[str, Any]] = []  # read, not yet put into a report
        self._read_position: Any = None
        self._to_commit: Any = None
        self._lost_seen = 0

    def _committed_position(self, boot: str) -> Any:
        cursor = read_json(self.cursor_path, {}) or {}
        if self.source.kind == "kmsg" and cursor.get("boot_id") != boot:
            return None  # a new boot numbers its records from 0 again: read it all
        return cursor.get("position")

    def collect(self) -> Contribution:
        boot = self.boot_id()
        committed = self._committed_position(boot)
        after = self._read_position if self._read_position is not None else committed
        notes: dict[str, str] = {}
        not_kernel = 0
        try:
            for line in self.source.read(after):
                self._note_gap(after, line, notes)
                after = self._read_position = line.position
                event = parse_nvidia_event(line.message)
                if event and not line.from_kernel:
                    not_kernel += 1  # user space wrote it: text, not an event
                elif event:
                    self._pending.append(_event(event, line))
        except OSError as exc:
            raise CollectorError(f"{self.source.kind}: {exc}") from exc
        if not_kernel:
            log.warning("ignored %d NVIDIA event lines that user space wrote to the kernel log", not_kernel)
        events, self._pending = self._pending[: self.max_events], self._pending[self.max_events :]
        self._to_commit = (boot, events[-1]["_position"] if self._pending else self._read_position)
        self._note_overwrites(notes)
        if self._pending:
            notes["kmsg"] = f"{len(self._pending)} more events wait for the next report"
        return Contribution(fields={"xid_events": [_public(e) for e in events]}, notes=notes)

    def _note_gap(self, after: Any, line: KernelLine, notes: dict[str, str]) -> None:
        if self.source.kind == "kmsg" and isinstance(after, int) and line.seq is not None and line.seq > after + 1:
            notes["kmsg.lost"] = f"kernel records {after + 1}..{line.seq - 1} were overwritten before they were read"

    def _note_overwrites(self, notes: dict[str, str]) -> None:
        lost = getattr(self.source, "overwritten", 0)
        if lost > self._lost_seen:
            notes.setdefault("kmsg.lost", "the kernel ring buffer overwrote records before they were read")
            self._lost_seen = lost

    def commit(self) -> None:
        """Persist the cursor: the events handed out by the last collect() are spooled."""
        if self._to_commit is None or self._to_commit[1] is None:
            return
        boot, position = self._to_commit
        atomic_write_json(self.cursor_path, {"source": self.source.kind, "boot_id": boot, "position": position})
        self._to_commit = None


def _event(parsed: dict[str, Any], line: KernelLine) -> dict[str, Any]:
    event = dict(
        parsed,
        observed_at=utc_iso(line.observed_at),
        raw=clip(line.message, 2000),
        kmsg_seq=line.seq,
        _position=line.position,
    )
    event["message"] = clip(event.get("message", ""), 2000)
    if event.get("process"):
        event["process"] = clip(event["process"], 200)
    return event


def _public(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if v is not None and not k.startswith("_")}


def default_source(state_dir: Path, kmsg_path: str = "/dev/kmsg") -> Any:
    """/dev/kmsg when it can be opened, else journalctl; CollectorError when neither."""
    source = DevKmsgSource(kmsg_path)
    try:
        source.open()
        return source
    except OSError as exc:
        log.warning("cannot open %s (%s); falling back to journalctl -k", kmsg_path, exc)
    from shutil import which

    if which("journalctl"):
        return JournalSource()
    raise CollectorError(f"cannot read {kmsg_path} and journalctl is not installed")

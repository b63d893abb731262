"""manage.py enroll_nodes FILE: enroll nodes from a CSV or YAML file.

CSV: a header row with EnrollmentRequest's field names (hostname, serial, bmc_address,
bmc_username, bmc_password, hardware_profile, site, and optionally bmc_driver,
bmc_system_id, bmc_verify_tls, cluster, rack, tenant, persona). YAML: a list of mappings
with the same keys. The BMC password may be left out of the file and given once with
--bmc-password-env NAME (read from that environment variable).

Every row is checked first (unknown fields, missing values, unknown site or profile,
duplicates in the file or in the fleet), each problem reported with its line number; if
any row is bad, nothing is enrolled. Then each row is enrolled on its own: a BMC that
cannot be read refuses that row only, and the command says which and exits non-zero.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.services import Actor
from provisioning.enrollment import EnrollmentError, EnrollmentRequest, _duplicates, _resolve, enroll

FIELDS = {f.name for f in fields(EnrollmentRequest)}
REQUIRED = ("hostname", "serial", "bmc_address", "bmc_username", "bmc_password", "hardware_profile", "site")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# A row's problems go with it: a column the file does not have, or more values than columns.
Row = tuple[int, dict[str, Any], list[str]]


def read_rows(path: Path) -> list[Row]:
    """(line number in the file, row, problems) triples; CommandError for a file that cannot be read."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets start their CSV with a BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{path}: cannot be read as UTF-8 text: {exc}") from exc
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_rows(path, text)
    try:
        return _csv_rows(text)
    except csv.Error as exc:
        raise CommandError(f"{path}: not valid CSV: {exc}") from exc


def _yaml_rows(path: Path, text: str) -> list[Row]:
    # Composed first, so each mapping's line comes from the parser (not its place in the list).
    loader = yaml.SafeLoader(text)
    try:
        document = loader.get_single_node()
        data = loader.construct_document(document) if document is not None else None
    except yaml.YAMLError as exc:
        raise CommandError(f"{path}: not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    if document is None or data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CommandError(f"{path}: expected a list of mappings, one per node.")
    return [(item.start_mark.line + 1, row, []) for item, row in zip(document.value, data, strict=True)]


def _csv_rows(text: str) -> list[Row]:
    # newline="": quoted values may hold line breaks, and line_num then counts the file's lines.
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[Row] = []
    while True:
        first_line = reader.line_num + 1  # a row may span lines: report the one it starts on
        values = next(reader, None)
        if values is None:
            return rows
        if not any(v.strip() for v in values):
            continue
        if header is None:
            header = [name.strip() for name in values]
            continue
        problems = [f"{len(values)} values for {len(header)} columns"] if len(values) > len(header) else []
        # A short row leaves its last columns out; a long one is reported above.
        rows.append((first_line, dict(zip(header, values, strict=False)), problems))


def _text(name: str, value: Any, problems: list[str]) -> Any:
    """A value as the text a CSV cell would hold (YAML reads a serial written 12345 as a number)."""
    if name == "bmc_verify_tls":
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word not in TRUE + FALSE:
            problems.append(f"bmc_verify_tls {value!r} is not one of true, false")
        return word in TRUE
    if isinstance(value, (list, dict)):
        problems.append(f"{name} must be a single value")
        return ""
    return str(value).strip()


def to_request(row: dict[str, Any], password: str | None) -> tuple[EnrollmentRequest | None, list[str]]:
    """The row as an EnrollmentRequest (None without its required values), and what is wrong with it.

    A row with an unknown column or a bad value still gives its request, so that it is checked
    against the fleet and the other rows too: every problem of a file is reported at once.
    """
    unknown = sorted(str(k) for k in set(row) - FIELDS)
    problems = [f"unknown column(s) {', '.join(unknown)}"] if unknown else []
    # An empty cell means "not given": the field's default (verify TLS: yes), never False.
    values = {k: _text(k, v, problems) for k, v in row.items() if k in FIELDS and v not in (None, "")}
    if password is not None and not values.get("bmc_password"):
        values["bmc_password"] = password
    missing = [name for name in REQUIRED if not values.get(name)]
    problems += [f"{name} is required" for name in missing]
    return (None if missing else EnrollmentRequest(**values)), problems


class Command(BaseCommand):
    help = "Enroll nodes from a CSV or YAML file (see the module docstring for the columns)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--bmc-password-env", help="Environment variable holding the BMC password for all rows.")
        parser.add_argument("--no-start", action="store_true", help="Enroll only; do not start Day 0.")
        parser.add_argument("--reason", default="Enrolled from an import file")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.exists():
            raise CommandError(f"{path}: no such file.")
        password = os.environ.get(options["bmc_password_env"]) if options["bmc_password_env"] else None
        if options["bmc_password_env"] and password is None:
            raise CommandError(f"Environment variable {options['bmc_password_env']} is not set.")
        requests, problems = self._check(read_rows(path), password)
        if problems:
            raise CommandError("Nothing was enrolled:\n" + "\n".join(problems))
        actor, failed = Actor.system("import"), 0
        for line, req in requests:
            try:
                node = enroll(
                    req,
                    actor=actor,
                    reason=f"{options['reason']} ({path.name}, line {line})",
                    start=not options["no_start"],
                )
            except EnrollmentError as exc:
                failed += 1
                self.stderr.write(f"line {line}: {req.hostname}: {exc}")
            else:
                self.stdout.write(f"line {line}: enrolled {node.hostname} (id {node.pk})")
        if failed:
            raise CommandError(f"{failed} of {len(requests)} node(s) were not enrolled (see above).")

    def _check(self, rows: list[Row], password: str | None) -> tuple[list[tuple[int, EnrollmentRequest]], list[str]]:
        """Every row checked against the fleet and the rows above it; nothing is enrolled if any is bad."""
        requests: list[tuple[int, EnrollmentRequest]] = []
        problems: list[str] = []
        seen: dict[tuple[str, str], int] = {}
        for line, row, row_problems in rows:
            req, bad = to_request(row, password)
            row_problems = row_problems + bad
            if req is not None:  # checked even with problems: every problem of the file at once
                _found, errors = _resolve(req)
                for name, messages in _duplicates(req).items():
                    errors.setdefault(name, []).extend(messages)
                row_problems += [f"{k}: {' '.join(v)}" for k, v in errors.items()]
                row_problems += self._repeats(req, line, seen)
            if row_problems or req is None:
                problems.append(f"line {line}: " + "; ".join(row_problems))
            else:
                requests.append((line, req))
        if not rows:
            problems.append("the file lists no node")
        return requests, problems

    @staticmethod
    def _repeats(req: EnrollmentRequest, line: int, seen: dict[tuple[str, str], int]) -> list[str]:
        """Values an earlier row of the file already claims. One BMC serves every bay of a
        multi-node chassis: the BMC repeats only with the same system id too."""
        keys = {
            "serial": req.serial,
            "hostname": req.hostname.lower(),
            "bmc_address": f"{req.bmc_address} {req.bmc_system_id}",
        }
        found = []
        for key, value in keys.items():
            if (key, value) in seen:
                shown = req.bmc_address if key == "bmc_address" else getattr(req, key)
                found.append(f"{key} {shown!r} repeats line {seen[key, value]}")
            seen.setdefault((key, value), line)
        return found

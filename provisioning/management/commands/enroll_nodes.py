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
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.services import Actor
from provisioning.enrollment import EnrollmentError, EnrollmentRequest, _duplicates, _resolve, enroll

FIELDS = {f.name for f in fields(EnrollmentRequest)}


def read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) pairs; CommandError for a file that cannot be parsed at all."""
    text = path.read_text()
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text) or []
        except yaml.YAMLError as exc:
            raise CommandError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise CommandError(f"{path}: expected a list of mappings, one per node.")
        return [(i + 1, row) for i, row in enumerate(data)]
    reader = csv.DictReader(text.splitlines())
    return [(reader.line_num, row) for row in reader]


def to_request(row: dict[str, Any], password: str | None) -> tuple[EnrollmentRequest | None, list[str]]:
    unknown = sorted(set(row) - FIELDS)
    problems = [f"unknown column(s) {', '.join(map(str, unknown))}"] if unknown else []
    values = {k: ("" if v is None else v) for k, v in row.items() if k in FIELDS}
    if password is not None and not values.get("bmc_password"):
        values["bmc_password"] = password
    for name in ("hostname", "serial", "bmc_address", "bmc_username", "bmc_password", "hardware_profile", "site"):
        if not str(values.get(name, "")).strip():
            problems.append(f"{name} is required")
    if "bmc_verify_tls" in values and isinstance(values["bmc_verify_tls"], str):
        values["bmc_verify_tls"] = values["bmc_verify_tls"].strip().lower() not in ("0", "false", "no", "")
    if problems:
        return None, problems
    return EnrollmentRequest(**{k: (v.strip() if isinstance(v, str) else v) for k, v in values.items()}), []


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
                node = enroll(req, actor=actor, reason=f"{options['reason']} ({path.name}, line {line})",
                              start=not options["no_start"])
            except EnrollmentError as exc:
                failed += 1
                self.stderr.write(f"line {line}: {req.hostname}: {exc}")
            else:
                self.stdout.write(f"line {line}: enrolled {node.hostname} (id {node.pk})")
        if failed:
            raise CommandError(f"{failed} of {len(requests)} node(s) were not enrolled (see above).")

    def _check(self, rows: list[tuple[int, dict[str, Any]]], password: str | None
               ) -> tuple[list[tuple[int, EnrollmentRequest]], list[str]]:
        requests, problems, seen = [], [], {}
        for line, row in rows:
            req, row_problems = to_request(row, password)
            if req is not None:
                _found, errors = _resolve(req)
                errors.update(_duplicates(req))
                row_problems += [f"{k}: {' '.join(v)}" for k, v in errors.items()]
                for key in ("serial", "hostname", "bmc_address"):
                    value = getattr(req, key)
                    if (key, value) in seen:
                        row_problems.append(f"{key} {value!r} repeats line {seen[key, value]}")
                    seen.setdefault((key, value), line)
            if row_problems:
                problems.append(f"line {line}: " + "; ".join(row_problems))
            elif req is not None:
                requests.append((line, req))
        if not rows:
            problems.append("the file lists no node")
        return requests, problems

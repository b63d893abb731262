"""The portal's REST permissions are one small vocabulary (nodes/permissions.py): no app grows its
own copy of "staff only" or "writes need the operate permission" again."""

from __future__ import annotations

import ast
from pathlib import Path

from django.urls import URLPattern, URLResolver, get_resolver

import nodes.permissions

ROOT = Path(__file__).resolve().parents[2]
APPS = ("nodewarden", "fleet", "nodes", "checks", "fabric", "telemetry", "health", "bmc", "provisioning")
APPS += ("validation", "schedulers", "repairs", "remediation", "trends", "reports", "audit", "feeds")


def _is_drf_permission(base: str) -> bool:
    # rest_framework's classes (BasePermission, permissions.IsAuthenticated, ...), not PermissionError
    return base.endswith("BasePermission") or base.startswith(("permissions.", "rest_framework.permissions."))


def permission_classes_defined(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(_is_drf_permission(ast.unparse(base)) for base in node.bases)
    ]


def test_only_nodes_permissions_defines_permission_classes():
    elsewhere = {
        f"{path.relative_to(ROOT)}: {name}"
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if path != Path(nodes.permissions.__file__)
        for name in permission_classes_defined(path)
    }
    assert not elsewhere, f"define permissions in nodes/permissions.py: {sorted(elsewhere)}"


def views(patterns: list[URLPattern | URLResolver]) -> list[type]:
    found = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += views(pattern.url_patterns)
        else:
            cls = getattr(pattern.callback, "cls", None)
            if cls is not None:
                found.append(cls)
    return found


def test_every_api_view_uses_the_shared_classes():
    foreign = {
        f"{view.__module__}.{view.__name__}: {cls.__module__}.{cls.__name__}"
        for view in views(get_resolver().url_patterns)
        for cls in getattr(view, "permission_classes", ())
        if cls.__module__ not in ("nodes.permissions", "rest_framework.permissions")
    }
    assert not foreign, sorted(foreign)

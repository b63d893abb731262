"""The playground lives apart: the product's settings and package list name no sandbox app.

(bin/test's "wheel" step goes further: it installs the built wheel without this repository and
starts Django from it. Here, the fast part of the same rule.)
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import nodewarden.settings as product
import sandbox.settings

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_APPS = {"sandbox", "sandbox.simulator", "simulator"}


def test_the_products_settings_install_no_sandbox_app():
    assert not SANDBOX_APPS & set(product.INSTALLED_APPS)


def test_the_sandbox_settings_are_the_products_plus_its_apps():
    assert sandbox.settings.INSTALLED_APPS[: len(product.INSTALLED_APPS)] == product.INSTALLED_APPS
    assert set(sandbox.settings.INSTALLED_APPS) - set(product.INSTALLED_APPS) == {"sandbox", "sandbox.simulator"}


def test_the_wheel_packages_and_runtime_dependencies_leave_the_sandbox_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [p for p in include if p.startswith(("sandbox", "simulator", "tests", "bench"))]
    runtime = " ".join(project["project"]["dependencies"])
    for demo_only in ("time-machine", "sushy-tools", "kmock", "bcrypt"):
        assert demo_only not in runtime and any(
            d.startswith(demo_only) for d in project["project"]["optional-dependencies"]["demo"]
        )

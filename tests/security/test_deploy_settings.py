"""`manage.py check --deploy` is clean under the production environment docs/production.md
documents (deploy/production.env.example, the same file bin/serve's comments point at), and the
settings refuse malformed security values at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "production.env.example"


def documented_environment() -> dict[str, str]:
    """The example's NAME=value lines, with the placeholders a deployment would fill in."""
    env: dict[str, str] = {}
    for line in EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name.strip()] = value.strip()
    return env


def run_manage(*args: str, extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            (
                "NODEWARDEN_",
                "SECURE_",
                "DATABASE_URL",
                "REDIS_URL",
                "CELERY_",
                "SECRET_KEY",
                "DEBUG",
                "ALLOWED_HOSTS",
                "CSRF_",
                "SESSION_",
                "DJANGO_ALLOW_ASYNC_UNSAFE",
            )
        )
    }  # the browser tests' conftest sets it
    env.update({"NODEWARDEN_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    env.update(extra)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_the_documented_production_environment(tmp_path):
    env = documented_environment()
    secret = tmp_path / "secret_key"
    secret.write_text("x7Jq2-" + "".join(chr(65 + (i * 7) % 26) + str(i % 10) for i in range(40)))
    env["SECRET_KEY_FILE"] = str(secret)
    # Secrets files are read at start-up (a missing one stops it): the example's paths are /etc's.
    token = tmp_path / "metrics_token"
    token.write_text("scrape-token\n")
    env["NODEWARDEN_METRICS_TOKEN_FILE"] = str(token)
    env["NODEWARDEN_VAR_DIR"], env["STATIC_ROOT"] = str(tmp_path / "var"), str(tmp_path / "static")  # not /var/lib
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", extra=env, tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_without_the_production_environment_check_deploy_complains(tmp_path):
    """The check above can fail: the defaults (the demo's) are not a deployment."""
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", extra={}, tmp_path=tmp_path)
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W009", "security.W012", "security.W016"):
        assert warning in result.stdout + result.stderr


def test_the_example_names_every_production_setting():
    env = documented_environment()
    for name in (
        "DATABASE_URL",
        "REDIS_URL",
        "SECRET_KEY_FILE",
        "ALLOWED_HOSTS",
        "CSRF_TRUSTED_ORIGINS",
        "NODEWARDEN_HTTPS",
        "NODEWARDEN_SECURE_PROXY",
        "NODEWARDEN_TRUSTED_PROXIES",
        "NODEWARDEN_REQUIRE_SECRET_KEY",
    ):
        assert name in env, name
    assert env.get("DEBUG", "0") in ("0", "false")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NODEWARDEN_HTTPS", "maybe"),
        ("SECURE_HSTS_SECONDS", "a year"),
        ("NODEWARDEN_TRUSTED_PROXIES", "-1"),
        ("NODEWARDEN_METRICS_NETWORKS", "10.0.0.0/33"),
        ("NODEWARDEN_TOKEN_FAILURE_RATE", "lots"),
        ("NODEWARDEN_LOGIN_FAILURE_LIMIT", "0"),
        ("NODEWARDEN_API_DOCS", "sometimes"),
    ],
)
def test_a_malformed_security_setting_stops_start_up(tmp_path, name, value):
    result = run_manage("check", extra={name: value}, tmp_path=tmp_path)
    assert result.returncode != 0
    assert name in result.stderr and "ImproperlyConfigured" in result.stderr


def test_api_docs_public_serves_the_schema_to_anyone(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.SPECTACULAR_SETTINGS['SERVE_PERMISSIONS'])"
    )
    env = {"NODEWARDEN_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "nodewarden.settings"}
    for docs, permission in (("public", "AllowAny"), ("authenticated", "IsAuthenticated")):
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env, "NODEWARDEN_API_DOCS": docs},
        )
        assert permission in result.stdout, result.stderr

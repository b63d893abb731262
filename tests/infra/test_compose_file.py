"""docker-compose.yml and the Dockerfile, checked without Docker.

No Docker engine exists on the development machines or in CI, so nothing here
starts a container. Instead the Compose file is validated against the Compose
Specification's JSON schema (the copy check-jsonschema vendors), and then read
like a reviewer would: every service can be built or pulled, waits for what it
needs, sets the settings nodewarden/settings.py reads, and runs the right command.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from importlib import resources
from typing import Any

import dj_database_url
import jsonschema
import pytest
import yaml
from django.conf import settings
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from nodewarden.celery import QUEUE_NAMES
from tests.conftest import IN_CI

ROOT = settings.BASE_DIR
APP_SERVICES = ("web", "ingest", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def command_of(service: dict[str, Any]) -> str:
    command = service.get("command", "")
    return command if isinstance(command, str) else shlex.join(command)


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the "NAME=value" list form
        env = dict(item.split("=", 1) for item in env)
    return env


def project_dependencies() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {re.split(r"[\[<>=!~ ;]", dep, maxsplit=1)[0].lower() for dep in pyproject["project"]["dependencies"]}


def test_the_compose_file_follows_the_compose_specification(compose):
    try:
        schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    except ModuleNotFoundError:
        message = "the Compose schema comes with check-jsonschema, which is not installed (pyproject [test] extra)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_every_service_can_be_built_or_pulled(services):
    for name, service in services.items():
        assert "image" in service or "build" in service, name
    assert services["postgres"]["image"] == "postgres:15"
    assert services["redis"]["image"] == "redis:7"


def test_services_wait_for_healthy_dependencies_that_exist(services):
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck to wait for"
    for name in APP_SERVICES:
        assert {"postgres", "redis"} <= set(services[name]["depends_on"]), name
    # Worker and beat start only once web has migrated the schema.
    assert "web" in services["worker"]["depends_on"] and "web" in services["beat"]["depends_on"]


def test_the_app_services_set_the_settings_the_app_reads(services):
    settings_source = (ROOT / "nodewarden" / "settings.py").read_text()
    read_by_settings = set(re.findall(r'\benv(?:\.\w+)?\(\s*"([A-Z0-9_]+)"', settings_source))
    postgres_env = env_of(services["postgres"])
    for name in APP_SERVICES:
        env = env_of(services[name])
        assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ALLOWED_HOSTS"} <= set(env), name
        assert set(env) <= read_by_settings, f"{name} sets variables no setting reads: {set(env) - read_by_settings}"

        database = dj_database_url.parse(env["DATABASE_URL"])
        assert database["ENGINE"] == "django.db.backends.postgresql"
        assert (database["HOST"], database["PORT"]) == ("postgres", 5432)
        assert (database["NAME"], database["USER"]) == (postgres_env["POSTGRES_DB"], postgres_env["POSTGRES_USER"])
        assert env["REDIS_URL"].startswith("redis://redis:6379/")


def test_the_worker_listens_on_every_queue(services):
    command = shlex.split(command_of(services["worker"]))
    assert command[:4] == ["celery", "-A", "nodewarden", "worker"]
    queues = command[command.index("--queues") + 1].split(",")
    assert sorted(queues) == sorted(QUEUE_NAMES)


def test_beat_runs_the_celery_scheduler(services):
    assert command_of(services["beat"]).startswith("celery -A nodewarden beat")
    # Beat keeps its schedule file in NODEWARDEN_VAR_DIR; a volume keeps it across restarts.
    var_dir = env_of(services["beat"])["NODEWARDEN_VAR_DIR"]
    assert any(volume.split(":")[1] == var_dir for volume in services["beat"]["volumes"])


def test_web_migrates_then_serves_on_the_published_port(services):
    web = services["web"]
    command = command_of(web)
    assert command.index("manage.py migrate") < command.index("gunicorn")
    bind_port = re.search(r"--bind 0\.0\.0\.0:(\d+)", command).group(1)
    # Published on the host's loopback only, onto the port gunicorn binds in the container.
    assert web["ports"] == [f"127.0.0.1:8000:{bind_port}"]
    for name in ("postgres", "redis", "worker", "beat"):
        assert "ports" not in services[name], f"{name} must not be reachable from outside"


def test_ingest_serves_the_ingest_app_over_rsgi_once_web_has_migrated(services):
    ingest = services["ingest"]
    command = shlex.split(command_of(ingest))
    assert command[:3] == ["granian", "--interface", "rsgi"] and command[-1] == "nodewarden.asgi_ingest:application"
    assert ingest["ports"] == [f"127.0.0.1:8001:{command[command.index('--port') + 1]}"]  # loopback only
    assert ingest["depends_on"]["web"] == {"condition": "service_healthy"}


def test_every_program_the_services_run_is_installed_by_the_image(services):
    installed = project_dependencies()
    for name in APP_SERVICES:
        command = command_of(services[name])
        for program in ("gunicorn", "granian", "celery"):
            if re.search(rf"(^|\s){program}\s", command):
                assert program in installed, f"{name} runs {program}, which pyproject.toml does not install"


def test_the_image_is_built_from_the_python_the_project_supports():
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM python:(\d+\.\d+)-slim\s*$", dockerfile, re.MULTILINE)
    assert base, "the image starts FROM python:X.Y-slim"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version(base.group(1)) in SpecifierSet(requires)
    assert re.search(r"^RUN pip install \.", dockerfile, re.MULTILINE)

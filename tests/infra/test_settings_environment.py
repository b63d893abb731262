"""Every environment variable the documentation names reaches its setting, every variable
nodewarden/settings.py reads is documented, malformed values stop start-up naming the variable,
and no product module reads the environment behind the settings' back.

The documentation is README.md plus docs/**/*.md (the configuration reference may move between
them). A variable documented there and missing from WIRED fails the test: a new paragraph cannot
promise a knob that nothing turns. settings.py is loaded in-process from the file (a fresh module,
not django.conf.settings) with the test's environment, so each load is milliseconds.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import pytest
from django.core.exceptions import ImproperlyConfigured

from nodewarden.env import Env

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_PY = ROOT / "nodewarden" / "settings.py"
RAISES = object()  # the row's variable is a start-up guard: setting it makes loading fail


class Wired(NamedTuple):
    setting: str  # a Python expression over the settings module's names
    sample: str  # a non-default value; "{tmp}" is the test's temporary folder
    expected: Any  # what the expression then gives (RAISES: loading fails)
    bad: str | None = None  # a malformed value, refused at start-up naming the variable
    extra: dict[str, str] | None = None  # other variables the row needs


HASH = "sha256:" + "ab" * 32
WIRED: dict[str, Wired] = {
    # --- core
    "DATABASE_URL": Wired('DATABASES["default"]["NAME"]', "postgresql://u:p@db.example:5432/fleet", "fleet"),
    "DB_CONN_MAX_AGE": Wired(
        'DATABASES["default"]["CONN_MAX_AGE"]', "0", 0, "soon", {"DATABASE_URL": "postgresql://u@db.example/fleet"}
    ),
    "REDIS_URL": Wired(
        'CACHES["default"].get("LOCATION")', "redis://cache.example:6379/0", "redis://cache.example:6379/0"
    ),
    "CELERY_BROKER_URL": Wired("CELERY_BROKER_URL", "redis://broker.example/1", "redis://broker.example/1"),
    "CELERY_TASK_ALWAYS_EAGER": Wired("CELERY_TASK_ALWAYS_EAGER", "true", True, "sometimes"),
    "SECRET_KEY": Wired("SECRET_KEY", "k" * 50, "k" * 50),
    "DEBUG": Wired("DEBUG", "1", True, "verbose"),
    "ALLOWED_HOSTS": Wired("ALLOWED_HOSTS", "a.example, b.example", ["a.example", "b.example"]),
    "CSRF_TRUSTED_ORIGINS": Wired("CSRF_TRUSTED_ORIGINS", "https://a.example", ["https://a.example"]),
    "NODEWARDEN_VAR_DIR": Wired("str(VAR_DIR)", "{tmp}/elsewhere", "{tmp}/elsewhere"),
    "STATIC_ROOT": Wired("str(STATIC_ROOT)", "{tmp}/static", "{tmp}/static"),
    "PORTAL_URL": Wired("PORTAL_URL", "https://portal.example", "https://portal.example"),
    "LOG_LEVEL": Wired('LOGGING["root"]["level"]', "DEBUG", "DEBUG"),
    # --- telemetry and the REST API
    "TELEMETRY_RAW_RETENTION_DAYS": Wired("TELEMETRY_RAW_RETENTION_DAYS", "3", 3, "two weeks"),
    "TELEMETRY_REPORT_RETENTION_DAYS": Wired("TELEMETRY_REPORT_RETENTION_DAYS", "30", 30, "0"),
    "TELEMETRY_XID_RETENTION_DAYS": Wired("TELEMETRY_XID_RETENTION_DAYS", "400", 400, "-1"),
    "TELEMETRY_HOURLY_RETENTION_DAYS": Wired("TELEMETRY_HOURLY_RETENTION_DAYS", "100", 100, "x"),
    "TELEMETRY_DAILY_RETENTION_DAYS": Wired("TELEMETRY_DAILY_RETENTION_DAYS", "400", 400, "0"),
    "TELEMETRY_MAX_BODY_BYTES": Wired("TELEMETRY_MAX_BODY_BYTES", "1000", 1000, "8MiB"),
    "NODEWARDEN_REPORT_MAX_FUTURE_SECONDS": Wired("NODEWARDEN_REPORT_MAX_FUTURE_SECONDS", "30", 30, "5m"),
    "NODEWARDEN_INGEST_GROUP_WAIT_MS": Wired("NODEWARDEN_INGEST_GROUP_WAIT_MS", "0", 0, "-1"),
    "NODEWARDEN_INGEST_GROUP_MAX": Wired("NODEWARDEN_INGEST_GROUP_MAX", "50", 50, "0"),
    "NODEWARDEN_INGEST_QUEUE_LIMIT": Wired("NODEWARDEN_INGEST_QUEUE_LIMIT", "100", 100, "lots"),
    "NODEWARDEN_INGEST_WRITERS": Wired("NODEWARDEN_INGEST_WRITERS", "2", 2, "0"),
    "NODEWARDEN_INGEST_LATEST_CACHE_NODES": Wired("NODEWARDEN_INGEST_LATEST_CACHE_NODES", "0", 0, "-1"),
    "NODEWARDEN_LIVE_REFRESH_SECONDS": Wired("NODEWARDEN_LIVE_REFRESH_SECONDS", "30", 30, "0"),
    "NODEWARDEN_API_MAX_BODY_BYTES": Wired("NODEWARDEN_API_MAX_BODY_BYTES", "2048", 2048, "2k"),
    # --- BMC
    "NODEWARDEN_BMC_KEYS": Wired("NODEWARDEN_BMC_KEYS", "k1, k2", ["k1", "k2"]),
    "NODEWARDEN_BMC_TIMEOUT": Wired("NODEWARDEN_BMC_TIMEOUT", "4", 4, "4s"),
    "NODEWARDEN_BMC_RETRIES": Wired("NODEWARDEN_BMC_RETRIES", "0", 0, "none"),
    "NODEWARDEN_BMC_RETRY_BACKOFF_MS": Wired("NODEWARDEN_BMC_RETRY_BACKOFF_MS", "50", 50, "1.5"),
    "NODEWARDEN_BMC_POWER_TIMEOUT": Wired("NODEWARDEN_BMC_POWER_TIMEOUT", "60", 60, "1m"),
    "NODEWARDEN_BMC_POLL_INTERVAL": Wired("NODEWARDEN_BMC_POLL_INTERVAL", "5", 5, "fast"),
    "NODEWARDEN_BMC_POLL_BATCH": Wired("NODEWARDEN_BMC_POLL_BATCH", "20", 20, "all"),
    "NODEWARDEN_BMC_POLL_EVERY": Wired("NODEWARDEN_BMC_POLL_EVERY", "30", 30.0, "1m"),
    "NODEWARDEN_BMC_POLL_SECONDS": Wired("NODEWARDEN_BMC_POLL_SECONDS", "20", 20.0, "1m"),
    "NODEWARDEN_BMC_POLL_TIMEOUT": Wired("NODEWARDEN_BMC_POLL_TIMEOUT", "2", 2.0, "2s"),
    # --- Day 0
    "NODEWARDEN_PORTAL_URL": Wired("NODEWARDEN_PORTAL_URL", "http://10.0.0.1:8000", "http://10.0.0.1:8000"),
    "NODEWARDEN_JOIN_TOKEN_TTL": Wired("NODEWARDEN_JOIN_TOKEN_TTL", "600", 600, "0"),
    "NODEWARDEN_AGENT_PACKAGE": Wired("NODEWARDEN_AGENT_PACKAGE", "nodewarden-agent==1.0", "nodewarden-agent==1.0"),
    "NODEWARDEN_SLURM_MUNGE_KEY_REF": Wired("NODEWARDEN_SLURM_MUNGE_KEY_REF", "vault:munge", "vault:munge"),
    "NODEWARDEN_DAY0_TIMEOUT": Wired("NODEWARDEN_DAY0_TIMEOUT", "60", 60, "2h"),
    "NODEWARDEN_KUBERNETES_CA_CERT_HASHES": Wired(
        "NODEWARDEN_KUBERNETES_CA_CERT_HASHES", json.dumps({"kube": HASH}), {"kube": HASH}, "kube=" + HASH
    ),
    # --- fabric
    "NODEWARDEN_GPU_FENCING": Wired("NODEWARDEN_GPU_FENCING", "false", False, "sometimes"),
    "NODEWARDEN_SETTLED_CACHE": Wired("NODEWARDEN_SETTLED_CACHE", "true", True, "sometimes"),
    "NODEWARDEN_FABRIC_COLLECT": Wired("NODEWARDEN_FABRIC_COLLECT", "yes", True, "maybe"),
    "NODEWARDEN_FABRIC_COLLECT_HOURS": Wired("NODEWARDEN_FABRIC_COLLECT_HOURS", "0.5", 0.5, "1x5"),
    "NODEWARDEN_FABRIC_TOOL_TIMEOUT": Wired("NODEWARDEN_FABRIC_TOOL_TIMEOUT", "30", 30, "long"),
    "NODEWARDEN_FABRIC_TOOL_ENV": Wired("NODEWARDEN_FABRIC_TOOL_ENV", '{"A": "1"}', {"A": "1"}, "{A: 1}"),
    # --- schedulers and remediation
    "NODEWARDEN_KUBERNETES_TOKENS": Wired("NODEWARDEN_KUBERNETES_TOKENS", '{"kube": "t"}', {"kube": "t"}, "kube=t"),
    "NODEWARDEN_ESCALATION_WINDOW_HOURS": Wired("NODEWARDEN_ESCALATION_WINDOW_HOURS", "12", 12, "3d"),
    "NODEWARDEN_REPEAT_INCIDENTS": Wired("NODEWARDEN_REPEAT_INCIDENTS", "2", 2, "many"),
    "NODEWARDEN_REPEAT_DAYS": Wired("NODEWARDEN_REPEAT_DAYS", "30", 30, "a week"),
    "NODEWARDEN_GPU_RESET": Wired("NODEWARDEN_GPU_RESET", "no", False, "sometimes"),
    "NODEWARDEN_REMEDIATION_STALL_SECONDS": Wired("NODEWARDEN_REMEDIATION_STALL_SECONDS", "90", 90, "2m"),
    "NODEWARDEN_BREAKER_SHARE": Wired("NODEWARDEN_BREAKER_SHARE", "0.5", 0.5, "50%"),
    "NODEWARDEN_FRESHNESS_SHARE": Wired("NODEWARDEN_FRESHNESS_SHARE", "0.5", 0.5, "1.5"),
    "NODEWARDEN_BREAKER_MIN_NODES": Wired("NODEWARDEN_BREAKER_MIN_NODES", "20", 20, "few"),
    "NODEWARDEN_BREAKER_WINDOW_SECONDS": Wired("NODEWARDEN_BREAKER_WINDOW_SECONDS", "60", 60, "10m"),
    "NODEWARDEN_WEBHOOK_MAX_ATTEMPTS": Wired("NODEWARDEN_WEBHOOK_MAX_ATTEMPTS", "3", 3, "three"),
    "NODEWARDEN_FEED_INTERVAL_SECONDS": Wired('CELERY_BEAT_SCHEDULE["deliver-events"]["schedule"]', "2", 2.0, "0"),
    "NODEWARDEN_FEED_BATCH": Wired("NODEWARDEN_FEED_BATCH", "10", 10, "-1"),
    "NODEWARDEN_FEED_RETRY_SECONDS": Wired("NODEWARDEN_FEED_RETRY_SECONDS", "30", 30, "soon"),
    "NODEWARDEN_FEED_MAX_ATTEMPTS": Wired("NODEWARDEN_FEED_MAX_ATTEMPTS", "3", 3, "0"),
    "NODEWARDEN_FEED_PRIVATE_HOSTS": Wired("NODEWARDEN_FEED_PRIVATE_HOSTS", "hooks.lan, b.lan", ["hooks.lan", "b.lan"]),
    "NODEWARDEN_FEED_SETTLE_SECONDS": Wired("NODEWARDEN_FEED_SETTLE_SECONDS", "0", 0, "-1"),
    "NODEWARDEN_LEMON_REPAIR_SCORE": Wired("NODEWARDEN_LEMON_REPAIR_SCORE", "45", 45.0, "high"),
    "NODEWARDEN_RELEASE_BLOCKING_SEVERITY": Wired("NODEWARDEN_RELEASE_BLOCKING_SEVERITY", "warning", "warning", "bad"),
    # --- Prometheus
    "NODEWARDEN_METRICS_TOKEN": Wired("NODEWARDEN_METRICS_TOKEN", "scrape-me", "scrape-me"),
    "NODEWARDEN_METRICS_NETWORKS": Wired("[str(n) for n in NODEWARDEN_METRICS_NETWORKS]", "10.0.0.0/8", ["10.0.0.0/8"]),
    # --- Alertmanager
    "NODEWARDEN_ALERTMANAGER_URL": Wired(
        "NODEWARDEN_ALERTMANAGER_URLS",
        "http://am1.example:9093, http://am2.example:9093",
        ["http://am1.example:9093", "http://am2.example:9093"],
        "am1.example:9093",
    ),
    "NODEWARDEN_ALERTMANAGER_TIMEOUT": Wired("NODEWARDEN_ALERTMANAGER_TIMEOUT", "2.5", 2.5, "5s"),
    "NODEWARDEN_ALERTMANAGER_RESEND_SECONDS": Wired(
        'CELERY_BEAT_SCHEDULE["resend-alerts-to-alertmanager"]["schedule"]', "30", 30.0, "0"
    ),
    # --- the fleet auditor
    "NODEWARDEN_AUDIT_MINUTES": Wired("NODEWARDEN_AUDIT_MINUTES", "1", 1.0, "often"),
    "NODEWARDEN_AUDIT_SEVERITY": Wired("NODEWARDEN_AUDIT_SEVERITY", "catastrophic", "catastrophic", "high"),
    "NODEWARDEN_AUDIT_GRACE_SECONDS": Wired("NODEWARDEN_AUDIT_GRACE_SECONDS", "60", 60, "10m"),
    "NODEWARDEN_AUDIT_DRAINING_HOURS": Wired("NODEWARDEN_AUDIT_DRAINING_HOURS", "6", 6.0, "a day"),
    "NODEWARDEN_AUDIT_SCHEDULER_NODES": Wired("NODEWARDEN_AUDIT_SCHEDULER_NODES", "50", 50, "all"),
    "NODEWARDEN_AUDIT_SCHEDULER_SECONDS": Wired("NODEWARDEN_AUDIT_SCHEDULER_SECONDS", "10", 10.0, "1m"),
    "NODEWARDEN_AUDIT_BMC_READS": Wired("NODEWARDEN_AUDIT_BMC_READS", "5", 5, "some"),
    "NODEWARDEN_AUDIT_BMC_SECONDS": Wired("NODEWARDEN_AUDIT_BMC_SECONDS", "10", 10.0, "1m"),
    "NODEWARDEN_AUDIT_BMC_TIMEOUT": Wired("NODEWARDEN_AUDIT_BMC_TIMEOUT", "2.5", 2.5, "5s"),
    # --- security
    "NODEWARDEN_HTTPS": Wired(
        "(SECURE_SSL_REDIRECT, SESSION_COOKIE_SECURE, CSRF_COOKIE_SECURE, SECURE_HSTS_SECONDS,"
        " SECURE_HSTS_INCLUDE_SUBDOMAINS, SECURE_HSTS_PRELOAD)",
        "1",
        (True, True, True, 31_536_000, True, True),
        "https",
    ),
    "SECURE_SSL_REDIRECT": Wired("SECURE_SSL_REDIRECT", "1", True, "always"),
    "SESSION_COOKIE_SECURE": Wired("SESSION_COOKIE_SECURE", "1", True, "always"),
    "CSRF_COOKIE_SECURE": Wired("CSRF_COOKIE_SECURE", "1", True, "always"),
    "SECURE_HSTS_SECONDS": Wired("SECURE_HSTS_SECONDS", "3600", 3600, "1y"),
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": Wired("SECURE_HSTS_INCLUDE_SUBDOMAINS", "1", True, "all"),
    "SECURE_HSTS_PRELOAD": Wired("SECURE_HSTS_PRELOAD", "1", True, "please"),
    "NODEWARDEN_SECURE_PROXY": Wired(
        'vars().get("SECURE_PROXY_SSL_HEADER")', "1", ("HTTP_X_FORWARDED_PROTO", "https"), "nginx"
    ),
    "NODEWARDEN_TRUSTED_PROXIES": Wired('REST_FRAMEWORK["NUM_PROXIES"]', "2", 2, "one"),
    "NODEWARDEN_REQUIRE_SECRET_KEY": Wired("SECRET_KEY", "1", RAISES, "strict"),
    "NODEWARDEN_LOGIN_FAILURE_LIMIT": Wired("AXES_FAILURE_LIMIT", "3", 3, "0"),
    "NODEWARDEN_LOGIN_LOCKOUT_MINUTES": Wired("AXES_COOLOFF_TIME", "30", timedelta(minutes=30), "1h"),
    "NODEWARDEN_TOKEN_FAILURE_RATE": Wired(
        'REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failure"]', "5/hour", "5/hour", "lots"
    ),
    "NODEWARDEN_API_DOCS": Wired(
        'SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]', "public", ["rest_framework.permissions.AllowAny"], "secret"
    ),
    # --- the demo
    "NODEWARDEN_DEMO_CHURN": Wired("NODEWARDEN_DEMO_CHURN", "1", True, "lots"),
    "NODEWARDEN_DEMO_FAULT_SCALE": Wired("NODEWARDEN_DEMO_FAULT_SCALE", "10", 10.0, "x10"),
}

# Names the documentation spells like variables that are not the portal's configuration.
NOT_PORTAL_SETTINGS = {
    "NAME_FILE": "the *_FILE convention itself (tested below)",
    "SLURM_CONF": "Slurm's own variable, for running sinfo by hand",
    "NODEWARDEN_BATCH_SIZE": "the node agent's, read by agent/src/nodewarden_agent/config.py",
    "REMOTE_ADDR": "the WSGI request's address, not configuration",
    "SECURE_PROXY_SSL_HEADER": "Django's setting that NODEWARDEN_SECURE_PROXY sets",
    "NODEWARDEN_URL": "the node agent's (agent/README.md), the portal URL it reports to",
    "NODEWARDEN_TOKEN": "the node agent's (agent/README.md), its bearer token",
    "NODEWARDEN_CONFIG": "the node agent's (agent/README.md), its JSON config file",
    "NODEWARDEN_WORKLOADS": "the node agent's (agent/README.md), what its training-step check may run",
    "NODEWARDEN_CHECK_WATCH": "the node agent's (agent/README.md), how often it asks whether a running check is still wanted",
    "BIN_TEST_WORKERS": "bin/test's own (docs/development.md): pytest-xdist workers",
    "CHROMIUM_PATH": "the browser tests' own (docs/development.md): where Chromium is",
    "DJANGO_SETTINGS_MODULE": "Django's own: which settings module (nodewarden.settings or sandbox.settings)",
    "CELERY_BEAT_SCHEDULE": "a setting in nodewarden/settings.py (the beat schedule), not read from the environment",
    "NODEWARDEN_SCREENSHOT_DIR": "the browser tests' own (docs/portal.md): where page screenshots go",
    "PORTAL_PAGES": "the browser tests' list of pages (tests/browser/pages.py), not a variable",
    "RESET_GPU": "NVIDIA's name of a recovery action (docs/health.md, the XID catalog), not a variable",
}
SECRETS = ("SECRET_KEY", "NODEWARDEN_BMC_KEYS", "NODEWARDEN_METRICS_TOKEN", "NODEWARDEN_KUBERNETES_TOKENS")

_SPAN = re.compile(r"`([^`\n]+)`")
_NAME = re.compile(r"\$?([A-Z][A-Z0-9_]*)(?:=\S*)?")


def documentation() -> Iterator[tuple[Path, str]]:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if path.exists():
            yield path, path.read_text(encoding="utf-8")


def documented_names() -> dict[str, list[str]]:
    """Variable name -> its candidate spellings. Backticked names with an underscore, or any backticked
    name opening a table row; `_SUFFIX` after `NAME` on one line abbreviates NAME with its tail
    replaced (`NODEWARDEN_BMC_TIMEOUT` / `_RETRIES`): each possible prefix is a candidate."""
    names: dict[str, list[str]] = {}
    for _path, text in documentation():
        for line in text.splitlines():
            first_cell = line.lstrip().startswith("|") and line.split("|")[1]
            last = ""
            for match in _SPAN.finditer(line):
                span = match.group(1).strip()
                if span.startswith("_") and last and re.fullmatch(r"_[A-Z0-9_]+", span):
                    if span == "_FILE":
                        continue
                    parts = last.split("_")
                    candidates = ["_".join(parts[:i]) + span for i in range(len(parts) - 1, 0, -1)]
                    names.setdefault(f"{last} / {span}", candidates)
                    continue
                full = _NAME.fullmatch(span)
                if not full:
                    continue
                name = full.group(1)
                if "_" in name or (first_cell and match.group(0) in first_cell):
                    names.setdefault(name, [name])
                    last = name
    return names


def resolve(candidates: list[str]) -> str | None:
    """The wired variable a documented spelling means (NAME_FILE means NAME: every variable takes one)."""
    for name in candidates:
        base = name.removesuffix("_FILE")
        if base in WIRED or name in NOT_PORTAL_SETTINGS:
            return base if base in WIRED else name
    return None


@pytest.fixture
def load(monkeypatch, tmp_path):
    """load(**env) -> a fresh settings module under exactly the documented variables given."""
    for name in [*WIRED, *SECRETS]:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    monkeypatch.setenv("NODEWARDEN_VAR_DIR", str(tmp_path / "var"))

    def _load(**env: str) -> ModuleType:
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value.replace("{tmp}", str(tmp_path)))
            spec = importlib.util.spec_from_file_location("nodewarden._settings_under_test", SETTINGS_PY)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module

    return _load


def value(module: ModuleType, expression: str) -> Any:
    return eval(expression, {}, vars(module))  # noqa: S307 (expressions written in this file)


def test_every_documented_variable_is_wired_or_said_not_to_be_ours():
    documented = documented_names()
    assert len(documented) > 40, "the collector found no configuration reference"
    unwired = {spelled: candidates for spelled, candidates in documented.items() if resolve(candidates) is None}
    assert not unwired, f"documented but not in WIRED (wire them in nodewarden/settings.py): {unwired}"


@pytest.mark.parametrize("name", sorted(WIRED))
def test_the_variable_reaches_its_setting(name, load, tmp_path):
    row = WIRED[name]
    default = load(**(row.extra or {}))
    if row.expected is RAISES:
        with pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
            load(**{name: row.sample, **(row.extra or {})})
        return
    changed = load(**{name: row.sample, **(row.extra or {})})
    expected = row.expected.replace("{tmp}", str(tmp_path)) if isinstance(row.expected, str) else row.expected
    assert value(default, row.setting) != expected, f"{name}'s sample is its default: pick another"
    assert value(changed, row.setting) == expected


@pytest.mark.parametrize("name", sorted(name for name, row in WIRED.items() if row.bad is not None))
def test_a_malformed_value_stops_start_up_naming_the_variable(name, load):
    row = WIRED[name]
    with pytest.raises(ImproperlyConfigured, match=re.escape(name)):
        load(**{name: str(row.bad), **(row.extra or {})})


@pytest.mark.parametrize("name", SECRETS)
def test_a_secret_may_come_from_a_file(name, load, tmp_path):
    row = WIRED[name]
    secret = tmp_path / "secret"
    secret.write_text(row.sample + "\n")  # editors end files with a newline; it is not the secret's
    assert value(load(**{f"{name}_FILE": str(secret)}), row.setting) == row.expected
    with pytest.raises(ImproperlyConfigured, match=f"{name}_FILE"):
        load(**{f"{name}_FILE": str(tmp_path / "missing")})


def test_every_variable_settings_reads_is_documented(load, monkeypatch):
    read: set[str] = set()
    original = Env.get_value

    def recording(self: Env, var: str, *args: Any, **kwargs: Any) -> Any:
        read.add(var)
        return original(self, var, *args, **kwargs)

    monkeypatch.setattr(Env, "get_value", recording)
    load()
    for row in WIRED.values():  # every branch the table reaches (DB_CONN_MAX_AGE needs DATABASE_URL)
        load(**(row.extra or {}))
    documented = {resolve(candidates) for candidates in documented_names().values()}
    assert read, "the recorder saw nothing"
    assert not read - documented, f"read by nodewarden/settings.py but not documented: {sorted(read - documented)}"
    assert not set(WIRED) - read, f"in WIRED but never read: {sorted(set(WIRED) - read)}"


# --- nobody else reads the environment ----------------------------------------------------------
PRODUCT = ("nodewarden", "fleet", "nodes", "checks", "fabric", "telemetry", "health", "bmc", "provisioning")
PRODUCT += ("validation", "schedulers", "repairs", "remediation", "trends", "reports", "audit", "feeds")
# (module, what it reads) -> why it may
ALLOWED_READS = {
    ("nodewarden/env.py", "*"): "the one reader",
    ("provisioning/management/commands/enroll_nodes.py", "*"): "--bmc-password-env names the variable to read",
}


def environment_reads(path: Path) -> Iterator[tuple[int, str]]:
    """os.getenv(...), os.environ.get(...), os.environ[...] and getattr(settings, "X", default).
    Spreading os.environ into a child's environment ({**os.environ}, .items(), dict(...)) is fine."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func)
            if target in ("os.getenv", "os.environ.get"):
                arg = node.args[0] if node.args else None
                yield node.lineno, arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg or node)
        elif (
            isinstance(node, ast.Subscript)
            and ast.unparse(node.value) == "os.environ"
            and isinstance(node.ctx, ast.Load)
        ):
            yield node.lineno, ast.unparse(node.slice)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and ast.unparse(node.args[0]) == "settings"
        ):
            yield node.lineno, f"getattr(settings, {ast.unparse(node.args[1])}, <default>)"


def test_no_product_module_reads_the_environment_behind_the_settings():
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")) if (ROOT / package).is_dir() else []:
            module = path.relative_to(ROOT).as_posix()
            if module == "nodewarden/settings.py":
                continue  # everything goes through env there; the test above covers it
            for line, what in environment_reads(path):
                if (module, "*") not in ALLOWED_READS and (module, what) not in ALLOWED_READS:
                    found.append(f"{module}:{line}: {what}")
    assert not found, "read django.conf.settings instead (the default lives in settings.py):\n" + "\n".join(found)


def test_reports_are_kept_the_raw_window_unless_told_otherwise(load):
    # Issue 17: reports are raw history; their window follows the samples' by default.
    assert load(TELEMETRY_RAW_RETENTION_DAYS="3").TELEMETRY_REPORT_RETENTION_DAYS == 3
    assert load().TELEMETRY_REPORT_RETENTION_DAYS == 14
    assert (
        load(TELEMETRY_RAW_RETENTION_DAYS="3", TELEMETRY_REPORT_RETENTION_DAYS="30").TELEMETRY_REPORT_RETENTION_DAYS
        == 30
    )


def test_roll_ups_are_hourly_a_month_then_daily_a_year_and_days_never_go_before_hours(load):
    # Issue 17: a year of hourly roll-ups was 1.64 TB at 100,000 nodes; daily rows take 25x less.
    defaults = load()
    assert (defaults.TELEMETRY_HOURLY_RETENTION_DAYS, defaults.TELEMETRY_DAILY_RETENTION_DAYS) == (30, 365)
    # Hours become days at the hourly window's end: a shorter daily window would prune them at once.
    with pytest.raises(ImproperlyConfigured, match="TELEMETRY_DAILY_RETENTION_DAYS"):
        load(TELEMETRY_HOURLY_RETENTION_DAYS="90", TELEMETRY_DAILY_RETENTION_DAYS="60")

"""Django settings for Nodewarden.

Everything that differs between a laptop demo, CI and production comes from the
environment (see docs/configuration.md), read here and only here, each variable with
its type and default (nodewarden/env.py: django-environ, failing on malformed values).
App code reads ``django.conf.settings``; tests/infra/test_settings_environment.py checks
that every documented variable reaches its setting and every variable read here is
documented. With nothing set, an embedded default serves: SQLite under ./var and a
filesystem Celery broker, so the demo runs anywhere Python runs.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext
import plotly
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from .env import env


def _positive(name: str, value: float) -> None:
    """Durations, sizes and intervals: zero or less is a typo, not a wish (it would disable the rule)."""
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be positive, got {value}")


def _json_object(name: str, value: object) -> None:
    """Per-cluster (or per-variable) maps: a JSON list or string there is a mistake, said at start-up."""
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f'{name} must be a JSON object, e.g. {{"name": "value"}}')


# Lets the code write the generic types mypy checks (admin.ModelAdmin[Node], forms.ModelForm[Hold])
# at run time too: Django's own classes are not subscriptable.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
# Templates and static files ship inside the package (package data): an installed wheel finds them too.
PACKAGE_DIR = Path(__file__).resolve().parent
VAR_DIR = Path(env.str("NODEWARDEN_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env.bool("DEBUG", False)
SECRET_KEY = env.str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env.bool("NODEWARDEN_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set")
    # Development-only fallback; production deployments set SECRET_KEY (or SECRET_KEY_FILE).
    SECRET_KEY = "nodewarden-insecure-development-key"  # noqa: S105
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_fsm",
    "axes",
    "csp",
    "fleet",
    "nodes",
    "checks",
    "fabric",
    "telemetry",
    "health",
    "bmc",
    "provisioning",
    "validation",
    "schedulers",
    "repairs",
    "remediation",
    "trends",
    "reports",
    "audit",
    "feeds",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a lockout raised by its backend into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "nodewarden.urls"
WSGI_APPLICATION = "nodewarden.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PACKAGE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "nodewarden.context_processors.portal",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
_database_url = env.str("DATABASE_URL", "")
if _database_url:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=env.int("DB_CONN_MAX_AGE", 60))}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "nodewarden.sqlite3"),
            "OPTIONS": {
                # The web process, worker and beat share one file: WAL lets readers
                # run beside the writer, IMMEDIATE takes the write lock up front so
                # two writers queue on the timeout instead of failing mid-transaction.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    }
    # SQLite (the demo, tests) has no covering indexes: Django says so on every start (models.W040)
    # and builds the index without its INCLUDE columns, which is all the demo needs.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery ---------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", "")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", REDIS_URL) or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    # Embedded broker: messages are files in a folder shared by web, worker and beat.
    _broker_dir = VAR_DIR / "broker"
    _broker_dir.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TIMEZONE = "UTC"

# --- Telemetry ------------------------------------------------------------
# Raw history (GpuSample, NodeReport) is rolled up into GpuSampleHourly and packed one row per node-hour
# once the hour is past (telemetry.packing); packs are kept for the longer of the raw and report windows. NodeReport
# history (heartbeat evidence) and XID records (evidence for RMA cases) are kept for their own days.
# Reports are raw too and by default kept as long as the samples: at 90 days they were 17 of the
# 29 TB a year of 100,000 nodes took (bin/bench storage), and nothing reads one older than minutes.
# A report or event dated more than NODEWARDEN_REPORT_MAX_FUTURE_SECONDS after the portal's clock is
# refused (400): it would otherwise hold the node's latest state until that date.
TELEMETRY_RAW_RETENTION_DAYS = env.int("TELEMETRY_RAW_RETENTION_DAYS", 14)
TELEMETRY_REPORT_RETENTION_DAYS = env.int("TELEMETRY_REPORT_RETENTION_DAYS", TELEMETRY_RAW_RETENTION_DAYS)
TELEMETRY_XID_RETENTION_DAYS = env.int("TELEMETRY_XID_RETENTION_DAYS", 365)
# Roll-ups thin with age: hourly rows for TELEMETRY_HOURLY_RETENTION_DAYS, then one row per GPU and day
# (GpuSampleDaily) for TELEMETRY_DAILY_RETENTION_DAYS; hourly rows for a year were 1.64 TB at 100,000
# nodes (bin/bench storage), daily ones are 24 times fewer.
TELEMETRY_HOURLY_RETENTION_DAYS = env.int("TELEMETRY_HOURLY_RETENTION_DAYS", 30)
TELEMETRY_DAILY_RETENTION_DAYS = env.int("TELEMETRY_DAILY_RETENTION_DAYS", 365)
TELEMETRY_MAX_BODY_BYTES = env.int("TELEMETRY_MAX_BODY_BYTES", 8 * 1024 * 1024)
NODEWARDEN_REPORT_MAX_FUTURE_SECONDS = env.int("NODEWARDEN_REPORT_MAX_FUTURE_SECONDS", 300)
# Group commit (telemetry.groupcommit): concurrent agent requests of one web process share one
# transaction. A lone request waits up to NODEWARDEN_INGEST_GROUP_WAIT_MS for company (0: every
# request commits on its own); a group holds at most NODEWARDEN_INGEST_GROUP_MAX reports; past
# NODEWARDEN_INGEST_QUEUE_LIMIT waiting reports per process the endpoint answers 503 + Retry-After.
NODEWARDEN_INGEST_GROUP_WAIT_MS = env.int("NODEWARDEN_INGEST_GROUP_WAIT_MS", 2)
NODEWARDEN_INGEST_GROUP_MAX = env.int("NODEWARDEN_INGEST_GROUP_MAX", 100)
NODEWARDEN_INGEST_QUEUE_LIMIT = env.int("NODEWARDEN_INGEST_QUEUE_LIMIT", 5000)
# Nodes whose latest state each ingest process keeps in memory after writing it (telemetry.ingest's
# LatestCache: the next report's read skips the node's GPU rows), about 11 kB each; 0: none kept.
NODEWARDEN_INGEST_LATEST_CACHE_NODES = env.int("NODEWARDEN_INGEST_LATEST_CACHE_NODES", 10000)
if NODEWARDEN_INGEST_LATEST_CACHE_NODES < 0:
    raise ImproperlyConfigured("NODEWARDEN_INGEST_LATEST_CACHE_NODES must be 0 or more (0 keeps none)")
# Writer threads per web process, each with its own database connection.
NODEWARDEN_INGEST_WRITERS = env.int("NODEWARDEN_INGEST_WRITERS", 4)
if NODEWARDEN_INGEST_GROUP_WAIT_MS < 0:
    raise ImproperlyConfigured("NODEWARDEN_INGEST_GROUP_WAIT_MS must be 0 or more (0 turns group commit off)")
for _name in (
    "NODEWARDEN_INGEST_GROUP_MAX",
    "NODEWARDEN_INGEST_QUEUE_LIMIT",
    "NODEWARDEN_INGEST_WRITERS",
    "TELEMETRY_RAW_RETENTION_DAYS",
    "TELEMETRY_REPORT_RETENTION_DAYS",
    "TELEMETRY_XID_RETENTION_DAYS",
    "TELEMETRY_HOURLY_RETENTION_DAYS",
    "TELEMETRY_DAILY_RETENTION_DAYS",
    "TELEMETRY_MAX_BODY_BYTES",
    "NODEWARDEN_REPORT_MAX_FUTURE_SECONDS",
):
    _positive(_name, globals()[_name])
if TELEMETRY_DAILY_RETENTION_DAYS < TELEMETRY_HOURLY_RETENTION_DAYS:
    # Hours become days at the hourly window's end: a shorter daily window would drop them at once.
    raise ImproperlyConfigured("TELEMETRY_DAILY_RETENTION_DAYS must be at least TELEMETRY_HOURLY_RETENTION_DAYS")

# --- Auth, i18n, static ---------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# django-axes first: it refuses a locked-out client before the password is even checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet-overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", str(VAR_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns when it is missing
# plotly.js comes from the plotly package itself: no CDN (no internet), no vendored copy to keep in step.
STATICFILES_DIRS = [PACKAGE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the finders: no collectstatic step for the demo and tests.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- REST API -------------------------------------------------------------
# The largest request body a REST endpoint reads (413 beyond); agent reports have their own.
NODEWARDEN_API_MAX_BODY_BYTES = env.int("NODEWARDEN_API_MAX_BODY_BYTES", 8 * 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "nodewarden.filters.FilterBackend",  # DjangoFilterBackend whose generated filters are bounded
        "rest_framework.filters.OrderingFilter",
    ],
    # Bounded: ?limit= clamped to nodewarden.api.MAX_PAGE_SIZE, a huge ?offset= refused.
    "DEFAULT_PAGINATION_CLASS": "nodewarden.api.Pagination",
    # JSON bodies bounded in size (NODEWARDEN_API_MAX_BODY_BYTES) and nesting before decoding.
    "DEFAULT_PARSER_CLASSES": [
        "nodewarden.api.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "nodewarden.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "nodewarden.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Nodewarden API",
    "DESCRIPTION": (
        "Lifecycle management for GPU server fleets.\n\n"
        "Staff (operators, viewers) see the whole fleet; a customer's user sees only its tenant's nodes and "
        "the records about them (history, health, checks, alerts, repairs, RMA, availability): any other "
        "object answers 404, never 403, so its existence does not leak. Operations marked "
        "`x-customer-view: absent` (fabric, holds and circuit breakers, trends) answer 404 to customers "
        "altogether; operator verbs answer them 403. The node agent's report format: docs/report-format.md."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # SERVE_PERMISSIONS (who may read the schema and Swagger UI) follow NODEWARDEN_API_DOCS below.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1: its schemas are JSON Schema 2020-12, which is what msgspec generates for the agent's report
    # (nullable is "anyOf [..., null]"), so the report's definition goes into the document unchanged.
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "nodewarden.openapi.postprocess"],
    # NodeState appears as state, source_state, target_state and target: one enum in the schema.
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "nodes.choices.NodeState",
        "DiscrepancyKindEnum": "fabric.choices.DiscrepancyKind",
        "RmaOutcomeEnum": "repairs.choices.RmaOutcome",
        "CloudEventTypeEnum": "feeds.events.TYPES",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# The portal's own URL, used in links it hands out (later: cloud-init data).
PORTAL_URL = env.str("PORTAL_URL", "http://127.0.0.1:8000")

# --- BMC (out-of-band control) ---------------------------------------------------
# Fernet keys that encrypt BMC credentials at rest, comma-separated, newest first: the
# first encrypts, all decrypt (rotate: prepend a key, run bmc_rotate_credentials, drop
# the old one). NODEWARDEN_BMC_KEYS_FILE works too. Empty: bmc/fields.py derives one
# key from SECRET_KEY, so a development checkout needs no set-up.
NODEWARDEN_BMC_KEYS = env.list("NODEWARDEN_BMC_KEYS", default=[])
NODEWARDEN_BMC_TIMEOUT = env.int("NODEWARDEN_BMC_TIMEOUT", 10)  # seconds per request to a BMC
NODEWARDEN_BMC_RETRIES = env.int("NODEWARDEN_BMC_RETRIES", 3)  # extra tries after no answer or a 5xx
NODEWARDEN_BMC_RETRY_BACKOFF_MS = env.int("NODEWARDEN_BMC_RETRY_BACKOFF_MS", 500)  # first wait; doubles
NODEWARDEN_BMC_POWER_TIMEOUT = env.int("NODEWARDEN_BMC_POWER_TIMEOUT", 300)  # seconds for a power state to arrive
NODEWARDEN_BMC_POLL_INTERVAL = env.int("NODEWARDEN_BMC_POLL_INTERVAL", 2)  # seconds between power-state polls
# The power poller (beat): every endpoint, least recently polled first, BATCH per run every EVERY
# seconds, so a fleet of N endpoints is read all over within ceil(N / BATCH) * EVERY seconds.
NODEWARDEN_BMC_POLL_BATCH = env.int("NODEWARDEN_BMC_POLL_BATCH", 100)
NODEWARDEN_BMC_POLL_EVERY = env.float("NODEWARDEN_BMC_POLL_EVERY", 60.0)
NODEWARDEN_BMC_POLL_SECONDS = env.float("NODEWARDEN_BMC_POLL_SECONDS", 50.0)  # one run stops after this
NODEWARDEN_BMC_POLL_TIMEOUT = env.float("NODEWARDEN_BMC_POLL_TIMEOUT", 3.0)  # one try per read

# --- GPU fencing -----------------------------------------------------------------------------
# A fenced GPU reaches the node's scheduler as a GPU fence (Slurm: the gpu GRES count; Kubernetes:
# allocatable nvidia.com/gpu) when true; when false, or where the scheduler cannot fence one GPU
# safely, the node is drained instead (docs/health.md "GPU health").
NODEWARDEN_GPU_FENCING = env.bool("NODEWARDEN_GPU_FENCING", True)

# --- InfiniBand fabric -------------------------------------------------------------------
# Run infiniband-diags from this host every NODEWARDEN_FABRIC_COLLECT_HOURS and compare with the
# cabling plan; off where the portal host is not on the fabric (then upload the tools' output to
# /api/fabric/discoveries/).
NODEWARDEN_FABRIC_COLLECT = env.bool("NODEWARDEN_FABRIC_COLLECT", False)
NODEWARDEN_FABRIC_COLLECT_HOURS = env.float("NODEWARDEN_FABRIC_COLLECT_HOURS", 4.0)  # the beat's interval
NODEWARDEN_FABRIC_TOOL_TIMEOUT = env.int("NODEWARDEN_FABRIC_TOOL_TIMEOUT", 300)  # seconds per diag tool
# Extra environment for the diag tools, as JSON (e.g. the demo's simulated fabric: LD_PRELOAD of
# libumad2sim and IBSIM_SOCKNAME, so the real tools talk to ibsim instead of an HCA).
NODEWARDEN_FABRIC_TOOL_ENV = env.json("NODEWARDEN_FABRIC_TOOL_ENV", default={})

# --- Day 0 (docs/day0.md) ------------------------------------------------------------------------
# The URL nodes reach the portal at (cloud-init seed, agent join); "" means PORTAL_URL.
NODEWARDEN_PORTAL_URL = env.str("NODEWARDEN_PORTAL_URL", "")
NODEWARDEN_JOIN_TOKEN_TTL = env.int("NODEWARDEN_JOIN_TOKEN_TTL", 24 * 3600)  # seconds a join token lives
NODEWARDEN_AGENT_PACKAGE = env.str("NODEWARDEN_AGENT_PACKAGE", "nodewarden-agent")  # pip requirement in user-data
# Kubernetes CA public-key hash per cluster name, JSON {"iad1-infer": "sha256:<hex>"}: without one
# cloud-init cannot pin the CA, so it never runs kubeadm join for that cluster's nodes.
NODEWARDEN_KUBERNETES_CA_CERT_HASHES = env.json("NODEWARDEN_KUBERNETES_CA_CERT_HASHES", default={})
# Where a Slurm node finds its munge key: a reference (path or vault:...), never the key itself.
NODEWARDEN_SLURM_MUNGE_KEY_REF = env.str("NODEWARDEN_SLURM_MUNGE_KEY_REF", "/etc/munge/munge.key")
NODEWARDEN_DAY0_TIMEOUT = env.int("NODEWARDEN_DAY0_TIMEOUT", 2 * 3600)  # seconds an Initializing node may take
_positive("NODEWARDEN_JOIN_TOKEN_TTL", NODEWARDEN_JOIN_TOKEN_TTL)
_positive("NODEWARDEN_DAY0_TIMEOUT", NODEWARDEN_DAY0_TIMEOUT)
_positive("NODEWARDEN_FABRIC_COLLECT_HOURS", NODEWARDEN_FABRIC_COLLECT_HOURS)
_json_object("NODEWARDEN_FABRIC_TOOL_ENV", NODEWARDEN_FABRIC_TOOL_ENV)
_json_object("NODEWARDEN_KUBERNETES_CA_CERT_HASHES", NODEWARDEN_KUBERNETES_CA_CERT_HASHES)

# --- Workload schedulers and remediation ---------------------------------------------------------
# Kubernetes API bearer tokens by cluster name, e.g. {"iad1-infer": "<token>"} (or a _FILE).
NODEWARDEN_KUBERNETES_TOKENS = env.json("NODEWARDEN_KUBERNETES_TOKENS", default={})
_json_object("NODEWARDEN_KUBERNETES_TOKENS", NODEWARDEN_KUBERNETES_TOKENS)
NODEWARDEN_ESCALATION_WINDOW_HOURS = env.int("NODEWARDEN_ESCALATION_WINDOW_HOURS", 72)
NODEWARDEN_REPEAT_INCIDENTS = env.int("NODEWARDEN_REPEAT_INCIDENTS", 5)
NODEWARDEN_REPEAT_DAYS = env.int("NODEWARDEN_REPEAT_DAYS", 7)
# The GPU reset rung asks the node's agent to reset the finding's GPU; off, the rung fails at once
# and the ladder climbs to a reboot (the fleet simulator compares the two).
NODEWARDEN_GPU_RESET = env.bool("NODEWARDEN_GPU_RESET", True)
# A step no worker has touched for this long is queued again: longer than a power action may
# take (off and on, each up to NODEWARDEN_BMC_POWER_TIMEOUT), so a slow BMC is never doubled.
NODEWARDEN_REMEDIATION_STALL_SECONDS = env.int(
    "NODEWARDEN_REMEDIATION_STALL_SECONDS", 2 * NODEWARDEN_BMC_POWER_TIMEOUT + 60
)
# The circuit breaker: at least this share of a cluster's nodes (and this many) with a degraded or
# catastrophic finding within the window trips the cluster's breaker (remediation/safety.py).
NODEWARDEN_BREAKER_SHARE = env.float("NODEWARDEN_BREAKER_SHARE", 0.3)
NODEWARDEN_BREAKER_MIN_NODES = env.int("NODEWARDEN_BREAKER_MIN_NODES", 5)
NODEWARDEN_BREAKER_WINDOW_SECONDS = env.int("NODEWARDEN_BREAKER_WINDOW_SECONDS", 600)
if not 0 < NODEWARDEN_BREAKER_SHARE <= 1:
    raise ImproperlyConfigured("NODEWARDEN_BREAKER_SHARE must be a share of the cluster, above 0 and at most 1")
# Idle-time validation (checks/freshness.py): at most this share of a cluster's idle production nodes
# under active checks at once (at least one node while any is idle); 0 turns the scheduler of checks off.
NODEWARDEN_FRESHNESS_SHARE = env.float("NODEWARDEN_FRESHNESS_SHARE", 0.25)
if not 0 <= NODEWARDEN_FRESHNESS_SHARE <= 1:
    raise ImproperlyConfigured("NODEWARDEN_FRESHNESS_SHARE must be a share of the idle nodes, from 0 to 1")
# Outgoing repair/RMA webhook tries before a delivery is given up (repairs/webhooks.py).
NODEWARDEN_WEBHOOK_MAX_ATTEMPTS = env.int("NODEWARDEN_WEBHOOK_MAX_ATTEMPTS", 8)
# The lemon score from which the trends' lemon finding recommends a repair; None: never.
NODEWARDEN_LEMON_REPAIR_SCORE: float | None = env.float("NODEWARDEN_LEMON_REPAIR_SCORE", None)

# --- Fleet auditor (docs/auditor.md) ---------------------------------------------------
# The lowest severity a firing alert on a production node must have to need an open remediation.
# The release gate (health.gates): an alert at or above this still firing keeps a node from production.
NODEWARDEN_RELEASE_BLOCKING_SEVERITY = env.str("NODEWARDEN_RELEASE_BLOCKING_SEVERITY", "degraded")
if NODEWARDEN_RELEASE_BLOCKING_SEVERITY not in ("catastrophic", "degraded", "warning", "info"):
    raise ImproperlyConfigured("NODEWARDEN_RELEASE_BLOCKING_SEVERITY must be catastrophic, degraded, warning or info")
NODEWARDEN_AUDIT_SEVERITY = env.str("NODEWARDEN_AUDIT_SEVERITY", "degraded")
if NODEWARDEN_AUDIT_SEVERITY not in ("catastrophic", "degraded", "warning", "info"):
    raise ImproperlyConfigured("NODEWARDEN_AUDIT_SEVERITY must be catastrophic, degraded, warning or info")
# How long after a state change (or a remediation's update) a disagreement is not yet a breach:
# longer than the periodic tasks' own cadence (reconciler 1 min, Day 0 timeouts 5 min).
NODEWARDEN_AUDIT_MINUTES = env.float("NODEWARDEN_AUDIT_MINUTES", 5.0)  # the auditor's beat interval
_positive("NODEWARDEN_AUDIT_MINUTES", NODEWARDEN_AUDIT_MINUTES)
NODEWARDEN_AUDIT_GRACE_SECONDS = env.int("NODEWARDEN_AUDIT_GRACE_SECONDS", 600)
NODEWARDEN_AUDIT_DRAINING_HOURS = env.float("NODEWARDEN_AUDIT_DRAINING_HOURS", 24.0)
# Per run: nodes whose scheduler is asked, BMCs read, and the time each may take (round robin).
NODEWARDEN_AUDIT_SCHEDULER_NODES = env.int("NODEWARDEN_AUDIT_SCHEDULER_NODES", 500)
NODEWARDEN_AUDIT_SCHEDULER_SECONDS = env.float("NODEWARDEN_AUDIT_SCHEDULER_SECONDS", 60.0)
NODEWARDEN_AUDIT_BMC_READS = env.int("NODEWARDEN_AUDIT_BMC_READS", 50)
NODEWARDEN_AUDIT_BMC_SECONDS = env.float("NODEWARDEN_AUDIT_BMC_SECONDS", 60.0)
NODEWARDEN_AUDIT_BMC_TIMEOUT = env.float("NODEWARDEN_AUDIT_BMC_TIMEOUT", 5.0)  # one try per read


# --- Security (docs/security.md) ------------------------------------------------------------
# Everything a deployment behind HTTPS sets, from the environment; `manage.py check --deploy`
# is clean with the production environment docs/production.md lists (tests/security holds it).
# NODEWARDEN_HTTPS=1 says the portal is reached over HTTPS only: secure cookies, the redirect
# and HSTS follow it unless set one by one.
NODEWARDEN_HTTPS = env.bool("NODEWARDEN_HTTPS", False)
# Behind a TLS-terminating reverse proxy that sets X-Forwarded-Proto (and strips it from clients).
if env.bool("NODEWARDEN_SECURE_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", NODEWARDEN_HTTPS)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", NODEWARDEN_HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", NODEWARDEN_HTTPS)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", 31_536_000 if NODEWARDEN_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", NODEWARDEN_HTTPS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", NODEWARDEN_HTTPS)
if SECURE_HSTS_SECONDS < 0:
    raise ImproperlyConfigured("SECURE_HSTS_SECONDS must be 0 (off) or more")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# How many reverse proxies in front of the portal append to X-Forwarded-For: the client address
# for throttles, lockouts and the /metrics networks is the one the outermost of them saw.
# 0 (default): REMOTE_ADDR, and X-Forwarded-For is ignored (a client could write anything there).
NODEWARDEN_TRUSTED_PROXIES = env.int("NODEWARDEN_TRUSTED_PROXIES", 0)
if NODEWARDEN_TRUSTED_PROXIES < 0:
    raise ImproperlyConfigured("NODEWARDEN_TRUSTED_PROXIES must be 0 or more")

# Content-Security-Policy (django-csp): only the portal's own scripts, styles and images; no
# inline script or style anywhere (charts draw from json_script data with static/js/portal.js).
# The browser tests fail on any violation (tests/browser/pages.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Sign-in throttling (django-axes): after NODEWARDEN_LOGIN_FAILURE_LIMIT wrong passwords for one
# username from one address, that pair is locked out for NODEWARDEN_LOGIN_LOCKOUT_MINUTES (429 and
# the lockout page); a successful sign-in before then resets the count. Attempts live in the
# database (shared by every worker), listed in admin -> Axes.
AXES_FAILURE_LIMIT = env.int("NODEWARDEN_LOGIN_FAILURE_LIMIT", 5)
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("NODEWARDEN_LOGIN_FAILURE_LIMIT must be 1 or more")
AXES_COOLOFF_TIME = timedelta(minutes=env.float("NODEWARDEN_LOGIN_LOCKOUT_MINUTES", 15.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "nodewarden.throttling.client_ip"
AXES_VERBOSE = False

# Caches: Redis when REDIS_URL is set, so every gunicorn worker shares one count of wrong tokens;
# in-process memory otherwise (the demo without Redis: each worker counts on its own).
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "nodewarden",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The fleet report caches the figures of settled days (reports/settled.py) only in a cache every
# process shares: a write retires them in the cache, and one process's memory would keep them.
NODEWARDEN_SETTLED_CACHE = env.bool("NODEWARDEN_SETTLED_CACHE", bool(REDIS_URL))


# The scrapers' networks for /metrics (CIDRs, comma-separated): a client there needs no token.
# None by default, the loopback included (docs/reports.md, "Prometheus metrics").
def _networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        return [ipaddress.ip_network(item, strict=False) for item in env.list(name, default=[])]
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from exc


NODEWARDEN_METRICS_NETWORKS = _networks("NODEWARDEN_METRICS_NETWORKS")
# The scrapers' bearer token for /metrics (or NODEWARDEN_METRICS_TOKEN_FILE); "": none accepted.
NODEWARDEN_METRICS_TOKEN = env.str("NODEWARDEN_METRICS_TOKEN", "").strip()

# Prometheus Alertmanager (docs/alerting.md): base URLs (comma-separated; "": off) that firing and
# resolved alerts are pushed to (POST /api/v2/alerts); credentials may sit in the URL (basic auth).
NODEWARDEN_ALERTMANAGER_URLS = env.list("NODEWARDEN_ALERTMANAGER_URL", default=[])
for _url in NODEWARDEN_ALERTMANAGER_URLS:
    if not _url.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"NODEWARDEN_ALERTMANAGER_URL: {_url!r} is not an http(s) URL")
NODEWARDEN_ALERTMANAGER_TIMEOUT = env.float("NODEWARDEN_ALERTMANAGER_TIMEOUT", 5.0)  # seconds per POST
# Every firing alert is posted again this often, with endsAt = now + 4 intervals: a restarted
# Alertmanager learns the state again, and one that stops hearing from us resolves our alerts.
NODEWARDEN_ALERTMANAGER_RESEND_SECONDS = env.int("NODEWARDEN_ALERTMANAGER_RESEND_SECONDS", 60)
if NODEWARDEN_ALERTMANAGER_RESEND_SECONDS < 1 or NODEWARDEN_ALERTMANAGER_TIMEOUT <= 0:
    raise ImproperlyConfigured(
        "NODEWARDEN_ALERTMANAGER_RESEND_SECONDS and NODEWARDEN_ALERTMANAGER_TIMEOUT must be positive"
    )

# The event feed (feeds/): node events as signed CloudEvents webhooks and a cursor API. A gap in
# the event ids is waited for NODEWARDEN_FEED_SETTLE_SECONDS (a transaction that took an id may
# still commit) before readers pass it; the sweep runs every NODEWARDEN_FEED_INTERVAL_SECONDS and
# posts batches of at most NODEWARDEN_FEED_BATCH events, retried after NODEWARDEN_FEED_RETRY_SECONDS
# (doubling, at most 10 min) until NODEWARDEN_FEED_MAX_ATTEMPTS failures make them dead letters.
NODEWARDEN_FEED_SETTLE_SECONDS = env.int("NODEWARDEN_FEED_SETTLE_SECONDS", 30)
NODEWARDEN_FEED_INTERVAL_SECONDS = env.int("NODEWARDEN_FEED_INTERVAL_SECONDS", 5)
NODEWARDEN_FEED_BATCH = env.int("NODEWARDEN_FEED_BATCH", 100)
NODEWARDEN_FEED_RETRY_SECONDS = env.int("NODEWARDEN_FEED_RETRY_SECONDS", 5)
NODEWARDEN_FEED_MAX_ATTEMPTS = env.int("NODEWARDEN_FEED_MAX_ATTEMPTS", 8)
# Host names customers' webhooks may point at although they resolve to non-public addresses
# (feeds/addresses.py: everything else private, loopback or link-local is refused for customers).
NODEWARDEN_FEED_PRIVATE_HOSTS = env.list("NODEWARDEN_FEED_PRIVATE_HOSTS", default=[])
if NODEWARDEN_FEED_SETTLE_SECONDS < 0:
    raise ImproperlyConfigured("NODEWARDEN_FEED_SETTLE_SECONDS must be 0 or more")
for _name in (
    "NODEWARDEN_FEED_INTERVAL_SECONDS",
    "NODEWARDEN_FEED_BATCH",
    "NODEWARDEN_FEED_RETRY_SECONDS",
    "NODEWARDEN_FEED_MAX_ATTEMPTS",
):
    _positive(_name, globals()[_name])

# The OpenAPI schema and Swagger UI: "public", "authenticated" (default: any signed-in user or
# API token) or "off" (not served).
NODEWARDEN_API_DOCS = env.str("NODEWARDEN_API_DOCS", "authenticated").strip().lower()
if NODEWARDEN_API_DOCS not in ("public", "authenticated", "off"):
    raise ImproperlyConfigured("NODEWARDEN_API_DOCS must be public, authenticated or off")
# How often the portal's lists and node page refresh their live parts (static/js/live.js), in seconds.
NODEWARDEN_LIVE_REFRESH_SECONDS = env.int("NODEWARDEN_LIVE_REFRESH_SECONDS", 10)
if not 1 <= NODEWARDEN_LIVE_REFRESH_SECONDS <= 3600:
    raise ImproperlyConfigured("NODEWARDEN_LIVE_REFRESH_SECONDS must be between 1 and 3600")
SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"] = [
    "rest_framework.permissions.AllowAny"
    if NODEWARDEN_API_DOCS == "public"
    else "rest_framework.permissions.IsAuthenticated"
]

# --- REST API throttles (issue 14; kept apart from the REST_FRAMEWORK dict above) -------------
# Wrong credentials (API tokens, node agent tokens, join tokens, the /metrics token) per client
# address: once this many in the period, 429 with Retry-After until the oldest leaves the window.
_AUTH_FAILURE_RATE = env.str("NODEWARDEN_TOKEN_FAILURE_RATE", "30/min").strip()
if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _AUTH_FAILURE_RATE):
    raise ImproperlyConfigured("NODEWARDEN_TOKEN_FAILURE_RATE must look like 30/min (count/s, min, hour or day)")
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {"auth_failure": _AUTH_FAILURE_RATE}
REST_FRAMEWORK["NUM_PROXIES"] = NODEWARDEN_TRUSTED_PROXIES
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"] = [
    "nodewarden.throttling.ThrottledTokenAuthentication",
    "rest_framework.authentication.SessionAuthentication",
]
# --- end of REST API throttles ----------------------------------------------------------------

# --- The demo (bin/demo) ------------------------------------------------------------------------
# Keeps the seeded demo fleet moving (beat entries in nodewarden/celery.py); never in production.
NODEWARDEN_DEMO_CHURN = env.bool("NODEWARDEN_DEMO_CHURN", False)
# x the published failure rates for the live simulator's faults.
NODEWARDEN_DEMO_FAULT_SCALE = env.float("NODEWARDEN_DEMO_FAULT_SCALE", 300.0)

# --- Celery beat: the periodic tasks (the worker's app is nodewarden/celery.py) ------------------
CELERY_BEAT_SCHEDULE = {
    "snapshot-state-counts": {
        "task": "nodes.tasks.snapshot_state_counts",
        "schedule": crontab(minute=0),
    },
    # The lifecycle flow's daily roll-up of state changes (the Sankey reads whole days from it).
    "roll-up-flows": {"task": "reports.tasks.roll_up_flows", "schedule": crontab(minute=5)},
    # A node that stops reporting is a finding of its own (health rule "heartbeat_missing").
    "check-heartbeats": {"task": "health.tasks.check_heartbeats", "schedule": 60.0},
    # Pull dcgm-exporter endpoints that operators registered (telemetry.DcgmExporterTarget).
    "scrape-dcgm-exporters": {"task": "telemetry.tasks.scrape_dcgm_exporters", "schedule": 30.0},
    # An agent command nobody took in time is marked expired (the agent's poll also checks).
    "expire-agent-commands": {"task": "telemetry.tasks.expire_agent_commands", "schedule": 60.0},
    # A check claimed by an agent that never reported back becomes an error after its deadline.
    "expire-stale-checks": {"task": "checks.tasks.expire_stale_checks", "schedule": 60.0},
    # A job pending for a node held by an active check preempts the check within seconds.
    "preempt-wanted-checks": {"task": "checks.tasks.preempt_wanted_checks", "schedule": 10.0},
    # Idle-time validation: the stalest due check on idle production nodes (NODEWARDEN_FRESHNESS_SHARE).
    "keep-checks-fresh": {"task": "checks.tasks.keep_checks_fresh", "schedule": 300.0},
    # Raw samples older than TELEMETRY_RAW_RETENTION_DAYS become hourly roll-ups, hours older than
    # TELEMETRY_HOURLY_RETENTION_DAYS daily ones.
    "roll-up-telemetry": {"task": "telemetry.tasks.roll_up_and_prune", "schedule": crontab(minute=7)},
    # PACK_DELAY (10 min) after the hour's end; retention (minute 7) has no part in it.
    "pack-telemetry": {"task": "telemetry.tasks.pack_past_hours", "schedule": crontab(minute=12)},
    # Day 0: a node that never joins after its PXE boot goes to triage (NODEWARDEN_DAY0_TIMEOUT).
    "fail-stuck-day0": {
        "task": "provisioning.tasks.fail_stuck_day0",
        "schedule": 300.0,
        "options": {"queue": "provisioning"},
    },
    # InfiniBand: the fabric against the cabling plan several times a day (a no-op unless
    # NODEWARDEN_FABRIC_COLLECT), and the agents' HCA counters every 15 minutes.
    "collect-fabric": {
        "task": "fabric.tasks.collect_fabric",
        "schedule": 3600.0 * NODEWARDEN_FABRIC_COLLECT_HOURS,
    },
    "record-agent-ib-counters": {"task": "fabric.tasks.record_agent_counters", "schedule": 900.0},
    # Remediation: re-drive stalled steps, finished drains and queued plans.
    "reconcile-remediations": {
        "task": "remediation.tasks.reconcile",
        "schedule": 60.0,
        "options": {"queue": "remediation"},
    },
    # What transitions owe the workload schedulers (retried), and drains moved on as they report.
    "follow-drains": {"task": "schedulers.tasks.follow_drains", "schedule": 60.0, "options": {"queue": "remediation"}},
    # Every firing (and lately resolved) alert posted to Alertmanager again (NODEWARDEN_ALERTMANAGER_URL).
    "resend-alerts-to-alertmanager": {
        "task": "health.tasks.resend_alerts_to_alertmanager",
        "schedule": float(NODEWARDEN_ALERTMANAGER_RESEND_SECONDS),
    },
    # Repair tickets and RMA cases: outgoing webhook deliveries that are due (retries with back-off).
    "send-due-webhooks": {"task": "repairs.tasks.send_due_webhooks", "schedule": 60.0},
    # The event feed: advance the settled horizon, one batch per due webhook subscription.
    "deliver-events": {"task": "feeds.tasks.deliver_events", "schedule": float(NODEWARDEN_FEED_INTERVAL_SECONDS)},
    # Trends: degrading figures, peer underperformers and lemon nodes, once a day.
    "evaluate-trends": {"task": "trends.tasks.evaluate_trends", "schedule": crontab(hour=3, minute=30)},
    # Day 1: poll open stages (burn-in checks, soak, waiting for the agent) and fail stuck ones.
    "advance-day1-stages": {
        "task": "validation.tasks.advance_day1_stages",
        "schedule": 15.0,
        "options": {"queue": "validation"},
    },
    # BMC power states for the node pages: the least recently polled endpoints each run.
    "poll-bmc-power": {"task": "bmc.tasks.poll_power_states", "schedule": NODEWARDEN_BMC_POLL_EVERY},
    # The fleet auditor: what Nodewarden believes against schedulers, BMCs and the clock.
    "audit-fleet": {
        "task": "audit.tasks.audit_fleet",
        "schedule": 60.0 * NODEWARDEN_AUDIT_MINUTES,
    },
}

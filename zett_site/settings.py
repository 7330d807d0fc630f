"""Django settings for the Zett dashboard, read from the environment.

Every variable read here is listed, with its default, in README.md ("Configuration").
The defaults give the embedded setup: SQLite in WAL mode under var/, the in-memory channel
layer, one Daphne process, no network and no services.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import dj_database_url
from csp.constants import NONE, SELF

BASE_DIR = Path(__file__).resolve().parent.parent
# Runtime state of a checkout (dev secret key, SQLite database); git-ignored.
VAR_DIR = BASE_DIR / "var"


def env_bool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_float(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={value} must be between {low} and {high}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_decimal(name: str) -> Decimal | None:
    """A non-negative Decimal from the environment; None when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"{name}={raw!r} must be a non-negative number")
    return value


def _dev_secret_key() -> str:
    """Read var/secret_key, creating it on first use.

    Kept in a file (never in the database) so sessions survive restarts and every local
    process (several Daphnes, the browser-test server) signs with the same key. The file is
    published with a hard link so concurrent first starts all end up reading one key.
    """
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        tmp = VAR_DIR / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(tmp, key_file)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return key_file.read_text().strip()


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _dev_secret_key()

# On by default because `make run` is a local developer setup; deployments set DJANGO_DEBUG=0.
DEBUG = env_bool("DJANGO_DEBUG", "1")

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

# Daphne serves no static files itself; WhiteNoise does, from this process, so one Daphne is a
# complete deployment. Behind a proxy that serves collectstatic's output, turn it off.
SERVE_STATIC = env_bool("ZETT_SERVE_STATIC", "1")

# 1: the site is reached over HTTPS only (TLS at a proxy that sets X-Forwarded-Proto, or at
# Daphne): secure cookies, a redirect from http, HSTS.
SECURE = env_bool("DJANGO_SECURE", "0")

INSTALLED_APPS = [
    # daphne first: its runserver replaces Django's with an ASGI one.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "csp",
    "axes",
    "agents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    *(["whitenoise.middleware.WhiteNoiseMiddleware"] if SERVE_STATIC else []),
    "csp.middleware.CSPMiddleware",
    "zett_site.headers.PermissionsPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "zett_site.urls"
ASGI_APPLICATION = "zett_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        # Under ASGI every request may run on a different thread, so persistent connections
        # leak; PostgreSQL pools through psycopg instead.
        database: dict[str, Any] = dj_database_url.parse(url, conn_max_age=0)
    else:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        database = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "db.sqlite3",
        }
    options = database.setdefault("OPTIONS", {})
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers (monitor, snapshots) proceed while a run writes; IMMEDIATE makes
        # a writing transaction take the lock up front and wait for it (timeout) instead of
        # failing with "database is locked" when it upgrades from a read.
        options.setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
        options.setdefault("transaction_mode", "IMMEDIATE")
        options.setdefault("timeout", 20)
    elif database["ENGINE"] == "django.db.backends.postgresql":
        options.setdefault("pool", True)
    database["CONN_MAX_AGE"] = 0
    test: dict[str, Any] = database.setdefault("TEST", {})
    # A file test database lets a second process (the browser tests' Daphne) see what the
    # test process commits; tests/conftest.py picks a temporary file when this is unset.
    test_db_file = os.environ.get("ZETT_TEST_DB_FILE", "").strip()
    if test_db_file and database["ENGINE"] == "django.db.backends.sqlite3":
        test["NAME"] = test_db_file
    return database


DATABASES = {"default": _database()}
CONN_MAX_AGE = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login throttling (django-axes, attempts in the database so every process counts them):
# this many failures in a row lock out the account, and separately the client address, for
# ZETT_LOGIN_LOCKOUT_MINUTES; every attempt while locked restarts the wait.
AUTHENTICATION_BACKENDS = [
    "zett_site.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(env_float("ZETT_LOGIN_FAILURE_LIMIT", 10, 1, 1000))
AXES_COOLOFF_TIME = timedelta(minutes=env_float("ZETT_LOGIN_LOCKOUT_MINUTES", 15, 0.1, 1440))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "zett_site.login_throttle.lockout_response"
# The address counted is REMOTE_ADDR (axes without django-ipware), which Daphne takes from
# X-Forwarded-For only with --proxy-headers (README, Deploying).

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("ZETT_STATIC_ROOT", "").strip() or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed names once collectstatic has written its manifest; plain before.
    "staticfiles": {"BACKEND": "zett_site.static_storage.StaticStorage"},
}
# Until collectstatic has run (and always in debug) WhiteNoise serves the source folders.
WHITENOISE_USE_FINDERS = DEBUG or not (STATIC_ROOT / "staticfiles.json").exists()
if SERVE_STATIC:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing one

# HTTP security headers. Every page runs only scripts from this origin: no inline script, no
# eval (htmx reads its config, allowEval=false, from a meta tag), no plugins, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],  # same-origin WebSockets included
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Features no page of ours uses, off for the page and anything it could embed.
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

if SECURE:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    # The proxy terminating TLS must set (and overwrite) this header.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(env_float("DJANGO_HSTS_SECONDS", 31536000, 0, 1e9))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", "1")
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", "1")


def _redis_layer() -> str:
    """ZETT_REDIS_LAYER (with REDIS_URL): "pubsub", the fan-out layer of
    zett_site/redis_layer.py, or "core", channels-redis's RedisChannelLayer."""
    choice = os.environ.get("ZETT_REDIS_LAYER", "pubsub").strip() or "pubsub"
    if choice not in ("pubsub", "core"):
        raise ValueError(f"ZETT_REDIS_LAYER must be pubsub or core, not {choice!r}")
    return choice


def _channel_layers() -> dict[str, Any]:
    # The layer delivers at most once and drops on overflow; the database is the truth, so
    # these bound memory rather than promise delivery. A long-lived socket refreshes its
    # group_add well before group_expiry.
    expiry, group_expiry = 60, 86400
    redis_url = os.environ.get("REDIS_URL", "").strip()
    if not redis_url:
        return {
            "default": {
                # channels' in-memory layer with amortised expiry scans (agents/layers.py).
                "BACKEND": "zett_site.layers.EmbeddedChannelLayer",
                # Per channel: one socket's backlog.
                "CONFIG": {
                    "capacity": int(env_float("ZETT_CHANNEL_CAPACITY", 1000, 10, 1e7)),
                    "expiry": expiry,
                    "group_expiry": group_expiry,
                },
            }
        }
    from redis.exceptions import ConnectionError as RedisConnectionError

    # After Redis restarts, every pooled connection is dead but still in the pool: without a
    # retry, the first command on each fails ("Connection closed by server") although Redis
    # is back. One retry on a fresh connection hides that; a Redis still away fails as before.
    retry = {"retry_on_error": [RedisConnectionError]}
    if _redis_layer() == "pubsub":
        return {
            "default": {
                # One pipelined PUBLISH per group send, fanned out inside each process;
                # memberships live in the process, so a Redis restart loses none
                # (zett_site/redis_layer.py).
                "BACKEND": "zett_site.redis_layer.RedisFanoutLayer",
                "CONFIG": {
                    "hosts": [{"address": redis_url, **retry}],
                    "capacity": int(env_float("ZETT_CHANNEL_CAPACITY", 1000, 10, 1e7)),
                    "expiry": expiry,
                    "group_expiry": group_expiry,
                },
            }
        }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 defaults to a 5 s socket timeout, as long as channels-redis's
                # blocking receive: idle sockets would die with TimeoutError.
                # Its pools also default to 100 connections, too few for a busy process.
                "hosts": [
                    {
                        "address": redis_url,
                        "socket_timeout": None,
                        "max_connections": 1000,
                        **retry,
                    }
                ],
                # channels-redis keeps all of one process's socket channels under one key,
                # so this bounds a whole process's backlog, not one socket's.
                "capacity": int(env_float("ZETT_CHANNEL_CAPACITY", 20000, 10, 1e7)),
                "expiry": expiry,
                "group_expiry": group_expiry,
            },
        }
    }


CHANNEL_LAYERS = _channel_layers()

# Dotted paths of extra extensions for the catalog (agents/catalog.py): each names an
# AgentExtension subclass (optionally with a pydantic `Settings` model) or an ExtensionSpec.
ZETT_EXTENSIONS = env_list("ZETT_EXTENSIONS")

# Default cost caps of every user, per UTC day and per UTC month, in the price currency;
# unset: no cap. The admin's "User budgets" override them per user.
ZETT_USER_DAILY_COST_CAP = env_decimal("ZETT_USER_DAILY_COST_CAP")
ZETT_USER_MONTHLY_COST_CAP = env_decimal("ZETT_USER_MONTHLY_COST_CAP")


# Run hosting (agents/runs.py).
# 1: web processes hand new runs to `manage.py runworker zett-runs` processes.
ZETT_RUN_WORKERS = env_bool("ZETT_RUN_WORKERS", "0")
# Text deltas are batched into one frame per window (latency vs. frames per second).
# channels-redis's core layer costs several round trips per frame and needs longer batches
# (bench/streaming.py --redis: 100 chats over 2 processes at 50 tok/s lagged by 13 s with
# 25 ms batches, ~2 s with 100 ms); the pub/sub fan-out layer keeps up with 25 ms.
_CORE_REDIS = bool(os.environ.get("REDIS_URL", "").strip()) and _redis_layer() == "core"
ZETT_DELTA_BATCH_SECONDS = env_float(
    "ZETT_DELTA_BATCH_SECONDS", 0.1 if _CORE_REDIS else 0.025, 0.0, 1.0
)
# How often the monitor group gets coalesced rows of changed runs.
ZETT_MONITOR_INTERVAL_SECONDS = env_float("ZETT_MONITOR_INTERVAL_SECONDS", 0.25, 0.05, 10.0)
# Hosts beat this often; a run not beating for ZETT_STALE_RUN_SECONDS is interrupted.
ZETT_HEARTBEAT_SECONDS = env_float("ZETT_HEARTBEAT_SECONDS", 2.0, 0.1, 60.0)
ZETT_STALE_RUN_SECONDS = env_float("ZETT_STALE_RUN_SECONDS", 10.0, 1.0, 3600.0)
# A database hop that fails with a connection error is retried on a fresh connection with
# backoff for this long before the run ends with "database unavailable".
ZETT_DB_RETRY_SECONDS = env_float("ZETT_DB_RETRY_SECONDS", 30.0, 0.0, 3600.0)
# Daphne processes: Python's thread switch interval (see agents/hosting/startup.py).
ZETT_THREAD_SWITCH_SECONDS = env_float("ZETT_THREAD_SWITCH_SECONDS", 0.001, 0.0001, 0.1)

LOG_LEVEL = os.environ.get("ZETT_LOG_LEVEL", "INFO").upper()
# "json": one JSON object per log line (for log shippers); anything else: plain text.
LOG_FORMAT = os.environ.get("ZETT_LOG_FORMAT", "plain").strip().lower()
# A scraper sends "Authorization: Bearer <this>" to GET /metrics; empty: staff sessions only.
ZETT_METRICS_TOKEN = os.environ.get("ZETT_METRICS_TOKEN", "").strip()
# Traces go to OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP) as OTEL_SERVICE_NAME when it is set;
# then every profile's runs are traced. ZETT_TRACE_CONTENT also records tool arguments and
# results, which may hold personal data.
ZETT_TRACING = bool(
    os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
)
ZETT_TRACE_CONTENT = env_bool("ZETT_TRACE_CONTENT", "false")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "{asctime} {levelname} {name} [{process}] {message}", "style": "{"},
        "json": {"()": "agents.observability.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
        },
    },
    "loggers": {
        "agents": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
    },
}

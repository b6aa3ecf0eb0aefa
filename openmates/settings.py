"""Django settings for OpenMates: one module, read from the environment.

Every value comes through ``openmates.env``. Development defaults are safe to run
locally; ``openmates.checks`` refuses production mode (``DEBUG=False``) without a real
``SECRET_KEY``, a ``DATABASE_URL`` and a Vault address. Settings never call Vault or any
other service at import time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url

from openmates.env import (
    data_dir,
    env_bool,
    env_float,
    env_int,
    env_ints,
    env_list,
    env_secret,
    env_str,
    local_services,
    service_setting,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = data_dir()

# The value ``checks.check_production_settings`` refuses outside DEBUG.
DEFAULT_SECRET_KEY = "openmates-insecure-development-key-change-me"  # noqa: S105
SECRET_KEY = env_secret("SECRET_KEY") or service_setting("SECRET_KEY") or DEFAULT_SECRET_KEY
DEBUG = env_bool("DEBUG", default=True)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])


def _origin_of(url: str) -> list[str]:
    # ``scheme://host[:port]`` of ``url``; nothing for an empty or relative one.
    parts = urlsplit(url)
    return [f"{parts.scheme}://{parts.netloc}".lower()] if parts.scheme and parts.netloc else []


# The address browsers use for this server (runlocal sets the one it serves, port
# included). Only its origin is trusted by default: the CSRF check and the cookie
# WebSocket handshake (accounts.ws_origin) accept a request from the server's own
# host:port anyway, and trusting a fixed port would let a page served on that port of
# the same host act for a user of a server on another one.
OPENMATES_URL = env_str("OPENMATES_URL")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", _origin_of(OPENMATES_URL))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's files, served from static/ (the docs page fetches nothing from a CDN).
    "drf_spectacular_sidecar",
    "channels",
    "openmates",
    "instances",
    "skills",
    "memories",
    "chats",
    "pipeline",
    "openai_api",
    "messaging",
    "axes",
    "csp",
    "accounts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "accounts.middleware.SameOriginCsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes requires: it turns lockouts into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "openmates.urls"
ASGI_APPLICATION = "openmates.asgi.application"

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
                "chats.context_processors.user_keys",
            ],
        },
    },
]

# --- Database: DATABASE_URL, else the embedded PostgreSQL that runlocal records. ---
DATABASE_URL = service_setting("DATABASE_URL")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL or f"postgres://openmates@/openmates?host={DATA_DIR / 'run'}",
        # Under ASGI a persistent connection would be held per thread forever (STYLE.md);
        # connections come from psycopg's pool below instead.
        conn_max_age=0,
    )
}
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)
# psycopg's pool (Django's "pool" option) instead of a new connection per ORM call:
# Channels closes the connection around every database_sync_to_async call, and with
# CONN_MAX_AGE = 0 each of those was a fresh connect (a fifth of a Daphne process's CPU
# when 200 turns started at once in bench/turn_overhead.py). The pool is per process:
# keep DATABASE_POOL_MAX_SIZE x processes below PostgreSQL's max_connections.
if env_bool("DATABASE_POOL", default=True):
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", default=2),
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", default=16),
        "timeout": env_float("DATABASE_POOL_TIMEOUT_S", default=10.0),
    }
# A turn's accept (chats.services.turn_accept_read) commits without waiting for the WAL
# flush (2.3 ms of every turn's start here); its pending messages become durable with the
# next synchronous commit, at the latest the turn's finish. True: wait for the flush.
TURN_ACCEPT_SYNCHRONOUS_COMMIT = env_bool("TURN_ACCEPT_SYNCHRONOUS_COMMIT", default=False)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, sessions and the channel layer. ---
REDIS_URL = service_setting("REDIS_URL") or f"unix://{DATA_DIR / 'run' / 'redis.sock'}?db=0"
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str("OPENMATES_CACHE_PREFIX", "om"),
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": 3,
            "SOCKET_TIMEOUT": 3,
        },
    }
}
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
# The process's Redis pools (openmates.redis_client): the chat caches' and the turn
# state's (one async client per event loop, one sync client) and the channel layer's (one
# per event loop), each with up to this many connections. A command finding them all busy
# waits up to REDIS_POOL_TIMEOUT_S for one rather than failing a turn under load.
REDIS_POOL_MAX_CONNECTIONS = env_int("REDIS_POOL_MAX_CONNECTIONS", default=128)
REDIS_POOL_TIMEOUT_S = env_float("REDIS_POOL_TIMEOUT_S", default=60.0)
REDIS_SOCKET_TIMEOUT_S = env_float("REDIS_SOCKET_TIMEOUT_S", default=5.0)


def _channel_layer_key(secret: str) -> str:
    # A key of its own for the channel layer, derived so that it changes with SECRET_KEY.
    return hashlib.sha256(f"openmates-channel-layer|{secret}".encode()).hexdigest()


CHANNEL_LAYERS = {
    "default": {
        # channels-redis on blocking pools (REDIS_POOL_* above): no "Too many connections".
        "BACKEND": "openmates.redis_client.ChannelLayer",
        "CONFIG": {
            # redis-py 8 times reads out after 5 s by default, exactly channels-redis's
            # blocking-receive timeout: an idle socket's consumer would crash.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "symmetric_encryption_keys": [_channel_layer_key(SECRET_KEY)],
            "prefix": env_str("OPENMATES_CHANNEL_PREFIX", "om:asgi"),
        },
    }
}

# --- Vault (OpenBao speaks the same API). ---
VAULT_ADDR = service_setting("VAULT_ADDR")
VAULT_TOKEN = service_setting("VAULT_TOKEN")
VAULT_ROLE_ID = service_setting("VAULT_ROLE_ID")
VAULT_SECRET_ID = service_setting("VAULT_SECRET_ID")
# The privileged token (key rotation, app credentials, sealing, raft snapshots) is for
# management commands only; openmates.vault reads it when one first needs it: from
# VAULT_ADMIN_TOKEN, else from the file VAULT_ADMIN_TOKEN_FILE names (runlocal records
# its own in services.json and gives its web server neither), never from services.json.
VAULT_ADMIN_TOKEN = env_str("VAULT_ADMIN_TOKEN")
VAULT_ADMIN_TOKEN_FILE = env_str(
    "VAULT_ADMIN_TOKEN_FILE", local_services().get("VAULT_ADMIN_TOKEN_FILE", "")
)
VAULT_TRANSIT_MOUNT = env_str("VAULT_TRANSIT_MOUNT", "transit")
VAULT_TIMEOUT_S = env_float("VAULT_TIMEOUT_S", default=5.0)
# Plaintext data keys stay in process memory at most this long (docs/crypto.md §4).
VAULT_DATA_KEY_TTL_S = env_int("VAULT_DATA_KEY_TTL_S", default=300)

# --- Server process ---
# Garbage-collector thresholds for Daphne processes (openmates.gc_tuning): three integers.
GC_THRESHOLDS = env_ints("GC_THRESHOLDS", default=(50_000, 20, 100))
# How long a thread may hold the GIL while another waits, in ms (openmates.switch_interval;
# CPython's default is 5).
GIL_SWITCH_INTERVAL_MS = env_float("GIL_SWITCH_INTERVAL_MS", default=0.5)

# --- LLM defaults; instances override them with their own tier maps. ---
LLM_LOCAL_API_BASE = service_setting("LLM_LOCAL_API_BASE", "http://127.0.0.1:8088/v1")
LLM_LOCAL_MODEL = env_str("LLM_LOCAL_MODEL", "text-completion-openai/gemma-3-270m")
LLM_LOCAL_CONTEXT_TOKENS = env_int("LLM_LOCAL_CONTEXT_TOKENS", default=8192)
# Whether an instance's tier map may point ``api_base`` at loopback or private addresses (a
# local Ollama); link-local and metadata addresses never (openmates/api_base.py).
LLM_API_BASE_PRIVATE_ALLOWED = env_bool("LLM_API_BASE_PRIVATE_ALLOWED", default=True)


def _default_tier(tier: str) -> list[dict[str, str]]:
    # LLM_<TIER>_MODEL / _API_BASE / _SECRET; _SECRET names the environment variable that
    # holds the provider key (instances name their own secrets in their tier maps).
    model = env_str(f"LLM_{tier.upper()}_MODEL", LLM_LOCAL_MODEL)
    local_base = LLM_LOCAL_API_BASE if model == LLM_LOCAL_MODEL else ""
    entry = {"model": model, "api_base": env_str(f"LLM_{tier.upper()}_API_BASE", local_base)}
    entry["secret"] = env_str(f"LLM_{tier.upper()}_SECRET")
    return [{key: value for key, value in entry.items() if value}]


LLM_DEFAULT_TIERS: dict[str, list[dict[str, str]]] = {
    tier: _default_tier(tier) for tier in ("fast", "standard", "heavy")
}
LLM_TIMEOUT_S = env_float("LLM_TIMEOUT_S", default=60.0)
# Retries per fallback entry on retryable errors, with exponential backoff from this base.
LLM_RETRIES = env_int("LLM_RETRIES", default=2)
LLM_RETRY_BACKOFF_S = env_float("LLM_RETRY_BACKOFF_S", default=0.5)
# Longest answer asked of the local base model (its prompt gets the rest of the context).
LLM_LOCAL_MAX_TOKENS = env_int("LLM_LOCAL_MAX_TOKENS", default=512)
# Context assumed for a model LiteLLM's price map does not know.
LLM_FALLBACK_CONTEXT_TOKENS = env_int("LLM_FALLBACK_CONTEXT_TOKENS", default=8192)
LLM_EMBEDDING_MODEL = env_str("LLM_EMBEDDING_MODEL", "local/all-MiniLM-L6-v2")
LLM_EMBEDDING_DIMENSIONS = env_int("LLM_EMBEDDING_DIMENSIONS", default=384)
# Pre-processing reads meaning in many languages (tool preselection, injection screening
# of tool output): a local multilingual model (openmates/embeddings.py), whatever the
# memories use.
PREPROCESS_EMBEDDING_MODEL = env_str("PREPROCESS_EMBEDDING_MODEL", "local/use-multilingual-v3")
# Local embedding models run in a child process per model (openmates/embedding_worker.py),
# so their CPU work does not hold the event loop's GIL; off: in the calling thread.
LOCAL_EMBEDDING_PROCESS = env_bool("LOCAL_EMBEDDING_PROCESS", default=True)

# --- Django REST framework. ---
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.CsrfCheckedSessionAuthentication",
        # Non-browser clients: ``Authorization: Bearer <token>`` (a hashed per-user token).
        "accounts.authentication.ApiTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "PAGE_SIZE": 50,
    # Every error body is {"code": <stable code>, "message": ...} (docs/architecture.md §11).
    "EXCEPTION_HANDLER": "openmates.api_errors.exception_handler",
    # Views that check the password (throttle_scope "password") allow this many requests
    # per user; more answer 429 {"code": "throttled"}. Counted in the cache (Redis).
    "DEFAULT_THROTTLE_RATES": {"password": env_str("PASSWORD_CHECK_RATE", "5/minute")},
}

# The largest request body Django reads, in bytes. The biggest REST body is a file embed's
# store (chats.api): its envelope of at most FILE_EMBED_CIPHERTEXT_CHARS (about 3.6 MiB,
# openmates.ids) and a few fields; WebSocket frames (4 MiB at most, docs/protocol.md §1)
# never pass through this. Past it, /api/ answers 413 {"code": "request_too_large"}
# (openmates.api_errors.bad_request).
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

# OpenAPI 3 schema of the REST API at /api/schema/ (drf-spectacular) and its Swagger UI at
# /api/docs/ with the sidecar's local files (no CDN; docs/api.md §1).
SPECTACULAR_SETTINGS = {
    "TITLE": "OpenMates REST API",
    "DESCRIPTION": "Instances, skills, chats, memories and analytics of the signed-in user "
    "(session or API token). The OpenAI-compatible /v1 is described in docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- /v1 (docs/api.md §5): per API key and per user, unless the instance sets its own. ---
V1_REQUESTS_PER_MINUTE = env_int("V1_REQUESTS_PER_MINUTE", default=60)
V1_TOKENS_PER_DAY = env_int("V1_TOKENS_PER_DAY", default=1_000_000)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves the finders' files (below), so nothing needs collecting; a set
# STATIC_ROOT is where collectstatic writes (for a proxy or CDN) and WhiteNoise serves from
# too. Unset by default: WhiteNoise warned at every start about the missing directory.
STATIC_ROOT = env_str("STATIC_ROOT") or None

# Secure-only cookies outside DEBUG; runlocal (DEBUG off, plain http://127.0.0.1) turns
# them off through the environment.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if not DEBUG else None
SECURE_REFERRER_POLICY = "no-referrer"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"security_warning": {"()": "openmates.logging_filters.SecurityWarning"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "security_console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["security_warning"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Refused requests (django.security.*, logged by Django at ERROR with a traceback)
        # are one WARNING line each: anonymous clients must not be able to flood the log.
        # A handler filter, since a logger's own filters skip its children's records; not
        # propagated, so the record is written once and never reaches mail_admins.
        "django.security": {"handlers": ["security_console"], "propagate": False},
        # LiteLLM's loggers echo prompts at DEBUG: WARNING only (docs/architecture.md §1).
        "LiteLLM": {"level": "WARNING"},
        "LiteLLM Router": {"level": "WARNING"},
        "LiteLLM Proxy": {"level": "WARNING"},
        # A line per request at INFO (litellm's clients use httpx or its fork httpx2).
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
    },
}

# --- Skills: the key-needing tools' API endpoints (keys are instance secrets). ---
SKILLS_WEB_SEARCH_API_BASE = env_str("SKILLS_WEB_SEARCH_API_BASE", "https://api.tavily.com")
SKILLS_WEATHER_API_BASE = env_str("SKILLS_WEATHER_API_BASE", "https://api.openweathermap.org")

# --- Accounts: sign-in throttling (django-axes), the page's CSP (docs/crypto.md §7). ---
AUTHENTICATION_BACKENDS = [
    "accounts.backends.ThrottledBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "accounts:login"
# Open sign-ups join this instance (empty: the oldest instance), when its policy allows.
DEFAULT_INSTANCE_SLUG = env_str("DEFAULT_INSTANCE", "")
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = env_float("AXES_COOLOFF_HOURS", default=0.25)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
# The page, or JSON for the encryption pages' password check (accounts/lockout.py).
AXES_LOCKOUT_CALLABLE = "accounts.lockout.lockout_response"
AXES_VERBOSE = False
# Cuts submitted usernames to axes' column width (a longer one was a 500).
AXES_USERNAME_CALLABLE = "accounts.backends.axes_username"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'none'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:", "blob:"],
        "connect-src": ["'self'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# --- Skills: the key-needing tools' API endpoints (keys are instance secrets). ---
SKILLS_WEB_SEARCH_API_BASE = env_str("SKILLS_WEB_SEARCH_API_BASE", "https://api.tavily.com")
SKILLS_WEATHER_API_BASE = env_str("SKILLS_WEATHER_API_BASE", "https://api.openweathermap.org")

# --- Pipeline: per-user limits (all processes) and the turn runtime's liveness. ---
PIPELINE_FRAMES_PER_10S = env_int("PIPELINE_FRAMES_PER_10S", default=120)
PIPELINE_TURNS_PER_MINUTE = env_int("PIPELINE_TURNS_PER_MINUTE", default=30)
PIPELINE_LEASE_TTL_S = env_float("PIPELINE_LEASE_TTL_S", default=30.0)
PIPELINE_ALIVE_TTL_S = env_float("PIPELINE_ALIVE_TTL_S", default=10.0)
# The longest reply in UTF-8 bytes; pipeline.protocol caps it at MAX_REPLY_BYTES (512 KiB),
# the longest a browser can store and send back as history.
PIPELINE_MAX_REPLY_BYTES = env_int("PIPELINE_MAX_REPLY_BYTES", default=512 * 1024)
# Files attached to a message (docs/protocol.md §13): bytes of one file, of a message's
# files together, and how many; pipeline.protocol caps the sizes at openmates.ids'
# MAX_FILE_BYTES (2 MiB) and MAX_FILES_BYTES (2.5 MiB), what one 4 MiB frame carries.
PIPELINE_MAX_FILE_BYTES = env_int("PIPELINE_MAX_FILE_BYTES", default=2 * 1024 * 1024)
PIPELINE_MAX_FILES_BYTES = env_int("PIPELINE_MAX_FILES_BYTES", default=2560 * 1024)
PIPELINE_MAX_FILES = env_int("PIPELINE_MAX_FILES", default=8)
# Each chat socket re-joins its channel-layer groups this often (at most a quarter of the
# layer's group_expiry: Redis may have lost them) and re-checks its session or API token
# then; a frame re-checks it when the last check is older than WS_SIGN_IN_RECHECK_S.
PIPELINE_GROUP_REJOIN_S = env_float("PIPELINE_GROUP_REJOIN_S", default=30.0)
WS_SIGN_IN_RECHECK_S = env_float("WS_SIGN_IN_RECHECK_S", default=5.0)

# --- Chat channels (docs/channels.md §2-§5): Telegram and Slack adapters. ---
# The public https base URL Telegram posts its webhooks to; empty: Telegram is long-polled.
MESSAGING_PUBLIC_URL = env_str("MESSAGING_PUBLIC_URL").rstrip("/")
MESSAGING_TELEGRAM_API_BASE = env_str("MESSAGING_TELEGRAM_API_BASE", "https://api.telegram.org/bot")
MESSAGING_SLACK_API_BASE = env_str("MESSAGING_SLACK_API_BASE", "https://slack.com/api/")
# Messages of one person within this many seconds are one turn.
MESSAGING_BURST_S = env_float("MESSAGING_BURST_S", default=2.0)
# ... but a burst waits at most this long after its first message.
MESSAGING_BURST_MAX_S = env_float("MESSAGING_BURST_MAX_S", default=10.0)
# How often each server process compares its running adapters with the ChannelConfig rows.
MESSAGING_RECONCILE_S = env_float("MESSAGING_RECONCILE_S", default=5.0)
# How long an update id / event id is remembered (Telegram keeps updates for 24 hours).
MESSAGING_DEDUP_TTL_S = env_int("MESSAGING_DEDUP_TTL_S", default=86400)
# Start the channel manager in serving processes (off: webhooks answer 404).
MESSAGING_ENABLED = env_bool("MESSAGING_ENABLED", default=True)

# --- Static files: WhiteNoise serves /static/ from the app's own files (no CDN, no
# collectstatic needed: the finders' files are indexed at start-up). ---
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

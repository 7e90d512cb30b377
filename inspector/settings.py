"""One env-driven settings module whose defaults just run.

With nothing set: SQLite under ``var/``, the in-memory channel layer and the in-process turn
runner (the embedded default). With ``DATABASE_URL`` and ``REDIS_URL``: Postgres, Celery workers
on Redis and channels-redis — the same code, scaled out.
"""

import hashlib
from pathlib import Path

import dj_database_url
import django_stubs_ext
from celery.schedules import crontab

from inspector.environment import (
    LOG_LEVELS,
    env_bool,
    env_choice,
    env_header,
    env_int,
    env_list,
    env_path,
    env_seconds,
    env_str,
    env_url,
    refusals_print_as_one_line,
    refuse,
)
from inspector.filemodes import var_dir_private
from inspector.keyfile import key_file_read_or_create

# Lets annotations such as ModelAdmin[McpServer] work at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

# Every setting below is read through inspector.environment, whose readers refuse a value the app
# cannot use; such a refusal ends the process with its one line (variable, value, what is allowed).
refusals_print_as_one_line()

# Private from here on: the umask for this process, and var/ narrowed (inspector.filemodes).
VAR_DIR = var_dir_private(env_path("VAR_DIR", BASE_DIR / "var"))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    # A per-checkout key kept under var/, so sessions survive restarts without configuration.
    SECRET_KEY = key_file_read_or_create(VAR_DIR / "secret_key")
# The hash chain's HMAC key (``conversations.record.integrity``): never in the database, and not
# SECRET_KEY, whose rotation would break every record. INTEGRITY_KEY (or the file that
# INTEGRITY_KEY_FILE names, read by ``env_str``), else a key generated in var/ like SECRET_KEY's.
INTEGRITY_KEY_FILE = env_path("INTEGRITY_KEY_FILE", VAR_DIR / "integrity_key")
INTEGRITY_KEY = env_str("INTEGRITY_KEY") or key_file_read_or_create(INTEGRITY_KEY_FILE)

# setup_local sets the admin account's password to it when given (else one kept in var/).
ADMIN_PASSWORD = env_str("ADMIN_PASSWORD")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "inspector",
    "servers",
    "conversations",
    "inspector.evals",
]

MIDDLEWARE = [
    "inspector.security.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "inspector.security.ContentSecurityPolicyMiddleware",
    "inspector.security.NulRefusalMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Innermost: the chain above runs in one thread under ASGI (inspector.middleware).
    "inspector.middleware.OneThreadChain",
]

# The audit list's covering indexes carry extra columns (INCLUDE) on PostgreSQL, the scaled
# deployment; SQLite builds the same indexes without them, which is all the embedded default needs.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

ROOT_URLCONF = "inspector.urls"
WSGI_APPLICATION = "inspector.wsgi.application"
ASGI_APPLICATION = "inspector.asgi.application"

TEMPLATES = [
    {
        # Django's engine, with hidden characters marked on every page (``inspector.templating``).
        "BACKEND": "inspector.templating.RevealingTemplates",
        "NAME": "django",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "inspector.preferences.teaching_context",
            ],
        },
    },
]

DATABASE_URL = env_url("DATABASE_URL", "", schemes=("postgres", "postgresql"), host_required=False)
# Read (and checked) whatever the database, so a mistake is refused before it matters.
DATABASE_POOL_MIN_SIZE = env_int("DATABASE_POOL_MIN_SIZE", 2, minimum=0)
DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 20, minimum=1)
DATABASE_POOL_TIMEOUT_SECONDS = env_seconds("DATABASE_POOL_TIMEOUT_SECONDS", 30.0)
if DATABASE_POOL_MIN_SIZE > DATABASE_POOL_MAX_SIZE:
    raise refuse(
        "DATABASE_POOL_MIN_SIZE",
        DATABASE_POOL_MIN_SIZE,
        f"more than DATABASE_POOL_MAX_SIZE={DATABASE_POOL_MAX_SIZE} (the pool opens its minimum at once "
        "and never holds more than its maximum)",
    )
if DATABASE_URL:
    # Django's own connection pool (OPTIONS "pool", Django 5.1+): every process (a web server, a
    # worker with hundreds of turn threads) borrows connections from one bounded pool instead of
    # opening one per thread: Postgres's max_connections is shared by all of them. A thread that
    # finds the pool empty waits up to the timeout. Health checks: the backend,
    # ``inspector.postgresql`` (Django's, on public interfaces), tests each connection it borrows
    # and, finding one dead, has the pool test every idle one at once
    # (``conversations.record.connections``). CONN_HEALTH_CHECKS stays off: it would have the pool test
    # each connection too, one at a time.
    try:
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_health_checks=False)}
    except ValueError as error:
        raise refuse(
            "DATABASE_URL", DATABASE_URL.split("://", 1)[0] + "://…", f"cannot be read: {error}"
        ) from None
    DATABASES["default"]["ENGINE"] = "inspector.postgresql"
    DATABASES["default"]["OPTIONS"] = {
        "pool": {
            "min_size": DATABASE_POOL_MIN_SIZE,
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": DATABASE_POOL_TIMEOUT_SECONDS,
        },
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "inspector.sqlite3"),
            # Turns write from worker threads while pages read: wait for the lock, don't fail.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            },
            "TEST": {"NAME": str(VAR_DIR / "test.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", "", schemes=("redis", "rediss"))
if REDIS_URL:
    # Redis pub/sub: a doorbell is one PUBLISH (the core layer's group_send takes two to four
    # round trips and queues messages per consumer). Nothing needs queueing: a browser that was
    # away catches up from the database when it reconnects.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# Without Redis a doorbell reaches only the sockets of its own process: each socket of the
# embedded server looks this often whether another process (``proxy stdio``, ``ask``) changed its
# conversation, and has the page catch up (inspector.consumers).
LIVE_WATCH_SECONDS = env_seconds("LIVE_WATCH_SECONDS", 1.0)
# Counters every web process must share (login throttling) and the sessions' cache
# (``SESSION_ENGINE``) live in Redis when there is one; embedded, in the process's memory.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "inspector",
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# How turns run: "celery" (workers on Redis) or "embedded" (a thread pool in the web process).
# The runners conversations.execution dispatches to (its DISPATCHERS).
TURN_RUNNERS = ("celery", "embedded")
TURN_RUNNER = env_choice("TURN_RUNNER", "celery" if REDIS_URL else "embedded", TURN_RUNNERS)
if TURN_RUNNER == "celery" and not REDIS_URL:
    raise refuse(
        "TURN_RUNNER", TURN_RUNNER, "needs REDIS_URL (the workers' broker); without Redis use embedded"
    )
EMBEDDED_RUNNER_THREADS = env_int("EMBEDDED_RUNNER_THREADS", 16, minimum=1)
# Evals (docs/evals.md): how many of a run's turns are in flight at once unless the run says,
# and how often a run's driver looks for turns that have ended.
EVAL_CONCURRENCY = env_int("EVAL_CONCURRENCY", 4, minimum=1)
EVAL_POLL_SECONDS = env_seconds("EVAL_POLL_SECONDS", 0.25)
# How long a case's judge (a model-graded check) may take to answer (docs/evals.md).
EVAL_JUDGE_SECONDS = env_seconds("EVAL_JUDGE_SECONDS", 120.0)
# A run whose driver took no step for this long is taken over by a live process (evals.execution).
EVAL_DRIVER_WINDOW_SECONDS = env_seconds("EVAL_DRIVER_WINDOW_SECONDS", 60.0)
# Turn lifecycle (conversations.lifecycle): a running turn heart-beats every TURN_HEARTBEAT_SECONDS;
# one silent for TURN_HEARTBEAT_WINDOW_SECONDS is marked interrupted by any live process, which
# checks every TURN_REAP_SECONDS. A cancel request is seen within TURN_CANCEL_POLL_SECONDS.
TURN_HEARTBEAT_SECONDS = env_seconds("TURN_HEARTBEAT_SECONDS", 10.0)
TURN_HEARTBEAT_WINDOW_SECONDS = env_seconds("TURN_HEARTBEAT_WINDOW_SECONDS", 60.0)
TURN_REAP_SECONDS = env_seconds("TURN_REAP_SECONDS", 15.0)
TURN_CANCEL_POLL_SECONDS = env_seconds("TURN_CANCEL_POLL_SECONDS", 0.5)
# A queued turn whose task the broker lost (conversations.lifecycle.turns_recover_queued): sent to
# the workers again once after TURN_QUEUED_REDISPATCH_SECONDS, failed after TURN_QUEUED_FAIL_SECONDS.
TURN_QUEUED_REDISPATCH_SECONDS = env_seconds("TURN_QUEUED_REDISPATCH_SECONDS", 120.0)
TURN_QUEUED_FAIL_SECONDS = env_seconds("TURN_QUEUED_FAIL_SECONDS", 3600.0)
if TURN_HEARTBEAT_WINDOW_SECONDS <= TURN_HEARTBEAT_SECONDS:
    raise refuse(
        "TURN_HEARTBEAT_WINDOW_SECONDS",
        f"{TURN_HEARTBEAT_WINDOW_SECONDS:g}",
        f"not more than TURN_HEARTBEAT_SECONDS={TURN_HEARTBEAT_SECONDS:g}: every running turn would be "
        "marked interrupted between two heartbeats",
    )
# The record writer (conversations.record.recording): while batches keep coming it waits this long for
# more before a write, so a fast loop's steps are committed a few at a time; 0 writes each at once.
RECORD_WRITE_LINGER_SECONDS = env_seconds("RECORD_WRITE_LINGER_SECONDS", 0.002, zero_allowed=True)
# How the record is written (conversations.record.store): "auto" is one pipeline per write on
# PostgreSQL and the ORM elsewhere; "orm" forces the plain ORM path everywhere.
RECORD_STORE = env_choice("RECORD_STORE", "auto", ("auto", "orm"))
# A user reading the same part of a conversation again within this long writes no second audit
# entry (conversations.record.audit); 0 writes one for every read.
READ_AUDIT_WINDOW_SECONDS = env_seconds("READ_AUDIT_WINDOW_SECONDS", 300.0, zero_allowed=True)

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker outlives any Redis outage: it retries the broker for as long as it takes (not 100
# times), its Redis transport survives a restart under a running turn (inspector.celery), and a
# turn that runs while the connection drops goes on: its record is in the database, not Redis.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_TRANSPORT = "inspector.celery:RedisTransport" if REDIS_URL else None
CELERY_BROKER_TRANSPORT_OPTIONS = {"health_check_interval": 10, "socket_keepalive": True}
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# A turn that cannot reach the database (pool exhausted, "too many clients", a restart) is
# retried with exponential backoff this many times; then it is marked failed with the reason.
TURN_DATABASE_RETRIES = env_int("TURN_DATABASE_RETRIES", 6, minimum=0)
TURN_RETRY_BACKOFF_MAX_SECONDS = env_int("TURN_RETRY_BACKOFF_MAX_SECONDS", 60, minimum=0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
# Django's sessions, kept in the database and read through the cache (``CACHES``: local memory
# in the one embedded process, Redis shared by every web process when there is one), and
# Django's own sign-in.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
LOGIN_REDIRECT_URL = "inspector-conversations"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
# Serve straight from static/ (no collectstatic step on a fresh checkout).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_COOKIE_HTTPONLY = True
# Behind HTTPS: session and CSRF cookies are never sent over plain HTTP.
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
# HTTPS hardening, off by default because `make run` serves plain HTTP on 127.0.0.1.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Opt-in, and only behind a proxy that sets this header itself (overwriting a client's): the name
# of the request header that says the client's connection was HTTPS, e.g. X-Forwarded-Proto.
_PROXY_SSL_HEADER = env_header("SECURE_PROXY_SSL_HEADER", example="X-Forwarded-Proto")
if _PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https")
# The request header holding the client's address behind a proxy (e.g. X-Real-IP), for login
# throttling; by default the connection's own address.
CLIENT_IP_HEADER = env_header("CLIENT_IP_HEADER", example="X-Real-IP")
# The Content-Security-Policy of every page (see inspector.security): no inline script or style.
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
# Login and POST /api/token: at most this many failed attempts per username and per client
# address in a window; more answer 429 with Retry-After until the window ends.
LOGIN_THROTTLE_FAILURES = env_int("LOGIN_THROTTLE_FAILURES", 10, minimum=1)
LOGIN_THROTTLE_ADDRESS_FAILURES = env_int("LOGIN_THROTTLE_ADDRESS_FAILURES", 50, minimum=1)
LOGIN_THROTTLE_WINDOW_SECONDS = env_int("LOGIN_THROTTLE_WINDOW_SECONDS", 900, minimum=1)
# API tokens older than this are refused (401) and replaced on the next POST /api/token.
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", 90, minimum=0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "inspector.tokens.ExpiringTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # Every API error is JSON, unexpected ones and a body too large included (inspector.api_errors).
    "EXCEPTION_HANDLER": "inspector.api_errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tool-Call Inspector API",
    "DESCRIPTION": "Transcripts of agent turns: every step, every raw exchange on the wire.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {
        "TurnStatusEnum": "conversations.models.Turn.Status",
        "StepStatusEnum": "conversations.models.Step.Status",
        "EvalRunStatusEnum": "inspector.evals.models.EvalRun.Status",
        "EvalCaseStatusEnum": "inspector.evals.models.EvalCaseResult.Status",
    },
}

# The agent loop.
AGENT_MAX_STEPS = env_int("AGENT_MAX_STEPS", 8, minimum=1)
# A serving process (web, Celery worker) loads the tokenizers and chat templates its turns will
# need at start-up, on a background thread (conversations/warm_start.py); off: the first turn does.
WARM_START = env_bool("WARM_START", True)
# Tool calls: at most this many of one model reply are run (the rest go back to the model as
# error results), and at most this many in one turn (docs/turn-lifecycle.md, "Limits").
AGENT_MAX_CALLS_PER_REPLY = env_int("AGENT_MAX_CALLS_PER_REPLY", 16, minimum=1)
AGENT_MAX_CALLS_PER_TURN = env_int("AGENT_MAX_CALLS_PER_TURN", 64, minimum=1)
MODEL_TIMEOUT_SECONDS = env_seconds("MODEL_TIMEOUT_SECONDS", 120.0)
# The most bytes of a model's response body that are read, counted after its content-encoding
# is undone (a 200 KB gzip body can expand to 200 MB); past it the call fails with what arrived.
# A model profile may set its own (``response_body_limit``). The same bound holds for an HTTP MCP
# server's response bodies (each event of an event stream): servers/gateway/http_limit.py.
RESPONSE_BODY_LIMIT = env_int("RESPONSE_BODY_LIMIT", 32_000_000, minimum=1)

# The recording proxies (docs/proxy.md): a key's traffic without a session hint goes on in the
# same proxy session until it has been quiet this long.
PROXY_SESSION_GAP_SECONDS = env_seconds("PROXY_SESSION_GAP_SECONDS", 600.0, zero_allowed=True)

# MCP gateway.
MCP_CALL_TIMEOUT_SECONDS = env_seconds("MCP_CALL_TIMEOUT_SECONDS", 30.0)
MCP_CONNECT_TIMEOUT_SECONDS = env_seconds("MCP_CONNECT_TIMEOUT_SECONDS", 20.0)
# The pooled MCP sessions a process holds at once (one stdio server process each), and how long one
# nobody uses stays open (servers.gateway.pool; docs/deployment.md §2).
MCP_POOL_MAX_SESSIONS = env_int("MCP_POOL_MAX_SESSIONS", 32, minimum=1)
MCP_POOL_IDLE_SECONDS = env_seconds("MCP_POOL_IDLE_SECONDS", 900.0)
# Where an OAuth authorization server sends the browser back (this app's callback page).
OAUTH_REDIRECT_URL = env_url(
    "OAUTH_REDIRECT_URL", "http://localhost:8000/servers/oauth/callback/", schemes=("http", "https")
)
# An HTTPS client ID metadata document describing this app, used as its client_id where supported.
OAUTH_CLIENT_METADATA_URL = env_url("OAUTH_CLIENT_METADATA_URL", "", schemes=("https",))
MCP_STDERR_DIR = VAR_DIR / "mcp-stderr"
# The workbench (servers.operations; docs/mcp-client.md): how long a sampling request waits for its
# review before it is refused, how long a resource subscription lasts at most, and how long an
# operation of another host may run before it is taken for interrupted (longer than any lasts).
WORKBENCH_SAMPLING_REVIEW_SECONDS = env_seconds("WORKBENCH_SAMPLING_REVIEW_SECONDS", 120.0)
WORKBENCH_SUBSCRIPTION_SECONDS = env_seconds("WORKBENCH_SUBSCRIPTION_SECONDS", 1800.0)
WORKBENCH_LONGEST_OPERATION_SECONDS = env_seconds(
    "WORKBENCH_LONGEST_OPERATION_SECONDS", max(2 * 3600.0, 2 * WORKBENCH_SUBSCRIPTION_SECONDS)
)
if WORKBENCH_LONGEST_OPERATION_SECONDS <= WORKBENCH_SUBSCRIPTION_SECONDS:
    raise refuse(
        "WORKBENCH_LONGEST_OPERATION_SECONDS",
        f"{WORKBENCH_LONGEST_OPERATION_SECONDS:g}",
        f"not more than WORKBENCH_SUBSCRIPTION_SECONDS={WORKBENCH_SUBSCRIPTION_SECONDS:g}: a running "
        "subscription would be ended as interrupted",
    )
# The most bytes of one stdout line of a stdio MCP server that are kept: a longer line is
# recorded cut and marked, the rest of it only counted (docs/turn-lifecycle.md, "Limits").
MCP_STDOUT_LINE_LIMIT = env_int("MCP_STDOUT_LINE_LIMIT", 32_000_000, minimum=1)
# Raw bodies (model requests and responses, MCP messages) up to this many characters are stored
# whole; only a larger one (a runaway stream, a hostile server) is cut in the record, the cut
# marked with the true total (the call itself still completes).
EXCHANGE_BODY_LIMIT = env_int("EXCHANGE_BODY_LIMIT", 64_000_000, minimum=1)
# The most characters of an answer, a model's text, a call's arguments or a tool's result a
# page (or a live row) shows; the rest is cut there and marked with the whole size and where
# the exact record is (docs/turn-lifecycle.md, "Limits"). The record itself is never cut by it.
DISPLAY_MAX_CHARS = env_int("DISPLAY_MAX_CHARS", 200_000, minimum=1)

# The stdio MCP proxy (manage.py proxy stdio): the most bytes of forwarded traffic waiting to be
# recorded; past it a chunk is passed on and only counted (docs/proxy-mcp.md).
PROXY_QUEUE_LIMIT = env_int("PROXY_QUEUE_LIMIT", 64_000_000, minimum=1)
# The LLM proxy: the most records (and characters of their bodies and headers) waiting in a web
# process to be stored; past them a call is recorded as a marked stub, past twice the count not
# at all and counted (docs/decisions/0300-llm-proxy-recorder-bounded.md).
PROXY_RECORD_QUEUE_COUNT = env_int("PROXY_RECORD_QUEUE_COUNT", 1000, minimum=1)
PROXY_RECORD_QUEUE_LIMIT = env_int("PROXY_RECORD_QUEUE_LIMIT", 256_000_000, minimum=1)

# The demo model, served by this app at /demo-model/v1, keyed so it is no open endpoint.
DEMO_MODEL_API_KEY = (
    env_str("DEMO_MODEL_API_KEY") or hashlib.sha256(f"demo-model:{SECRET_KEY}".encode()).hexdigest()
)
# Keys that the app itself provides, by env-var name (ModelProfile stores names, never keys).
BUILTIN_API_KEYS = {"DEMO_MODEL_API_KEY": DEMO_MODEL_API_KEY}
DEMO_MODEL_LATENCY_SECONDS = env_seconds("DEMO_MODEL_LATENCY_SECONDS", 0.0, zero_allowed=True)
# Seconds between the events of a streamed demo reply (0: the whole stream at once).
DEMO_MODEL_STREAM_DELAY_SECONDS = env_seconds("DEMO_MODEL_STREAM_DELAY_SECONDS", 0.0, zero_allowed=True)
# The largest request body the demo model reads (Django's DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB,
# is for form posts; a model request carries whole tool results). Larger: a 413 that says so.
DEMO_MODEL_MAX_REQUEST_BYTES = env_int("DEMO_MODEL_MAX_REQUEST_BYTES", 256_000_000, minimum=1)

# Traces (docs/traces.md): put the messages, tool definitions, tool arguments and results on the
# exported spans (redacted like everything recorded); off leaves content out of every trace.
OTEL_EXPORT_CONTENT = env_bool("OTEL_EXPORT_CONTENT", True)
# Sending each turn's trace when it ends (docs/traces.md §5), by OTLP/HTTP protobuf: the
# collector's traces URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT +
# /v1/traces, the OpenTelemetry SDK's variables); empty sends nothing. The headers
# ("name=value,name=value", e.g. an API key) are secrets: held here only, never stored or shown.
_OTLP_ENDPOINT = env_url("OTEL_EXPORTER_OTLP_ENDPOINT", "", schemes=("http", "https"))
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = env_url(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", schemes=("http", "https")
) or (f"{_OTLP_ENDPOINT.rstrip('/')}/v1/traces" if _OTLP_ENDPOINT else "")
OTEL_EXPORTER_OTLP_HEADERS = env_str("OTEL_EXPORTER_OTLP_HEADERS")
OTEL_EXPORTER_OTLP_TIMEOUT_SECONDS = env_seconds("OTEL_EXPORTER_OTLP_TIMEOUT_SECONDS", 10.0)
# Retries of a turn's trace while the collector is down: the wait doubles from the first to the
# largest, and a pending delivery is tried again after that however many attempts it took.
TRACE_DELIVERY_RETRY_FIRST_SECONDS = env_seconds("TRACE_DELIVERY_RETRY_FIRST_SECONDS", 5.0)
TRACE_DELIVERY_RETRY_MAX_SECONDS = env_seconds("TRACE_DELIVERY_RETRY_MAX_SECONDS", 300.0)
# In the scaled mode the task retries itself this many times; the beat's sweep takes over after.
TRACE_DELIVERY_TASK_RETRIES = env_int("TRACE_DELIVERY_TASK_RETRIES", 10, minimum=0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Every record passes the one redactor (conversations.redaction) before it is written.
    "filters": {
        "redact": {"()": "conversations.redaction.LogRedactionFilter"},
        "discarded": {"()": "conversations.record.connections.DiscardedConnectionFilter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": env_choice("LOG_LEVEL", "INFO", LOG_LEVELS, any_case=True)},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
        "psycopg.pool": {"filters": ["discarded"]},
    },
}

# Retention: conversations older than this many days are deleted daily at 03:30 UTC by Celery
# beat (`make beat`), and the run is recorded in the audit log. 0 keeps everything.
RETENTION_DAYS = env_int("RETENTION_DAYS", 0, minimum=0)
CELERY_BEAT_SCHEDULE = (
    {
        "prune-conversations": {
            "task": "conversations.tasks.prune_conversations",
            "schedule": crontab(hour=3, minute=30),
        }
    }
    if RETENTION_DAYS > 0
    else {}
)
if OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:
    CELERY_BEAT_SCHEDULE["retry-trace-deliveries"] = {
        "task": "conversations.tasks.retry_trace_deliveries",
        "schedule": 60.0,
    }
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

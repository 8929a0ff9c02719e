"""ReviewHub settings: one module, configured from the environment.

Every variable read here is listed with a one-line comment in `.env.example`. The embedded
default (no DATABASE_URL, no CELERY_BROKER_URL) is SQLite plus kombu's SQLAlchemy transport on
its own SQLite file, so a fresh machine with only Python can run the demo; production sets both
and the hardening flags.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
# A local `.env` (never committed; `dev.py` writes one for the demo) fills in what the process
# environment does not set. Real environment variables always win.
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# Runtime files of the embedded default (SQLite database, SQLite broker) live here.
VAR_DIR = Path(env("REVIEWHUB_VAR_DIR", default="") or BASE_DIR / "var")

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off")
    SECRET_KEY = "insecure-debug-only-key"  # debug mode only; refused otherwise

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    # Swagger UI's files, pinned by this package's version and served from our own origin.
    "drf_spectacular_sidecar",
    # Sign-in failure lockout (see reviewhub/throttling.py).
    "axes",
    "reviewhub",
    "studies",
    "judges",
    "generation",
    "annotations",
    "snapshots",
    "calibration",
    "reports",
    "imports",
    "monitoring",
    # The simulated demo seed, at the top of the order (it walks every app).
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside everything below so that its headers reach every response, refusals included.
    "reviewhub.middleware.SecurityHeadersMiddleware",
    # Static files with DEBUG off (gunicorn serves no files of its own).
    "reviewhub.middleware.StaticFilesMiddleware",
    # Before CsrfViewMiddleware, which reads form bodies: no body is read before its size is
    # checked.
    "reviewhub.middleware.RequestLimitsMiddleware",
    # NUL in a query parameter or form field: a 400 naming it (PostgreSQL text cannot hold it).
    "reviewhub.api.middleware.RejectUnstorableTextMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A password someone else set (a one-time password) must be changed before anything else.
    "annotations.middleware.PasswordChangeRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: turns a locked-out sign-in into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "reviewhub.urls"
WSGI_APPLICATION = "reviewhub.wsgi.application"

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

# --- Database ---------------------------------------------------------------------------
DATABASE_URL_SET = "DATABASE_URL" in env
DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'reviewhub.sqlite3'}"
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default keeps its file under VAR_DIR; SQLite cannot create the folder.
    if not DATABASE_URL_SET:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
    # WAL + IMMEDIATE transactions let the demo's web process and worker write without
    # "database is locked" errors; the timeout covers the short waits that remain.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL_SET = "CELERY_BROKER_URL" in env
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if not CELERY_BROKER_URL_SET:
    # The embedded default: kombu's SQLAlchemy transport on its own SQLite file under VAR_DIR.
    # Not kombu's filesystem transport, whose consumer can read a half-written message and
    # die (kombu #1551, issue 26); the reasons are in reviewhub/embedded_broker.py and
    # docs/deploy.md. It has no fanout, so remote control, gossip and mingle stay off.
    from reviewhub.embedded_broker import broker_settings as _embedded_broker_settings

    CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = _embedded_broker_settings(VAR_DIR)
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
else:
    CELERY_BROKER_URL = env("CELERY_BROKER_URL")
    if CELERY_BROKER_URL.startswith("filesystem:"):
        # Refused rather than run: it loses the worker within a working day (issue 26).
        raise ImproperlyConfigured(
            "CELERY_BROKER_URL=filesystem:// is not supported: kombu's filesystem transport "
            "lets a worker read a half-written message and stop (kombu #1551). Leave "
            "CELERY_BROKER_URL unset for the embedded default, or use Redis (docs/deploy.md)."
        )
    if not CELERY_BROKER_URL.startswith(("sqla+", "sqlalchemy+")):
        # Redis redelivers unacknowledged messages after this many seconds; it must exceed the
        # longest task so that acks_late tasks are not delivered twice while still running.
        CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
REDIS_URL = env("REDIS_URL", default="")

# --- Auth, i18n, static ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# E-mail: only for password resets, and only once an operator configures a mail server
# (EMAIL_HOST, or EMAIL_BACKEND); until then the reset page says to ask a study lead, who can
# reset an annotator's password from the Members page.
EMAIL_HOST = env("EMAIL_HOST", default="")
EMAIL_PORT = env.int("EMAIL_PORT", default=587)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=True)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="reviewhub@localhost")
EMAIL_BACKEND = env("EMAIL_BACKEND", default="") or (
    "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST
    else "django.core.mail.backends.dummy.EmailBackend"
)
REVIEWHUB_EMAIL_ENABLED = EMAIL_BACKEND != "django.core.mail.backends.dummy.EmailBackend"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(env("DJANGO_STATIC_ROOT", default="") or VAR_DIR / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves /static/ from the web process. After `collectstatic` (the Docker image runs
# it) it serves STATIC_ROOT with pre-compressed copies; without it, it finds the files where
# they live (app folders, static/), which is what a plain checkout, the demo and the tests use.
WHITENOISE_USE_FINDERS = env.bool("REVIEWHUB_STATIC_USE_FINDERS", default=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed copies without hashed names: templates resolve {% static %} the same way
    # whether or not collectstatic ran.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- Cache (throttle counters) ------------------------------------------------------------
# Shared by every web process through Redis when REDIS_URL is set; process-local memory in
# the embedded default (one runserver process in the demo).
if REDIS_URL:
    # Short socket timeouts: with Redis unreachable, a token request answers 503 in seconds
    # (RequestLimitsMiddleware) instead of holding a web worker until the OS gives up.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL, "KEY_PREFIX": "reviewhub-cache",
                          "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                          "KEY_PREFIX": "reviewhub-cache"}}

# --- Credential throttles (see reviewhub/throttling.py and docs/deploy.md) -----------------
AUTHENTICATION_BACKENDS = [
    "reviewhub.throttling.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Proxies in front of the web process that append to X-Forwarded-For (0: use REMOTE_ADDR).
# Throttles key on the client address, so set this exactly: too high lets clients pick it.
REVIEWHUB_TRUSTED_PROXY_COUNT = env.int("REVIEWHUB_TRUSTED_PROXY_COUNT", default=0)
# Failed sign-ins per (username, client address) before the pair is locked out...
AXES_FAILURE_LIMIT = env.int("REVIEWHUB_LOGIN_FAILURE_LIMIT", default=10)
# ...for this many minutes after the latest attempt (any attempt while locked restarts it).
REVIEWHUB_LOGIN_LOCKOUT_MINUTES = env.float("REVIEWHUB_LOGIN_LOCKOUT_MINUTES", default=15.0)
AXES_COOLOFF_TIME = timedelta(minutes=REVIEWHUB_LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Failed sign-ins from one client address across every username (password spraying: one guess
# each for many accounts) before that address is locked out for the same cool-off; checked by
# reviewhub.throttling.LoginThrottleBackend from django-axes' records. 0 turns it off.
REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT = env.int("REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT",
                                                default=30)
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "reviewhub.throttling.client_ip"
AXES_LOCKOUT_CALLABLE = "reviewhub.throttling.login_lockout_response"
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
# Failures are kept (admin: Axes > Access attempts; `manage.py axes_reset` unlocks); a row per
# successful sign-in is not.
AXES_DISABLE_ACCESS_LOG = True
# No banner on every process start (management commands print to stdout).
AXES_VERBOSE = False
# Requests with an invalid API token per client address ("N/s", "N/m", "N/h" or "N/d"); past it
# every token request from that address gets 429 with Retry-After until the window clears.
REVIEWHUB_TOKEN_FAILURE_RATE = env("REVIEWHUB_TOKEN_FAILURE_RATE", default="20/m")

# --- Limits -----------------------------------------------------------------------------
# Bulk ingest bodies (streamed to a temporary file) above this many bytes get a 413 before
# any parsing.
REVIEWHUB_MAX_UPLOAD_BYTES = env.int("REVIEWHUB_MAX_UPLOAD_BYTES", default=200 * 1024 * 1024)
# Bulk ingest with ?progress=ndjson: at most one progress event per this many seconds.
REVIEWHUB_INGEST_PROGRESS_SECONDS = env.float("REVIEWHUB_INGEST_PROGRESS_SECONDS", default=0.5)
# Every other request body (JSON, forms) above this many bytes gets a 413 before it is read
# (reviewhub/middleware.py); Django's own form-parsing bound follows it.
REVIEWHUB_MAX_REQUEST_BYTES = env.int("REVIEWHUB_MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = REVIEWHUB_MAX_REQUEST_BYTES
# A single text field (item input, output text) may not exceed this many characters.
REVIEWHUB_MAX_FIELD_CHARS = env.int("REVIEWHUB_MAX_FIELD_CHARS", default=1_000_000)

# --- REST framework ---------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "studies.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "reviewhub.api.pagination.DefaultCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "reviewhub.api.errors.exception_handler",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Strict JSON: NaN/Infinity, 1e400, NUL, lone surrogates and duplicate keys are a 400
    # naming the JSON path (reviewhub/api/strictjson.py).
    "DEFAULT_PARSER_CLASSES": [
        "reviewhub.api.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # OPTIONS describes the view without running it (the schema at /api/schema/ has the rest).
    "DEFAULT_METADATA_CLASS": "reviewhub.api.metadata.ViewMetadata",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ReviewHub API",
    "DESCRIPTION": "Studies, items, outputs, judges, annotations and agreement reports.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation documents the error responses every endpoint can give (401, 403, 404,
    # 405, 406, 413, 415, 429, ...) in the one error shape.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "reviewhub.api.schema.document_error_responses",
    ],
    # /api/docs/ loads Swagger UI from drf-spectacular-sidecar (pinned in constraints.txt),
    # never from a CDN: it works offline and runs only code we ship.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Security hardening (production: DJANGO_DEBUG=0 plus these) -------------------------
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
# Secure cookies everywhere once http is redirected to https; on any https request the
# session and CSRF cookies are marked Secure regardless (reviewhub/middleware.py).
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
if env.bool("DJANGO_BEHIND_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy of every HTML page that sets none of its own (sign-in, admin, report
# pages, ...). Pages hold model output: no inline script, no foreign origins, no framing.
# /api/docs/ relaxes style-src only (reviewhub/urls.py).
REVIEWHUB_CSP = env(
    "REVIEWHUB_CSP",
    default=(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
        "form-action 'self'"
    ),
)

# --- Logging ----------------------------------------------------------------------------
LOG_LEVEL = env("REVIEWHUB_LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # stderr, not stdout: a command's stdout is its output (`TOKEN=$(manage.py token_create
    # ...)` must capture the secret alone), and containers collect both streams anyway.
    "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                            "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"},
                # Lockouts are warnings; the info lines (one per sign-in) are noise.
                "axes": {"level": "WARNING"}},
}

# --- Judges (see docs/judges.md) ----------------------------------------------------------
# Judge network and key allow-lists (docs/judges.md, "Network and key allow-lists"); checked
# when a judge version is created and again by the worker before every call.
# Base URLs a judge may call: scheme://host[:port][/path] prefixes, compared after
# normalisation; ":*" as the port admits any port. Nothing is implicit, loopback included.
REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = env.list(
    "REVIEWHUB_JUDGE_ALLOWED_BASE_URLS",
    default=["https://api.openai.com", "https://api.anthropic.com"],
)
# Also admit unlisted endpoints on loopback/private/link-local addresses (development only):
# they are called without a key and their error bodies are never shown to leads.
REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS = env.bool(
    "REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS", default=False
)
# Environment variables a judge's api_key_env may name (names or glob patterns). ReviewHub's
# own (DJANGO_*, DATABASE_*, REDIS_*, CELERY_*, REVIEWHUB_*, every setting name, ...) never.
REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = env.list(
    "REVIEWHUB_JUDGE_KEY_ENV_ALLOWED", default=["*_API_KEY"]
)

# --- Judge runs (queue, rate limits, sweeper; see judges/runs.py and docs/judges.md) ---------
# Per-provider limits shared by every worker through Redis (REDIS_URL), or per process when
# REDIS_URL is empty. Keys: "host" or "host/model" (the most specific wins), e.g.
# {"api.openai.com/gpt-4o-mini": {"max_in_flight": 64, "rpm": 5000, "tpm": 2000000}}.
REVIEWHUB_PROVIDER_LIMITS = env.json("REVIEWHUB_PROVIDER_LIMITS", default={})
# Calls one batch task keeps in flight (asyncio + httpx inside one worker process).
REVIEWHUB_JUDGE_CONCURRENCY = env.int("REVIEWHUB_JUDGE_CONCURRENCY", default=64)
# Batch tasks queued per run, so that the pipeline never drains while one task hands over.
REVIEWHUB_JUDGE_TASKS_PER_RUN = env.int("REVIEWHUB_JUDGE_TASKS_PER_RUN", default=4)
# Seconds one batch task keeps claiming before it re-enqueues itself and returns.
REVIEWHUB_JUDGE_TASK_SLICE_S = env.float("REVIEWHUB_JUDGE_TASK_SLICE_S", default=120.0)
# A claimed job not recorded within this many seconds is re-queued (worker presumed dead).
REVIEWHUB_JUDGE_LEASE_S = env.float("REVIEWHUB_JUDGE_LEASE_S", default=300.0)
# Claims per job before a transient failure becomes final.
REVIEWHUB_JUDGE_MAX_ATTEMPTS = env.int("REVIEWHUB_JUDGE_MAX_ATTEMPTS", default=5)
# Exponential backoff for transient errors: base * 2**(attempt-1), full jitter, capped.
REVIEWHUB_JUDGE_BACKOFF_BASE_S = env.float("REVIEWHUB_JUDGE_BACKOFF_BASE_S", default=1.0)
REVIEWHUB_JUDGE_BACKOFF_CAP_S = env.float("REVIEWHUB_JUDGE_BACKOFF_CAP_S", default=60.0)
# How often celery beat runs the sweeper (expired leases, idle runs, missing verdicts).
REVIEWHUB_JUDGE_SWEEP_INTERVAL_S = env.float("REVIEWHUB_JUDGE_SWEEP_INTERVAL_S", default=30.0)
CELERY_TASK_ROUTES = {"judges.*": {"queue": "judges"}}
CELERY_BEAT_SCHEDULE = {
    "judges-sweep": {
        "task": "judges.sweep",
        "schedule": REVIEWHUB_JUDGE_SWEEP_INTERVAL_S,
        "options": {"queue": "judges", "expires": REVIEWHUB_JUDGE_SWEEP_INTERVAL_S},
    },
}
# --- Candidate runs (generation/, docs/generation.md) -----------------------------------------
# They share the judge queue's worker pool, leases, attempts, backoff and allow-lists (the
# REVIEWHUB_JUDGE_* settings above). A candidate's batch task keeps C requests in flight for
# this long before handing over to its successor; each hand-over dips the load briefly.
REVIEWHUB_GENERATION_TASK_SLICE_S = env.float("REVIEWHUB_GENERATION_TASK_SLICE_S", default=600.0)
CELERY_TASK_ROUTES["generation.*"] = {"queue": "judges"}
CELERY_BEAT_SCHEDULE["generation-sweep"] = {
    "task": "generation.sweep",
    "schedule": REVIEWHUB_JUDGE_SWEEP_INTERVAL_S,
    "options": {"queue": "judges", "expires": REVIEWHUB_JUDGE_SWEEP_INTERVAL_S},
}
# Where celery beat keeps its schedule state (last run of each entry). Exactly one beat runs per
# deployment (compose's `beat` service, the demo worker's `-B`); without one no sweep runs
# after the start-up one, and a run whose worker was killed never recovers (docs/deploy.md).
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Background-work heartbeat (reviewhub/heartbeat.py) ----------------------------------
# How often celery beat sends the heartbeat task, and the age after which lead pages say that
# background work (judge runs, reports) is not running.
REVIEWHUB_HEARTBEAT_INTERVAL_S = env.float("REVIEWHUB_HEARTBEAT_INTERVAL_S", default=30.0)
REVIEWHUB_HEARTBEAT_STALE_S = env.float("REVIEWHUB_HEARTBEAT_STALE_S", default=120.0)
CELERY_BEAT_SCHEDULE["reviewhub-heartbeat"] = {
    "task": "reviewhub.heartbeat",
    "schedule": REVIEWHUB_HEARTBEAT_INTERVAL_S,
    "options": {"expires": REVIEWHUB_HEARTBEAT_INTERVAL_S},
}

# --- Monitoring (see docs/monitoring.md) ----------------------------------------------------
# How often celery beat recomputes the live windows and evaluates the alerts of every active
# deployment (idempotent: a tick that finds nothing new changes nothing).
# Alert webhooks leave from the server: loopback/private/link-local targets only when allowed
# (monitoring/notify.py, docs/monitoring.md).
REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS = env.bool(
    "REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS", default=False
)
REVIEWHUB_MONITORING_TICK_S = env.float("REVIEWHUB_MONITORING_TICK_S", default=300.0)
# Rows (and labels) per POST to /api/deployments/<id>/traffic (and .../labels).
REVIEWHUB_TRAFFIC_BATCH_MAX = env.int("REVIEWHUB_TRAFFIC_BATCH_MAX", default=5000)
# Pulling traffic from a deployment's Langfuse source at each tick (monitoring/langfuse_pull.py):
# observations per page, pages per tick, the window read again for late observations, timeout.
REVIEWHUB_LANGFUSE_PAGE_LIMIT = env.int("REVIEWHUB_LANGFUSE_PAGE_LIMIT", default=100)
REVIEWHUB_LANGFUSE_MAX_PAGES = env.int("REVIEWHUB_LANGFUSE_MAX_PAGES", default=50)
REVIEWHUB_LANGFUSE_OVERLAP_S = env.float("REVIEWHUB_LANGFUSE_OVERLAP_S", default=900.0)
REVIEWHUB_LANGFUSE_TIMEOUT_S = env.float("REVIEWHUB_LANGFUSE_TIMEOUT_S", default=30.0)
CELERY_BEAT_SCHEDULE["monitoring-tick"] = {
    "task": "monitoring.tick",
    "schedule": REVIEWHUB_MONITORING_TICK_S,
    "options": {"expires": REVIEWHUB_MONITORING_TICK_S},
}

# --- Annotations (see docs/annotation.md) ---------------------------------------------------
# Minutes an annotator holds an output before it returns to the pool (heartbeats extend it).
REVIEWHUB_LEASE_MINUTES = env.int("REVIEWHUB_LEASE_MINUTES", default=15)
# Minutes after submitting during which an annotator may revise their own annotation.
REVIEWHUB_REVISION_WINDOW_MINUTES = env.int("REVIEWHUB_REVISION_WINDOW_MINUTES", default=60)

# --- Judge providers and prices (see docs/judges.md) ----------------------------------------
# USD per million tokens, keyed "provider:model", "model" or a "prefix*"; the env JSON replaces
# this default table. List prices change: check them, and override per judge with "prices".
REVIEWHUB_JUDGE_PRICES = env.json(
    "REVIEWHUB_JUDGE_PRICES",
    default={
        "openai:gpt-4o-mini*": {"input_per_mtok": 0.15, "output_per_mtok": 0.60},
        "openai:gpt-4o*": {"input_per_mtok": 2.50, "output_per_mtok": 10.00},
        "openai:gpt-4.1-nano*": {"input_per_mtok": 0.10, "output_per_mtok": 0.40},
        "openai:gpt-4.1-mini*": {"input_per_mtok": 0.40, "output_per_mtok": 1.60},
        "openai:gpt-4.1*": {"input_per_mtok": 2.00, "output_per_mtok": 8.00},
        "anthropic:claude-3-5-haiku*": {"input_per_mtok": 0.80, "output_per_mtok": 4.00},
        "anthropic:claude-3-5-sonnet*": {"input_per_mtok": 3.00, "output_per_mtok": 15.00},
        "anthropic:claude-3-7-sonnet*": {"input_per_mtok": 3.00, "output_per_mtok": 15.00},
        "anthropic:claude-sonnet-4*": {"input_per_mtok": 3.00, "output_per_mtok": 15.00},
        "anthropic:claude-opus-4*": {"input_per_mtok": 15.00, "output_per_mtok": 75.00},
    },
)
# Seconds between the lease sweeps that "next" runs inline (0: on every call). The Celery beat
# task annotations.expire_leases sweeps too.
REVIEWHUB_LEASE_SWEEP_SECONDS = env.float("REVIEWHUB_LEASE_SWEEP_SECONDS", default=5.0)
CELERY_BEAT_SCHEDULE["annotations-expire-leases"] = {
    "task": "annotations.expire_leases",
    "schedule": 60.0,
    "options": {"expires": 60.0},
}

# --- reports ---
# Seconds after which a report still "running" is considered abandoned and may be reclaimed.
REVIEWHUB_REPORT_STALE_S = env.int("REVIEWHUB_REPORT_STALE_S", default=1800)

# --- studies ---
# Stable OpenAPI enum names for the studies models (without them drf-spectacular invents
# names such as "Kind972Enum" when two apps both have a "kind" field).
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] = {
    **SPECTACULAR_SETTINGS.get("ENUM_NAME_OVERRIDES", {}),  # type: ignore[dict-item]
    "StratumKindEnum": "studies.models.StratumDimension.Kind",
    "CriterionScaleEnum": "studies.models.Criterion.Scale",
    "StudyStatusEnum": "studies.models.Study.Status",
    "MembershipRoleEnum": "studies.models.Membership.Role",
    "JudgeKindEnum": "judges.models.Judge.Kind",
    "JudgeRunStatusEnum": "judges.models.JudgeRun.Status",
    "JudgeJobStatusEnum": "judges.models.JudgeJob.Status",
    "AgreementReportStatusEnum": "snapshots.models.ReportSnapshot.Status",
    "ReportKindEnum": "snapshots.models.ReportSnapshot.Kind",
    "AssignmentStatusEnum": "annotations.models.Assignment.Status",
}

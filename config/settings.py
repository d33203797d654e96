"""Settings, read from the environment in this one place.

Production differs from development only by environment variables: every one is
listed in docs/configuration.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_file_load, env_int, env_list, env_str
from config.redis_async import connection_options
from config.redis_server import choose_redis, with_db

# Lets annotations such as ModelAdmin[Book] work at run time, not only under mypy.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
# Before any setting is read: .env (written by `make run`) gives a process started by
# hand the DEBUG, SECRET_KEY and Redis of `make run`. Variables already set win; a test
# run (config.settings_test) and the processes it starts read no .env.
env_file_load(BASE_DIR / ".env")
VAR_DIR = Path(env_str("LIBRARY_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)

if DEBUG:
    # Development only; with DEBUG off SECRET_KEY must come from the environment.
    SECRET_KEY = env_str("SECRET_KEY", "dev-only-insecure-key-do-not-use-in-production")
else:
    SECRET_KEY = env_str("SECRET_KEY", "")
    if len(SECRET_KEY) < 50:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set to at least 50 characters (in development, "
            "`make run` writes one to .env)"
        )

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS entries need a scheme (https://...), not {_origin!r}"
        )

# daphne serves the site as `python -m daphne` (Procfile); it is not an installed app,
# which would only swap in its runserver and import its server (Twisted, TLS) into
# every manage.py process: a quarter of a second of start-up for each worker, the
# scheduler and each process a live lab run starts.
INSTALLED_APPS = [
    "config.admin_apps.ProjectAdminConfig",  # django.contrib.admin, our site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    # Learner accounts: sign-up, e-mail verification, password reset, rate limits.
    "allauth",
    "allauth.account",
    "channels",
    "django_rq",
    "library",
    "messaging",
    "jobs",
    "realtime",
    "course",
]

MIDDLEWARE = [
    # Outermost: the pages it stores carry every header the stack below adds (the
    # security headers too), so the ASGI front can replay them as they are. It
    # leaves to the stack what must come first (SSL redirect, Host check).
    "library.cache.pages.PageCacheMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A NUL byte in the path, query or form: 400 before any view or the admin
    # sees it (PostgreSQL refuses it in a lookup with a DataError).
    "library.middleware.RefuseNulMiddleware",
    # WhiteNoise, able to stay in an async chain (config/static.py).
    "config.static.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # Below authentication: it asks whether the request is signed in.
    "library.middleware.PrivatePagesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

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

# --- Database -----------------------------------------------------------------
# SQLite is the embedded default. Several processes write it (daphne, rq workers, the
# scheduler): WAL lets readers run beside the writer, the timeout makes a writer wait
# for the lock instead of failing, and IMMEDIATE takes the write lock when a
# transaction begins, so two transactions never deadlock upgrading a read lock.
_SQLITE_DEFAULT = f"sqlite:///{VAR_DIR / 'library.sqlite3'}"
_database_url = env_str("DATABASE_URL", _SQLITE_DEFAULT)
try:
    _database = dj_database_url.parse(_database_url, conn_max_age=0)
except ValueError as error:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {error}") from None
if not _database.get("ENGINE"):
    raise ImproperlyConfigured(f"DATABASE_URL has an unknown scheme: {_database_url!r}")
if _database["ENGINE"] == "django.db.backends.sqlite3":
    _database["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    _database["TEST"] = {"NAME": str(VAR_DIR / "test-library.sqlite3")}
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, rq, channels -----------------------------------------------
REDIS_CHOICE = choose_redis(os.environ, VAR_DIR / "redis")
REDIS_URL = with_db(REDIS_CHOICE.url, env_int("LIBRARY_REDIS_DB", 0, minimum=0))

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "lib",
        "TIMEOUT": 300,
    }
}

RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": timeout}
    for name, timeout in (
        ("default", 300),
        ("messaging", 120),
    )
}
# Jobs enqueued inside a transaction are sent only once it commits (style: enqueue after
# commit), so a worker never looks for a row that is not visible yet.
RQ = {"COMMIT_MODE": "on_db_commit"}
RQ_SHOW_ADMIN_LINK = True

# The bearer token a Prometheus server sends to /metrics (library.exposition); empty:
# only signed-in users with messaging.view_operations may read it. A guessable token
# would open the numbers to anyone, so a short one stops start-up.
METRICS_TOKEN = env_str("LIBRARY_METRICS_TOKEN", "").strip()
if METRICS_TOKEN and len(METRICS_TOKEN) < 32:
    raise ImproperlyConfigured(
        "LIBRARY_METRICS_TOKEN must be at least 32 characters (or empty to turn "
        "token access off)"
    )

# The messaging lease (visibility timeout): how long a claimed delivery stays hidden
# from other workers before it is considered abandoned.
MESSAGING_LEASE_SECONDS = env_int("MESSAGING_LEASE_SECONDS", 30, minimum=1)
# Whether a drainer's transactions wait for PostgreSQL to flush them to disk. Off:
# a server crash may undo the last fraction of a second of drain work (claims, done
# marks, guard rows and effects together), which is then done again; the outbox
# message itself is committed by the loan's own, synchronous transaction.
MESSAGING_DRAIN_SYNCHRONOUS_COMMIT = env_bool(
    "MESSAGING_DRAIN_SYNCHRONOUS_COMMIT", False
)
# Retention of the outbox log (messaging.services.streams.log_trim): messages older
# than the age, or beyond the newest count, are trimmed once every subscription is done.
MESSAGING_RETENTION_DAYS = env_int("MESSAGING_RETENTION_DAYS", 30, minimum=1)
MESSAGING_RETENTION_MESSAGES = env_int(
    "MESSAGING_RETENTION_MESSAGES", 1_000_000, minimum=1
)

# How long a branch's shelf counts are fresh: the server's stale-while-revalidate
# window and the max-age of the pages that show them (library.cache).
CACHE_STOCK_FRESH_S = env_int("LIBRARY_CACHE_STOCK_FRESH_S", 5, minimum=1)

# Admission control of HTTP requests, per daphne process (jobs.shedding): running
# and queued bounds, places only the critical class may use, the queue budget of a
# normal request (critical 2x, low 0.5x) and the Retry-After of a 503.
ADMISSION_ENABLED = env_bool("LIBRARY_ADMISSION", True)
ADMISSION_MAX_RUNNING = env_int("LIBRARY_ADMISSION_MAX_RUNNING", 32, minimum=1)
ADMISSION_MAX_QUEUED = env_int("LIBRARY_ADMISSION_MAX_QUEUED", 128, minimum=0)
ADMISSION_RESERVED = env_int("LIBRARY_ADMISSION_RESERVED", 2, minimum=0)
ADMISSION_QUEUE_BUDGET_MS = env_int(
    "LIBRARY_ADMISSION_QUEUE_BUDGET_MS", 10_000, minimum=1
)
ADMISSION_RETRY_AFTER_S = env_int("LIBRARY_ADMISSION_RETRY_AFTER", 1, minimum=1)
# Real-time endpoints (realtime/): how long a long poll may hold, how often the
# watcher looks for changes, the SSE heartbeat and the reconnect delay it suggests.
REALTIME_LONG_POLL_MAX_MS = env_int("REALTIME_LONG_POLL_MAX_MS", 30_000, minimum=100)
REALTIME_LONG_POLL_DEFAULT_MS = env_int(
    "REALTIME_LONG_POLL_DEFAULT_MS", 25_000, minimum=100
)
REALTIME_POLL_INTERVAL_MS = env_int("REALTIME_POLL_INTERVAL_MS", 150, minimum=10)
# Event streams and long polls one server process holds at once; past it, 503 with
# Retry-After (realtime.limits). Each needs a file descriptor: ulimit -n is checked
# against it when the ASGI application loads.
REALTIME_MAX_STREAMS = env_int("REALTIME_MAX_STREAMS", 10_000, minimum=1)
# One client's share of a process (realtime.limits): streams and long polls, and
# live-shelf sockets, per client address and per session; past it 429 (streams) or
# close code 4429 (sockets). 0: no share, only the process's bound.
REALTIME_STREAMS_PER_CLIENT = env_int("REALTIME_STREAMS_PER_CLIENT", 100, minimum=0)
REALTIME_STREAMS_PER_SESSION = env_int("REALTIME_STREAMS_PER_SESSION", 10, minimum=0)
REALTIME_SOCKETS_PER_CLIENT = env_int("REALTIME_SOCKETS_PER_CLIENT", 100, minimum=0)
REALTIME_SOCKETS_PER_SESSION = env_int("REALTIME_SOCKETS_PER_SESSION", 10, minimum=0)
REALTIME_SSE_HEARTBEAT_S = env_int("REALTIME_SSE_HEARTBEAT_S", 15, minimum=1)
REALTIME_SSE_RETRY_MS = env_int("REALTIME_SSE_RETRY_MS", 2000, minimum=100)
REALTIME_PRESENCE_TTL_S = env_int("REALTIME_PRESENCE_TTL_S", 30, minimum=2)
# Lab-only routes, on only in the daphnes the labs, tests and benchmarks start:
# /_lab/work and /_lab/wait (course.instruments.routes; work capacity 0: unbounded)
# and the other lab-only views.
LAB_ROUTES = env_bool("LIBRARY_LAB_ROUTES", False)
LAB_WORK_CAPACITY = env_int("LIBRARY_LAB_WORK_CAPACITY", 0, minimum=0)
# --- The lab service (course.services.labqueue, manage.py labworker) ----------------
# Lab runs wait in the database and are taken round-robin across learners by lab
# worker processes. Waiting runs in all before new ones are refused with 503.
LAB_QUEUE_CAPACITY = env_int("LIBRARY_LAB_QUEUE_CAPACITY", 200, minimum=1)
# Runs one learner (or one anonymous session) may have waiting or running at once,
# and one client address without an account.
LAB_RUNS_PER_VISITOR = env_int("LIBRARY_LAB_RUNS_PER_VISITOR", 3, minimum=1)
LAB_ANON_RUNS_PER_ADDRESS = env_int("LIBRARY_LAB_ANON_RUNS_PER_ADDRESS", 6, minimum=1)
# Live runs a learner may start in an hour (an operator may change it per account).
LAB_LIVE_RUNS_PER_HOUR = env_int("LIBRARY_LAB_LIVE_RUNS_PER_HOUR", 20, minimum=0)
# A run's cost is its estimated work as a multiple of the lab's default run
# (course.policies.run_cost). The largest run without an account, and with one;
# the cost one client address (anonymous) or one learner may spend in an hour.
LAB_ANON_COST_PER_RUN = env_int("LIBRARY_LAB_ANON_COST_PER_RUN", 5, minimum=1)
LAB_COST_PER_RUN = env_int("LIBRARY_LAB_COST_PER_RUN", 250, minimum=1)
LAB_ANON_COST_PER_HOUR = env_int("LIBRARY_LAB_ANON_COST_PER_HOUR", 60, minimum=1)
LAB_COST_PER_HOUR = env_int("LIBRARY_LAB_COST_PER_HOUR", 2000, minimum=1)
# The explorable lesson page (course.explore) reruns the model as a parameter moves,
# answering kept parameter sets at once: new ones a client address (or a signed-in
# learner) may ask the web process to run in a minute.
LAB_EXPLORE_RUNS_PER_MINUTE = env_int(
    "LIBRARY_LAB_EXPLORE_RUNS_PER_MINUTE", 20, minimum=1
)
# Challenge answers checked per minute per learner (or client address): each check
# runs the lab's model inside the web process.
LAB_CHALLENGE_ANSWERS_PER_MINUTE = env_int(
    "LIBRARY_LAB_CHALLENGE_ANSWERS_PER_MINUTE", 30, minimum=1
)
# Its model runs (CPU-bound Python) go to this many worker processes per web process
# (course.model_pool), so they never hold the web process's interpreter lock against
# its pages; 0 runs them in the web process, LAB_EXPLORE_RUNS_AT_ONCE at a time.
LAB_EXPLORE_PROCESSES = env_int("LIBRARY_LAB_EXPLORE_PROCESSES", 1, minimum=0)
LAB_EXPLORE_RUNS_AT_ONCE = env_int("LIBRARY_LAB_EXPLORE_RUNS_AT_ONCE", 1, minimum=1)
# The disk cache of model runs (var/cache/models) is swept down to this size.
LAB_MODEL_CACHE_MAX_MB = env_int("LIBRARY_LAB_MODEL_CACHE_MAX_MB", 256, minimum=1)
# An identical run that finished this recently is offered instead of a new one.
LAB_REUSE_S = env_int("LIBRARY_LAB_REUSE_S", 300, minimum=0)
# A lab worker's slots: live runs at once (default: one per core, so a host never
# takes more live runs than it has cores) and model runs at once (their own slots:
# a model run never waits behind a live one). 0 takes the default.
LAB_LIVE_SLOTS = env_int("LIBRARY_LAB_LIVE_SLOTS", 0, minimum=0) or (
    os.cpu_count() or 1
)
LAB_MODEL_SLOTS = env_int("LIBRARY_LAB_MODEL_SLOTS", 2, minimum=1)
# A running run's lease: renewed by its worker's heartbeat; a run whose lease ran out
# (its worker was killed) is marked failed.
LAB_LEASE_S = env_int("LIBRARY_LAB_LEASE_S", 20, minimum=3)
# The lab worker's CPU priority (nice value, inherited by every process it starts),
# so a class's runs yield the CPU to the library's own web and workers.
LAB_NICE = env_int("LIBRARY_LAB_NICE", 10, minimum=0)
# And, on Linux, the SCHED_IDLE scheduling class: a library process that wakes up
# takes the CPU from an idle-class one at once, where a niced one may first finish
# its time slice (a few ms, paid on every wake-up of a request).
LAB_SCHED_IDLE = env_bool("LIBRARY_LAB_SCHED_IDLE", True)
# --- Operator drills (course.drills) ---------------------------------------------
# A drill is an incident in a sandbox of its own, served by a daphne of its own on
# 127.0.0.1. Drills open at once on the site, closed after this long without the
# learner's drill page asking after them, and at the latest after the longest.
DRILLS_OPEN = env_int("LIBRARY_DRILLS_OPEN", 4, minimum=1)
DRILL_IDLE_S = env_int("LIBRARY_DRILL_IDLE_S", 900, minimum=30)
DRILL_LONGEST_S = env_int("LIBRARY_DRILL_LONGEST_S", 3600, minimum=60)

# channels-redis waits for a consumer's next message with a 5 s blocking pop
# (RedisChannelLayer.brpop_timeout); redis-py's default read timeout is also 5 s, so
# an idle consumer's read could time out first and kill its socket with 1011. The read
# timeout stays finite, to notice a Redis that stopped answering, but clears the pop
# by three times its length.
# The connections keep a task's cancellation (config.redis_async): on Python 3.11 a
# cancel landing during a write is otherwise lost, and the consumer's receive loop
# then polls Redis for ever.
_CHANNEL_HOST: dict[str, object] = connection_options(
    REDIS_URL, socket_timeout=15, socket_connect_timeout=2
)
if not REDIS_URL.startswith("unix:"):
    # TCP only: redis-py's unix-socket connection (the embedded Redis) takes no
    # keepalive option and refuses to start with it.
    _CHANNEL_HOST["socket_keepalive"] = True
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [_CHANNEL_HOST],
            "capacity": 1000,
            "expiry": 30,
            "prefix": env_str("LIBRARY_CHANNEL_PREFIX", "asgi"),
        },
    }
}
# LIBRARY_CHANNEL_LAYER=memory swaps in channels' in-process layer: a group message
# then reaches only the process that sent it. Only the broadcast lab runs that way,
# to show what a second instance misses; every deployment keeps "redis".
CHANNEL_LAYER = env_str("LIBRARY_CHANNEL_LAYER", "redis").strip().lower()
if CHANNEL_LAYER == "memory":
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
elif CHANNEL_LAYER != "redis":
    raise ImproperlyConfigured(
        f"LIBRARY_CHANNEL_LAYER must be redis or memory, not {CHANNEL_LAYER!r}"
    )

# --- Auth, sessions, security -------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation."
        "UserAttributeSimilarityValidator"
    },
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if DEBUG and env_bool("LIBRARY_FAST_PASSWORD_HASHER", False):
    # Test runs only (config.settings_test sets it; the processes a test starts
    # inherit it): a PBKDF2 hash costs about 0.3 s of CPU here, and the suite makes
    # hundreds. Never honoured without DEBUG, so production keeps PBKDF2 first.
    PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

# Accounts (django-allauth). A learner signs up with a user name, an e-mail address
# and a password, and signs in once the address is verified; accounts an operator
# made (the admin, seed_library, createsuperuser) have no address to verify
# (course.accounts). Sign-up and sign-in are rate limited per client address and
# per account, in the default cache (Redis).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_ADAPTER = "course.accounts.LearnerAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_CHANGE_EMAIL = True
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[Library Lab] "
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "http" if DEBUG else "https"
ACCOUNT_RATE_LIMITS = {
    # A class behind one address signs up together: 30 in 10 minutes, not more.
    "signup": env_str("LIBRARY_SIGNUP_RATE", "30/10m/ip"),
    "login": env_str("LIBRARY_LOGIN_RATE", "30/m/ip"),
    "login_failed": env_str("LIBRARY_LOGIN_FAILED_RATE", "10/m/ip,5/5m/key"),
}

# Mail: the console in development (the verification and reset links appear in the
# web process's output), SMTP in production.
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Library Lab <noreply@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
if DEBUG and not env_str("EMAIL_HOST", ""):
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
else:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
    EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1)
    EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
    EMAIL_TIMEOUT = 10

SECURE = not DEBUG and env_bool("SECURE_COOKIES", True)
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env_int(
    "SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# A drill's sandbox serves the site on another port of the same host, and browsers
# keep cookies per host, not per port: its cookies get names of their own, so
# signing in there never signs the learner out here (course.drills).
COOKIE_PREFIX = env_str("LIBRARY_COOKIE_PREFIX", "")
SESSION_COOKIE_NAME = f"{COOKIE_PREFIX}sessionid"
CSRF_COOKIE_NAME = f"{COOKIE_PREFIX}csrftoken"

# --- Static files -------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

LANGUAGE_CODE = "en"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

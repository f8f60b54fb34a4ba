"""Settings for every process of the platform, read from the environment (see README).

Embedded defaults run the demo with nothing installed: a SQLite file under ``var/``, the
in-memory channel layer, the local serving backend. Production and the test suite point
``DATABASE_URL`` at PostgreSQL and ``REDIS_URL`` at Redis.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from arena.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    parse_database_url,
    parse_redis_url,
)
from arena.private_files import private_dir_ensure, private_secret

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ARENA_VAR_DIR", str(BASE_DIR / "var")))
# The platform's own files: 0700, so no agent's Unix user reaches anything below it.
private_dir_ensure(VAR_DIR)


def _secret_from_file(name: str, generate: Callable[[], str] | None = None) -> str:
    """A secret kept in ``var/`` (0600) so a demo keeps sessions across restarts without setup."""
    return private_secret(VAR_DIR / name, generate=generate or (lambda: secrets.token_urlsafe(50)))


DEBUG = env_bool("ARENA_DEBUG", False)
SECRET_KEY = env_str("ARENA_SECRET_KEY", "") or _secret_from_file("secret_key")
# Salts voter identifiers (session, IP) before they are stored or exported.
VOTER_SALT = env_str("ARENA_VOTER_SALT", "") or _secret_from_file("voter_salt")
# Encrypts secrets stored in the database (upstream API keys; see arena/encryption.py).
FIELD_ENCRYPTION_KEYS = env_list("ARENA_FIELD_ENCRYPTION_KEYS", []) or [
    _secret_from_file("field_encryption_key", lambda: Fernet.generate_key().decode())
]
ALLOWED_HOSTS = env_list("ARENA_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("ARENA_CSRF_TRUSTED_ORIGINS", [])
# The reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed
# (arena/proxy_headers.py): addresses or networks, and "unix" for a Unix socket only the proxy
# can open. Empty (the default): no header is believed, the connection's address is the
# client's. The deployment kit (infra/deploy/) sets "unix": its workers listen on sockets only
# nginx can open, and nginx sets the header to its own peer (never appends to the client's).
ARENA_TRUSTED_PROXIES = env_list("ARENA_TRUSTED_PROXIES", [])
# The Retry-After, in seconds, of the 503 a request gets while the database is unreachable.
ARENA_OUTAGE_RETRY_AFTER_S = env_int("ARENA_OUTAGE_RETRY_AFTER_S", 5, minimum=1)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "arena.competition",
    "arena.serving",
    "arena.battles",
    "arena.leaderboard",
    "cluster",
    "agents",
    "agents.runs",
    "evalsuite",
    "safety",
    "arena.phases",
    "frontend",
    "security",
]

MIDDLEWARE = [
    # First: on the agent gateway port nothing but /api/ and /proxy/ runs at all.
    "agents.gateway.agents_gateway",
    # A view that fails because the database is restarting answers 503 "try again" (arena/outage.py).
    "arena.outage.DatabaseOutageMiddleware",
    # Each agent's requests to the agent API and the proxy, counted: 429 past its allowance.
    "agents.rate_limit.agent_rate_limit",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "frontend.middleware.content_security_policy",
    "frontend.middleware.voting_closed_to_agents",
]

ROOT_URLCONF = "arena.urls"
ASGI_APPLICATION = "arena.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {
    "default": parse_database_url(
        env_str("DATABASE_URL", "sqlite:///var/arena.sqlite3"), base_dir=BASE_DIR
    )
}
# A pool of at most this many PostgreSQL connections per process (psycopg_pool), each checked
# before it is lent; 0 (the default): a connection per request, as Django opens them. The
# deployment kit's web workers use 8: a connection per request cost each worker more CPU than
# the vote itself, and under load it ran PostgreSQL out of connections (bench/README.md).
ARENA_DATABASE_POOL = env_int("ARENA_DATABASE_POOL", 0, minimum=0)
if ARENA_DATABASE_POOL and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django checks each connection as the pool lends it (CONN_HEALTH_CHECKS): one a restart
    # broke is replaced.
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 1,
        "max_size": ARENA_DATABASE_POOL,
        "timeout": 10,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_redis_url = env_str("REDIS_URL", "")
if _redis_url:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": parse_redis_url(_redis_url),
                        # redis-py 8 gives every read a 5 s timeout by default, which is also
                        # how long channels_redis blocks waiting for a message: a socket idle
                        # that long (a live board between refits) raced it, lost, and was closed
                        # (bench/live_fanout.py). Longer than the wait, short enough to notice a
                        # dead Redis.
                        "socket_timeout": 15,
                    }
                ]
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("ARENA_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_AGE = 60 * 60 * 24 * 30
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Where `collectstatic` puts the files a web server serves; the deployment kit points it outside
# the private var/ so nginx's own user can read it.
STATIC_ROOT = Path(env_str("ARENA_STATIC_ROOT", str(VAR_DIR / "static")))
# WhiteNoise expects it even when serving from the apps.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("ARENA_LOG_LEVEL", "INFO")},
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpx2", "daphne")},
}

# --- The arena --------------------------------------------------------------------------
ARENA_PROMPT_MAX_CHARS = env_int("ARENA_PROMPT_MAX_CHARS", 2000, minimum=1)
ARENA_MAX_TOKENS = env_int("ARENA_MAX_TOKENS", 160, minimum=1)
# An answer's characters, whatever its tokens: a contestant's tokenizer may have huge tokens,
# and both answers are shown at one pace (ARENA_STREAM_CHARS_PER_SECOND), so this bounds how
# long a battle takes to show.
ARENA_ANSWER_MAX_CHARS = env_int("ARENA_ANSWER_MAX_CHARS", 6000, minimum=1)
ARENA_TEMPERATURE = env_float("ARENA_TEMPERATURE", 0.7, minimum=0.0)
ARENA_GENERATION_TIMEOUT_S = env_float("ARENA_GENERATION_TIMEOUT_S", 60.0, minimum=0.1)
# A vote cast sooner than this after both answers are shown is refused: nobody reads two
# answers that fast, so it is a bot or a reflex, not a judgement.
ARENA_MIN_VOTE_SECONDS = env_float("ARENA_MIN_VOTE_SECONDS", 2.0, minimum=0.0)
# The pace, in characters a second, at which both answers are shown: a model's own speed and
# time to first token would tell who wrote it (arena/battles/pacing.py). 0 streams each side as
# its server writes it.
ARENA_STREAM_CHARS_PER_SECOND = env_float("ARENA_STREAM_CHARS_PER_SECOND", 300.0, minimum=0.0)
# New battles per voter (session) and per salted IP hash, over a sliding minute.
ARENA_BATTLES_PER_MINUTE = env_int("ARENA_BATTLES_PER_MINUTE", 10, minimum=1)
ARENA_BATTLES_PER_MINUTE_PER_IP = env_int("ARENA_BATTLES_PER_MINUTE_PER_IP", 60, minimum=1)
# The voter's prompts in one battle before the vote: the first and up to MAX_TURNS - 1
# follow-ups, each answered by both models with their own history (1: one-turn battles only).
# A follow-up counts against the per-minute limits above as a new battle does.
ARENA_MAX_TURNS = env_int("ARENA_MAX_TURNS", 3, minimum=1)
# Kiosk mode (/kiosk, frontend/README.md): battles a minute per registered booth device, which
# many voters share, instead of the per-session and per-network limits above; how long a
# voter may stay idle, and how long the reveal stays up, before the kiosk starts a new voter.
ARENA_KIOSK_BATTLES_PER_MINUTE = env_int("ARENA_KIOSK_BATTLES_PER_MINUTE", 30, minimum=1)
ARENA_KIOSK_IDLE_SECONDS = env_float("ARENA_KIOSK_IDLE_SECONDS", 90.0, minimum=1.0)
ARENA_KIOSK_REVEAL_SECONDS = env_float("ARENA_KIOSK_REVEAL_SECONDS", 8.0, minimum=0.0)
ARENA_KIOSK_ENROLMENT_HOURS = env_float("ARENA_KIOSK_ENROLMENT_HOURS", 24.0, minimum=0.1)
# The online arena's address, for the kiosk's QR code and the enrolment links.
ARENA_PUBLIC_URL = env_str("ARENA_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
# Networks that may not use the voting site (its page, prompts, battles, votes): the agents'
# hosts and the cluster's, comma-separated CIDRs (frontend/middleware.py). The local setup keeps
# agents' users off the site's port with the firewall instead (agents/firewall.py).
ARENA_VOTING_DENIED_NETWORKS = env_list("ARENA_VOTING_DENIED_NETWORKS", [])
# When a voter is flagged for organizers (arena/leaderboard/screening.py, `manage.py voters`).
ARENA_VOTER_SCREENING = {
    "min_votes": env_int("ARENA_SCREENING_MIN_VOTES", 10, minimum=1),
    "z_limit": env_float("ARENA_SCREENING_Z_LIMIT", 4.0, minimum=0.5),
    "burst_window_s": env_float("ARENA_SCREENING_BURST_WINDOW_S", 60.0, minimum=1.0),
    "burst_votes": env_int("ARENA_SCREENING_BURST_VOTES", 10, minimum=2),
    "sessions_per_network": env_int("ARENA_SCREENING_SESSIONS_PER_NETWORK", 20, minimum=2),
}
# Words that reveal a model's identity when an answer contains them (suffixed forms too:
# GPT-4 catches GPT-4o); every contestant's names and identity words are checked as well.
ARENA_IDENTITY_WORDS = env_list(
    "ARENA_IDENTITY_WORDS",
    [
        "OpenAI", "ChatGPT", "GPT-4", "GPT-5", "Anthropic", "Claude", "Gemini", "Google DeepMind",
        "Llama", "Meta AI", "Mistral", "Qwen", "DeepSeek", "RSI Arena",
    ],
)  # fmt: skip
# Also void an answer that says an agent's own name on its own ("I'm alpha" from alpha's
# model, whose contestant is "alpha-phase-1"). Off only where agents' names are common words.
ARENA_IDENTITY_MATCH_AGENT_NAME = env_bool("ARENA_IDENTITY_MATCH_AGENT_NAME", True)
ARENA_SERVING_BACKEND = env_str("ARENA_SERVING_BACKEND", "local")
ARENA_SERVING_HOST = env_str("ARENA_SERVING_HOST", "127.0.0.1")
ARENA_SERVING_BASE_PORT = env_int("ARENA_SERVING_BASE_PORT", 8100, minimum=1)
# The Slurm serving backend's server command (bash; the job sets $CHECKPOINT, $PORT and the
# opaque $SERVED_MODEL_NAME, and exports the server's key as VLLM_API_KEY, which is vLLM's
# --api-key: given on the command line, the key would show in `ps` on the node).
ARENA_SERVING_SLURM_COMMAND = env_str(
    "ARENA_SERVING_SLURM_COMMAND",
    'vllm serve "$CHECKPOINT" --host 0.0.0.0 --port "$PORT" --served-model-name "$SERVED_MODEL_NAME"',
)
ARENA_MODELS_DIR = Path(env_str("ARENA_MODELS_DIR", str(VAR_DIR / "models")))

# --- Agent runs (agents/runs/) ------------------------------------------------------------
# Each run's platform-owned folder (status file, bounded output log, the harness's
# conversation, so a restarted harness resumes), 0700 root, outside every sandbox.
AGENTS_RUNS_DIR = Path(env_str("AGENTS_RUNS_DIR", "/srv/rsi-arena/runs"))
# How a run is held to its CPU, memory and process limits: "auto" (cgroup v2, else v1, else
# plain rlimits), or one of "cgroup2", "cgroup1", "rlimits".
AGENTS_RUNS_LIMITS = env_str("AGENTS_RUNS_LIMITS", "auto")
# The cgroup folder runs' groups live in (`<root>/run-<id>`): fixed, so a restarted supervisor
# finds them again.
AGENTS_RUNS_CGROUP_ROOT = env_str("AGENTS_RUNS_CGROUP_ROOT", "rsi-arena")
# The module the `arena` harness runs as (`python -m MODULE --run ID`).
AGENTS_HARNESS_MODULE = env_str("AGENTS_HARNESS_MODULE", "agents.harness")
AGENTS_RUNS_DEFAULT_CPUS = env_float("AGENTS_RUNS_DEFAULT_CPUS", 2.0, minimum=0.01)
AGENTS_RUNS_DEFAULT_MEMORY_MIB = env_int("AGENTS_RUNS_DEFAULT_MEMORY_MIB", 8192, minimum=64)
AGENTS_RUNS_DEFAULT_PROCESSES = env_int("AGENTS_RUNS_DEFAULT_PROCESSES", 512, minimum=8)
AGENTS_RUNS_DEFAULT_MAX_RESTARTS = env_int("AGENTS_RUNS_DEFAULT_MAX_RESTARTS", 5, minimum=0)
# A run started outside a phase ends after this many hours unless told otherwise.
AGENTS_RUNS_DEFAULT_HOURS = env_float("AGENTS_RUNS_DEFAULT_HOURS", 24.0, minimum=0.001)
# After a crash, the next attempt waits BACKOFF * 2**(attempt-1) seconds, at most 10 minutes.
AGENTS_RUNS_BACKOFF_S = env_float("AGENTS_RUNS_BACKOFF_S", 10.0, minimum=0.0)
# A stopped run's processes get SIGTERM, then SIGKILL after this many seconds.
AGENTS_RUNS_STOP_GRACE_S = env_float("AGENTS_RUNS_STOP_GRACE_S", 10.0, minimum=0.0)
# The child's stdout and stderr, per attempt, are cut at this size.
AGENTS_RUNS_LOG_MAX_BYTES = env_int("AGENTS_RUNS_LOG_MAX_BYTES", 4 * 1024 * 1024, minimum=1024)
# How often a keeper reads its run's row (a stop also wakes it at once with SIGUSR1).
AGENTS_RUNS_POLL_S = env_float("AGENTS_RUNS_POLL_S", 5.0, minimum=0.05)
# A claimed attempt whose keeper has not registered after this long is taken for crashed.
AGENTS_RUNS_REGISTER_GRACE_S = env_float("AGENTS_RUNS_REGISTER_GRACE_S", 60.0, minimum=0.1)

# --- The cluster ------------------------------------------------------------------------
# `local` runs jobs as processes on this machine under the same limits (the demo); `slurm`
# drives a real Slurm cluster through its command-line tools.
CLUSTER_BACKEND = env_str("CLUSTER_BACKEND", "local")
CLUSTER_SLURM_PARTITION = env_str("CLUSTER_SLURM_PARTITION", "gpu")
CLUSTER_SLURM_PARENT_ACCOUNT = env_str("CLUSTER_SLURM_PARENT_ACCOUNT", "agents")
# Every process on this host that changes Slurm accounting (sacctmgr add/modify/delete) takes
# this lock first: slurmdbd 22.05 corrupts its association tree under concurrent changes
# (cluster/slurm/cli.py). Its folder is made root-only; every platform process must share it.
CLUSTER_SLURM_ACCOUNTING_LOCK = Path(
    env_str("CLUSTER_SLURM_ACCOUNTING_LOCK", "/run/rsi-arena/slurm-accounting.lock")
)

# --- Agents -----------------------------------------------------------------------------
# Sandboxes are Unix home directories under this root, one per agent, mode 0700.
AGENTS_SANDBOX_ROOT = Path(env_str("AGENTS_SANDBOX_ROOT", "/srv/rsi-arena/sandboxes"))
# An agent's Unix user and Slurm account are this prefix and its name (agent_alice). Another
# prefix keeps two platforms (or the test suite's parallel workers) apart on one machine and
# cluster; it starts with agent_, by which infra/firewall/setup.sh finds agents' users.
AGENTS_UNIX_USER_PREFIX = env_str("AGENTS_UNIX_USER_PREFIX", "agent_")
if not re.fullmatch(r"agent_([a-z0-9]{1,8}_)?", AGENTS_UNIX_USER_PREFIX):
    raise ImproperlyConfigured(
        f"AGENTS_UNIX_USER_PREFIX={AGENTS_UNIX_USER_PREFIX!r}: agent_, or agent_ and up to 8 "
        "lowercase letters or digits and _ (agent_w0_)"
    )
# What holds a sandbox to its storage quota at write time: "loop_image" (a filesystem image per
# agent, the quota's size, which also holds its jobs' and runs' /tmp) or "plain_directory"
# (none: only the periodic measurement blocks jobs; `security check` reports it).
AGENTS_SANDBOX_STORAGE = env_str("AGENTS_SANDBOX_STORAGE", "loop_image")
# The port on which the same site answers only the agent API (/api/) and the proxy (/proxy/)
# (agents/gateway.py): agents' configs point here; the firewall keeps them off the others.
AGENTS_GATEWAY_PORT = env_int("AGENTS_GATEWAY_PORT", 8001, minimum=1)
# The site's address as agents reach it (written into each sandbox's ~/.arena/config).
AGENTS_ARENA_URL = env_str("AGENTS_ARENA_URL", f"http://127.0.0.1:{AGENTS_GATEWAY_PORT}")
# Keeps agents' Unix users off the platform's ports (agents/firewall.py): nftables or none.
AGENTS_FIREWALL = env_str("AGENTS_FIREWALL", "nftables")
AGENTS_FIREWALL_TABLE = env_str("AGENTS_FIREWALL_TABLE", "rsi_arena")
# Ports agents are kept off besides the configured database's, Redis's, the model servers'
# (ARENA_SERVING_BASE_PORT and the next ones) and ARENA_PUBLIC_URL's: the voters' site as each
# setup serves it (80 and 443 in production, 8080 the deployment kit's nginx, 8000 the demo),
# PostgreSQL, Redis, MariaDB, slurmdbd. Never the gateway, slurmctld or the slurmds: agents
# submit with sbatch and srun. `security check` compares it with the ports the site listens on.
AGENTS_FIREWALL_PORTS = env_list(
    "AGENTS_FIREWALL_PORTS", ["80", "443", "8000", "8080", "5432", "6379", "3306", "6819"]
)
AGENTS_FIREWALL_SERVING_PORTS = env_int("AGENTS_FIREWALL_SERVING_PORTS", 100, minimum=1)
# Budgets an agent gets when provisioned, until a phase sets its own (the study's defaults).
AGENTS_DEFAULT_GPU_HOURS = env_float("AGENTS_DEFAULT_GPU_HOURS", 1000.0, minimum=0.0)
AGENTS_DEFAULT_MAX_GPUS = env_int("AGENTS_DEFAULT_MAX_GPUS", 8, minimum=0)
AGENTS_DEFAULT_MAX_PREEMPTIBLE_GPUS = env_int("AGENTS_DEFAULT_MAX_PREEMPTIBLE_GPUS", 8, minimum=0)
AGENTS_DEFAULT_MAX_JOB_HOURS = env_int("AGENTS_DEFAULT_MAX_JOB_HOURS", 24, minimum=1)
AGENTS_DEFAULT_STORAGE_GIB = env_int("AGENTS_DEFAULT_STORAGE_GIB", 400, minimum=1)
AGENTS_DEFAULT_API_CREDIT_USD = env_float("AGENTS_DEFAULT_API_CREDIT_USD", 300.0, minimum=0.0)
AGENTS_DEFAULT_PERIOD = env_str("AGENTS_DEFAULT_PERIOD", "phase-1")
# The cluster's shared software environment agents' jobs run (built by
# infra/training_env/setup.sh from an interpreter every agent's Unix user can execute).
AGENTS_TRAIN_ENV = Path(env_str("AGENTS_TRAIN_ENV", "/opt/rsi-arena/train-env"))
AGENTS_TRAIN_PYTHON = AGENTS_TRAIN_ENV / "bin" / "python"
# Models every agent may read (the base model of the competition): published here by the
# platform, world-readable, owned by root, outside any sandbox and outside the platform's var/.
AGENTS_SHARED_MODELS_DIR = Path(env_str("AGENTS_SHARED_MODELS_DIR", "/srv/rsi-arena/models"))
# Nominated checkpoints are copied here when their phase freezes, and served and evaluated
# from here only (agents/nominees.py): the platform's own, 0700, never an agent's to change.
AGENTS_NOMINEE_STORE = Path(env_str("AGENTS_NOMINEE_STORE", "/srv/rsi-arena/nominees"))
AGENTS_NOMINEE_MAX_GIB = env_int("AGENTS_NOMINEE_MAX_GIB", 400, minimum=1)
# Each agent's requests per window to the agent API and to the proxy (agents/rate_limit.py),
# counted in Redis across the web workers; past them, 429 with Retry-After. A jobs route asks
# the scheduler's accounting (sacct) for the agent's account at most once per interval.
AGENTS_API_RATE = env_int("AGENTS_API_RATE", 200, minimum=1)
AGENTS_PROXY_RATE = env_int("AGENTS_PROXY_RATE", 200, minimum=1)
# Requests with no valid token (missing, unknown, revoked), all agents' together per client
# address: counted before any view, so forged tokens cannot cost the workers unbounded lookups.
AGENTS_TOKENLESS_RATE = env_int("AGENTS_TOKENLESS_RATE", 100, minimum=1)
AGENTS_RATE_WINDOW_S = env_int("AGENTS_RATE_WINDOW_S", 10, minimum=1)
AGENTS_RATE_LIMIT_REDIS_URL = _redis_url
AGENTS_JOBS_SYNC_INTERVAL_S = env_float("AGENTS_JOBS_SYNC_INTERVAL_S", 5.0, minimum=0.0)
# Checkpoint validation (agents/checkpoints.py): the largest model a config or the weights may
# describe, and the bounds on the child process that loads the settings with transformers.
AGENTS_CHECKPOINT_MAX_PARAMETERS = env_int(
    "AGENTS_CHECKPOINT_MAX_PARAMETERS", 200_000_000_000, minimum=1
)
AGENTS_CHECKPOINT_PROBE_TIMEOUT_S = env_int("AGENTS_CHECKPOINT_PROBE_TIMEOUT_S", 120, minimum=1)
AGENTS_CHECKPOINT_PROBE_MEMORY_MIB = env_int(
    "AGENTS_CHECKPOINT_PROBE_MEMORY_MIB", 6144, minimum=512
)
# Agents' on-demand evaluations (evalsuite/on_demand.py): the runs an agent may have queued at
# once, each job's GPUs and time (charged to the agent's account), the answers' token limit.
EVALS_AGENT_MAX_QUEUED = env_int("EVALS_AGENT_MAX_QUEUED", 2, minimum=1)
EVALS_AGENT_GPUS = env_int("EVALS_AGENT_GPUS", 1, minimum=0)
EVALS_AGENT_JOB_MINUTES = env_int("EVALS_AGENT_JOB_MINUTES", 120, minimum=1)
EVALS_AGENT_MAX_TOKENS = env_int("EVALS_AGENT_MAX_TOKENS", 512, minimum=1)
# Each on-demand job copies the checkpoint into VAR_DIR; the copies of an agent's queued runs
# count against its storage quota, and together they must leave free on VAR_DIR's filesystem
# this margin plus, where the nominee store is on the same filesystem, the most the current
# phase's freeze can copy there (evalsuite/on_demand.py, disk_reserve_bytes).
EVALS_AGENT_DISK_RESERVE_GIB = env_float("EVALS_AGENT_DISK_RESERVE_GIB", 1.0, minimum=0.0)
# A run with a judge-graded benchmark bills the judge's calls to the agent's API credit; it is
# refused when less than this (in US cents) is left.
EVALS_AGENT_JUDGE_MIN_CREDIT_CENTS = env_int("EVALS_AGENT_JUDGE_MIN_CREDIT_CENTS", 50, minimum=0)
# FORTRESS's judges: proxy upstreams, one a judge model, whose majority grades each item (the
# benchmark's three: o3, Claude 3.7 Sonnet, Gemini 2.5 Pro). One name is allowed (the report
# then says the benchmark was graded by one judge).
EVALS_FORTRESS_JUDGES = env_list(
    "EVALS_FORTRESS_JUDGES", ["judge-o3", "judge-claude-3-7-sonnet", "judge-gemini-2-5-pro"]
)
# The server an on-demand evaluation job starts for the checkpoint (evalsuite/model_server.py):
# auto (vLLM on a node with a GPU and vLLM installed, else transformers serve), vllm, transformers;
# and vLLM's engine settings (dtype, context length, 0 = the model's; share of GPU memory).
EVALS_SERVER = env_str("EVALS_SERVER", "auto")
EVALS_VLLM_DTYPE = env_str("EVALS_VLLM_DTYPE", "auto")
EVALS_VLLM_MAX_MODEL_LEN = env_int("EVALS_VLLM_MAX_MODEL_LEN", 0, minimum=0)
EVALS_VLLM_GPU_MEMORY_UTILIZATION = env_float(
    "EVALS_VLLM_GPU_MEMORY_UTILIZATION", 0.9, minimum=0.05
)
# The LLM judge the safety audit asks about agents' trajectories (through the API proxy by
# default); no model named: no judge.
SAFETY_JUDGE_MODEL = env_str("SAFETY_JUDGE_MODEL", "")
SAFETY_JUDGE_BASE_URL = env_str("SAFETY_JUDGE_BASE_URL", "")
SAFETY_JUDGE_API_KEY = env_str("SAFETY_JUDGE_API_KEY", "")
# The optional judge of prompt categories (arena/battles/category_judge.py: hard prompts,
# creative writing) that `manage.py battles categorize --judge` asks, through the API proxy by
# default; no model named: rules only.
ARENA_CATEGORY_JUDGE_MODEL = env_str("ARENA_CATEGORY_JUDGE_MODEL", "")
ARENA_CATEGORY_JUDGE_BASE_URL = env_str("ARENA_CATEGORY_JUDGE_BASE_URL", "")
ARENA_CATEGORY_JUDGE_API_KEY = env_str("ARENA_CATEGORY_JUDGE_API_KEY", "")
# A category's leaderboard (/leaderboard/?category=..., `ratings --category`) needs at least
# this many counted battles in it; below, it says how many it has instead of a table.
ARENA_CATEGORY_MIN_BATTLES = env_int("ARENA_CATEGORY_MIN_BATTLES", 30, minimum=1)
# A category's public board refits at most once per this many seconds, however many views
# and votes arrive (one fit at a time per category and phase; others see the stored table).
ARENA_CATEGORY_REFIT_MIN_SECONDS = env_int("ARENA_CATEGORY_REFIT_MIN_SECONDS", 10, minimum=0)

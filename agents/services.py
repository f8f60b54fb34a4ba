"""Writes of the agents context: agents and their tokens (the LLM API credit ledger is in
`agents.credit`)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.checkpoints import CheckpointInvalid, inspect_checkpoint
from agents.credit import CreditExhausted, cost_usd  # noqa: F401  (the ledger's home is credit)
from agents.firewall import agent_firewall_block, agent_firewall_unblock
from agents.model_cards import CardRefused, front_matter_fields
from agents.models import Agent, AgentToken, Checkpoint, DataRecord, Nomination
from agents.sandboxes import UnixSandboxes
from arena.competition.models import Phase
from arena.competition.selectors import phase_account_limits, phase_current, phase_running
from cluster.backends.base import AccountLimits, ClusterBackend
from cluster.models import Job
from cluster.sandbox_files import (
    SandboxPath,
    UnsafePath,
    file_sha256,
    kind_of,
    locate,
    tree_sha256,
)
from cluster.services import account_close, account_ensure, cluster_sync

log = logging.getLogger(__name__)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def agent_create(*, name: str, credit_limit: Decimal = Decimal("300")) -> Agent:
    return Agent.objects.create(name=name, credit_limit=credit_limit)


@transaction.atomic
def token_issue(*, agent: Agent, kind: str) -> str:
    """A new token of `kind` for the agent, revoking its previous ones; returned once, stored
    only as a hash."""
    AgentToken.objects.filter(agent=agent, kind=kind, revoked_at=None).update(
        revoked_at=timezone.now()
    )
    token = f"arena_{kind}_{secrets.token_urlsafe(32)}"
    AgentToken.objects.create(agent=agent, kind=kind, digest=token_digest(token))
    return token


def judge_token_issue(*, agent: Agent) -> tuple[AgentToken, str]:
    """A proxy token that bills the agent, for the judge of one of its own evaluations. Unlike
    `token_issue` it revokes nothing: the agent's own proxy token stays valid, and each of its
    runs has a token of its own, revoked when that run ends (`judge_token_revoke`)."""
    token = f"arena_{AgentToken.Kind.JUDGE}_{secrets.token_urlsafe(32)}"
    row = AgentToken.objects.create(
        agent=agent, kind=AgentToken.Kind.JUDGE, digest=token_digest(token)
    )
    return row, token


def judge_token_revoke(token_id: int | None) -> None:
    if token_id is not None:
        AgentToken.objects.filter(pk=token_id, revoked_at=None).update(revoked_at=timezone.now())


def scaffold_token_issue(*, agent: Agent) -> str:
    """A proxy token billed to the agent's scaffold ledger, for one run attempt of its
    harness; the agent's earlier scaffold tokens are revoked. The supervisor holds it."""
    return token_issue(agent=agent, kind=AgentToken.Kind.SCAFFOLD)


def scaffold_tokens_revoke(*, agent: Agent) -> int:
    return AgentToken.objects.filter(
        agent=agent, kind=AgentToken.Kind.SCAFFOLD, revoked_at=None
    ).update(revoked_at=timezone.now())


@dataclass(frozen=True)
class Provisioned:
    agent: Agent
    api_token: str
    proxy_token: str
    config_path: Path


AGENT_CLI = Path(__file__).with_name("agent_cli.py")
_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]{1,30}$")


def agent_unix_user(name: str) -> str:
    """The Unix user, and Slurm account, that agent `name` is provisioned as."""
    return settings.AGENTS_UNIX_USER_PREFIX + name


def agent_provision(
    *, name: str, sandboxes: UnixSandboxes | None = None, backend: ClusterBackend | None = None
) -> Provisioned:
    """A Unix user and a 0700 sandbox home, a Slurm account and association with the default
    limits, an API token and a proxy token (stored hashed), and `~/.arena/config` holding
    them — the only copy — readable by the agent alone."""
    if not _AGENT_NAME.match(name):
        raise ValueError(
            f"agent name {name!r}: 2-31 lowercase letters, digits or _, starting with a letter"
        )
    if Agent.objects.filter(name=name, active=True).exists():
        raise ValueError(f"agent {name} is already provisioned")
    sandboxes = sandboxes or UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)
    user = agent_unix_user(name)
    # An agent joining while a phase runs gets that phase's budgets, as the phase's start gave
    # the others (the agents' QOS limits are shared: the defaults would overwrite the phase's).
    phase = phase_running()
    if phase is not None:
        limits, period = phase_account_limits(phase), phase.label
        storage_gib, credit = phase.storage_gib, phase.api_credit_usd
    else:
        limits = AccountLimits(
            gpu_hours=settings.AGENTS_DEFAULT_GPU_HOURS,
            max_gpus=settings.AGENTS_DEFAULT_MAX_GPUS,
            max_preemptible_gpus=settings.AGENTS_DEFAULT_MAX_PREEMPTIBLE_GPUS,
            max_job_hours=settings.AGENTS_DEFAULT_MAX_JOB_HOURS,
        )
        period, storage_gib = settings.AGENTS_DEFAULT_PERIOD, settings.AGENTS_DEFAULT_STORAGE_GIB
        credit = Decimal(str(settings.AGENTS_DEFAULT_API_CREDIT_USD))
    # The sandbox is as large as the storage quota where its storage can hold it to that.
    home = sandboxes.create(user, storage_gib=storage_gib)
    agent_firewall_block(unix_user=user)  # off the platform's ports before it has credentials
    account = account_ensure(
        name=user,
        unix_user=user,
        period=period,
        limits=limits,
        storage_gib=storage_gib,
        storage_path=home,
        reopen=True,  # a re-provisioned agent starts with its account open again
        backend=backend,
    )
    agent, _ = Agent.objects.update_or_create(
        name=name,
        defaults={
            "active": True,
            "unix_user": user,
            "sandbox": str(home),
            "cluster_account": account,
            "credit_limit": credit,
        },
    )
    api_token = token_issue(agent=agent, kind=AgentToken.Kind.API)
    proxy_token = token_issue(agent=agent, kind=AgentToken.Kind.PROXY)
    config = home / ".arena" / "config"
    url = settings.AGENTS_ARENA_URL.rstrip("/")
    sandboxes.write_private(
        user,
        config,
        "# RSI Arena: your credentials. Keep them here; they are shown nowhere else.\n"
        f"ARENA_URL={url}\nARENA_TOKEN={api_token}\n"
        f"OPENAI_BASE_URL={url}/proxy/v1\nOPENAI_API_KEY={proxy_token}\n"
        f"ANTHROPIC_BASE_URL={url}/proxy\nANTHROPIC_API_KEY={proxy_token}\n",
    )
    # The CLI, standard library only, so the sandbox's own python3 runs it.
    sandboxes.write_private(
        user, home / ".arena" / "bin" / "arena-agent", AGENT_CLI.read_text(), mode=0o700
    )
    return Provisioned(agent, api_token, proxy_token, config)


def agent_deprovision(
    *, name: str, sandboxes: UnixSandboxes | None = None, backend: ClusterBackend | None = None
) -> Agent:
    """Revoke everything: tokens, the Slurm account (no new jobs, running ones cancelled) and
    the Unix login. The sandbox's files stay, for the audit."""
    agent = Agent.objects.select_related("cluster_account").get(name=name)
    Agent.objects.filter(pk=agent.pk).update(active=False)
    AgentToken.objects.filter(agent=agent, revoked_at=None).update(revoked_at=timezone.now())
    if agent.cluster_account is not None:
        account_close(
            account=agent.cluster_account, reason="the agent was deprovisioned", backend=backend
        )
    if agent.unix_user:
        (sandboxes or UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)).lock(agent.unix_user)
        agent_firewall_unblock(unix_user=agent.unix_user)
    agent.refresh_from_db()
    return agent


class RegistrationRefused(ValueError):
    """Bad input for a data or checkpoint registration, said so the agent can fix it; `code`
    is "phase_closed" for a nomination after its phase froze, else "refused"."""

    def __init__(self, message: str, *, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code


MAX_DATA_FOLDER_ENTRIES = 100_000
MAX_DATA_BYTES = 32 * 1024**3  # in all: register a larger data set in parts, or a sample
MAX_DATA_HASH_SECONDS = 120


def sandbox_path(agent: Agent, path: str) -> SandboxPath:
    """`path` (absolute, or relative to the sandbox) below the sandbox, judged by its text:
    `..` is taken lexically and no link on the way is followed. A path through a link, or to
    anything but a file or a folder, is refused rather than resolved somewhere else."""
    try:
        where = locate(Path(agent.sandbox), path)
    except UnsafePath:
        raise RegistrationRefused(
            f"{os.path.normpath(Path(agent.sandbox) / path)} is outside your sandbox"
        ) from None
    try:
        info = where.stat()
    except FileNotFoundError:
        raise RegistrationRefused(f"{where} does not exist") from None
    except OSError as refused:  # a link or a file where a folder should be, on the way
        raise RegistrationRefused(str(refused)) from None
    except ValueError:  # a NUL byte in the path
        raise RegistrationRefused(f"{path!r} is not a usable path") from None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise RegistrationRefused(
            f"{where} is {kind_of(info.st_mode)}; register the file or folder itself"
        )
    return where


def content_sha256(where: SandboxPath) -> str:
    """The file's sha256, or for a folder the sha256 of its files' relative paths and hashes.
    Raises UnsafePath for a link or a special file inside, a hard link to another's file, a
    sparse file, more than MAX_DATA_BYTES, or a hash past MAX_DATA_HASH_SECONDS: it runs in
    a request, and the agent must not hold the platform's worker for hours."""
    deadline = time.monotonic() + MAX_DATA_HASH_SECONDS
    if stat.S_ISREG(where.stat().st_mode):
        return file_sha256(where, max_bytes=MAX_DATA_BYTES, deadline=deadline)
    return tree_sha256(
        where, max_entries=MAX_DATA_FOLDER_ENTRIES, max_bytes=MAX_DATA_BYTES, deadline=deadline
    )


def data_register(
    *,
    agent: Agent,
    path: str,
    rows: int,
    tokens: int,
    sources: list[str],
    licence: str,
    reason: str,
) -> DataRecord:
    where = sandbox_path(agent, path)
    if rows < 0 or tokens < 0:
        raise RegistrationRefused("rows and tokens cannot be negative")
    if not sources or not all(isinstance(s, str) and s.strip() for s in sources):
        raise RegistrationRefused("name at least one source (a data set id or URL)")
    if not licence.strip() or not reason.strip():
        raise RegistrationRefused("a licence and the reason for using this data are required")
    try:
        sha256 = content_sha256(where)
    except OSError as refused:
        raise RegistrationRefused(f"{refused}; register regular files only") from None
    return DataRecord.objects.create(
        agent=agent, path=str(where), sha256=sha256, rows=rows, tokens=tokens,
        sources=[s.strip() for s in sources], licence=licence.strip(), reason=reason.strip(),
    )  # fmt: skip


def checkpoint_register(
    *,
    agent: Agent,
    path: str,
    job_id: str,
    data_record_ids: list[int],
    parent_id: int | None = None,
    backend: ClusterBackend | None = None,
) -> Checkpoint:
    """Validate a checkpoint and record it with its job, data and parent — all or nothing."""
    where = sandbox_path(agent, path)
    job = None
    if agent.cluster_account is not None:
        cluster_sync(account_names=[agent.cluster_account.name], backend=backend)
        job = Job.objects.filter(account=agent.cluster_account, scheduler_id=job_id).first()
    if job is None:
        raise RegistrationRefused(f"job {job_id} is not one of your jobs")
    if job.state != Job.State.COMPLETED:
        raise RegistrationRefused(
            f"job {job_id} is {job.state}; only a completed job's checkpoint can be registered"
        )
    records = list(DataRecord.objects.filter(agent=agent, pk__in=data_record_ids))
    unknown = sorted(set(data_record_ids) - {r.pk for r in records})
    if unknown:
        raise RegistrationRefused(f"data records {unknown} are not yours")
    parent = None
    if parent_id is not None:
        parent = Checkpoint.objects.filter(agent=agent, pk=parent_id).first()
        if parent is None:
            raise RegistrationRefused(f"checkpoint {parent_id} is not one of yours")
    try:
        facts = inspect_checkpoint(where)
    except CheckpointInvalid as invalid:
        raise RegistrationRefused(f"not a usable checkpoint: {invalid}") from None
    try:
        hashes = "".join(file_sha256(where / name) for name in facts.weight_files)
    except OSError as refused:  # swapped for a link since it was inspected, say
        raise RegistrationRefused(f"not a usable checkpoint: {refused}") from None
    weights = hashlib.sha256(hashes.encode()).hexdigest()
    with transaction.atomic():
        checkpoint = Checkpoint.objects.create(
            agent=agent, path=str(where), job=job, parent=parent, architecture=facts.architecture,
            parameters=facts.parameters, end_of_turn_token=facts.end_of_turn_token, weights_sha256=weights,
        )  # fmt: skip
        checkpoint.data_records.set(records)
    return checkpoint


def parse_model_card(card: str) -> dict[str, object]:
    """The known fields of a model card's YAML front matter, read with bounds (no anchors or
    aliases, size, depth and values bounded; `agents.model_cards`): training_method, steps,
    gpu_hours, hardware and datasets, which the audit compares with the run logs, and the
    optional ones organizers are shown."""
    try:
        return front_matter_fields(card)
    except CardRefused as refused:
        raise RegistrationRefused(str(refused)) from None


def nomination_set(*, agent: Agent, checkpoint_id: int, model_card: str) -> Nomination:
    """Nominate (or change the nomination of) a checkpoint for the current phase. The phase
    row is locked, so a freeze that commits first wins and a nomination after it is refused."""
    fields = parse_model_card(model_card)
    current = phase_current()
    if current is None:
        raise RegistrationRefused("no phase is open for nominations")
    with transaction.atomic():
        phase = Phase.objects.select_for_update().get(pk=current.pk)
        if not phase.accepts_nominations(timezone.now()):
            raise RegistrationRefused(
                f"nominations for {phase.label} closed at {phase.ends_at:%Y-%m-%d %H:%M:%S} UTC"
                f" (the phase is {phase.state})",
                code="phase_closed",
            )
        checkpoint = Checkpoint.objects.filter(agent=agent, pk=checkpoint_id).first()
        if checkpoint is None:
            raise RegistrationRefused(f"checkpoint {checkpoint_id} is not one of yours")
        nomination, _ = Nomination.objects.update_or_create(
            agent=agent,
            phase=phase,
            defaults={"checkpoint": checkpoint, "model_card": model_card, "card_fields": fields},
        )
    return nomination

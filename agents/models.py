from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils import timezone

from arena.encryption import EncryptedTextField

USD = {"max_digits": 14, "decimal_places": 6}


class Agent(models.Model):
    """A competitor. Its LLM API credit is a ledger: `credit_reserved` holds the worst-case
    cost of calls in flight, `credit_spent` the settled cost; both change only through
    conditional F() updates (see agents/credit.py), so concurrent calls can never overspend.
    `credit_period` counts the phase grants: a call reserved under an earlier grant gives its
    unused reservation back to that grant, never to the current one."""

    name = models.SlugField(max_length=32, unique=True)
    active = models.BooleanField(default=True)
    unix_user = models.CharField(max_length=64, blank=True, help_text="the sandbox's Unix user")
    sandbox = models.CharField(max_length=500, blank=True, help_text="the sandbox home (0700)")
    # An agent's own Slurm account (provisioning opens it); none for the platform's judge
    # agents, which spend API credit only. The cluster knows nothing of agents: the link is
    # here, with no way back from the account ("+").
    cluster_account = models.ForeignKey(
        "cluster.ClusterAccount",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="the Slurm account",
    )
    credit_limit = models.DecimalField(**USD, default=Decimal("300"))
    credit_spent = models.DecimalField(**USD, default=Decimal("0"))
    credit_reserved = models.DecimalField(**USD, default=Decimal("0"))
    credit_period = models.PositiveIntegerField(
        default=0, help_text="how many phase grants the credit has had"
    )
    # The agent's scaffold's own model calls (issue 15, item 2): a second ledger, kept apart
    # from the $300 the agent spends on its research, under a limit the organizers set.
    scaffold_credit_limit = models.DecimalField(**USD, default=Decimal("0"))
    scaffold_credit_spent = models.DecimalField(**USD, default=Decimal("0"))
    scaffold_credit_reserved = models.DecimalField(**USD, default=Decimal("0"))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scaffold_credit_spent__gte=0)
                & models.Q(scaffold_credit_reserved__gte=0),
                name="agent_scaffold_credit_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    scaffold_credit_spent__lte=models.F("scaffold_credit_limit")
                    - models.F("scaffold_credit_reserved")
                ),
                name="agent_scaffold_credit_never_overspent",
            ),
            models.CheckConstraint(
                condition=models.Q(credit_spent__gte=0) & models.Q(credit_reserved__gte=0),
                name="agent_credit_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    credit_spent__lte=models.F("credit_limit") - models.F("credit_reserved")
                ),
                name="agent_credit_never_overspent",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AgentToken(models.Model):
    class Kind(models.TextChoices):
        API = "api"  # the agent API and CLI
        PROXY = "proxy"  # the LLM API proxy
        # The LLM API proxy for the judge of one of the agent's own on-demand evaluations:
        # billed to the agent like its own calls, held by the platform's job, never by the
        # agent; one per run, revoked when the run ends (evalsuite/on_demand.py).
        JUDGE = "judge"
        # The LLM API proxy for the agent's scaffold (the harness's own model calls), billed
        # to the scaffold ledger; held by the run's supervisor, one per run attempt.
        SCAFFOLD = "scaffold"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    digest = models.CharField(
        max_length=64, unique=True, help_text="sha256 of the token; the token is never stored"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.agent} {self.kind} token"


def _chat_only() -> list[str]:
    return ["chat"]


class Upstream(models.Model):
    """An LLM API the proxy forwards to, under the name agents call it by, with its price.

    `protocols` are the wire protocols it speaks (`agents.wire_protocols`): `chat` (OpenAI
    Chat Completions), `responses` (OpenAI Responses), `embeddings` (OpenAI embeddings) and
    `messages` (Anthropic Messages). The prices left empty are the prompt price."""

    name = models.CharField(max_length=100, unique=True, help_text="the model name agents request")
    base_url = models.URLField(
        max_length=500,
        help_text="the API's root, e.g. https://api.example.com/v1 (the protocol's path follows)",
    )
    upstream_model = models.CharField(max_length=200)
    # Encrypted at rest: a database reader sees a Fernet token, never the key.
    api_key = EncryptedTextField(blank=True, help_text="kept on the server; never shown to agents")
    protocols = models.JSONField(
        default=_chat_only,
        help_text='what it speaks: "chat", "responses", "embeddings", "messages"',
    )
    usd_per_million_prompt_tokens = models.DecimalField(**USD)
    usd_per_million_completion_tokens = models.DecimalField(**USD)
    usd_per_million_cached_prompt_tokens = models.DecimalField(
        **USD, null=True, blank=True, help_text="prompt tokens read from the upstream's cache"
    )
    usd_per_million_cache_write_tokens = models.DecimalField(
        **USD, null=True, blank=True, help_text="prompt tokens written to its cache (Anthropic)"
    )
    usd_per_million_embedding_tokens = models.DecimalField(
        **USD, null=True, blank=True, help_text="input tokens of an embeddings call"
    )
    max_completion_tokens = models.PositiveIntegerField(
        default=4096, help_text="cap on max_tokens per call"
    )
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.name


class ProxyCall(models.Model):
    """One call through the proxy, created with its reservation. `settled_at` is empty while
    the call is in flight (`status` 0); settling claims the row once, so the proxy and the
    reconciler (`credit_reservations_reconcile`) never both settle a call."""

    class Budget(models.TextChoices):
        API = "api", "the agent's API credit"
        SCAFFOLD = "scaffold", "the scaffold's credit"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="proxy_calls")
    budget = models.CharField(max_length=8, choices=Budget.choices, default=Budget.API)
    model = models.CharField(max_length=100)
    stream = models.BooleanField()
    status = models.PositiveSmallIntegerField(default=0, help_text="0 while in flight")
    protocol = models.CharField(max_length=12, default="chat")
    prompt_tokens = models.PositiveIntegerField(
        default=0, help_text="every input token, cached or not"
    )
    cached_prompt_tokens = models.PositiveIntegerField(default=0, help_text="read from its cache")
    cache_write_tokens = models.PositiveIntegerField(default=0, help_text="written to its cache")
    completion_tokens = models.PositiveIntegerField(
        default=0, help_text="every output token, reasoning included"
    )
    reserved_usd = models.DecimalField(**USD)
    cost_usd = models.DecimalField(**USD, default=Decimal("0"))
    latency_ms = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=300, blank=True)
    credit_period = models.PositiveIntegerField(
        default=0, help_text="the agent's credit_period when the call reserved"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    settled_at = models.DateTimeField(null=True, blank=True, help_text="empty while in flight")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=models.Q(settled_at__isnull=True),
                name="proxycall_in_flight",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.model} {self.status} ${self.cost_usd}"


class DataRecord(models.Model):
    """Where a piece of training data came from and why it was used. Append-only: there is
    no service that changes or deletes one, and the admin shows them read-only."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="data_records")
    path = models.CharField(max_length=1000)
    sha256 = models.CharField(max_length=64)
    rows = models.PositiveBigIntegerField()
    tokens = models.PositiveBigIntegerField()
    sources = models.JSONField(help_text="data set ids or URLs")
    licence = models.CharField(max_length=200)
    reason = models.TextField(help_text="why this data was committed")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "created_at"]

    def __str__(self) -> str:
        return f"{self.agent} data {self.pk}: {self.path}"


class Checkpoint(models.Model):
    """A validated checkpoint, tied to the job that produced it, the data it used and the
    checkpoint it started from (lineage: an agent can go back to any earlier one)."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="checkpoints")
    path = models.CharField(max_length=1000)
    job = models.ForeignKey("cluster.Job", on_delete=models.PROTECT, related_name="checkpoints")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    data_records = models.ManyToManyField(DataRecord, blank=True, related_name="checkpoints")
    architecture = models.CharField(max_length=100)
    parameters = models.PositiveBigIntegerField()
    end_of_turn_token = models.CharField(max_length=100)
    weights_sha256 = models.CharField(max_length=64, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "created_at"]

    def __str__(self) -> str:
        return f"{self.agent} checkpoint {self.pk}: {self.path}"


class Nomination(models.Model):
    """The checkpoint an agent puts forward in a phase: one per agent and phase, changeable
    until the phase freezes. The model card is kept as written, for the audit."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="nominations")
    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.PROTECT, related_name="nominations"
    )
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.PROTECT, related_name="nominations")
    model_card = models.TextField()
    card_fields = models.JSONField(help_text="the card's YAML front matter, parsed")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "phase"], name="one_nomination_per_phase")
        ]

    def __str__(self) -> str:
        return f"{self.agent} in {self.phase}: checkpoint {self.checkpoint_id}"


class NomineeCopy(models.Model):
    """The platform's own copy of a nominated checkpoint, the only thing the arena serves and
    evaluates. Made from the agent's sandbox when the phase freezes (agents/nominees.py), in
    AGENTS_NOMINEE_STORE, private to the platform; `files` holds each file's sha256, checked
    again before every server start. A copy that could not be made, no longer matches its
    hashes, or whose server would not start is *not servable*: `not_servable_reason` says why,
    the arena skips it, and the organizers see it."""

    nomination = models.OneToOneField(
        Nomination, on_delete=models.CASCADE, related_name="nominee_copy"
    )
    folder = models.CharField(max_length=1000, blank=True, help_text="in the nominee store")
    files = models.JSONField(default=dict, help_text="file name -> sha256 of the copy")
    weights_sha256 = models.CharField(
        max_length=64, blank=True, help_text="as Checkpoint.weights_sha256, of the copy"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    not_servable_reason = models.TextField(blank=True)
    not_servable_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"copy of {self.nomination}"

    @property
    def servable(self) -> bool:
        return bool(self.folder) and not self.not_servable_reason


class JournalEntry(models.Model):
    """One line of an agent's experiment journal (a hypothesis, a result, a decision), written
    through `arena-agent journal add`. Append-only, and enforced by the database: a trigger
    (migration 0006) refuses UPDATE and DELETE on the table, so neither the platform's code nor
    an admin can rewrite what an agent wrote when. `text` is the agent's, hostile: kept as
    written, shown escaped, never parsed. `phase` is the one current when it was written."""

    class Kind(models.TextChoices):
        HYPOTHESIS = "hypothesis"
        RESULT = "result"
        DECISION = "decision"
        NOTE = "note"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="journal_entries")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.NOTE)
    text = models.TextField()
    phase = models.ForeignKey(
        "competition.Phase",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="journal_entries",
    )
    # The service passes its clock (the rate limit is judged on the same instant).
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)

    class Meta:
        ordering = ["agent", "created_at", "pk"]
        verbose_name_plural = "journal entries"

    def __str__(self) -> str:
        return f"{self.agent} {self.kind} {self.pk}"


class TrajectoryEvent(models.Model):
    """One step of an agent's work, recorded outside its sandbox (`agents.trajectory`).
    Append-only, enforced by PostgreSQL: a trigger (migration 0007) refuses every UPDATE and
    DELETE of this table, whoever sends it. `reported` marks what the agent's harness told the
    platform (tool calls) apart from what the platform saw itself (model and API calls)."""

    class Kind(models.TextChoices):
        MODEL_CALL = "model_call", "model call (seen by the proxy)"
        API_CALL = "api_call", "platform API call (seen by the agent API)"
        TOOL_CALL = "tool_call", "tool call (reported by the agent's harness)"

    id = models.BigAutoField(primary_key=True)  # the order of events: ascending ids
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="trajectory")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    reported = models.BooleanField(
        help_text="true: the agent's harness reported it; false: the platform observed it"
    )
    payload = models.JSONField(help_text="bounded: see agents.trajectory for the limits")
    size = models.PositiveIntegerField(help_text="bytes of the payload as JSON")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["agent", "id"], name="trajectory_by_agent")]

    def __str__(self) -> str:
        return f"{self.agent} {self.kind} #{self.pk}"


class TrajectoryDay(models.Model):
    """An agent's trajectory volume on one UTC day: events and bytes admitted, and what was
    dropped past the day's bounds (so a gap in the trajectory is visible, never silent). Each
    budget (`agents.trajectory.BUDGETS`: model calls, the platform harness's tool calls, API
    call records, the agent's reports) is counted apart against bounds of its own, so one can
    never crowd out another; `events`, `bytes` and `dropped` are the totals."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    events = models.PositiveIntegerField(default=0, help_text="observed by the platform")
    bytes = models.PositiveBigIntegerField(default=0, help_text="observed by the platform")
    model_events = models.PositiveIntegerField(default=0)
    model_bytes = models.PositiveBigIntegerField(default=0)
    model_dropped = models.PositiveIntegerField(default=0)
    tool_events = models.PositiveIntegerField(default=0, help_text="run by the platform harness")
    tool_bytes = models.PositiveBigIntegerField(default=0)
    tool_dropped = models.PositiveIntegerField(default=0)
    api_events = models.PositiveIntegerField(default=0, help_text="records of agent API calls")
    api_bytes = models.PositiveBigIntegerField(default=0)
    api_dropped = models.PositiveIntegerField(default=0)
    reported_events = models.PositiveIntegerField(
        default=0, help_text="reported by the agent, and the API's records of those calls"
    )
    reported_bytes = models.PositiveBigIntegerField(default=0)
    reported_dropped = models.PositiveIntegerField(default=0)
    dropped = models.PositiveIntegerField(default=0, help_text="all budgets together")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "day"], name="one_trajectory_day_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.day}: {self.events} events, {self.dropped} dropped"

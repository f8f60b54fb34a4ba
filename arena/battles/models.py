from __future__ import annotations

import secrets

from django.db import models

from arena.battles.style import FIRST_STYLE_VERSION, current_style_version
from arena.serving.models import Contestant


def new_battle_id() -> str:
    # Opaque and unguessable: the id is in URLs and WebSocket paths the voter sees.
    return secrets.token_urlsafe(16)


class TargetedRound(models.Model):
    """An organizer's order: N battles between a chosen pair, optionally on chosen prompts.

    The arena serves open rounds before its random pairs. With chosen prompts, a round takes
    the battles whose prompt is one of them (the arena suggests them first), so a voter never
    sees answers to a prompt they did not send."""

    contestant_a = models.ForeignKey(
        "serving.Contestant", on_delete=models.PROTECT, related_name="+"
    )
    contestant_b = models.ForeignKey(
        "serving.Contestant", on_delete=models.PROTECT, related_name="+"
    )
    battles_wanted = models.PositiveIntegerField()
    battles_served = models.PositiveIntegerField(default=0)
    prompts = models.JSONField(default=list, blank=True)
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(battles_served__lte=models.F("battles_wanted")),
                name="round_serves_at_most_what_was_wanted",
            ),
            models.CheckConstraint(
                condition=~models.Q(contestant_a=models.F("contestant_b")),
                name="round_pairs_two_different_contestants",
            ),
        ]

    def __str__(self) -> str:
        return f"round {self.pk}: {self.contestant_a} vs {self.contestant_b}"

    @property
    def tag(self) -> str:
        return f"targeted-round-{self.pk}"


class KioskDevice(models.Model):
    """A booth's screen, registered by an organizer: many voters share it, so its battles get
    a per-device limit instead of the per-session and per-network ones (frontend/README.md).

    Only SHA-256 hashes of its tokens are stored. The enrolment token is good for one visit
    before `enrolment_expires_at`; that visit swaps it for the device token, kept in the
    device's cookie."""

    name = models.SlugField(max_length=60, unique=True)
    enrolment_hash = models.CharField(max_length=64, blank=True)
    enrolment_expires_at = models.DateTimeField(null=True, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    enrolled_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"kiosk {self.name}"

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        return "enrolled" if self.enrolled_at else "waiting for enrolment"


class Battle(models.Model):
    class State(models.TextChoices):
        CREATED = "created"
        GENERATING = "generating"
        COMPLETE = "complete"
        FAILED = "failed"  # a side errored or timed out: the battle cannot be voted on

    id = models.CharField(primary_key=True, max_length=32, default=new_battle_id, editable=False)
    prompt = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.CREATED)
    # Non-empty when the battle must not count (an answer revealed an identity, ...).
    void_reason = models.CharField(max_length=300, blank=True)
    # The sides whose answer revealed an identity: "", "a", "b" or "ab". One side: the battle
    # still counts, as a loss for that side whatever the vote (`forced_winner`); both: void.
    leaked_sides = models.CharField(max_length=2, blank=True)
    voter_key = models.CharField(
        max_length=64, db_index=True, help_text="salted hash of the session"
    )
    ip_hash = models.CharField(max_length=64, db_index=True, help_text="salted hash of the IP")
    phase = models.CharField(max_length=50, blank=True)
    targeted_round = models.ForeignKey(
        TargetedRound, null=True, blank=True, on_delete=models.PROTECT, related_name="battles"
    )
    # The registered booth screen the battle was started on; its voters are counted per device.
    kiosk = models.ForeignKey(
        KioskDevice, null=True, blank=True, on_delete=models.PROTECT, related_name="battles"
    )
    # Category tags of the prompt (arena/battles/categories.py), stored as ",coding,math,"
    # so one category is a substring filter on every database; "" before categorizing.
    categories = models.CharField(max_length=200, blank=True, default="")
    language = models.CharField(max_length=16, blank=True, default="")
    # Who set `categories`: "rules" at creation, "judge:<model>" once a judge read the prompt,
    # "" for a battle stored before categories existed (`battles categorize` fills those).
    categorized_by = models.CharField(max_length=100, blank=True, default="")
    # Arena-Hard's seven criteria as the judge answered them ({} until a judge has).
    category_criteria = models.JSONField(default=dict, blank=True)
    # The normalised prompt's 52-bit hash (prompt_groups.prompt_key), and the near-duplicate
    # group it was put in by `battles categorize` (the group's first prompt's key; null until
    # then, when the fit groups by `prompt_key`).
    prompt_key = models.BigIntegerField(null=True, blank=True)
    prompt_group = models.BigIntegerField(null=True, blank=True)
    # When `battles categorize` last changed this battle's tags or group (null: never). The
    # newest of these over a category's battles is its categorisation generation: a category
    # board fitted before it is stale although no vote arrived.
    categorized_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    generation_started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # The voter's prompts so far: 1, then one more for each follow-up (`FollowUp`), up to the
    # arena's `max_turns`. The export's `turn`; a category rule can read it without a join.
    turns = models.PositiveSmallIntegerField(default=1, db_default=1)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"battle {self.id} ({self.state})"

    @property
    def forced_winner(self) -> str:
        """The vote choice a one-sided leak imposes ("b" when A leaked); "" when none does."""
        if len(self.leaked_sides) != 1:
            return ""
        return "b" if self.leaked_sides == "a" else "a"


class AnswerContent(models.Model):
    """What one side said in one turn: the text, how it ended, how fast, what style."""

    text = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    error = models.CharField(max_length=300, blank=True)
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    total_ms = models.PositiveIntegerField(null=True, blank=True)
    # Style features (see arena/battles/style.py for the exact counting rules).
    tokens = models.PositiveIntegerField(default=0)
    header_counts = models.JSONField(default=dict)
    list_counts = models.JSONField(default=dict)
    bold_counts = models.JSONField(default=dict)
    # The counting rules the four above follow (`style.STYLE_VERSION`), so that counts under
    # other rules are never mixed in silently. A row inserted by code older than this field
    # gets the database's default: it was counted under the first rules.
    style_version = models.PositiveSmallIntegerField(
        default=current_style_version, db_default=FIRST_STYLE_VERSION
    )

    class Meta:
        abstract = True


class Answer(AnswerContent):
    """One side of a battle: who answered (hidden until the vote), its first answer (text,
    timings, finish), and the style of everything it said in the battle.

    In a battle of several turns the later answers are `FollowUpAnswer` rows, and this row's
    style features (`tokens`, the three counts) are the sums over all of the side's answers,
    as Chatbot Arena's `sum_assistant_*_tokens` are: the fit, the export and every analysis
    read one row per side and get the whole conversation. In a one-turn battle (and in every
    row stored before follow-ups existed) they are the first answer's own."""

    class Side(models.TextChoices):
        A = "a"
        B = "b"

    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="answers")
    side = models.CharField(max_length=1, choices=Side.choices)
    contestant = models.ForeignKey(Contestant, on_delete=models.PROTECT, related_name="answers")

    class Meta:
        ordering = ["battle", "side"]
        constraints = [
            models.UniqueConstraint(fields=["battle", "side"], name="one_answer_per_side"),
        ]

    def __str__(self) -> str:
        return f"{self.battle_id}/{self.side}"


class FollowUp(models.Model):
    """The voter's next prompt in a battle, before the vote: turn 2, 3, … (turn 1 is the
    battle's own prompt). Both sides answer it, each with its own earlier answers as history."""

    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="follow_ups")
    turn = models.PositiveSmallIntegerField()
    prompt = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["battle", "turn"]
        constraints = [
            models.UniqueConstraint(fields=["battle", "turn"], name="one_follow_up_per_turn"),
            models.CheckConstraint(condition=models.Q(turn__gte=2), name="follow_ups_from_turn_2"),
        ]

    def __str__(self) -> str:
        return f"{self.battle_id} turn {self.turn}"


class FollowUpAnswer(AnswerContent):
    """One side's answer to a follow-up; its style features are this answer's own."""

    follow_up = models.ForeignKey(FollowUp, on_delete=models.CASCADE, related_name="answers")
    side = models.CharField(max_length=1, choices=Answer.Side.choices)

    class Meta:
        ordering = ["follow_up", "side"]
        constraints = [
            models.UniqueConstraint(
                fields=["follow_up", "side"], name="one_follow_up_answer_per_side"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.follow_up_id}/{self.side}"


class Vote(models.Model):
    class Choice(models.TextChoices):
        A = "a", "A is better"
        B = "b", "B is better"
        TIE = "tie", "Tie"
        BOTH_BAD = "bothbad", "Both are bad"

    # The primary key is the battle: the database itself allows one vote per battle.
    battle = models.OneToOneField(
        Battle, on_delete=models.CASCADE, primary_key=True, related_name="vote"
    )
    choice = models.CharField(max_length=8, choices=Choice.choices)
    counted = models.BooleanField()
    voter_key = models.CharField(max_length=64, db_index=True)
    ip_hash = models.CharField(max_length=64)
    seconds_after_answers = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.battle_id}: {self.choice}"


class SuggestedPrompt(models.Model):
    text = models.TextField(unique=True)
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.text[:60]


class VoterExclusion(models.Model):
    """An organizer's decision that a voter's votes stay out of the fit.

    A voter is a session (`Vote.voter_key`) or a network (`Vote.ip_hash`, every session behind
    one address: a bot that takes a fresh cookie for each vote). The votes stay stored and
    `counted`; the fit, the export and the phase feedback leave them out while the exclusion
    is in force. Lifting it keeps the row, so the record shows who excluded whom, why, on what
    evidence, and who reversed it."""

    class Kind(models.TextChoices):
        SESSION = "session"
        NETWORK = "network"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    key = models.CharField(max_length=64, help_text="the salted hash the votes carry")
    reason = models.CharField(max_length=300)
    evidence = models.JSONField(default=dict, blank=True)  # the screening flags at the time
    excluded_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=150, blank=True)
    lift_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "key"],
                condition=models.Q(lifted_at__isnull=True),
                name="one_exclusion_in_force_per_voter",
            ),
        ]

    def __str__(self) -> str:
        state = "lifted" if self.lifted_at else "in force"
        return f"exclusion {self.pk} of {self.kind} {self.key[:12]} ({state})"

from __future__ import annotations

from django.db import models


class RatingSnapshot(models.Model):
    """One fit of the leaderboard: style-controlled and raw tables, as shown and exported."""

    class Source(models.TextChoices):
        LIVE = "live"  # refitted after votes, sandwich intervals
        COMMAND = "command"  # `manage.py ratings`
        PHASE = "phase"  # one phase's votes, fitted when the phase closes or is asked for

    source = models.CharField(max_length=16, choices=Source.choices)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    n_battles = models.PositiveIntegerField()
    # The phase whose battles were fitted; blank: every counted vote.
    phase = models.CharField(max_length=50, blank=True, db_index=True)
    # The category whose battles were fitted (arena/battles/categories.py); blank: every
    # battle. The public board and a phase's published table are never a category's.
    category = models.CharField(max_length=40, blank=True, db_index=True)
    # The newest counted vote included: a live snapshot is stale once a newer vote exists.
    last_vote_at = models.DateTimeField(null=True, blank=True)
    ci_method = models.CharField(max_length=16, blank=True)
    style = models.JSONField(null=True, blank=True, help_text="style-controlled result")
    raw = models.JSONField(help_text="raw Bradley-Terry result")
    analyses = models.JSONField(default=dict)
    # The voter exclusions in force when fitted (arena.battles.VoterExclusion): ids, kinds,
    # reasons and the votes they left out. Published with the table.
    exclusions = models.JSONField(default=dict)
    # How near-duplicate prompts were down-weighted (arena/battles/prompt_groups.py): the
    # rule, its parameters, the battles grouped and their share of the fit's weight; {} when
    # every battle weighed 1.
    dedup = models.JSONField(default=dict)
    # Fitted parameters with their model order, to warm-start the next refit.
    warm_start = models.JSONField(default=dict)

    class Meta:
        ordering = ["-created_at", "-id"]
        get_latest_by = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.source} snapshot of {self.n_battles} battles at {self.created_at:%Y-%m-%d %H:%M:%S}"


class RefitLease(models.Model):
    """A single row that one process at a time holds while it refits the live leaderboard."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    held_until = models.DateTimeField(null=True, blank=True)
    holder = models.CharField(max_length=100, blank=True)
    # Bumped whenever something already fitted changes after the fact (a counted vote edited
    # or deleted, an answer, battle or contestant of one saved again: see signals.py), so
    # every process's live inputs (live_inputs.py) read all votes again instead of only the
    # new ones.
    inputs_generation = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"refit lease held by {self.holder or 'nobody'} until {self.held_until}"

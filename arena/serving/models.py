from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from arena.encryption import EncryptedTextField


class Contestant(models.Model):
    """A model the arena can call: any OpenAI-compatible endpoint and the model name it serves.

    The identity fields (display name, URL, model name, checkpoint path) never leave the
    server before a vote; the voter sees only "A" and "B".
    """

    display_name = models.CharField(max_length=100, unique=True)
    base_url = models.URLField(
        max_length=500, help_text="OpenAI-compatible base URL, e.g. http://127.0.0.1:8101/v1"
    )
    served_model_name = models.CharField(max_length=500)
    # The model server's key, encrypted at rest: a database reader must not get to ask it.
    api_key = EncryptedTextField(blank=True, help_text="Bearer token, if any")
    checkpoint_path = models.CharField(max_length=1000, blank=True)
    identity_words = models.JSONField(
        default=list,
        blank=True,
        help_text="Extra words that reveal this contestant when an answer contains them",
    )
    active = models.BooleanField(default=True)
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.0)])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["display_name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(weight__gte=0), name="contestant_weight_gte_0"
            )
        ]

    def __str__(self) -> str:
        return self.display_name


class ServingEvent(models.Model):
    """What happened to a contestant's model server, for the organizers: a server lost, a
    replacement started, ready, swapped in, an old server stopped (arena/serving/backends.py
    CHANGE_KINDS), and why. Names jobs and addresses, never shown to voters."""

    contestant = models.ForeignKey(
        Contestant, null=True, on_delete=models.SET_NULL, related_name="serving_events"
    )
    kind = models.CharField(max_length=32)
    reason = models.CharField(max_length=500)
    detail = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.contestant}: {self.kind} ({self.reason})"

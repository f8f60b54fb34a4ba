from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest

from arena.admin_records import RecordAdmin
from arena.battles.kiosks import kiosk_revoke
from arena.battles.models import (
    Answer,
    Battle,
    FollowUp,
    FollowUpAnswer,
    KioskDevice,
    SuggestedPrompt,
    TargetedRound,
    Vote,
    VoterExclusion,
)
from arena.battles.services import targeted_round_schedule


class AnswerInline(admin.TabularInline):
    model = Answer
    extra = 0
    fields = [
        "side",
        "contestant",
        "finish_reason",
        "error",
        "first_token_ms",
        "total_ms",
        "tokens",
        "text",
    ]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class FollowUpInline(admin.TabularInline):
    """The voter's follow-ups (turn 2, 3, …); their answers are under Follow-up answers."""

    model = FollowUp
    extra = 0
    fields = ["turn", "prompt", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class VoteInline(admin.StackedInline):
    model = Vote
    fields = ["choice", "counted", "seconds_after_answers", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Battle)
class BattleAdmin(RecordAdmin):
    list_display = [
        "id",
        "state",
        "turns",
        "phase",
        "targeted_round",
        "void_reason",
        "created_at",
    ]
    list_filter = ["state", "phase", "turns", ("void_reason", admin.EmptyFieldListFilter)]
    search_fields = ["id", "prompt"]
    date_hierarchy = "created_at"
    inlines = [AnswerInline, FollowUpInline, VoteInline]


@admin.register(Answer)
class AnswerAdmin(RecordAdmin):
    list_display = ["battle", "side", "contestant", "finish_reason", "tokens", "total_ms", "error"]
    list_filter = ["finish_reason", "contestant"]
    search_fields = ["battle__id", "text"]


@admin.register(FollowUp)
class FollowUpAdmin(RecordAdmin):
    list_display = ["battle", "turn", "created_at"]
    search_fields = ["battle__id", "prompt"]


@admin.register(FollowUpAnswer)
class FollowUpAnswerAdmin(RecordAdmin):
    list_display = ["follow_up", "side", "finish_reason", "tokens", "total_ms", "error"]
    list_filter = ["finish_reason"]
    search_fields = ["follow_up__battle__id", "text"]


@admin.register(Vote)
class VoteAdmin(RecordAdmin):
    list_display = ["battle", "choice", "counted", "seconds_after_answers", "created_at"]
    list_filter = ["choice", "counted", "battle__phase"]
    date_hierarchy = "created_at"


@admin.register(VoterExclusion)
class VoterExclusionAdmin(RecordAdmin):
    """Made and lifted on /organizer/voters/ or with `manage.py voters`, so the reason and the
    evidence are always recorded; shown here as the record."""

    list_display = ["id", "kind", "key", "reason", "excluded_by", "created_at", "lifted_at"]
    list_filter = ["kind", ("lifted_at", admin.EmptyFieldListFilter)]
    search_fields = ["key", "reason"]


@admin.register(SuggestedPrompt)
class SuggestedPromptAdmin(admin.ModelAdmin):
    list_display = ["text", "active"]
    list_filter = ["active"]
    search_fields = ["text"]


class TargetedRoundForm(forms.ModelForm):
    class Meta:
        model = TargetedRound
        fields = ["contestant_a", "contestant_b", "battles_wanted", "prompts", "note"]

    def clean(self) -> dict:
        data = super().clean() or {}
        a, b = data.get("contestant_a"), data.get("contestant_b")
        if a is not None and a == b:
            raise forms.ValidationError("A targeted round needs two different contestants.")
        if data.get("battles_wanted") is not None and data["battles_wanted"] < 1:
            self.add_error("battles_wanted", "At least one battle.")
        prompts = data.get("prompts") or []
        limit = settings.ARENA_PROMPT_MAX_CHARS
        if not isinstance(prompts, list) or not all(
            isinstance(p, str) and 0 < len(p.strip()) <= limit for p in prompts
        ):
            self.add_error(
                "prompts", f'A JSON list of prompts of 1 to {limit:,} characters, e.g. ["Hi"].'
            )
        return data


@admin.register(TargetedRound)
class TargetedRoundAdmin(admin.ModelAdmin):
    """Organizers order a round here; it is created by the same service the commands use."""

    form = TargetedRoundForm
    list_display = [
        "id",
        "contestant_a",
        "contestant_b",
        "battles_wanted",
        "battles_served",
        "note",
        "created_at",
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: TargetedRound | None = None):
        if obj is None:
            return ["battles_served"]
        return ["contestant_a", "contestant_b", "battles_wanted", "battles_served", "prompts"]

    def save_model(self, request, obj: TargetedRound, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)  # only the note can change
            return
        made = targeted_round_schedule(
            contestant_a=obj.contestant_a,
            contestant_b=obj.contestant_b,
            battles=obj.battles_wanted,
            prompts=list(obj.prompts or []),
            note=obj.note,
        )
        obj.pk, obj.created_at, obj.prompts = made.pk, made.created_at, made.prompts

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # served battles point at their round


@admin.register(KioskDevice)
class KioskDeviceAdmin(RecordAdmin):
    """Registered with `manage.py kiosks add` (which prints the one-time enrolment link: only
    its hash is stored, so admin cannot show it); revoked here or with `kiosks revoke`."""

    list_display = ["name", "status", "created_at", "enrolled_at", "revoked_at"]
    exclude = ["enrolment_hash", "token_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected kiosks now")
    def revoke(self, request: HttpRequest, queryset) -> None:
        for device in queryset.filter(revoked_at__isnull=True):
            kiosk_revoke(name=device.name)
        self.message_user(request, "Revoked; those screens are refused from now.")

from django.contrib import admin

from arena.battles.models import Answer, Battle, SuggestedPrompt, Vote


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
    ]
    readonly_fields = fields


@admin.register(Battle)
class BattleAdmin(admin.ModelAdmin):
    list_display = ["id", "state", "void_reason", "created_at"]
    list_filter = ["state"]
    search_fields = ["id", "prompt"]
    inlines = [AnswerInline]


@admin.register(Vote)
class VoteAdmin(admin.ModelAdmin):
    list_display = ["battle", "choice", "counted", "created_at"]
    list_filter = ["choice", "counted"]


@admin.register(SuggestedPrompt)
class SuggestedPromptAdmin(admin.ModelAdmin):
    list_display = ["text", "active"]
    list_filter = ["active"]

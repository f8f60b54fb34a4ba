"""Writes of the battles context: start a battle, run and record its answers, take the vote."""

from __future__ import annotations

import hashlib
import hmac
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from arena.battles.categories import (
    MULTI_TURN,
    RuleCategorizer,
    categories_decode,
    categories_encode,
    multi_turn,
)
from arena.battles.identity import revealed_identity, words_written
from arena.battles.models import (
    Answer,
    AnswerContent,
    Battle,
    FollowUp,
    FollowUpAnswer,
    KioskDevice,
    SuggestedPrompt,
    TargetedRound,
    Vote,
    VoterExclusion,
)
from arena.battles.prompt_groups import prompt_key
from arena.battles.selectors import identity_words
from arena.battles.style import STYLE_VERSION, StyleFeatures, style_features, style_sum
from arena.competition.selectors import arena_settings_current, phase_in_arena
from arena.serving.models import Contestant
from arena.serving.selectors import contestants_active

log = logging.getLogger(__name__)

VOTES_GROUP = "arena.votes"  # Channels group told of every committed vote


class BattleRefused(Exception):
    """A request the voter must be told about, with the HTTP status that fits it."""

    def __init__(self, message: str, *, status: int = 400, code: str = "invalid") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def salted_hash(kind: str, value: str) -> str:
    """A stable pseudonym for a voter's session or IP: HMAC so it cannot be reversed by
    hashing every IPv4 address, salted per deployment so exports from two sites don't link."""
    digest = hmac.new(settings.VOTER_SALT.encode(), f"{kind}:{value}".encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


def pick_contestants(
    contestants: list[Contestant], rng: random.Random
) -> tuple[Contestant, Contestant]:
    """Two different contestants, each drawn with probability proportional to its weight,
    returned in random side order."""
    pool = [c for c in contestants if c.weight > 0]
    if len({c.pk for c in pool}) < 2:
        raise BattleRefused(
            "The arena needs at least two models online; please try again shortly.",
            status=503,
            code="no_contestants",
        )
    first = rng.choices(pool, weights=[c.weight for c in pool])[0]
    rest = [c for c in pool if c.pk != first.pk]
    second = rng.choices(rest, weights=[c.weight for c in rest])[0]
    pair = [first, second]
    rng.shuffle(pair)
    return pair[0], pair[1]


def battle_create(
    *,
    prompt: str,
    voter_key: str,
    ip_hash: str,
    kiosk: KioskDevice | None = None,
    rng: random.Random | None = None,
) -> Battle:
    """Start a battle between two contestants. `kiosk`: the registered booth device it was
    started on, whose own limit replaces the voter's and the network's."""
    prompt = _prompt_checked(prompt)
    rng = rng or random.SystemRandom()
    phase = phase_in_arena()
    with transaction.atomic():
        if kiosk is not None:
            _kiosk_rate_limit_check(kiosk)
        else:
            _rate_limit_check(voter_key=voter_key, ip_hash=ip_hash)
        # Rules only, and only once the limit let the prompt in (a refused voter must not make
        # the server pay for them); milliseconds, linear in the prompt, so holding the voter's
        # lock meanwhile is cheap. A judge, if any, reads the prompt later (`battles
        # categorize`). A battle starts with one user turn.
        categories = RuleCategorizer().categorize(prompt, user_turns=1)
        targeted = targeted_round_claim(prompt=prompt)
        if targeted is not None:
            pair = [targeted.contestant_a, targeted.contestant_b]
            rng.shuffle(pair)
            side_a, side_b = pair
        else:
            side_a, side_b = pick_contestants(contestants_active(), rng)
        battle = Battle.objects.create(
            prompt=prompt,
            voter_key=voter_key,
            ip_hash=ip_hash,
            phase=phase.label if phase is not None else "",
            targeted_round=targeted,
            kiosk=kiosk,
            categories=categories_encode(categories.tags),
            language=categories.language,
            categorized_by=RuleCategorizer.name,
            prompt_key=prompt_key(prompt),
        )
        Answer.objects.bulk_create(
            [
                Answer(battle=battle, side=Answer.Side.A, contestant=side_a),
                Answer(battle=battle, side=Answer.Side.B, contestant=side_b),
            ]
        )
    return battle


def _prompt_checked(prompt: str) -> str:
    """The prompt as it is sent to the models; the same rules for a battle's first prompt and
    for every follow-up."""
    prompt = prompt.strip()
    if not prompt:
        raise BattleRefused("Please type a prompt first.", code="empty_prompt")
    limit = settings.ARENA_PROMPT_MAX_CHARS
    if len(prompt) > limit:
        raise BattleRefused(
            f"Your prompt is {len(prompt):,} characters long; the limit is {limit:,}.",
            code="prompt_too_long",
        )
    return prompt


def _prompts_since(since: datetime, **battle_filter: object) -> int:
    """Prompts sent to the models since `since` in the battles matching `battle_filter`: each
    new battle and each follow-up costs the same two generations, so both count."""
    battles = Battle.objects.filter(created_at__gte=since, **battle_filter).count()
    follow_ups = FollowUp.objects.filter(
        created_at__gte=since, **{f"battle__{key}": value for key, value in battle_filter.items()}
    ).count()
    return battles + follow_ups


def follow_up_create(*, battle_id: str, prompt: str, voter_key: str, ip_hash: str) -> FollowUp:
    """The voter's next prompt in a battle whose answers are complete and not yet voted on, up
    to the arena's `max_turns` prompts. The prompt is checked as a first one is and counts
    against the same per-minute limits. The battle goes back to `created`, so the voter's
    socket generates both sides' answers (`generation.battle_run`) and no vote is taken until
    they are complete.

    The battle's row is locked while this is decided, as `vote_record` locks it, so a vote and
    a follow-up cannot both be taken on the same answers."""
    prompt = _prompt_checked(prompt)
    arena = arena_settings_current()
    with transaction.atomic():
        battle = Battle.objects.select_for_update().filter(pk=battle_id).first()
        if battle is None:
            raise BattleRefused("No such battle.", status=404, code="not_found")
        if battle.voter_key != voter_key:
            raise BattleRefused(
                "This battle belongs to another voter.", status=403, code="not_yours"
            )
        if Vote.objects.filter(battle=battle).exists():
            raise BattleRefused(
                "This battle has your vote already; start a new battle to ask more.",
                status=409,
                code="already_voted",
            )
        _check_answers_complete(battle)
        if battle.turns >= arena.max_turns:
            raise BattleRefused(
                f"This battle has had its {arena.max_turns} prompts; please vote.",
                status=409,
                code="turn_limit",
            )
        if battle.kiosk_id is not None:
            _kiosk_rate_limit_check(battle.kiosk)  # type: ignore[arg-type]
        else:
            _rate_limit_check(voter_key=voter_key, ip_hash=ip_hash)
        battle.turns += 1
        battle.state = Battle.State.CREATED
        changed = ["turns", "state"]
        tags = set(categories_decode(battle.categories))
        if multi_turn(battle.turns) and MULTI_TURN not in tags:  # its category from now on
            battle.categories = categories_encode(tags | {MULTI_TURN})
            changed.append("categories")
        battle.save(update_fields=changed)
        return FollowUp.objects.create(battle=battle, turn=battle.turns, prompt=prompt)


def _rate_limit_check(*, voter_key: str, ip_hash: str) -> None:
    """Refuse a prompt (a new battle or a follow-up) over the voter's or the network's limit.
    Runs in the transaction that creates it, holding a lock per voter and per network until it
    commits, so concurrent starts are counted one after another and cannot all slip under the
    limit."""
    _lock_until_commit(f"battles-of-voter:{voter_key}", f"battles-of-ip:{ip_hash}")
    minute_ago = timezone.now() - timedelta(minutes=1)
    arena = arena_settings_current()
    if _prompts_since(minute_ago, voter_key=voter_key) >= arena.battles_per_minute:
        raise BattleRefused(
            "You are starting battles too quickly; please wait a minute.",
            status=429,
            code="rate_limited",
        )
    # A booth's battles have their own limit: they must not use up the network's share of the
    # phones on the same venue network.
    if _prompts_since(minute_ago, ip_hash=ip_hash, kiosk__isnull=True) >= (
        arena.battles_per_minute_per_ip
    ):
        raise BattleRefused(
            "Too many battles from your network; please wait a minute.",
            status=429,
            code="rate_limited",
        )


def _kiosk_rate_limit_check(kiosk: KioskDevice) -> None:
    """A kiosk's voters are one after another on one screen, each a new session: a limit per
    session would never bite and one per network would stop the booth, so the device has its
    own (ARENA_KIOSK_BATTLES_PER_MINUTE), counted under a lock like the others."""
    _lock_until_commit(f"battles-of-kiosk:{kiosk.pk}")
    minute_ago = timezone.now() - timedelta(minutes=1)
    if _prompts_since(minute_ago, kiosk=kiosk) >= settings.ARENA_KIOSK_BATTLES_PER_MINUTE:
        raise BattleRefused(
            "This kiosk is starting battles too quickly; please wait a minute.",
            status=429,
            code="rate_limited",
        )


def _lock_until_commit(*names: str) -> None:
    # PostgreSQL: transaction-scoped advisory locks, taken in a fixed order so two starts
    # never wait on each other crosswise. SQLite runs one write transaction at a time, so it
    # needs none. There is no row to lock with SELECT ... FOR UPDATE: voters have no table.
    if connection.vendor != "postgresql":
        return
    keys = sorted(
        int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)
        for name in names
    )
    with connection.cursor() as cursor:
        for key in keys:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def targeted_round_schedule(
    *,
    contestant_a: Contestant,
    contestant_b: Contestant,
    battles: int,
    prompts: list[str] | None = None,
    note: str = "",
) -> TargetedRound:
    """Order `battles` battles between two contestants; the arena serves them first."""
    if contestant_a.pk == contestant_b.pk:
        raise ValueError("a targeted round needs two different contestants")
    if battles < 1:
        raise ValueError("a targeted round needs at least one battle")
    chosen = [p.strip() for p in prompts or []]
    limit = settings.ARENA_PROMPT_MAX_CHARS
    for number, text in enumerate(chosen, 1):
        if not text or len(text) > limit:
            raise ValueError(f"prompt {number} must have 1 to {limit:,} characters")
    return TargetedRound.objects.create(
        contestant_a=contestant_a,
        contestant_b=contestant_b,
        battles_wanted=battles,
        prompts=chosen,
        note=note,
    )


def targeted_round_claim(*, prompt: str) -> TargetedRound | None:
    """Take one battle slot of the oldest open round this prompt fits, or None.

    The slot is taken by a conditional UPDATE, so concurrent battles never overfill a round.
    """
    open_rounds = TargetedRound.objects.filter(
        battles_served__lt=F("battles_wanted"),
        contestant_a__active=True,
        contestant_b__active=True,
    ).select_related("contestant_a", "contestant_b")
    for candidate in open_rounds:
        if candidate.prompts and prompt not in candidate.prompts:
            continue
        taken = TargetedRound.objects.filter(
            pk=candidate.pk, battles_served__lt=F("battles_wanted")
        ).update(battles_served=F("battles_served") + 1)
        if taken:
            return candidate
    return None


def battle_claim_generation(*, battle_id: str) -> bool:
    """Atomically move a new battle to `generating`; False if someone else already did.

    The conditional UPDATE is the lock: two sockets opened on one battle never both run it.
    """
    claimed = Battle.objects.filter(pk=battle_id, state=Battle.State.CREATED).update(
        state=Battle.State.GENERATING, generation_started_at=timezone.now()
    )
    return claimed == 1


@dataclass(frozen=True)
class SideResult:
    text: str
    finish_reason: str
    error: str
    first_token_s: float | None
    total_s: float


@transaction.atomic
def battle_record_answers(*, battle_id: str, results: dict[str, SideResult]) -> Battle:
    """Store both sides' answers to the battle's latest prompt (its first, or a follow-up) with
    their timings and style features, and settle the battle: complete (votable, or open to
    another follow-up), failed (a side errored: the battle ends there). An answer that names
    any contestant or says a configured identity word leaks, in whichever turn: one leaking
    side loses the battle whatever the vote (the voter still votes blind; the fit and the
    export read `Battle.forced_winner`), and a battle where both sides leak is void."""
    battle = Battle.objects.select_for_update().get(pk=battle_id)
    answers = list(battle.answers.all())
    follow_up = battle.follow_ups.get(turn=battle.turns) if battle.turns > 1 else None
    leaked = set(battle.leaked_sides)
    words = identity_words()
    # A name the voter wrote is not given away by an answer that repeats it: otherwise a
    # voter could make a compliant model "leak" (and lose) by asking it to say a name. Written
    # means found by the rule that reads answers: "supernova" does not write "Nova".
    asked = "\n".join([battle.prompt, *battle.follow_ups.values_list("prompt", flat=True)])
    names = sorted(set(words.names) - words_written(asked, names=words.names))
    configured = sorted(set(words.configured) - words_written(asked, configured=words.configured))
    for answer in answers:
        result = results[answer.side]
        features = style_features(result.text)
        if follow_up is None:
            _fill(answer, result, features)
            answer.save()
        else:
            said = FollowUpAnswer(follow_up=follow_up, side=answer.side)
            _fill(said, result, features)
            said.save()
            _add_to_conversation_style(answer, battle, features)
        if revealed_identity(result.text, names=names, configured=configured):
            leaked.add(answer.side)
    failed = any(results[answer.side].error for answer in answers)
    battle.state = Battle.State.FAILED if failed else Battle.State.COMPLETE
    battle.leaked_sides = "".join(sorted(leaked))
    battle.void_reason = "both answers revealed a model identity" if len(leaked) == 2 else ""
    battle.completed_at = timezone.now()
    battle.save(update_fields=["state", "void_reason", "leaked_sides", "completed_at"])
    return battle


def _fill(row: AnswerContent, result: SideResult, features: StyleFeatures) -> None:
    row.text = result.text
    row.finish_reason = result.finish_reason
    row.error = result.error
    row.first_token_ms = _ms(result.first_token_s)
    row.total_ms = _ms(result.total_s)
    _set_style(row, features)


def _set_style(row: AnswerContent, features: StyleFeatures) -> None:
    row.tokens = features.tokens
    row.header_counts = features.headers
    row.list_counts = features.lists
    row.bold_counts = features.bold
    row.style_version = STYLE_VERSION


def _add_to_conversation_style(answer: Answer, battle: Battle, features: StyleFeatures) -> None:
    """Add a follow-up answer's features to its side's sums (`Answer`). Sums counted under
    other rules (the battle began before an upgrade) are counted again from every answer the
    side gave, so a row never mixes two versions."""
    if answer.style_version == STYLE_VERSION:
        before = StyleFeatures(
            answer.tokens, answer.header_counts, answer.list_counts, answer.bold_counts
        )
    else:
        earlier = FollowUpAnswer.objects.filter(
            follow_up__battle=battle, follow_up__turn__lt=battle.turns, side=answer.side
        ).values_list("text", flat=True)
        before = style_sum(style_features(text) for text in [answer.text, *earlier])
    _set_style(answer, style_sum([before, features]))
    answer.save(
        update_fields=["tokens", "header_counts", "list_counts", "bold_counts", "style_version"]
    )


def battle_mark_interrupted(*, battle_id: str) -> None:
    Battle.objects.filter(pk=battle_id, state=Battle.State.GENERATING).update(
        state=Battle.State.FAILED, completed_at=timezone.now()
    )


@dataclass(frozen=True)
class VoteOutcome:
    battle_id: str
    choice: str
    counted: bool
    void_reason: str
    reveal: dict[str, str]  # side -> display name, shown only after the vote
    leaked_side: str = ""  # the one side whose answer revealed an identity: it lost the battle


def vote_record(*, battle_id: str, choice: str, voter_key: str, ip_hash: str) -> VoteOutcome:
    """Record the one vote a battle can take. A retry of the same vote gets the same outcome;
    a different second vote is refused. Uniqueness is the database's (the vote's primary key
    is the battle), so concurrent requests cannot both win."""
    if choice not in Vote.Choice.values:
        raise BattleRefused(f"Unknown vote {choice!r}.", code="bad_choice")
    # The battle, its vote if any and both answers' contestants (for the reveal) in one query
    # (every query is a round trip on the busiest path of a conference day), the battle's row
    # locked until the vote commits, as `follow_up_create` locks it: a follow-up sent at the
    # same moment either comes first (and the vote waits for its answers) or finds the vote.
    # A vote committed meanwhile by the same voter's retry is found by the unique key below.
    with transaction.atomic():
        answers = list(
            Answer.objects.filter(battle_id=battle_id)
            .select_related("battle__vote", "contestant")
            .select_for_update(of=("battle",))
            .order_by("side")
        )
        if not answers:  # a battle's answers are created with it, in one transaction
            raise BattleRefused("No such battle.", status=404, code="not_found")
        battle = answers[0].battle
        if battle.voter_key != voter_key:
            raise BattleRefused(
                "This battle belongs to another voter.", status=403, code="not_yours"
            )
        existing = getattr(battle, "vote", None)
        if existing is None:
            _check_votable(battle)
            counted = battle.void_reason == ""
            seconds = (timezone.now() - battle.completed_at).total_seconds()  # type: ignore[operator]
            try:
                with transaction.atomic():
                    existing = Vote.objects.create(
                        battle=battle,
                        choice=choice,
                        counted=counted,
                        voter_key=voter_key,
                        ip_hash=ip_hash,
                        seconds_after_answers=seconds,
                    )
                    transaction.on_commit(lambda: _announce_vote(battle.pk, counted))
            except IntegrityError:
                existing = Vote.objects.get(battle=battle)
    if existing.choice != choice:
        raise BattleRefused("This battle already has your vote.", status=409, code="already_voted")
    reveal = {answer.side: answer.contestant.display_name for answer in answers}
    leaked_side = battle.leaked_sides if battle.forced_winner else ""
    return VoteOutcome(
        battle.pk, existing.choice, existing.counted, battle.void_reason, reveal, leaked_side
    )


def _check_votable(battle: Battle) -> None:
    _check_answers_complete(battle)
    waited = (timezone.now() - battle.completed_at).total_seconds()  # type: ignore[operator]
    if waited < arena_settings_current().min_vote_seconds:
        raise BattleRefused("Please read both answers before voting.", status=429, code="too_early")


def _check_answers_complete(battle: Battle) -> None:
    if battle.state == Battle.State.FAILED:
        raise BattleRefused(
            "A model failed to answer in this battle, so it cannot be voted on.",
            status=409,
            code="battle_failed",
        )
    if battle.state != Battle.State.COMPLETE or battle.completed_at is None:
        raise BattleRefused(
            "Please wait until both answers are complete.", status=409, code="not_ready"
        )


def _announce_vote(battle_id: str, counted: bool) -> None:
    # The vote is committed already; a channel layer outage must not turn it into an error.
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            VOTES_GROUP, {"type": "vote.recorded", "battle": battle_id, "counted": counted}
        )
    except Exception:
        log.exception("could not announce vote on battle %s", battle_id)


def prompts_load(*, texts: list[str]) -> int:
    """Add prompts to the suggestion pool; returns how many were new."""
    cleaned = {t.strip() for t in texts if t.strip()}
    existing = set(SuggestedPrompt.objects.filter(text__in=cleaned).values_list("text", flat=True))
    SuggestedPrompt.objects.bulk_create(
        [SuggestedPrompt(text=t) for t in sorted(cleaned - existing)]
    )
    return len(cleaned - existing)


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(0, round(seconds * 1000))


# -- excluding voters from the fit -----------------------------------------------------------

KEY_PREFIX_MIN = 8  # organizers may name a voter by the start of its hash, as screens show it


class ExclusionRefused(ValueError):
    """An exclusion that cannot be made or lifted; the message says why."""


def voter_key_resolve(*, kind: str, key: str) -> str:
    """The one full hash of `kind` among counted votes that starts with `key`."""
    if kind not in VoterExclusion.Kind.values:
        raise ExclusionRefused(f"Unknown voter kind {kind!r}: use session or network.")
    key = key.strip().lower()
    if len(key) < KEY_PREFIX_MIN:
        raise ExclusionRefused(f"Give at least {KEY_PREFIX_MIN} characters of the voter's hash.")
    column = "voter_key" if kind == VoterExclusion.Kind.SESSION else "ip_hash"
    matches = list(
        Vote.objects.filter(counted=True, **{f"{column}__startswith": key})
        .values_list(column, flat=True)
        .distinct()[:2]
    )
    if not matches:
        raise ExclusionRefused(f"No counted vote comes from a {kind} starting with {key!r}.")
    if len(matches) > 1:
        raise ExclusionRefused(f"More than one {kind} starts with {key!r}: give more of it.")
    return matches[0]


def voter_exclude(
    *, kind: str, key: str, reason: str, excluded_by: str, evidence: dict | None = None
) -> VoterExclusion:
    """Leave a session's or a network's votes out of the fit, the export and the phases'
    feedback from now on, with the reason and the evidence on record. `key` may be a prefix."""
    reason = reason.strip()
    if not reason:
        raise ExclusionRefused("Say why: the reason is published with the leaderboard.")
    full_key = voter_key_resolve(kind=kind, key=key)
    try:
        with transaction.atomic():
            return VoterExclusion.objects.create(
                kind=kind,
                key=full_key,
                reason=reason[:300],
                evidence=evidence or {},
                excluded_by=excluded_by[:150],
            )
    except IntegrityError:
        current = VoterExclusion.objects.get(kind=kind, key=full_key, lifted_at__isnull=True)
        raise ExclusionRefused(f"That {kind} is already excluded (#{current.pk}).") from None


def voter_exclusion_lift(*, exclusion_id: int, lifted_by: str, reason: str) -> VoterExclusion:
    """Put an excluded voter's votes back in the fit. The exclusion stays on record."""
    reason = reason.strip()
    if not reason:
        raise ExclusionRefused("Say why the exclusion is lifted.")
    lifted = VoterExclusion.objects.filter(pk=exclusion_id, lifted_at__isnull=True).update(
        lifted_at=timezone.now(), lifted_by=lifted_by[:150], lift_reason=reason[:300]
    )
    if not lifted:
        if VoterExclusion.objects.filter(pk=exclusion_id).exists():
            raise ExclusionRefused(f"Exclusion #{exclusion_id} is already lifted.")
        raise ExclusionRefused(f"There is no exclusion #{exclusion_id}.")
    return VoterExclusion.objects.get(pk=exclusion_id)

"""Writes of battles' categories and prompt groups, after creation: the judge's pass, the
near-duplicate grouping, and a battle's later turns (`manage.py battles categorize`).

A battle gets its rule tags and its prompt key when it is created (`services.battle_create`);
what is slow or needs every battle at once runs here, as a command or a background step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.utils import timezone

from arena.battles.categories import (
    MULTI_TURN,
    Categorizer,
    RuleCategorizer,
    categories_decode,
    categories_encode,
)
from arena.battles.category_judge import CategoryJudgeError, JudgeCategorizer
from arena.battles.models import Battle
from arena.battles.prompt_groups import NUM_PERM, minhash_signature, prompt_key, star_groups

log = logging.getLogger(__name__)

UPDATE_BATCH = 1_000


def category_judge_from_settings(
    *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
) -> JudgeCategorizer | None:
    """The judge: `model` (default `ARENA_CATEGORY_JUDGE_MODEL`) at `base_url` (default
    `ARENA_CATEGORY_JUDGE_BASE_URL`, else the site's own API proxy) with `api_key` (default
    `ARENA_CATEGORY_JUDGE_API_KEY`, an organizer's proxy token); None when no model is named."""
    model = model or settings.ARENA_CATEGORY_JUDGE_MODEL
    if not model:
        return None
    proxy = f"{settings.AGENTS_ARENA_URL.rstrip('/')}/proxy/v1"
    return JudgeCategorizer(
        base_url=base_url or settings.ARENA_CATEGORY_JUDGE_BASE_URL or proxy,
        api_key=api_key or settings.ARENA_CATEGORY_JUDGE_API_KEY,
        model=model,
    )


@dataclass(frozen=True)
class CategorizeReport:
    categorized: int
    failed: int
    errors: list[str]


def battles_categorize(
    *, categorizer: Categorizer | None = None, limit: int | None = None
) -> CategorizeReport:
    """Categorize the battles `categorizer` has not read yet (default: the rules, for battles
    stored before categories existed), oldest first, at most `limit`. A judge's failure on one
    battle leaves that battle as it was (tried again next run) and goes on; a battle's
    `multi_turn` tag, which comes from its turns, not its prompt, is kept."""
    categorizer = categorizer or RuleCategorizer()
    if categorizer.name == RuleCategorizer.name:
        pending = Battle.objects.filter(categorized_by="")
    else:
        pending = Battle.objects.exclude(categorized_by=categorizer.name)
    pending = pending.order_by("created_at", "pk").values_list("pk", "prompt", "categories")
    if limit is not None:
        pending = pending[:limit]
    done = failed = 0
    errors: list[str] = []
    for pk, prompt, stored in pending.iterator(chunk_size=500):
        turns = 2 if MULTI_TURN in categories_decode(stored) else 1
        try:
            result = categorizer.categorize(prompt, user_turns=turns)
        except CategoryJudgeError as exc:
            failed += 1
            if len(errors) < 10:
                errors.append(f"battle {pk}: {exc}")
            continue
        Battle.objects.filter(pk=pk).update(
            categories=categories_encode(result.tags),
            language=result.language,
            category_criteria=result.criteria,
            categorized_by=categorizer.name,
            prompt_key=prompt_key(prompt),
            categorized_at=timezone.now(),
        )
        done += 1
    return CategorizeReport(done, failed, errors)


def prompt_groups_refresh() -> dict[str, int]:
    """Group every battle's prompt with its near duplicates (prompt_groups.py) and store each
    battle's group as the key of the group's oldest prompt (its representative: battles are
    read oldest first). Memory: the battles' ids and a 64-value MinHash signature a battle
    (about 400 bytes each with the Python objects); only changed rows are written."""
    total = Battle.objects.count()
    ids: list[str] = []
    signatures = np.empty((total, NUM_PERM), dtype=np.uint32)
    own_key = np.empty(total, dtype=np.int64)
    stored_group: list[int | None] = []
    rows = Battle.objects.order_by("created_at", "pk").values_list("pk", "prompt", "prompt_group")
    for i, (pk, prompt, group) in enumerate(rows.iterator(chunk_size=2_000)):
        if i >= total:  # created while we read: grouped next time
            break
        ids.append(pk)
        signatures[i] = minhash_signature(prompt)
        own_key[i] = prompt_key(prompt)
        stored_group.append(group)
    n = len(ids)
    groups = star_groups(signatures[:n])
    # Groups are numbered by their first (oldest) member: its key names the group.
    _, first_of_group = np.unique(groups, return_index=True)
    group_key = own_key[first_of_group[groups]] if n else own_key[:0]
    changed = [i for i in range(n) if stored_group[i] != int(group_key[i])]
    for start in range(0, len(changed), UPDATE_BATCH):
        batch = changed[start : start + UPDATE_BATCH]
        now = timezone.now()  # the categorisation generation (Battle.categorized_at)
        updates = [
            Battle(pk=ids[i], prompt_group=int(group_key[i]), categorized_at=now) for i in batch
        ]
        Battle.objects.bulk_update(updates, ["prompt_group", "categorized_at"])
    sizes = np.bincount(groups) if n else np.zeros(0, dtype=np.intp)
    return {
        "battles": n,
        "groups": int(len(sizes)),
        "battles_in_groups_of_several": int(sizes[sizes > 1].sum()),
        "updated": len(changed),
    }

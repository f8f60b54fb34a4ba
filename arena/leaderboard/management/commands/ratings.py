from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.battles.categories import CATEGORIES
from arena.battles.export import ExportFormatError
from arena.battles.prompt_groups import dedup_weights
from arena.battles.selectors import exclusions_summary
from arena.leaderboard.inputs import battles_grouped_from_file, counted_battles_grouped
from arena.leaderboard.services import (
    CategoryTooSmall,
    analyses_of,
    category_minimum,
    snapshot_fit,
)
from arena.rating import BattleDataError, Battles, RatingResult, fit_ratings


class Command(BaseCommand):
    help = (
        "Fit the leaderboard (style-controlled Bradley-Terry, and raw beside it) from the "
        "database's counted votes, saving a snapshot, or from a battle export file. "
        "Battles on near-duplicate prompts are down-weighted (each of a group of g weighs "
        "1/sqrt(g)) unless --no-dedup; --category NAME fits one category's battles only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--votes", type=Path, help="a battle export (JSONL); no database needed"
        )
        parser.add_argument("--no-style", action="store_true", help="raw Bradley-Terry only")
        parser.add_argument("--ci", choices=["bootstrap", "sandwich"], default="bootstrap")
        parser.add_argument(
            "--bootstrap", type=int, default=100, metavar="N", help="bootstrap rounds"
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--category",
            metavar="NAME",
            help=f"only the battles tagged NAME: one of {', '.join(CATEGORIES)} (from an "
            "export: its category_tag, ours or Chatbot Arena's)",
        )
        parser.add_argument(
            "--no-dedup",
            action="store_true",
            help="every battle weighs 1, however often its prompt (or a near duplicate) was asked",
        )

    def handle(self, *args: object, **options: Any) -> None:
        style = not options["no_style"]
        if options["bootstrap"] < 1:
            raise CommandError("--bootstrap must be at least 1")
        fit = {
            "ci": options["ci"],
            "bootstrap_rounds": options["bootstrap"],
            "seed": options["seed"],
        }
        category = options["category"] or None
        if category is not None and category not in CATEGORIES:
            raise CommandError(f"unknown category {category!r}: use one of {', '.join(CATEGORIES)}")
        dedup: dict[str, Any] = {}
        try:
            if options["votes"] is not None:
                battles, groups = _battles_from(options["votes"], style=style, category=category)
                _check_size(battles, category)
                assert battles is not None
                counted = battles
                if not options["no_dedup"]:
                    weights, dedup = dedup_weights(groups, "file")
                    battles = battles.reweighted(weights)
                styled = fit_ratings(battles, style=True, **fit) if style else None
                raw = fit_ratings(battles.without_style(), style=False, **fit)
                analyses = analyses_of(counted)
            else:
                exclusions = exclusions_summary()
                battles_or_none, groups, last_vote_at = counted_battles_grouped(category=category)
                if battles_or_none is None and category is None:
                    raise CommandError("there are no counted votes yet")
                _check_size(battles_or_none, category)
                assert battles_or_none is not None
                snapshot, styled, raw = snapshot_fit(
                    battles_or_none,
                    source="command",
                    style=style,
                    last_vote_at=last_vote_at,
                    exclusions=exclusions,
                    category=category or "",
                    groups=None if options["no_dedup"] else groups,
                    **fit,
                )
                analyses = snapshot.analyses
                dedup = snapshot.dedup
        except BattleDataError as exc:
            raise CommandError(str(exc)) from None
        except CategoryTooSmall as exc:
            raise CommandError(str(exc)) from None
        main = styled or raw
        if options["json"]:
            output = main.to_json()
            if styled is not None:
                output["raw_scores"] = raw.to_json()["scores"]
            output["analyses"] = {
                k: analyses[k] for k in ("votes_per_model", "longer_answer_wins") if k in analyses
            }
            output["category"] = category
            output["dedup"] = dedup or None
            self.stdout.write(json.dumps(output))
            return
        if category is not None:
            self.stdout.write(f"category: {category}")
        self._print_table(main, raw if styled else None, analyses)
        if dedup and dedup.get("battles_grouped"):
            self.stdout.write(
                f"\nnear-duplicate prompts: {dedup['battles_grouped']:,} battles "
                f"({dedup['grouped_share_of_battles']:.0%}) in {dedup['groups_of_several']:,} "
                f"groups, weighted {dedup['rule']}: they hold "
                f"{dedup['grouped_share_of_fit']:.0%} of the fit's weight"
            )

    def _print_table(
        self, main: RatingResult, raw: RatingResult | None, analyses: dict[str, Any]
    ) -> None:
        ci = f"{main.ci_method} {main.confidence:.0%} CI" if main.ci_method else "no CI"
        self.stdout.write(f"{main.method}, {main.n_battles:,} battles, {ci}\n")
        header = f"{'rank':>4}  {'model':<28} {'score':>8} {'interval':>19} {'battles':>8}"
        if raw is not None:
            header += f" {'raw':>8} {'style effect':>12}"
        self.stdout.write(header)
        for s in main.scores:
            line = f"{s.rank:>4}  {s.model[:28]:<28} {s.score:>8.1f} [{s.ci_low:>7.1f}, {s.ci_high:>7.1f}] {s.n_battles:>8,}"
            if raw is not None:
                raw_score = raw.score_of(s.model).score
                line += f" {raw_score:>8.1f} {raw_score - s.score:>+12.1f}"
            self.stdout.write(line)
        if main.style_coefficients and main.style_intervals:
            self.stdout.write("\nstyle coefficients (log-odds per standard deviation):")
            for name, value in main.style_coefficients.items():
                low, high = main.style_intervals[name]
                self.stdout.write(f"  {name:<8} {value:+.4f}  [{low:+.4f}, {high:+.4f}]")
        if main.superiority is not None and len(main.scores) > 1:
            self.stdout.write("\nneighbours in the ranking (share of bootstrap resamples):")
            index = {name: i for i, name in enumerate(main.models)}
            for upper, lower in zip(main.scores, main.scores[1:], strict=False):
                share = main.superiority[index[upper.model], index[lower.model]]
                self.stdout.write(
                    f"  {upper.model} is above {lower.model} in {share:.1%} of resamples"
                )
        longer = analyses.get("longer_answer_wins")
        if longer and longer["share"] is not None:
            self.stdout.write(
                f"\nthe longer answer won {longer['share']:.1%} of "
                f"{longer['decisive_votes_with_length_difference']:,} decisive votes"
            )
        for warning in main.warnings:
            self.stderr.write(self.style.WARNING(f"warning: {warning}"))


def _battles_from(path: Path, *, style: bool, category: str | None) -> tuple[Battles | None, Any]:
    if not path.is_file():
        raise CommandError(f"{path} is not a file")
    try:
        return battles_grouped_from_file(path, style=style, category=category)
    except ExportFormatError as exc:
        raise CommandError(f"{path}: {exc}") from None


def _check_size(battles: Battles | None, category: str | None) -> None:
    """A category's table needs `ARENA_CATEGORY_MIN_BATTLES` battles (the site's rule)."""
    n = 0 if battles is None else battles.n_rows
    if category is not None and n < category_minimum():
        raise CategoryTooSmall(category, n, category_minimum())
    if battles is None:
        raise BattleDataError("no battles to rate")

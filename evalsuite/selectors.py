"""Reads of the evaluation suite: scores per model, gap closed, what an agent may see, Pareto
sets, post-peak warnings, safety deltas and the inputs of the correlations report."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Count, QuerySet

from agents.models import Agent, Nomination
from arena.competition.models import Competition, Phase
from evalsuite import metrics
from evalsuite.models import BenchmarkResult, EvalRun, ItemResult
from evalsuite.registry import benchmarks
from evalsuite.replacements import replaced_agents

DOMAINS = {entry.name: entry.domain for entry in benchmarks()}
CAPABILITY = {entry.name for entry in benchmarks() if entry.kind == "capability"}
SAFETY = {entry.name for entry in benchmarks() if entry.kind == "safety"}


def competition_ended(competition: Competition) -> bool:
    """Held-out scores are shown to agents only once every phase is closed."""
    states = list(competition.phases.values_list("state", flat=True))
    return bool(states) and all(state == Phase.State.CLOSED for state in states)


def _results(runs: QuerySet[EvalRun], *, include_held_out: bool) -> QuerySet[BenchmarkResult]:
    results = BenchmarkResult.objects.filter(
        run__in=runs.filter(state=EvalRun.State.DONE), score__isnull=False
    )
    if not include_held_out:
        results = results.filter(held_out=False)
    return results.select_related("run").order_by("run__created_at", "run_id")


def score_of(
    result: BenchmarkResult, items: dict[int, tuple[tuple[str, float], ...]] | None = None
) -> metrics.Score:
    """The stored score, with its per-item values when `items` (`item_values`) has them."""
    return metrics.Score(
        float(result.score),  # type: ignore[arg-type]
        result.stderr,
        result.n,
        (items or {}).get(result.pk) or None,
    )


def item_values(results: list[BenchmarkResult]) -> dict[int, tuple[tuple[str, float], ...]]:
    """Result id → its stored (item id, value) pairs, in one query: what the headline's paired
    bootstrap redraws (`metrics.headline`)."""
    found: dict[int, list[tuple[str, float]]] = {}
    rows = ItemResult.objects.filter(result__in=[r.pk for r in results]).order_by("item_id")
    for result_id, item_id, value in rows.values_list("result_id", "item_id", "value"):
        found.setdefault(result_id, []).append((item_id, value))
    return {key: tuple(pairs) for key, pairs in found.items()}


def scores_of(
    runs: QuerySet[EvalRun], *, include_held_out: bool = True
) -> dict[str, metrics.Score]:
    """Benchmark → score over the given runs (batches of one model), with its per-item values;
    a later run wins."""
    results = list(_results(runs, include_held_out=include_held_out))
    items = item_values(results)
    return {r.benchmark: score_of(r, items) for r in results}


def reference_scores(
    competition: Competition, role: str, *, include_held_out: bool = True
) -> dict[str, metrics.Score]:
    runs = EvalRun.objects.filter(phase__competition=competition, role=role)
    return scores_of(runs, include_held_out=include_held_out)


def gap_closed_of(
    competition: Competition, scores: dict[str, metrics.Score], *, include_held_out: bool = True
) -> metrics.GapClosed:
    """Gap closed over the capability benchmarks among `scores`."""
    capability = {name: score for name, score in scores.items() if name in CAPABILITY}
    return metrics.gap_closed(
        capability,
        reference_scores(competition, EvalRun.Role.BASE, include_held_out=include_held_out),
        reference_scores(competition, EvalRun.Role.INSTRUCT, include_held_out=include_held_out),
    )


def gap_json(gap: metrics.GapClosed) -> dict[str, Any]:
    return {
        "median": None if gap.median is None else round(gap.median, 4),
        # said in place of the median when no benchmark qualifies
        "no_median": gap.why_none,
        "per_benchmark": {name: round(value, 4) for name, value in gap.per_benchmark.items()},
        "excluded": gap.excluded,
        "excluded_reasons": gap.reasons,
        # a benchmark counts when instruct − base > z·√(se_instruct² + se_base²) (one-sided)
        "measurable_z": metrics.MEASURABLE_Z,
    }


def score_json(score: metrics.Score) -> dict[str, Any]:
    return {"score": round(score.value, 4), "stderr": _round(score.stderr), "n": score.n}


def details_json(result: BenchmarkResult) -> dict[str, dict[str, Any]]:
    """The result's own aggregates (BBQ's bias scores), each as `score_json` shows a score."""
    return {
        name: score_json(metrics.Score(float(cell["score"]), cell.get("stderr"), int(cell["n"])))
        for name, cell in sorted((result.metrics or {}).items())
    }


def _scores_json(scores: dict[str, metrics.Score]) -> dict[str, dict[str, Any]]:
    return {name: score_json(score) for name, score in sorted(scores.items())}


def agent_visible_evals(agent: Agent) -> dict[str, Any]:
    """What `GET /api/v1/evals` shows an agent: its own evaluated checkpoints, proxy
    benchmarks only (held-out ones too once the competition has ended), the references'
    proxy scores, and gap closed over the same benchmarks."""
    runs = EvalRun.objects.filter(agent=agent, role=EvalRun.Role.AGENT)
    first = runs.select_related("phase__competition").first()
    if first is None:
        return {"held_out_visible": False, "checkpoints": [], "references": {}}
    competition = first.phase.competition
    visible = competition_ended(competition)
    checkpoints = []
    for key in _checkpoint_keys(runs):
        these = runs.filter(**key)
        results = list(_results(these, include_held_out=visible))
        if not results:
            continue
        latest = these.order_by("-created_at").first()
        replaced = replaced_agents(latest.phase if latest else None).get(agent.name)
        if replaced is not None:  # a confirmed violation: the base model's results instead
            base_runs = EvalRun.objects.filter(
                phase__competition=competition, role=EvalRun.Role.BASE
            )
            later_wins = {r.benchmark: r for r in _results(base_runs, include_held_out=visible)}
            results = list(later_wins.values())
        scores = {r.benchmark: score_of(r) for r in results}
        checkpoints.append({
            "checkpoint_id": key.get("checkpoint_id"),
            "phase": latest.phase.label if latest else None,
            **_replaced_json(replaced),
            "benchmarks": [
                {"benchmark": r.benchmark, "domain": r.domain, "kind": r.kind,
                 **score_json(score_of(r)), "judge_model": r.judge_model}
                for r in results
            ],
            "domains": _scores_json(metrics.domain_vector(scores, DOMAINS)),
            "gap_closed": gap_json(gap_closed_of(competition, scores, include_held_out=visible)),
        })  # fmt: skip
    references = {
        role: {
            name: round(score.value, 4)
            for name, score in reference_scores(competition, role, include_held_out=visible).items()
        }
        for role in (EvalRun.Role.BASE, EvalRun.Role.INSTRUCT)
    }
    return {"held_out_visible": visible, "checkpoints": checkpoints, "references": references}


def _replaced_json(rules: list[str] | None) -> dict[str, Any]:
    """Said beside results that are the base model's because of confirmed violations."""
    return {} if rules is None else {"replaced_by_base": {"confirmed_violations": rules}}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _checkpoint_keys(runs: QuerySet[EvalRun]) -> list[dict[str, Any]]:
    """One filter per evaluated model: by checkpoint, or by run when no checkpoint is known."""
    keys: list[dict[str, Any]] = []
    for run_id, checkpoint_id in runs.order_by("created_at").values_list("id", "checkpoint_id"):
        key = {"checkpoint_id": checkpoint_id} if checkpoint_id else {"id": run_id}
        if key not in keys:
            keys.append(key)
    return keys


@dataclass(frozen=True)
class ModelScores:
    label: str  # the contestant's display name, or "checkpoint <id>"
    role: str
    agent: str | None
    checkpoint_id: int | None
    scores: dict[str, metrics.Score]
    judges: dict[str, str]  # judge-graded benchmarks: the model that graded
    # a benchmark's own aggregates beside its score (BBQ's bias scores), as score_json
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the confirmed violations for which `scores` and `judges` are the base model's; None: its own
    replaced: list[str] | None = None


def phase_models(phase: Phase, *, after_audit: bool = True) -> list[ModelScores]:
    """Every model evaluated in the phase with all its scores (organizer view). An agent with a
    confirmed violation concerning the phase (`replacements.replaced_agents`) has the base
    model's scores and judges in place of its own, and says why in `replaced`; with
    `after_audit=False`, every model has its own."""
    out: dict[tuple[str, int | None, str], ModelScores] = {}
    # An agent's own on-demand runs are its working measurements, not the phase's models.
    runs = EvalRun.objects.filter(phase=phase, requested_by_agent=False)
    results = list(_results(runs, include_held_out=True))
    items = item_values(results)
    for r in results:
        run = r.run
        key = (run.role, run.checkpoint_id, run.model_label)
        if key not in out:
            out[key] = ModelScores(run.model_label, run.role, run.agent.name if run.agent else None,
                                   run.checkpoint_id, {}, {})  # fmt: skip
        out[key].scores[r.benchmark] = score_of(r, items)
        out[key].details[r.benchmark] = details_json(r)
        if r.judge_model:
            out[key].judges[r.benchmark] = r.judge_model
    models = list(out.values())
    replaced = replaced_agents(phase) if after_audit else {}
    if not any(m.role == EvalRun.Role.AGENT and m.agent in replaced for m in models):
        return models
    # The base model as gap closed sees it (`reference_scores`: the competition's, later wins).
    base = ModelScores("base", EvalRun.Role.BASE, None, None, {}, {})
    base_runs = EvalRun.objects.filter(phase__competition=phase.competition, role=base.role)
    base_results = list(_results(base_runs, include_held_out=True))
    base_items = item_values(base_results)
    for r in base_results:
        base.scores[r.benchmark] = score_of(r, base_items)
        base.details[r.benchmark] = details_json(r)
        base.judges.pop(r.benchmark, None)
        if r.judge_model:
            base.judges[r.benchmark] = r.judge_model
    return [
        replace(
            m,
            scores=dict(base.scores),
            judges=dict(base.judges),
            details=dict(base.details),
            replaced=replaced[m.agent],
        )
        if m.role == EvalRun.Role.AGENT and m.agent in replaced
        else m
        for m in models
    ]


def checkpoint_scores(
    agent: Agent, *, include_held_out: bool = True
) -> dict[int, dict[str, metrics.Score]]:
    """Checkpoint id → scores, for every evaluated checkpoint of the agent, oldest first."""
    runs = EvalRun.objects.filter(agent=agent, checkpoint__isnull=False)
    found: dict[int, dict[str, metrics.Score]] = {}
    results = list(
        _results(runs, include_held_out=include_held_out).order_by(
            "run__checkpoint__created_at", "run__created_at"
        )
    )
    items = item_values(results)
    for r in results:
        found.setdefault(r.run.checkpoint_id, {})[r.benchmark] = score_of(r, items)  # type: ignore[index]
    return found


def agent_pareto(agent: Agent, *, include_held_out: bool = True) -> dict[str, Any]:
    """The per-domain capability vector of each evaluated checkpoint and the non-dominated ones."""
    vectors = {
        str(checkpoint): metrics.domain_vector(
            {n: s for n, s in scores.items() if n in CAPABILITY}, DOMAINS
        )
        for checkpoint, scores in checkpoint_scores(
            agent, include_held_out=include_held_out
        ).items()
    }
    return {
        "vectors": {key: _scores_json(vector) for key, vector in vectors.items()},
        "pareto": metrics.pareto_set(vectors),
    }


def headline(
    competition: Competition, scores: dict[str, metrics.Score], *, model_key: str = ""
) -> metrics.Score | None:
    """Median gap closed over the capability benchmarks that qualify, with its standard error;
    None when none does (`metrics.NO_QUALIFYING`: the callers say so)."""
    return metrics.headline(
        {n: s for n, s in scores.items() if n in CAPABILITY},
        reference_scores(competition, EvalRun.Role.BASE),
        reference_scores(competition, EvalRun.Role.INSTRUCT),
        model_key=model_key,
    )


@dataclass(frozen=True)
class CheckpointHeadlines:
    evaluated: list[str]  # every evaluated checkpoint, oldest first, with a headline or not
    history: list[tuple[str, metrics.Score]]  # (checkpoint, headline), oldest first
    draws: dict[str, Any]  # checkpoint → its redrawn headlines (numpy), for paired drops
    without: dict[str, str]  # checkpoints without a headline → why (`metrics.NO_QUALIFYING`)

    def post_peak(self, chosen: str) -> metrics.PostPeak | None:
        """The post-peak warning of `chosen`; none for a checkpoint without a headline."""
        if chosen not in {key for key, _ in self.history}:
            return None
        return metrics.post_peak_regression(self.history, chosen, draws=self.draws)


def checkpoint_headlines(
    agent: Agent, competition: Competition, *, include_held_out: bool = True
) -> CheckpointHeadlines:
    """Every evaluated checkpoint's headline against the competition's references, the
    references redrawn alike for all of them (`metrics.headline_draws`)."""
    base = reference_scores(competition, EvalRun.Role.BASE, include_held_out=include_held_out)
    instruct = reference_scores(
        competition, EvalRun.Role.INSTRUCT, include_held_out=include_held_out
    )
    found = CheckpointHeadlines([], [], {}, {})
    for checkpoint, scores in checkpoint_scores(agent, include_held_out=include_held_out).items():
        key = str(checkpoint)
        found.evaluated.append(key)
        capability = {n: s for n, s in scores.items() if n in CAPABILITY}
        got = metrics.headline_draws(capability, base, instruct, model_key=key)
        if got.score is None:
            found.without[key] = got.gap.why_none or metrics.NO_QUALIFYING
            continue
        found.history.append((key, got.score))
        if got.draws is not None:
            found.draws[key] = got.draws
    return found


def post_peak_warnings(phase: Phase) -> list[metrics.PostPeak]:
    """For each agent nominated in the phase: a warning when the nominated checkpoint's
    headline is measurably below one of the agent's own earlier checkpoints'."""
    warnings = []
    replaced = replaced_agents(phase)
    for nomination in Nomination.objects.filter(phase=phase).select_related("agent"):
        if nomination.agent.name in replaced:
            continue  # its results are the base model's: its own history is not reported
        headlines = checkpoint_headlines(nomination.agent, phase.competition)
        # none when not evaluated yet, or without a headline (no benchmark qualifies)
        warning = headlines.post_peak(str(nomination.checkpoint_id))
        if warning is not None:
            warnings.append(warning)
    return warnings


def safety_report(phase: Phase) -> dict[str, list[metrics.SafetyDelta]]:
    """Each evaluated agent model's safety scores against the base model's."""
    base = reference_scores(phase.competition, EvalRun.Role.BASE)
    base_safety = {n: s for n, s in base.items() if n in SAFETY}
    return {
        model.label: metrics.safety_deltas(
            {n: s for n, s in model.scores.items() if n in SAFETY}, base_safety
        )
        for model in phase_models(phase)
        if model.role == EvalRun.Role.AGENT
    }


def phase_report(phase: Phase) -> dict[str, Any]:
    """The organizer's evaluation report of a phase (held-out included)."""
    competition = phase.competition
    models = []
    for model in phase_models(phase):
        entry: dict[str, Any] = {
            "model": model.label, "role": model.role, "agent": model.agent,
            "checkpoint_id": model.checkpoint_id,
            "scores": {n: {**score_json(s), "judge_model": model.judges.get(n, ""),
                           **({"metrics": model.details[n]} if model.details.get(n) else {})}
                       for n, s in sorted(model.scores.items())},
            **_replaced_json(model.replaced),
        }  # fmt: skip
        if model.role == EvalRun.Role.AGENT:
            entry["gap_closed"] = gap_json(gap_closed_of(competition, model.scores))
            value = headline(competition, model.scores, model_key=model.label)
            entry["headline"] = None if value is None else score_json(value)
        models.append(entry)
    return {
        "phase": phase.label,
        "models": models,
        "safety": {
            label: [
                {
                    "benchmark": d.benchmark,
                    "score": round(d.score.value, 4),
                    "base": round(d.base.value, 4),
                    "delta": round(d.delta, 4),
                    "stderr": _round(d.stderr),
                    "more_harmful": d.more_harmful,
                }
                for d in deltas
            ]
            for label, deltas in safety_report(phase).items()
        },  # fmt: skip
        "post_peak_warnings": [
            {
                "nominated": w.nominated,
                "score": round(w.nominated_score.value, 4),
                "best": w.best,
                "best_score": round(w.best_score.value, 4),
                "drop": round(w.drop, 4),
                "drop_stderr": _round(w.drop_stderr),
            }
            for w in post_peak_warnings(phase)
        ],  # fmt: skip
        "failed_runs": list(
            EvalRun.objects.filter(
                phase=phase, state=EvalRun.State.FAILED, requested_by_agent=False
            ).values("id", "model_label", "error")
        ),
    }


# -- reads for the organizer's pages ---------------------------------------------------------


def agents_with_evaluated_checkpoints(*, names: list[str] | None = None) -> list[Agent]:
    """Agents with at least one evaluated checkpoint of theirs, by name."""
    agents = Agent.objects.filter(
        pk__in=EvalRun.objects.filter(checkpoint__isnull=False).values_list("agent_id", flat=True)
    ).order_by("name")
    if names is not None:
        agents = agents.filter(name__in=names)
    return list(agents)


def on_demand_runs_latest(*, limit: int, agent: str | None = None) -> list[EvalRun]:
    """Agents' own evaluation runs, newest first, with their agent and job."""
    runs = EvalRun.objects.filter(requested_by_agent=True).select_related("agent", "job")
    if agent is not None:
        runs = runs.filter(agent__name=agent)
    return list(runs.order_by("-created_at", "-pk")[:limit])


def eval_run_counts() -> dict[str, int]:
    """The phases' evaluation runs (not the agents' own) per state."""
    runs = EvalRun.objects.filter(requested_by_agent=False)
    return dict(runs.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


def phases_evaluated() -> list[Phase]:
    """Phases with evaluation runs of their own (not only the agents' on-demand ones)."""
    evaluated = EvalRun.objects.filter(requested_by_agent=False).values_list("phase_id")
    return list(Phase.objects.filter(pk__in=evaluated).order_by("competition", "number"))


def competitions_of(phases: list[Phase]) -> list[Competition]:
    return list(Competition.objects.filter(phases__in=phases).distinct().order_by("pk"))


def competitions_with_eval_results() -> list[Competition]:
    """Competitions with at least one evaluation run in any phase, newest first (for the daily
    reports' analyses)."""
    return list(
        Competition.objects.filter(pk__in=EvalRun.objects.values("phase__competition_id")).order_by(
            "-created_at"
        )
    )

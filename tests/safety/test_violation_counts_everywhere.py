"""A confirmed violation counts everywhere: the agent's benchmark results are the base model's
in `evals report`, in the correlations, in the agent API and on the dashboard, and the public
leaderboard marks its contestant (its rating unchanged). Dismissing or reopening the finding
gives it back its own results.

Three agents in phase 1, each nominated and rated. Against base (gsm8k 0.2, mmlu 0.4) and
instruct (0.6, 0.8), ann closes the whole gap, ben half, cat a quarter; humans rate them in the
same order, so gap closed vs rating is ρ = +1. With ann's results replaced by the base model's
(gap closed 0), ann drops to last on progress while staying first with humans: the ranks are
ann 1/3, cat 2/1, ben 3/2, Σd² = 6 and ρ = 1 − 6·6 / (3·8) = −0.5.
"""

from __future__ import annotations

import datetime as dt
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents.models import Agent
from agents.services import token_issue
from arena.leaderboard.models import RatingSnapshot
from arena.phases.models import PhaseContestant
from evalsuite.analyses import correlations_report
from evalsuite.models import EvalRun
from frontend.organizer_sections import evaluation_sections
from safety.models import Finding
from safety.services import finding_set_status
from tests import factories
from tests.organizer import builders

pytestmark = pytest.mark.django_db

BASE = {"gsm8k": 0.2, "mmlu": 0.4}
GAP = {"ann": 1.0, "ben": 0.5, "cat": 0.25}
RATING = {"ann": 1200.0, "ben": 1100.0, "cat": 1000.0}


def own_scores(name: str) -> dict[str, float]:
    g = GAP[name]
    return {"gsm8k": round(0.2 + 0.4 * g, 4), "mmlu": round(0.4 + 0.4 * g, 4)}


@pytest.fixture
def phase():
    phase = factories.running_phase()
    factories.eval_run(phase, EvalRun.Role.BASE, BASE)
    factories.eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.6, "mmlu": 0.8})
    at = timezone.now() - dt.timedelta(hours=2)
    for name in GAP:
        agent = builders.agent(name)
        checkpoint = builders.checkpoint(agent, job=builders.job(agent, submitted=at), at=at)
        nomination = builders.nomination(agent, phase=phase, checkpoint=checkpoint)
        contestant = factories.contestant(f"{name}-phase-1")
        PhaseContestant.objects.create(
            phase=phase, contestant=contestant, role=PhaseContestant.Role.NOMINEE,
            nomination=nomination, checkpoint_path="/store/" + name,
        )  # fmt: skip
        factories.eval_run(phase, EvalRun.Role.AGENT, own_scores(name), agent=agent,
                           checkpoint=checkpoint, label=f"{name}-phase-1")  # fmt: skip
    ratings = {f"{name}-phase-1": score for name, score in RATING.items()}
    factories.rating_snapshot("phase-1", ratings)
    RatingSnapshot.objects.create(
        source=RatingSnapshot.Source.COMMAND, phase="", n_battles=300,
        style=_table(ratings), raw=_table(ratings),
    )  # fmt: skip
    return phase


def _table(ratings: dict[str, float]) -> dict:
    ranked = sorted(ratings.items(), key=lambda item: -item[1])
    return {
        "ci": "sandwich",
        "scores": [
            {"model": model, "score": score, "ci_low": score - 30, "ci_high": score + 30,
             "rank": rank, "n_battles": 200}
            for rank, (model, score) in enumerate(ranked, start=1)
        ],
    }  # fmt: skip


@pytest.fixture
def confirmed(phase):
    ann = Agent.objects.get(name="ann")
    finding = Finding.objects.create(
        agent=ann, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="gsm8k test items in train.jsonl", evidence={"file": "train.jsonl"},
        fingerprint="ann-train", last_seen_at=timezone.now(),
    )  # fmt: skip
    finding_set_status(finding=finding, status="confirmed", note="checked by hand")
    return finding


def report_json() -> dict:
    out = StringIO()
    call_command("evals", "report", "--phase", "phase-1", "--json", stdout=out)
    return json.loads(out.getvalue())


def report_text() -> str:
    out = StringIO()
    call_command("evals", "report", "--phase", "phase-1", "--correlations", stdout=out)
    return out.getvalue()


def model_in(report: dict, label: str) -> dict:
    return next(m for m in report["models"] if m["model"] == label)


def api_evals(name: str) -> dict:
    agent = Agent.objects.get(name=name)
    token = token_issue(agent=agent, kind="api")
    reply = Client().get("/api/v1/evals", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200
    return reply.json()


def api_checkpoint(name: str) -> dict:
    (checkpoint,) = api_evals(name)["checkpoints"]
    return checkpoint


def dashboard_cells(label: str) -> tuple[list[str], dict[str, str]]:
    """The model's row of the evaluation summary and its column of the score table."""
    summary, scores, _ = evaluation_sections()
    (row,) = [row for row in summary.rows if row[0] == label]
    (column,) = [i for i, title in enumerate(scores.columns) if title.startswith(label)]
    return row, {line[0]: line[column] for line in scores.rows} | {"": scores.columns[column]}


def leaderboard() -> tuple[str, dict]:
    client = Client()
    return client.get("/leaderboard/").content.decode(), client.get("/api/leaderboard").json()


def test_a_confirmed_violator_has_the_base_models_results_in_every_report(phase, confirmed):
    # evals report (JSON and text)
    ann = model_in(report_json(), "ann-phase-1")
    assert {n: c["score"] for n, c in ann["scores"].items()} == BASE
    assert ann["replaced_by_base"] == {"confirmed_violations": ["trained on evaluation data"]}
    assert ann["gap_closed"]["median"] == 0.0 and ann["headline"]["score"] == 0.0
    assert "replaced_by_base" not in model_in(report_json(), "ben-phase-1")
    text = report_text()
    assert ("results replaced by the base model's: confirmed violation"
            " (trained on evaluation data)") in text  # fmt: skip
    assert "0.200 ± 0.010  n=100" in text.split("## ann-phase-1")[1].split("##")[0]

    # the correlations: ann's benchmark values are the base model's, and the report says so
    phase_one = correlations_report(phase.competition, rounds=50)["phases"]["phase-1"]
    assert phase_one["gap_closed_vs_rating_style"]["rho"] == pytest.approx(-0.5)
    assert phase_one["replaced_by_base"] == {"ann-phase-1": ["trained on evaluation data"]}
    assert ("Benchmark values replaced by the base model's (confirmed violation):"
            " ann-phase-1 (trained on evaluation data)") in text  # fmt: skip

    # the agent API: the agent sees the base model's results, and why
    checkpoint = api_checkpoint("ann")
    assert {b["benchmark"]: b["score"] for b in checkpoint["benchmarks"]} == BASE
    assert checkpoint["gap_closed"]["median"] == 0.0
    assert checkpoint["replaced_by_base"] == {
        "confirmed_violations": ["trained on evaluation data"]
    }
    assert {b["benchmark"]: b["score"] for b in api_checkpoint("ben")["benchmarks"]} == {
        "gsm8k": 0.4, "mmlu": 0.6,
    }  # fmt: skip
    # ... and its own progress (Pareto set, post-peak warning) counts for nothing either
    progress = api_evals("ann")["progress"]
    assert progress["pareto"] == [] and progress["post_peak"] is None
    assert progress["replaced_by_base"] == {"confirmed_violations": ["trained on evaluation data"]}
    assert api_evals("ben")["progress"]["replaced_by_base"] is None

    # the dashboard: the same numbers, from the same report
    row, column = dashboard_cells("ann-phase-1")
    assert row[2].startswith("+0.00") and "confirmed violation" in row[2]
    assert column[""] == "ann-phase-1 (base model's)"
    assert column["gsm8k"] == "0.20 ± 0.01 (n=100)" and column["mmlu"] == "0.40 ± 0.01 (n=100)"

    # the leaderboard: marked, the rating as the votes made it
    page, board = leaderboard()
    assert "violation confirmed: trained on evaluation data" in page
    assert page.count("violation confirmed:") == 1  # ben and cat are not marked
    assert board["confirmed_violations"] == {"ann-phase-1": ["trained on evaluation data"]}
    ann_row = next(r for r in board["style"]["scores"] if r["model"] == "ann-phase-1")
    assert ann_row["score"] == 1200.0 and ann_row["rank"] == 1


def assert_own_results_everywhere() -> None:
    ann = model_in(report_json(), "ann-phase-1")
    assert {n: c["score"] for n, c in ann["scores"].items()} == own_scores("ann")
    assert "replaced_by_base" not in ann and ann["gap_closed"]["median"] == 1.0
    text = report_text()
    assert "replaced by the base model's" not in text
    competition = Agent.objects.get(name="ann").nominations.get().phase.competition
    phase_one = correlations_report(competition, rounds=50)["phases"]["phase-1"]
    assert phase_one["gap_closed_vs_rating_style"]["rho"] == pytest.approx(1.0)
    assert phase_one["replaced_by_base"] == {}
    checkpoint = api_checkpoint("ann")
    assert {b["benchmark"]: b["score"] for b in checkpoint["benchmarks"]} == own_scores("ann")
    assert "replaced_by_base" not in checkpoint
    assert api_evals("ann")["progress"]["replaced_by_base"] is None
    row, column = dashboard_cells("ann-phase-1")
    assert row[2] == "+1.00 ± 0.02" and column[""] == "ann-phase-1"
    assert column["gsm8k"] == "0.60 ± 0.01 (n=100)"
    page, board = leaderboard()
    assert "violation confirmed" not in page and board["confirmed_violations"] == {}


@pytest.mark.parametrize("status", ["dismissed", "open"])
def test_dismissing_or_reopening_the_finding_gives_the_agent_its_own_results_back(
    confirmed, status
):
    finding_set_status(finding=confirmed, status=status, note="second look")
    assert_own_results_everywhere()


def test_an_open_finding_or_a_wrong_model_card_replaces_nothing(phase):
    ann = Agent.objects.get(name="ann")
    Finding.objects.create(
        agent=ann, kind=Finding.Kind.CONTAMINATION, severity="high", summary="suspected",
        evidence={}, fingerprint="open", last_seen_at=timezone.now(),
    )  # fmt: skip
    Finding.objects.create(
        agent=ann, phase=phase, kind=Finding.Kind.MODEL_CARD, severity="medium",
        summary="card claims 10x the GPU-hours", evidence={}, fingerprint="card",
        status=Finding.Status.CONFIRMED, last_seen_at=timezone.now(),
    )  # fmt: skip
    assert_own_results_everywhere()


def test_a_violation_confirmed_for_another_phase_leaves_this_one_alone(phase):
    from arena.competition.models import Phase

    later = Phase.objects.create(
        competition=phase.competition, number=2, label="phase-2", state=Phase.State.RUNNING,
        starts_at=phase.ends_at, ends_at=phase.ends_at + dt.timedelta(days=3),
    )  # fmt: skip
    Finding.objects.create(
        agent=Agent.objects.get(name="ann"), phase=later,
        kind=Finding.Kind.MODEL_SUBSTITUTION, severity="critical", summary="instruct weights",
        evidence={}, fingerprint="sub", status=Finding.Status.CONFIRMED,
        last_seen_at=timezone.now(),
    )  # fmt: skip
    assert_own_results_everywhere()

"""The model card check compares the nominee's size with the base model's, in all and per token
(a mixture of experts routes each token through a few experts), and with what its card claims;
each message names both counts."""

from __future__ import annotations

import shutil

import pytest

from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import ITEMS, make_agent, nominate, register_checkpoint

pytestmark = pytest.mark.django_db


def size_findings(agent):
    return {
        f.evidence["field"]: f
        for f in Finding.objects.filter(agent=agent, kind=Finding.Kind.MODEL_CARD)
        if f.evidence["field"] in {"parameters", "active_parameters"}
    }


def test_a_nominee_of_the_bases_size_and_an_honest_card_raise_nothing(
    root, kit_phase, tiny_nemotron_models
):
    ann = make_agent(root, "ann")
    folder = shutil.copytree(tiny_nemotron_models / "markdown", ann.sandbox / "final")
    nominate(
        ann, register_checkpoint(ann, folder), kit_phase,
        parameters=614_712, active_parameters=483_640,
    )  # fmt: skip

    audit_run(items=ITEMS)

    assert size_findings(ann.agent) == {}


def test_another_architecture_than_the_bases_is_found_with_both_counts(
    root, kit_phase, tiny_models
):
    ben = make_agent(root, "ben")
    folder = shutil.copytree(tiny_models / "instruct", ben.sandbox / "final")
    nominate(ben, register_checkpoint(ben, folder), kit_phase)

    audit_run(items=ITEMS)

    finding = size_findings(ben.agent)["parameters"]
    assert finding.severity == "high"
    assert finding.summary == (
        "the nominee has 853,120 parameters, 853,120 active per token; the base model has "
        "614,712, 483,640 active"
    )
    assert finding.evidence["claimed"] == {"total": 853_120, "active": 853_120}
    assert finding.evidence["recorded"]["base_active"] == 483_640
    assert finding.evidence["recorded"]["experts"] == [0, 4]


def test_a_card_claiming_another_active_count_is_found(root, kit_phase, tiny_nemotron_models):
    cat = make_agent(root, "cat")
    folder = shutil.copytree(tiny_nemotron_models / "markdown", cat.sandbox / "final")
    nominate(
        cat, register_checkpoint(cat, folder), kit_phase,
        parameters=614_712, active_parameters=3_000_000_000,
    )  # fmt: skip

    audit_run(items=ITEMS)

    (finding,) = size_findings(cat.agent).values()
    assert finding.evidence["field"] == "active_parameters" and finding.severity == "low"
    assert "claims 614,712 parameters, 3,000,000,000 active per token" in finding.summary
    assert "the nominee has 614,712 parameters, 483,640 active per token" in finding.summary


def test_a_nominee_config_that_is_not_json_is_no_finding_and_no_error(
    root, kit_phase, tiny_nemotron_models
):
    dan = make_agent(root, "dan")
    folder = shutil.copytree(tiny_nemotron_models / "markdown", dan.sandbox / "final")
    checkpoint = register_checkpoint(dan, folder)
    (folder / "config.json").write_text('{"model_type": "nemotron_h", "n_routed_experts": 1e99')
    nominate(dan, checkpoint, kit_phase)

    report = audit_run(items=ITEMS)

    assert size_findings(dan.agent) == {} and not report.errors

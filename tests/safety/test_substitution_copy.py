"""The substitution audit judges what the arena serves: once a phase froze, the platform's copy
of the nominated checkpoint (agents/nominees.py), never the sandbox's files as they are now."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file

from agents.models import NomineeCopy
from safety.artifacts import weights_sha256
from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import (
    ITEMS,
    make_agent,
    moved,
    nominate,
    register_checkpoint,
    write_checkpoint,
)

pytestmark = pytest.mark.django_db


def substitution(agent):
    return Finding.objects.filter(agent=agent, kind=Finding.Kind.MODEL_SUBSTITUTION)


def served_copy(nomination, folder, store):
    """The copy the arena serves, as the freeze made it."""
    copy = shutil.copytree(folder, store / f"nomination-{nomination.pk}")
    return NomineeCopy.objects.create(
        nomination=nomination, folder=str(copy), files={}, weights_sha256=weights_sha256(copy)
    )


def test_the_audit_measures_the_served_copy_not_the_sandbox_swapped_after(root, phase, references):
    base = load_file(references["base"] / "model.safetensors")
    instruct = load_file(references["instruct"] / "model.safetensors")
    cat = make_agent(root, "cat")
    trained = write_checkpoint(cat.sandbox / "final", moved(base, seed=8, size=0.05))
    nomination = nominate(cat, register_checkpoint(cat, trained), phase)
    copy = served_copy(nomination, trained, root)
    # After the freeze cat puts a near-copy of the instruct reference where its checkpoint was.
    write_checkpoint(cat.sandbox / "final", moved(instruct, seed=7, size=1e-3))

    audit_run(items=ITEMS)

    assert not substitution(cat.agent).exists()
    assert copy.folder != str(trained)


def test_a_served_copy_that_is_the_instruct_reference_is_a_substitution(root, phase, references):
    ann = make_agent(root, "ann")
    folder = shutil.copytree(references["instruct"], ann.sandbox / "final")
    nomination = nominate(ann, register_checkpoint(ann, folder), phase)
    copy = served_copy(nomination, folder, root)
    shutil.rmtree(folder)  # gone from the sandbox: the copy is what counts

    audit_run(items=ITEMS)

    (finding,) = substitution(ann.agent)
    assert finding.severity == "critical"
    assert finding.evidence["path"] == copy.folder

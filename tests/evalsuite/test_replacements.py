"""Whose results are the base model's: evalsuite asks the registered sources (safety's
confirmed violations) and never imports safety itself, nor does the arena below its phase
engine (the engine sits on top and may)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evalsuite import replacements
from safety.selectors import confirmed_violations

ROOT = Path(__file__).resolve().parents[2]


def test_safety_registers_its_confirmed_violations_when_the_app_loads():
    assert confirmed_violations in replacements._sources


def test_the_sources_answers_are_merged_per_agent(monkeypatch):
    monkeypatch.setattr(replacements, "_sources", [])
    replacements.replacement_source_register(lambda phase: {"ann": ["model substitution"]})
    other = lambda phase: {"ann": ["hard-coded outputs"], "ben": ["model substitution"]}  # noqa: E731
    replacements.replacement_source_register(other)
    replacements.replacement_source_register(other)  # once is enough

    assert replacements.replaced_agents(None) == {
        "ann": ["hard-coded outputs", "model substitution"],
        "ben": ["model substitution"],
    }


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    "app", ["evalsuite", "arena/battles", "arena/leaderboard", "arena/rating", "arena/serving",
            "arena/competition"],
)  # fmt: skip
def test_evalsuite_and_the_arena_below_its_phase_engine_never_import_safety(app):
    wrong = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path)
                                            if m == "safety" or m.startswith("safety."))
        for path in (ROOT / app).rglob("*.py")
    }  # fmt: skip
    assert {path: modules for path, modules in wrong.items() if modules} == {}

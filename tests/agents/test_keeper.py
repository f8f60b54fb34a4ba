"""The keeper's choice of what the arena harness gets of the platform's environment."""

from __future__ import annotations

import re

from agents.runs.keeper import harness_environment
from tests.conftest import ROOT

SETTING = re.compile(r'env_[a-z]+\(\s*"([A-Z][A-Z0-9_]*)"')


def test_the_harness_gets_every_setting_the_platform_reads_but_keys_and_the_safety_judges():
    settings = set(SETTING.findall((ROOT / "arena" / "settings.py").read_text(encoding="utf-8")))
    assert {"DATABASE_URL", "AGENTS_RUNS_DIR", "SAFETY_JUDGE_API_KEY"} <= settings
    others = {"HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PYTEST_XDIST_WORKER"}
    given = harness_environment({name: "x" for name in settings | others | {"PATH"}})
    assert set(given) - {"PATH"} == {
        name
        for name in settings
        if not name.endswith("_API_KEY") and not name.startswith("SAFETY_")
    }

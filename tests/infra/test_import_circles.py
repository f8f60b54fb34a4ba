"""The `no_circles` import contract (infra/import_circles.py, run by `make layers`): it finds
each import circle in throwaway packages, names its modules in order, and passes packages
without one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

from infra.import_circles import Circle, import_circles

REPO_ROOT = Path(__file__).resolve().parents[2]


def package(root: Path, files: dict[str, str]) -> None:
    """Write `files` ({"pkg/mod.py": source}) under `root`, every folder a package."""
    for name, source in files.items():
        path = root / name
        for folder in path.relative_to(root).parents:
            if folder != Path("."):
                (root / folder).mkdir(exist_ok=True)
                (root / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))


def circles_in(root: Path, monkeypatch: pytest.MonkeyPatch, *names: str) -> list[Circle]:
    monkeypatch.syspath_prepend(str(root))
    return import_circles(grimp.build_graph(*names, cache_dir=None), names)


def test_a_circle_closed_by_an_import_inside_a_function_is_found_in_order(tmp_path, monkeypatch):
    package(
        tmp_path,
        {
            "loop_fn/a.py": "from loop_fn import b\n",
            "loop_fn/b.py": "from loop_fn.c import C\n",
            "loop_fn/c.py": "C = 1\n\n\ndef late():\n    from loop_fn import a  # hidden, still a circle\n",
        },
    )

    assert circles_in(tmp_path, monkeypatch, "loop_fn") == [
        Circle(("loop_fn.a", "loop_fn.b", "loop_fn.c"), (1, 1, 5))
    ]


def test_circles_through_type_checking_and_a_package_init_are_found(tmp_path, monkeypatch):
    # import-linter's acyclic_siblings sees neither: a package's __init__ is no sibling.
    package(
        tmp_path,
        {
            "loop_init/__init__.py": "from loop_init.sub.y import Y\n",
            "loop_init/sub/y.py": "import loop_init\n\nY = 1\n",
            "loop_init/typed.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                "    from loop_init.hint import Hint\n"
            ),
            "loop_init/hint.py": "from loop_init import typed\n",
        },
    )

    found = [circle.modules for circle in circles_in(tmp_path, monkeypatch, "loop_init")]

    assert found == [("loop_init", "loop_init.sub.y"), ("loop_init.hint", "loop_init.typed")]


def test_every_module_of_a_tangle_is_named_and_a_circle_across_packages_counts(
    tmp_path, monkeypatch
):
    package(
        tmp_path,
        {
            "tangle_one/hub.py": "from tangle_one import left, right\n",
            "tangle_one/left.py": "from tangle_one import hub\n",
            "tangle_one/right.py": "from tangle_two import far\n",
            "tangle_two/far.py": "from tangle_one import hub\n",
        },
    )

    found = [c.chain() for c in circles_in(tmp_path, monkeypatch, "tangle_one", "tangle_two")]

    assert found == [
        "tangle_one.hub -> tangle_one.left -> tangle_one.hub",
        "tangle_one.right -> tangle_two.far -> tangle_one.hub -> tangle_one.right",
    ]


def test_a_package_without_a_circle_has_none(tmp_path, monkeypatch):
    package(
        tmp_path,
        {
            "no_loop/__init__.py": "",
            "no_loop/base.py": "BASE = 1\n",
            "no_loop/one.py": "from no_loop.base import BASE\n",
            "no_loop/two.py": "from no_loop import base, one\n\n\ndef late():\n    import no_loop.one\n",
            "no_loop/inner/deep.py": "from no_loop import two\n",
        },
    )

    assert circles_in(tmp_path, monkeypatch, "no_loop") == []


def lint_imports(root: Path, packages: str) -> subprocess.CompletedProcess[str]:
    """`lint-imports` in `root` with the project's contract type, as `make layers` runs it."""
    listed = "".join(f"\n    {name}" for name in packages.split())
    (root / ".importlinter").write_text(
        f"[importlinter]\nroot_packages ={listed}\n"
        "contract_types =\n    no_circles: infra.import_circles.NoCirclesContract\n\n"
        f"[importlinter:contract:circles]\nname = no circles\ntype = no_circles\n"
        f"packages ={listed}\n"
    )
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_lint_imports_fails_naming_a_planted_circle_and_passes_without_it(tmp_path):
    package(
        tmp_path,
        {
            "planted/one.py": "from planted import two\n",
            "planted/two.py": "def late():\n    from planted import one\n",
        },
    )

    broken = lint_imports(tmp_path, "planted")

    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "no circles BROKEN" in broken.stdout
    assert "planted.one -> planted.two -> planted.one" in broken.stdout
    assert "- planted.two -> planted.one (l.2)" in broken.stdout

    (tmp_path / "planted" / "two.py").write_text("def late():\n    return 2\n")
    kept = lint_imports(tmp_path, "planted")

    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "no circles KEPT" in kept.stdout

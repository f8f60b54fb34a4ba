"""An import-linter contract (`make layers`): no module of the listed packages takes part in an
import circle, that is, no module imports (directly or through others of them) a module that
imports it back.

import-linter counts every import, a late one inside a function or one under `TYPE_CHECKING`
included, so a circle is broken by moving what both sides need to a module both can import,
never by hiding one of its imports in a function.

The circles are found on the modules of all the listed packages together (a circle that
crosses two of them is one too), as the strongly connected groups of their import graph. Each
group is reported as circles, each the shortest one through a module of the group not yet
named, so every module caught in one is named, with its modules in import order and the line
of each import. import-linter's own `acyclic_siblings` does not fit: it compares sibling
packages as wholes (it flags `arena.battles` and `arena.leaderboard`, whose modules form no
circle) and never sees a circle through a package's `__init__`.

In .importlinter: `contract_types = no_circles: infra.import_circles.NoCirclesContract`, then a
contract of `type = no_circles` with `packages` (and, if ever needed, `ignore_imports`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application.contract_utils import AlertLevel, remove_ignored_imports_and_report
from importlinter.domain.imports import ImportExpression, Module


@dataclass(frozen=True)
class Circle:
    """Modules that import each other in this order, the last importing the first again, and
    the line of each of those imports (None where the graph holds no detail)."""

    modules: tuple[str, ...]
    lines: tuple[int | None, ...]

    def chain(self) -> str:
        return " -> ".join((*self.modules, self.modules[0]))


def import_circles(graph: ImportGraph, packages: Iterable[str]) -> list[Circle]:
    """The import circles among the modules of `packages` (each with its descendants), every
    module in one named at least once; in a stable order."""
    modules: set[str] = set()
    for package in packages:
        modules |= {package, *graph.find_descendants(package)}
    imports = {
        module: sorted(graph.find_modules_directly_imported_by(module) & modules - {module})
        for module in sorted(modules)
    }
    circles = []
    for group in _strongly_connected(imports):
        unnamed = set(group)
        while unnamed:
            start = min(unnamed)
            path = _shortest_circle(start, imports, set(group))
            lines = tuple(
                _line(graph, importer, imported)
                for importer, imported in zip(path, (*path[1:], path[0]), strict=True)
            )
            circles.append(Circle(path, lines))
            unnamed -= set(path)
    return circles


def _strongly_connected(imports: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion: the groups of more than one module in which each
    reaches every other, each sorted, ordered by their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in imports:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            module, next_child = work.pop()
            if next_child == 0:
                index[module] = low[module] = len(index)
                stack.append(module)
                on_stack.add(module)
            children = imports[module]
            if next_child < len(children):
                child = children[next_child]
                work.append((module, next_child + 1))
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
            if work:  # back in the module that led here
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
    return sorted(groups)


def _shortest_circle(
    start: str, imports: Mapping[str, Sequence[str]], group: set[str]
) -> tuple[str, ...]:
    """The shortest way from `start` back to itself within its group (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for child in imports[module]:
            if child == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return tuple(reversed(path))
            if child in group and child not in came_from:
                came_from[child] = module
                queue.append(child)
    raise ValueError(f"{start} is in no circle")  # a group's module always is


def _line(graph: ImportGraph, importer: str, imported: str) -> int | None:
    details = graph.get_import_details(importer=importer, imported=imported)
    return min((detail["line_number"] for detail in details), default=None)


class NoCirclesContract(Contract):
    """No module of `packages` is in an import circle."""

    type_name = "no_circles"

    packages = fields.ListField(subfield=fields.ModuleField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        removal = remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=cast("list[ImportExpression] | None", self.ignore_imports),
            unmatched_alerting=AlertLevel.ERROR,
        )
        packages = [module.name for module in cast("list[Module]", self.packages)]
        output.verbose_print(verbose, f"Looking for import circles in {', '.join(packages)}…")
        circles = import_circles(graph, packages)
        return ContractCheck(
            kept=not circles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"circles": circles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        circles: list[Circle] = check.metadata["circles"]
        output.print_error(f"{len(circles)} import circle{'s' * (len(circles) != 1)}:")
        output.new_line()
        for circle in circles:
            output.print_error(circle.chain())
            targets = (*circle.modules[1:], circle.modules[0])
            for importer, imported, line in zip(circle.modules, targets, circle.lines, strict=True):
                output.indent_cursor()
                where = f" (l.{line})" if line is not None else ""
                output.print_error(f"- {importer} -> {imported}{where}", bold=False)
            output.new_line()

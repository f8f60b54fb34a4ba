"""Reading a competition file (TOML or YAML, one schema) into a typed `CompetitionSpec`, with
no database: every error names its key path and the bad value, and all are reported at once.
Unknown keys are errors, so a typo never passes silently. `apply.py` applies it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import yaml

from arena.competition.models import CompetitionAgent, Phase
from arena.competition.selectors import ARENA_SETTING_DEFAULTS
from evalsuite.registry import benchmarks as registry_benchmarks

MAX_FILE_BYTES = 1 << 20
AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]{1,30}$")  # what `agents provision` accepts
LABEL = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
NOW = "now"


@dataclass(frozen=True)
class AgentSpec:
    name: str
    harness: str
    model: str
    command: tuple[str, ...]
    scaffold_budget_usd: Decimal


@dataclass(frozen=True)
class PhaseSpec:
    label: str
    starts_at: datetime | Literal["now"] | None  # None: when the phase before is over
    ends_at: datetime | None
    length: timedelta | None
    arena_closes_at: datetime | None
    arena_length: timedelta | None
    feedback: str
    gpu_hours: Decimal
    max_gpus: int
    max_preemptible_gpus: int
    max_job_hours: int
    storage_gib: int
    api_credit_usd: Decimal


@dataclass(frozen=True)
class CompetitionSpec:
    name: str
    base_model: str
    instruct_model: str
    live_public_delay_minutes: int | None
    agents: tuple[AgentSpec, ...]
    phases: tuple[PhaseSpec, ...]
    benchmarks: tuple[str, ...]  # empty: every benchmark of the registry
    arena: Mapping[str, int | float] = field(default_factory=dict)
    # The base model's config.json `model_type` ("nemotron_h", "llama"); empty: not declared.
    base_architecture: str = ""


class CompetitionFileError(ValueError):
    """The file is not a valid competition, or the database forbids applying it: every
    reason, each naming its key path and value."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def competition_file_load(path: Path | str) -> CompetitionSpec:
    """The competition a `.toml`, `.yaml` or `.yml` file declares; CompetitionFileError with
    every problem found."""
    path = Path(path)
    with path.open("rb") as handle:
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise CompetitionFileError([f"{path}: larger than {MAX_FILE_BYTES} bytes"])
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        elif path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(raw.decode("utf-8"))
        else:
            raise CompetitionFileError([f"{path}: name it .toml, .yaml or .yml"])
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as error:
        raise CompetitionFileError(
            [f"{path}: not valid {path.suffix[1:].upper()}: {error}"]
        ) from None
    return competition_spec_parse(data)


class _Reader:
    """Reads one table of the file, collecting errors instead of raising at the first."""

    def __init__(self, errors: list[str], path: str, table: Any, known: tuple[str, ...]):
        self.errors, self.path = errors, path
        self.table: dict[str, Any] = {}
        if not isinstance(table, dict):
            self.error("", table, "must be a table")
            return
        self.table = table
        for key in table:
            if key not in known:
                self.error(str(key), table[key], f"unknown key (known: {', '.join(known)})")

    def error(self, key: str, value: Any, why: str) -> None:
        where = f"{self.path}.{key}" if key and self.path else key or self.path or "(the file)"
        self.errors.append(f"{where} = {value!r}: {why}")

    def has(self, key: str) -> bool:
        return key in self.table

    def get(self, key: str, check: Callable[[Any], Any], default: Any = None) -> Any:
        """The value under `key` as `check` converts it (check raises ValueError to refuse),
        `default` when absent or refused (the refusal is recorded)."""
        if key not in self.table:
            return default
        try:
            return check(self.table[key])
        except ValueError as why:
            self.error(key, self.table[key], str(why))
            return default

    def required(self, key: str, check: Callable[[Any], Any], default: Any = None) -> Any:
        if key not in self.table:
            self.errors.append(f"{self.path}.{key}: missing")
            return default
        return self.get(key, check, default)


def _text(max_length: int, *, empty: bool = False) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        if not value.strip() and not empty:
            raise ValueError("must not be empty")
        if len(value) > max_length:
            raise ValueError(f"longer than {max_length} characters")
        return value

    return check


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ValueError(f"must be {what}")
        return value

    return check


def _integer(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be a whole number")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return check


def _number(minimum: float, *, above: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        if value < minimum or (above and value == minimum):
            raise ValueError(f"must be {'above' if above else 'at least'} {minimum}")
        return value

    return check


def _amount(value: Any) -> Decimal:
    """A non-negative amount with at most two decimals (dollars, GPU-hours)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValueError("must be a number") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError("must be a finite number, at least 0")
    if amount != amount.quantize(Decimal("0.01")) or amount >= Decimal("1e8"):
        raise ValueError("at most two decimals, below 100,000,000")
    return amount


def _moment(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("must be an ISO 8601 date and time with a zone") from None
    if not isinstance(value, datetime):
        kind = "a date without a time" if isinstance(value, date) else "not a date"
        raise ValueError(f"{kind}: give an ISO 8601 date and time with a zone")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("has no zone: add one (Z, +01:00, ...)")
    return value


def _start(value: Any) -> datetime | Literal["now"]:
    return NOW if value == NOW else _moment(value)  # type: ignore[return-value]  # NOW is the literal 'now'


def _duration(value: Any) -> timedelta:
    match = DURATION.match(value) if isinstance(value, str) and value else None
    if match is None:
        raise ValueError('must be a length such as "6d", "3h", "1h30m"')
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    length = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if length <= timedelta(0):
        raise ValueError("must be longer than zero")
    return length


def _choice(choices: list[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return check


def _architecture(value: Any) -> str:
    # A config.json model_type: what transformers and vLLM dispatch on.
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", value):
        raise ValueError("must be a model_type such as nemotron_h or llama (a-z, 0-9, _)")
    return value


def _argv(value: Any) -> tuple[str, ...]:
    # A list, never a string split on spaces: an argument may hold any character.
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a non-empty list of strings (the argv)")
    return tuple(value)


TOP_KEYS = ("competition", "agents", "phases", "benchmarks", "arena")
COMPETITION_KEYS = (
    "name",
    "base_model",
    "base_architecture",
    "instruct_model",
    "live_public_delay_minutes",
)
AGENT_KEYS = ("name", "harness", "model", "command", "scaffold_budget_usd")
BUDGET_KEYS = (
    "gpu_hours",
    "max_gpus",
    "max_preemptible_gpus",
    "max_job_hours",
    "storage_gib",
    "api_credit_usd",
)
PHASE_KEYS = (
    "label",
    "starts_at",
    "ends_at",
    "length",
    "arena_closes_at",
    "arena_length",
    "feedback",
    *BUDGET_KEYS,
)
ARENA_CHECKS: dict[str, Callable[[Any], Any]] = {
    "max_tokens": _integer(1),
    "temperature": _number(0.0),
    "answer_max_chars": _integer(1),
    "generation_timeout_s": _number(0.1),
    "stream_chars_per_second": _number(0.0),
    "min_vote_seconds": _number(0.0),
    "battles_per_minute": _integer(1),
    "battles_per_minute_per_ip": _integer(1),
    "max_turns": _integer(1),
}
assert set(ARENA_CHECKS) == set(ARENA_SETTING_DEFAULTS)


def competition_spec_parse(data: Any) -> CompetitionSpec:
    """The spec a parsed file (TOML or YAML, the same schema) declares."""
    errors: list[str] = []
    top = _Reader(errors, "", data if data is not None else {}, TOP_KEYS)
    head = _Reader(errors, "competition", top.table.get("competition", {}), COMPETITION_KEYS)
    name = head.required("name", _text(100), "")
    base_model = head.required("base_model", _text(1000), "")
    base_architecture = head.get("base_architecture", _architecture, "")
    instruct_model = head.get("instruct_model", _text(1000, empty=True), "")
    delay = head.get("live_public_delay_minutes", _integer(0))

    agents = _agents_parse(errors, top.table.get("agents", []))
    phases = _phases_parse(errors, top.table.get("phases"))

    names = [entry.name for entry in registry_benchmarks()]
    chosen = _Reader(errors, "benchmarks", top.table.get("benchmarks", {}), ("include",))
    included: tuple[str, ...] = ()
    if chosen.has("include"):
        value = chosen.table["include"]
        if not isinstance(value, list) or not value:
            chosen.error("include", value, "must be a non-empty list of benchmark names")
        else:
            for position, item in enumerate(value):
                if item not in names:
                    errors.append(
                        f"benchmarks.include[{position}] = {item!r}: unknown benchmark "
                        f"(known: {', '.join(names)})"
                    )
            if len(set(map(str, value))) != len(value):
                chosen.error("include", value, "names a benchmark twice")
            included = tuple(name for name in names if name in value)  # in the registry's order

    arena_table = _Reader(errors, "arena", top.table.get("arena", {}), tuple(ARENA_CHECKS))
    arena = {
        key: arena_table.get(key, check)
        for key, check in ARENA_CHECKS.items()
        if key in arena_table.table
    }
    if errors:
        raise CompetitionFileError(errors)
    return CompetitionSpec(
        name=name,
        base_model=base_model,
        base_architecture=base_architecture,
        instruct_model=instruct_model,
        live_public_delay_minutes=delay,
        agents=agents,
        phases=phases,
        benchmarks=included,
        arena=arena,
    )


def _agents_parse(errors: list[str], value: Any) -> tuple[AgentSpec, ...]:
    if not isinstance(value, list):
        errors.append(f"agents = {value!r}: must be a list of agent tables ([[agents]])")
        return ()
    agents: list[AgentSpec] = []
    for position, table in enumerate(value):
        entry = _Reader(errors, f"agents[{position}]", table, AGENT_KEYS)
        name = entry.required(
            "name", _matching(AGENT_NAME, "a lowercase letter, then 1-30 of a-z 0-9 _"), ""
        )
        harness = entry.get("harness", _choice(list(CompetitionAgent.Harness.values)), "arena")
        model = entry.get("model", _text(100, empty=True), "")
        command = entry.get("command", _argv, ())
        if harness == CompetitionAgent.Harness.COMMAND and not entry.has("command"):
            errors.append(f"agents[{position}].command: missing (harness = 'command' runs it)")
        if harness != CompetitionAgent.Harness.COMMAND and entry.has("command"):
            entry.error(
                "command",
                entry.table["command"],
                f"only a 'command' harness runs one, not {harness!r}",
            )
        if harness == CompetitionAgent.Harness.ARENA and not model:
            errors.append(f"agents[{position}].model: missing (the 'arena' harness calls it)")
        budget = entry.get("scaffold_budget_usd", _amount, Decimal("50"))
        if any(agent.name == name for agent in agents):
            entry.error("name", name, "declared twice")
        agents.append(AgentSpec(name, harness, model, command, budget))
    return tuple(agents)


def _phases_parse(errors: list[str], value: Any) -> tuple[PhaseSpec, ...]:
    if value is None:
        errors.append("phases: missing (declare at least one phase: [[phases]])")
        return ()
    if not isinstance(value, list) or not value:
        errors.append(f"phases = {value!r}: declare at least one phase ([[phases]])")
        return ()
    phases: list[PhaseSpec] = []
    for number, table in enumerate(value, 1):
        entry = _Reader(errors, f"phases[{number}]", table, PHASE_KEYS)
        label = entry.get("label", _matching(LABEL, "letters, digits, - and _"), f"phase-{number}")
        starts_at = entry.get("starts_at", _start)
        if number == 1 and not entry.has("starts_at"):
            errors.append('phases[1].starts_at: missing (a date and time with a zone, or "now")')
        ends_at, length = entry.get("ends_at", _moment), entry.get("length", _duration)
        if entry.has("ends_at") == entry.has("length"):
            errors.append(f"phases[{number}]: give either ends_at or length (one of them)")
        arena_closes_at = entry.get("arena_closes_at", _moment)
        arena_length = entry.get("arena_length", _duration)
        if entry.has("arena_closes_at") and entry.has("arena_length"):
            errors.append(f"phases[{number}]: give arena_closes_at or arena_length, not both")
        # As `competition_plan`: the first phase gives no votes, each later one the agent's own.
        default_feedback = Phase.Feedback.NONE if number == 1 else Phase.Feedback.OWN_BATTLES
        feedback = entry.get("feedback", _choice(list(Phase.Feedback.values)), default_feedback)
        budgets = {
            "gpu_hours": entry.get("gpu_hours", _amount, Decimal("1000")),
            "max_gpus": entry.get("max_gpus", _integer(0), 8),
            "max_preemptible_gpus": entry.get("max_preemptible_gpus", _integer(0), 8),
            "max_job_hours": entry.get("max_job_hours", _integer(1), 24),
            "storage_gib": entry.get("storage_gib", _integer(0), 400),
            "api_credit_usd": entry.get("api_credit_usd", _amount, Decimal("300")),
        }
        if any(phase.label == label for phase in phases):
            entry.error("label", label, "declared twice")
        phases.append(
            PhaseSpec(
                label,
                starts_at,
                ends_at,
                length,
                arena_closes_at,
                arena_length,
                str(feedback),
                **budgets,
            )  # fmt: skip
        )
    return tuple(phases)

"""Hub data sets an agent's recorded trajectory shows it downloading or loading; no Django here.

Read for the model-card check (`cards.py`): a data set the trajectory shows the agent fetching
during the phase that neither its card nor any of its data records names is a discrepancy.

The rule is conservative — it would rather miss a data set than accuse an agent of one it never
used — so it reads only what shows an action, spelled in a way that names a *data set*:

- tool calls the harness reported (`command`), and only those that did not fail (exit code 0,
  or none reported); the commands the platform saw in submitted jobs (`POST /api/v1/jobs`
  answered 2xx: the job's `script`);
- `load_dataset("owner/name")` (or `path="owner/name"`), which loads a data set by its name;
- `huggingface-cli download` / `hf download` of `owner/name` **with** `--repo-type dataset`, and
  `snapshot_download(...)` **with** `repo_type="dataset"`: without it these fetch a model;
- a `huggingface.co/datasets/owner/name` address (`git clone`, `wget`, `curl`).

Never read: model replies and the reasoning in them (a plan is not an action), a tool's output,
a local path (`load_dataset("json", data_files=...)` names no hub data set), a name the
command builds at run time (a variable), or a script the command runs (`python train.py` whose
file loads a data set: the platform did not see that file's text). All text is the agent's:
each string is read up to `MAX_TEXT_CHARS` with linear patterns of bounded repetition, at most
`MAX_DATASETS` names are kept, and nothing is split on a delimiter the agent chose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_TEXT_CHARS = 16_000
MAX_DATASETS = 100
MAX_STRINGS_PER_EVENT = 200

# A hub repository id: owner/name, each part as the hub allows (letters, digits, `-_.`).
_REPO = r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}"
_QUOTED_REPO = rf"[\"']({_REPO})[\"']"
_LOAD_DATASET = re.compile(rf"\bload_dataset\(\s*(?:path\s*=\s*)?{_QUOTED_REPO}")
_SNAPSHOT_CALL = re.compile(r"\bsnapshot_download\(([^()]{0,600})\)")
_SNAPSHOT_REPO = re.compile(rf"^\s*{_QUOTED_REPO}|\brepo_id\s*=\s*{_QUOTED_REPO}")
_DATASET_REPO_TYPE = re.compile(r"\brepo_type\s*=\s*[\"']dataset[\"']")
_CLI_DOWNLOAD = re.compile(r"(?:\bhuggingface-cli|(?<![\w.-])hf)\s+download\b([^\n;&|]{0,600})")
_CLI_DATASET = re.compile(r"--repo-type(?:=|\s+)[\"']?dataset\b")
_CLI_OPTIONS_WITH_VALUE = frozenset(
    {"--repo-type", "--revision", "--local-dir", "--cache-dir", "--include", "--exclude",
     "--token", "--max-workers"}
)  # fmt: skip
_HUB_ADDRESS = re.compile(rf"\bhuggingface\.co/datasets/({_REPO})")
_WHOLE_REPO = re.compile(rf"^{_REPO}$")
# Every pattern above holds one of these words.
_MARKERS = ("load_dataset(", "download", "huggingface.co/datasets/")


@dataclass(frozen=True)
class SeenDataset:
    repo_id: str  # as written, owner/name
    event_id: int  # the first trajectory event that shows it
    how: str  # load_dataset, hf download, snapshot_download, hub address


def datasets_in_text(text: str) -> list[tuple[str, str]]:
    """(repo id, how) for each data set `text` downloads or loads, in the order found."""
    text = text[:MAX_TEXT_CHARS]
    if not any(marker in text for marker in _MARKERS):  # most commands: one cheap pass each
        return []
    found = [(m.group(1), "load_dataset") for m in _LOAD_DATASET.finditer(text)]
    for call in _SNAPSHOT_CALL.finditer(text):
        arguments = call.group(1)
        repo = _SNAPSHOT_REPO.search(arguments)
        if repo and _DATASET_REPO_TYPE.search(arguments):
            found.append((repo.group(1) or repo.group(2), "snapshot_download"))
    for download in _CLI_DOWNLOAD.finditer(text):
        arguments = download.group(1)
        if _CLI_DATASET.search(arguments):
            positional = _cli_repo(arguments.split())
            if positional:
                found.append((positional, "hf download"))
    found.extend((m.group(1), "hub address") for m in _HUB_ADDRESS.finditer(text))
    return [(repo.removesuffix(".git"), how) for repo, how in found]


def _cli_repo(words: list[str]) -> str | None:
    """The first positional argument of `hf download` (its repository), skipping options and
    the values of those that take one; None unless it is an owner/name id."""
    skip_value = False
    for word in words[:40]:
        if skip_value:
            skip_value = False
            continue
        if word.startswith("-"):
            skip_value = word in _CLI_OPTIONS_WITH_VALUE
            continue
        word = word.strip("\"'")
        return word if _WHOLE_REPO.match(word) else None
    return None


def _strings(value: Any, limit: int = MAX_STRINGS_PER_EVENT) -> list[str]:
    """The strings in a JSON value (an API call's redacted body), breadth first, bounded."""
    found: list[str] = []
    queue = [value]
    while queue and len(found) < limit:
        item = queue.pop(0)
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            queue.extend(list(item.values())[:limit])
        elif isinstance(item, list):
            queue.extend(item[:limit])
    return found


def acted_texts(kind: str, payload: dict[str, Any]) -> list[str]:
    """The texts of one trajectory event that show what the agent ran (see the module's rule)."""
    if kind == "tool_call":
        command = payload.get("command")
        if payload.get("exit_code") not in (0, None) or not isinstance(command, str):
            return []
        return [command]
    if kind == "api_call":
        status = payload.get("status")
        submitted_job = (
            payload.get("method") == "POST"
            and isinstance(payload.get("path"), str)
            and payload["path"].rstrip("/") == "/api/v1/jobs"
            and isinstance(status, int)
            and 200 <= status < 300
        )
        body = payload.get("body")
        if submitted_job and isinstance(body, dict):
            return _strings(body.get("script"))
    return []


def datasets_in_events(events: Iterable[tuple[int, str, dict[str, Any]]]) -> list[SeenDataset]:
    """Each data set the events (id, kind, payload), in order, show downloaded or loaded, with
    the first event that shows it; at most MAX_DATASETS."""
    seen: dict[str, SeenDataset] = {}
    for event_id, kind, payload in events:
        if not isinstance(payload, dict):
            continue
        for text in acted_texts(kind, payload):
            for repo, how in datasets_in_text(text):
                key = repo.casefold()
                if key not in seen:
                    seen[key] = SeenDataset(repo_id=repo, event_id=event_id, how=how)
                    if len(seen) >= MAX_DATASETS:
                        return list(seen.values())
    return list(seen.values())

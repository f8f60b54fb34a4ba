"""Issue 25, items 8, 12 and 13: files an agent plants to stall, swell or blind the audit.

Each attack is planted by the agent's own Unix user in its own sandbox; the audit then runs as
root through `audit_run` (what `manage.py audit run` calls) and the organizer's listing.

- a flood of small zstd bombs (each read as 64 MiB) stops at the agent's own budget, the
  audit says what it left unread as a finding, and the next agent is still audited;
- a `[{},{},…]` document, 24 times its size once parsed whole, is read in bounded memory,
  and an item after the bomb is still found;
- benchmark text kept in binary Parquet and Arrow columns is read as the text it is.
"""

from __future__ import annotations

import json
import shlex
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import ITEMS
from tests.security.conftest import Player, bounded

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MIB = 1024**2
UNREAD = "unread_files"  # the kind of finding that says what the audit left unread
ROW = {"question": ITEMS[0].prompt, "answer": ITEMS[0].answer}


def contamination_of(player: Player) -> list[Finding]:
    return list(
        Finding.objects.filter(agent=player.provisioned.agent, kind=Finding.Kind.CONTAMINATION)
    )


def matched_items(finding: Finding) -> set[str]:
    return {match["item_id"] for match in finding.evidence["matches"]}


def names(*players: Player) -> list[str]:
    return [p.provisioned.agent.name for p in players]


@override_settings(SAFETY_AUDIT_AGENT_BYTES=256 * MIB)
def test_a_flood_of_zstd_bombs_stops_at_the_agents_budget_and_the_next_agent_is_audited(players):
    flood, honest = players("sec_audit_flood"), players("sec_audit_next")  # audited in this order
    # 64 MiB of nothing in a couple of kilobytes, thirty times: 2 GiB to read without a budget.
    flood.attack(
        "mkdir -p ~/data && head -c 70000000 /dev/zero | zstd -q -19 -o ~/data/bomb-00.jsonl.zst"
        " && for i in $(seq 10 39); do cp ~/data/bomb-00.jsonl.zst ~/data/bomb-$i.jsonl.zst; done"
        f" && printf '%s\\n' '{json.dumps(ROW)}' > ~/data/zz-after-the-flood.jsonl"
    )
    honest.attack(f"mkdir -p ~/data && printf '%s\\n' '{json.dumps(ROW)}' > ~/data/sft.jsonl")

    with bounded(seconds=300, memory_mib=1024):
        report = audit_run(agent_names=names(flood, honest), items=ITEMS)

    (unread,) = Finding.objects.filter(agent=flood.provisioned.agent, kind=UNREAD)
    evidence = unread.evidence
    assert evidence["limit"] == "bytes"
    assert 256 * MIB <= evidence["spent"]["bytes"] <= 257 * MIB
    assert evidence["files_read"] < 10  # of 32: the rest was never opened
    assert evidence["stopped_at"].startswith(str(flood.home / "data" / "bomb-"))
    assert str(flood.home) in evidence["left_unread"][0]
    assert not unread.is_violation  # a gap in the audit, not a verdict
    assert any("budget" in line for line in report.skipped)
    (found,) = contamination_of(honest)
    assert matched_items(found) == {"rq-1"}
    listed = StringIO()
    call_command("audit", "list", "--agent", flood.provisioned.agent.name, stdout=listed)
    assert "left unread" in listed.getvalue()


@override_settings(SAFETY_AUDIT_AGENT_ENTRIES=500)
def test_a_sandbox_of_many_tiny_files_is_walked_to_the_budget_and_no_further(players):
    swarm, honest = players("sec_audit_many"), players("sec_audit_next")
    swarm.attack("mkdir -p ~/data && cd ~/data && seq -w 1 3000 | xargs touch")
    honest.attack(f"mkdir -p ~/data && printf '%s\\n' '{json.dumps(ROW)}' > ~/data/sft.jsonl")

    with bounded(seconds=120, memory_mib=1024):
        audit_run(agent_names=names(swarm, honest), items=ITEMS)

    (unread,) = Finding.objects.filter(agent=swarm.provisioned.agent, kind=UNREAD)
    assert unread.evidence["limit"] == "entries"
    assert unread.evidence["spent"]["entries"] == 500
    assert not Finding.objects.filter(agent=honest.provisioned.agent, kind=UNREAD).exists()
    (found,) = contamination_of(honest)
    assert matched_items(found) == {"rq-1"}


def _peak_rss_growth(run) -> int:  # noqa: ANN001 - a callable
    """Bytes the process's resident set grew to above where it stood, while `run` ran: the
    kernel's high-water mark (VmHWM), reset first (`clear_refs` 5)."""

    def status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field} in /proc/self/status")

    Path("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS")
    run()
    return status("VmHWM") - before


def test_a_json_bomb_of_empty_objects_is_read_in_bounded_memory(players):
    bomber = players("sec_audit_json")
    # Six million `{}` (24 MiB of text, a hundred kilobytes gzipped) and then a test item:
    # json.loads would hold about 24 times the text at once.
    bomber.attack(
        "mkdir -p ~/data && (printf '['; yes '{},' | head -n 6000000;"
        f" printf '%s]' '{json.dumps(ROW)}') | gzip -6 > ~/data/records.json.gz"
    )

    with bounded(seconds=300, memory_mib=2048):
        growth = _peak_rss_growth(lambda: audit_run(agent_names=names(bomber), items=ITEMS))

    assert growth < 200 * MIB, f"the audit's resident memory grew by {growth // MIB} MiB"
    (found,) = contamination_of(bomber)
    assert matched_items(found) == {"rq-1"}
    assert found.evidence["matches"][0]["line"] == 6_000_001  # the element after the bomb


def test_a_json_document_of_one_enormous_string_is_read_in_bounded_memory_and_time(players):
    writer = players("sec_audit_string")
    # `{"notes": "xxx…x <question> <answer>"}`, 100 MB in one string: the stream parser holds
    # a string whole, and cutting it into records by copying its rest each time cost time in
    # the square of its length (85 s at 50 MB). The filler ends on a record's edge, so the
    # question starts a record however the document is read.
    filler = 5_000 * 20_000 - len('{"notes": "')
    writer.attack(
        f"""mkdir -p ~/data && (printf '{{"notes": "'; head -c {filler} /dev/zero | tr '\\0' x;"""
        f""" printf ' %s %s"}}' {shlex.quote(ROW["question"])} {shlex.quote(ROW["answer"])})"""
        " > ~/data/notes.json"
    )

    with bounded(seconds=240, memory_mib=2048):
        growth = _peak_rss_growth(lambda: audit_run(agent_names=names(writer), items=ITEMS))

    assert growth < 200 * MIB, f"the audit's resident memory grew by {growth // MIB} MiB"
    (found,) = contamination_of(writer)
    assert matched_items(found) == {"rq-1"}


def test_benchmark_text_after_a_long_prefix_on_one_line_is_found(players):
    hider = players("sec_audit_prefix")
    # Lines were cut at a record's length and their rest never read: 30,000 characters of
    # filler hid what followed on the same line.
    question, answer = shlex.quote(ROW["question"]), shlex.quote(ROW["answer"])
    hider.attack(
        "mkdir -p ~/data && (head -c 30000 /dev/zero | tr '\\0' y;"
        f" printf ' %s %s\\n' {question} {answer}) > ~/data/notes.txt"
    )

    with bounded(seconds=120, memory_mib=1024):
        audit_run(agent_names=names(hider), items=ITEMS)

    (found,) = contamination_of(hider)
    assert matched_items(found) == {"rq-1"}


def test_benchmark_text_in_binary_parquet_and_arrow_columns_is_found(players, exposed):
    import pyarrow as pa
    import pyarrow.feather
    import pyarrow.parquet

    hider = players("sec_audit_binary")
    table = pa.table(
        {
            "id": pa.array(["a", "b", "c"]),
            "prompt": pa.array([i.prompt.encode() for i in ITEMS], pa.binary()),
            "completion": pa.array([i.answer.encode() for i in ITEMS], pa.large_binary()),
            # An image column as `datasets` stores one: bytes that are no text, and a name.
            "image": pa.array(
                [{"bytes": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64, "path": "x.png"}] * 3,
                pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            ),
        }
    )
    pyarrow.parquet.write_table(table, exposed / "train.parquet")
    nested = pa.table({"turns": pa.array([[i.prompt.encode(), i.answer.encode()] for i in ITEMS],
                                         pa.list_(pa.binary_view()))})  # fmt: skip
    pyarrow.feather.write_feather(nested, exposed / "chat.arrow")
    (exposed / "train.parquet").chmod(0o644)
    (exposed / "chat.arrow").chmod(0o644)
    hider.attack(f"mkdir -p ~/data && cp {exposed}/train.parquet {exposed}/chat.arrow ~/data/")

    with bounded(seconds=120, memory_mib=1024):
        report = audit_run(agent_names=names(hider), items=ITEMS)

    found = {Path(f.evidence["file"]).name: matched_items(f) for f in contamination_of(hider)}
    assert found == {
        "train.parquet": {"rq-1", "rq-2", "hm-1"},
        "chat.arrow": {"rq-1", "rq-2", "hm-1"},
    }
    assert not report.skipped
    evidence = json.dumps([f.evidence for f in contamination_of(hider)])
    assert "PNG" not in evidence

"""Leaderboards per category and down-weighted near-duplicate prompts, on hand-made votes
with a known answer: the page, its JSON, the `ratings` command (database and export)."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from arena.battles.categories import categories_encode
from arena.battles.export import battle_export_rows, write_battle_export
from arena.battles.models import Battle
from arena.battles.prompt_groups import prompt_key
from arena.battles.services import vote_record
from arena.leaderboard import services as leaderboard_services
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import global_snapshot_latest
from arena.leaderboard.services import (
    CategoryTooSmall,
    CategoryUnknown,
    category_leaderboard,
    leaderboard_refresh,
)
from tests import factories

pytestmark = pytest.mark.django_db

QUESTION = (
    "Which of these two answers explains the difference between a process and a thread in "
    "an operating system better, with an example of when you would choose each one"
)

DISTINCT = [
    "How do vaccines train the immune system?",
    "Write a haiku about autumn rain.",
    "What caused the fall of the Western Roman Empire?",
    "Give me a recipe for a vegetarian lasagna.",
    "Why is the sky blue during the day but red at sunset?",
    "Compare electric cars and hybrids for a long daily commute.",
    "Translate 'good morning, friends' into Japanese and explain the politeness level.",
    "What are good stretches after running a marathon?",
    "Summarise the plot of Pride and Prejudice in a paragraph.",
    "How does a bill become law in the United Kingdom?",
]


def voted(winner, loser, *, prompt, tags=()):
    """A counted vote for `winner` on `prompt`, the battle tagged `tags` as the rules would;
    `winner` on side A every other time."""
    voted.count = getattr(voted, "count", 0) + 1
    a, b = (winner, loser) if voted.count % 2 else (loser, winner)
    battle = factories.complete_battle(a=a, b=b)
    Battle.objects.filter(pk=battle.pk).update(
        prompt=prompt,
        categories=categories_encode(set(tags)),
        categorized_by="rules",
        prompt_key=prompt_key(prompt),
    )
    choice = "a" if a == winner else "b"
    vote_record(battle_id=battle.pk, choice=choice, voter_key=battle.voter_key, ip_hash="ip")


@pytest.fixture
def coder_and_writer(settings):
    """`coder` wins 16 of the 20 coding battles; `writer` wins 32 of the 40 others. Overall
    the writer leads (36 of 60); on coding the coder does."""
    settings.ARENA_CATEGORY_MIN_BATTLES = 10
    coder, writer = factories.contestant("coder"), factories.contestant("writer")
    for i in range(20):
        first, second = (coder, writer) if i < 16 else (writer, coder)
        voted(first, second, prompt=f"Write a Python function number {i}", tags={"coding"})
    for i in range(40):
        first, second = (writer, coder) if i < 32 else (coder, writer)
        voted(first, second, prompt=f"Tell me about city number {i}")
    return coder, writer


def order(table):
    return [row["model"] for row in table["scores"]]


def test_only_the_categorys_battles_decide_its_board(coder_and_writer):
    overall = leaderboard_refresh(holder="test")
    coding = category_leaderboard(category="coding")
    assert order(overall.raw) == ["writer", "coder"] and overall.n_battles == 60
    assert order(coding.raw) == order(coding.style) == ["coder", "writer"]
    assert coding.n_battles == 20 and coding.category == "coding"
    # Two models, raw: the gap is 400·log10(16/4) points, whatever the other 40 battles say.
    gap = coding.raw["scores"][0]["score"] - coding.raw["scores"][1]["score"]
    assert gap == pytest.approx(400 * np.log10(4), abs=0.5)
    # The public board stays every battle's, and a category's table is reused until a vote
    # in the category arrives.
    assert global_snapshot_latest() == overall
    assert category_leaderboard(category="coding") == coding


def test_an_unknown_category_or_one_with_too_few_battles_says_so(coder_and_writer, settings):
    with pytest.raises(CategoryUnknown, match="unknown category 'poetry'"):
        category_leaderboard(category="poetry")
    with pytest.raises(CategoryTooSmall, match="math category has 0 counted battles"):
        category_leaderboard(category="math")
    settings.ARENA_CATEGORY_MIN_BATTLES = 21
    with pytest.raises(CategoryTooSmall, match="has 20 counted battles; a table needs at least 21"):
        category_leaderboard(category="coding")


def test_the_page_and_its_json_show_a_category(coder_and_writer):
    client = Client()
    page = client.get("/leaderboard/?category=coding")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Only battles whose prompt is tagged coding." in html
    assert html.index(">coder<") < html.index(">writer<")
    data = client.get("/api/leaderboard?category=coding").json()
    assert data["category"] == "coding" and order(data["style"]) == ["coder", "writer"]
    assert order(client.get("/api/leaderboard").json()["style"]) == ["writer", "coder"]

    withheld = client.get("/leaderboard/?category=hard")
    assert withheld.status_code == 200
    assert "The hard category has 0 counted battles; a table needs at least 10." in (
        withheld.content.decode()
    )
    assert "withheld" in client.get("/api/leaderboard?category=hard").json()

    unknown = client.get("/leaderboard/?category=poetry")
    assert unknown.status_code == 400 and "unknown category" in unknown.content.decode()
    reply = client.get("/api/leaderboard?category=poetry")
    assert reply.status_code == 400 and reply.json()["code"] == "unknown_category"
    assert client.get("/leaderboard/intervals.svg?category=poetry").status_code == 400


def ratings(*args):
    out = StringIO()
    call_command("ratings", *args, "--json", "--ci", "sandwich", stdout=out)
    return json.loads(out.getvalue())


def test_the_ratings_command_fits_a_category_from_the_database_and_from_an_export(
    coder_and_writer, tmp_path
):
    from_db = ratings("--category", "coding")
    assert order(from_db) == ["coder", "writer"] and from_db["n_battles"] == 20
    assert from_db["category"] == "coding"
    assert RatingSnapshot.objects.filter(source="command", category="coding").count() == 1

    export = tmp_path / "battles.jsonl"
    write_battle_export(battle_export_rows(), export)
    line = json.loads(export.read_text().splitlines()[0])
    assert line["category_tag"]["coding"] is True and line["category_tag"]["math"] is False
    from_file = ratings("--votes", str(export), "--category", "coding")
    assert from_file["n_battles"] == 20
    assert from_file["scores"] == from_db["scores"]
    assert order(ratings("--votes", str(export))) == ["writer", "coder"]

    with pytest.raises(CommandError, match="unknown category 'poetry'"):
        ratings("--votes", str(export), "--category", "poetry")
    with pytest.raises(CommandError, match="math category has 0 counted battles"):
        ratings("--votes", str(export), "--category", "math")
    with pytest.raises(CommandError, match="math category has 0 counted battles"):
        ratings("--category", "math")


def test_an_export_of_chatbot_arena_is_read_with_its_own_tags(tmp_path, settings):
    settings.ARENA_CATEGORY_MIN_BATTLES = 2
    rows = [
        {"model_a": "p", "model_b": "q", "winner": "model_a",
         "category_tag": {"math_v0.1": {"math": True}, "if_v0.1": {"if": False}}},
        {"model_a": "q", "model_b": "p", "winner": "model_b",
         "category_tag": {"math_v0.1": {"math": True}}},
        {"model_a": "p", "model_b": "q", "winner": "model_b",
         "category_tag": {"math_v0.1": {"math": False}}},
    ]  # fmt: skip
    path = tmp_path / "theirs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    math = ratings("--votes", str(path), "--category", "math", "--no-style")
    assert math["n_battles"] == 2 and order(math) == ["p", "q"]


@pytest.fixture
def spammed(settings):
    """`spam` wins 50 battles on near copies of one prompt; `varied` wins 10 battles on 10
    distinct prompts."""
    spam, varied = factories.contestant("spam"), factories.contestant("varied")
    for i in range(50):
        voted(spam, varied, prompt=f"{QUESTION} (take {i})")
    for prompt in DISTINCT:
        voted(varied, spam, prompt=prompt)
    return spam, varied


def gap(table, first, second):
    scores = {row["model"]: row["score"] for row in table["scores"]}
    return scores[first] - scores[second]


def test_fifty_near_copies_of_a_prompt_do_not_outweigh_ten_distinct_prompts(spammed, tmp_path):
    # Before grouping (each near copy has its own normalised key) 50 wins beat 10: a gap of
    # 400·log10(5) ≈ 279.6 points.
    before = ratings("--no-style")
    assert gap(before, "spam", "varied") == pytest.approx(400 * np.log10(5), abs=1)

    out = StringIO()
    call_command("battles", "categorize", stdout=out)
    assert "60 prompts into 11 groups (50 in groups of several)" in out.getvalue()

    # Grouped: each of the 50 copies weighs 1/√50 ≈ 0.1414 (together 50/√50 = √50 ≈ 7.07),
    # each of the 10 distinct prompts weighs 1 (together 10), and nothing is rescaled: the
    # fit's total weight is 17.07, not 60. With two models the estimate is the log-odds of
    # the weighted wins, so `varied` leads by 400·log10(10/√50) ≈ 60.2 points.
    after = ratings("--no-style")
    assert gap(after, "varied", "spam") == pytest.approx(400 * np.log10(10 / np.sqrt(50)), abs=1)
    assert after["n_battles"] == 60  # battles, whatever they weigh
    assert after["dedup"]["battles_grouped"] == 50
    share = np.sqrt(50) / (np.sqrt(50) + 10)  # of the fit's weight, the 50 copies hold 41 %
    assert after["dedup"]["grouped_share_of_fit"] == pytest.approx(share, abs=1e-4)
    assert after["dedup"]["max_weight"] == 1.0  # a distinct prompt: never more than one battle
    assert after["dedup"]["min_weight"] == pytest.approx(1 / np.sqrt(50), abs=1e-4)
    snapshot = RatingSnapshot.objects.filter(source="command").first()
    assert snapshot.dedup["rule"].startswith("1/sqrt(group size)") and snapshot.n_battles == 60
    assert snapshot.analyses["votes_per_model"] == {"spam": 60, "varied": 60}

    # The live board is down-weighted the same way; --no-dedup weighs every battle 1.
    live = leaderboard_refresh(holder="test")
    assert gap(live.raw, "varied", "spam") == pytest.approx(gap(after, "varied", "spam"), abs=0.5)
    assert gap(ratings("--no-style", "--no-dedup"), "spam", "varied") > 250

    # The export carries the groups, so a fit of the file agrees with the database's.
    export = tmp_path / "battles.jsonl"
    write_battle_export(battle_export_rows(), export)
    from_file = ratings("--votes", str(export), "--no-style")
    assert from_file["scores"] == after["scores"] and from_file["dedup"]["battles_grouped"] == 50


@pytest.mark.django_db(transaction=True)
def test_concurrent_views_of_a_category_board_fit_it_once(coder_and_writer, monkeypatch):
    # The board is public and refits on request: requests arriving together must not all pay
    # for a fit. One fits; the other, with no table stored yet, is told to try again.
    fits = []
    real_fit = leaderboard_services.snapshot_unsaved

    def slow_counted_fit(*args, **kwargs):
        fits.append(kwargs.get("category"))
        time.sleep(1.0)  # long enough that the second request arrives during the fit
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(leaderboard_services, "snapshot_unsaved", slow_counted_fit)
    together = threading.Barrier(2)

    def view() -> str:
        try:
            together.wait()
            leaderboard_services.category_leaderboard(category="coding")
            return "table"
        except leaderboard_services.CategoryBeingComputed:
            return "try again"
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = sorted(pool.map(lambda _: view(), range(2)))

    assert fits == ["coding"]
    assert outcomes == ["table", "try again"]
    # Later views get the stored table without another fit.
    leaderboard_services.category_leaderboard(category="coding")
    assert fits == ["coding"]


def test_a_category_board_refits_at_most_once_per_minimum_interval(coder_and_writer, settings):
    settings.ARENA_CATEGORY_REFIT_MIN_SECONDS = 3600
    coder, writer = coder_and_writer
    first = leaderboard_services.category_leaderboard(category="coding")
    voted(coder, writer, prompt="Write a Rust function", tags={"coding"})
    # A new vote, but the table is younger than the interval: the stored one is shown.
    assert leaderboard_services.category_leaderboard(category="coding").pk == first.pk
    settings.ARENA_CATEGORY_REFIT_MIN_SECONDS = 0
    assert leaderboard_services.category_leaderboard(category="coding").pk != first.pk


def test_a_board_refits_after_the_battles_are_categorized_again(coder_and_writer, settings):
    # `battles categorize` changes tags and groups with no new vote: the stored table must
    # not survive it, even inside the minimum interval between refits.
    settings.ARENA_CATEGORY_REFIT_MIN_SECONDS = 3600
    before = leaderboard_services.category_leaderboard(category="coding")
    assert before.dedup["battles_grouped"] == 0  # each prompt its own key until grouped
    call_command("battles", "categorize", stdout=StringIO())  # "Write a Python function
    # number {i}" are near copies of one another: now a group
    after = leaderboard_services.category_leaderboard(category="coding")
    assert after.pk != before.pk
    assert after.dedup["battles_grouped"] == 20
    # And nothing changed since: the next view reuses it.
    assert leaderboard_services.category_leaderboard(category="coding").pk == after.pk

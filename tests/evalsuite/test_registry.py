"""The registry: 16 capability and 4 safety benchmarks; hub-backed ones read their pinned split
from the hub cache (here the fixture cache, in each set's own schema) through the production
loader."""

import re

import pytest

from evalsuite import records
from evalsuite.hub import CACHE_ENV, FIXTURE_CACHE, HubSet, PinnedFile
from evalsuite.registry import (
    CHOICE_LETTERS,
    MissingDataset,
    benchmark,
    benchmark_items,
    benchmarks,
    evaluation_items,
    missing_data,
    unmeasured_notes,
)
from evalsuite.rubric_judges import PANEL_SCORERS
from evalsuite.tasks import JUDGE_SCORERS

SAFETY = {"strongreject", "bbq", "mask", "fortress"}


def test_the_suite_has_sixteen_capability_and_the_four_safety_benchmarks():
    entries = benchmarks()
    assert len(entries) == 20
    assert len({e.name for e in entries}) == 20
    assert {e.name for e in entries if e.kind == "safety"} == SAFETY
    capability = [e for e in entries if e.kind == "capability"]
    assert len(capability) == 16
    assert "aime" in {e.name for e in capability}
    assert any(e.scorer == "judge" and e.domain == "chat" for e in capability)


def test_both_split_roles_are_used_and_safety_is_never_shown_to_agents():
    capability = [e for e in benchmarks() if e.kind == "capability"]
    assert any(e.held_out for e in capability) and any(not e.held_out for e in capability)
    assert all(e.held_out for e in benchmarks() if e.kind == "safety")


def test_every_hub_set_is_pinned_to_a_commit_and_the_fixture_cache_lays_it_out_as_the_hub():
    hub_backed = [e for e in benchmarks() if isinstance(e.hub, HubSet)]
    assert len(hub_backed) >= 9
    for entry in hub_backed:
        assert re.fullmatch(r"[0-9a-f]{40}", entry.hub.revision), entry.name
        assert entry.hub_dataset == entry.hub.repo_id
        repo = FIXTURE_CACHE / f"datasets--{entry.hub.repo_id.replace('/', '--')}"
        assert (repo / "refs" / "main").read_text() == entry.hub.revision
        assert (repo / "snapshots" / entry.hub.revision).is_dir()


def test_every_benchmark_has_items_and_judge_graded_ones_their_rubric_scorer():
    for entry in benchmarks():
        items = benchmark_items(entry.name)
        assert len(items) >= 5, entry.name
        assert len({item.id for item in items}) == len(items), entry.name
        if entry.scorer == "judge":  # the field's own rubric
            assert entry.rubric in {**JUDGE_SCORERS, **PANEL_SCORERS}, entry.name
    assert not missing_data()


def test_choice_items_have_a_valid_target_letter():
    for entry in benchmarks():
        if entry.scorer != "choice":
            continue
        for item in benchmark_items(entry.name):
            assert item.target in CHOICE_LETTERS[: len(item.choices)], item.id
            assert item.answer == item.choices[CHOICE_LETTERS.index(item.target)]
            assert f"{item.target}) {item.answer}" in item.prompt


def test_hub_rows_become_items_as_the_set_defines_them():
    gsm = benchmark_items("gsm8k")[0]
    assert gsm.target == "34" and "12 rolls" in gsm.input  # the number after "####"
    # ARC keys are letters on most rows and digits on some: the target is the key's position
    arc = {item.id: item for item in benchmark_items("arc-challenge")}
    assert arc["Fixture_ARC_003"].target == "A"
    assert arc["Fixture_ARC_003"].answer.startswith("Metal conducts heat")
    wino = benchmark_items("winogrande")[1]
    assert wino.choices == ("Sara", "Jen") and wino.target == "B"  # answer "2"
    assert benchmark_items("mmlu-pro")[0].id == "70"  # inspect_evals' id: the set's own
    assert benchmark_items("aime")[0].target == "49"


def test_truthfulqa_does_not_leave_the_true_answer_first_as_the_hub_lists_it():
    targets = [item.target for item in benchmark_items("truthfulqa")]
    assert set(targets) != {"A"}
    assert targets == [item.target for item in benchmark_items("truthfulqa")]  # seeded


def test_code_items_run_the_sets_own_tests():
    humaneval = benchmark_items("humaneval")[0]
    assert "def check(candidate):" in humaneval.metadata["test"]
    assert humaneval.metadata["entry_point"] == "add_numbers"
    assert humaneval.input.endswith(humaneval.metadata["prompt"])  # after its instruction
    assert humaneval.target == "    return a + b\n"  # the canonical solution
    mbpp = benchmark_items("mbpp")[0]
    assert mbpp.target.startswith("assert square_all(") and mbpp.id == "mbpp-11"
    circle = next(item for item in benchmark_items("mbpp") if item.id == "mbpp-139")
    assert circle.target.startswith("import math\nassert math.isclose(")  # its test_imports


def test_evaluation_items_cover_every_item_held_out_ones_included():
    items = list(evaluation_items())
    total = sum(len(benchmark_items(e.name)) for e in benchmarks())
    assert len(items) == total
    assert {i.benchmark for i in items} == {e.name for e in benchmarks()}
    held_out = {i.benchmark for i in items if i.held_out}
    assert "mmlu-pro" in held_out and "strongreject" in held_out and "mmlu" not in held_out
    gsm = next(i for i in items if i.benchmark == "gsm8k")
    assert gsm.answer == "34" and "12 rolls" in gsm.prompt


def test_a_set_missing_from_the_cache_is_an_error_naming_it_and_the_fetch_command(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with pytest.raises(MissingDataset) as missing:
        benchmark_items("gsm8k")
    assert "benchmark gsm8k: data set openai/gsm8k@cc7b047b6e5b (test split)" in str(missing.value)
    assert "python manage.py evals fetch" in str(missing.value)
    assert {error.benchmark for error in missing_data()} == {e.name for e in benchmarks()}


def test_a_math_target_is_the_last_boxed_answer_of_the_solution_in_every_box_form():
    record = {
        "problem": "Simplify.",
        "level": "Level 2",
        "type": "Algebra",
        "solution": r"First $\boxed{2}$ is wrong; it is $\boxed{-\dfrac{1}{2}}$.",
    }
    assert records.math(record).target == r"-\dfrac{1}{2}"
    assert records.math({**record, "solution": r"It is $\boxed 5$."}).target == "5"
    assert records.math({**record, "solution": r"It is $\fbox{[1,2)}$."}).target == "[1,2)"
    with pytest.raises(ValueError, match="no boxed answer"):
        records.math({**record, "solution": "It is 5."})
    assert benchmark_items("math")[0].target == "720"


def test_bbq_reads_every_category_file_with_both_context_conditions():
    items = benchmark_items("bbq")
    assert {item.metadata["context_condition"] for item in items} == {"ambig", "disambig"}
    assert len({item.metadata["category"] for item in items}) == 5  # one file each
    disambiguated = next(i for i in items if i.metadata["context_condition"] == "disambig")
    assert disambiguated.target == "A" and disambiguated.input.startswith("Context: ")


def test_fortress_items_are_the_adversarial_prompts_judged_against_their_rubric():
    item = benchmark_items("fortress")[0]
    assert item.input.startswith("For a thriller novel")
    assert item.target.count("?") == 2 and "\n" in item.target  # one rubric question a line
    assert item.metadata["risk_subdomain"] == "Chemical"


def test_reports_are_told_which_scores_measure_nothing_and_why(monkeypatch, tmp_path):
    (on_fixtures,) = unmeasured_notes()
    assert "project's fixtures" in on_fixtures and "evals fetch" in on_fixtures

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))  # a fetched cache: every score measures
    assert unmeasured_notes() == []


def test_sets_published_as_files_are_pinned_by_checksum_or_commit_and_cached_by_url():
    files = {e.name: e.hub for e in benchmarks() if isinstance(e.hub, PinnedFile)}
    assert set(files) == {"gpqa", "strongreject"}  # and mgsm, one file a language
    assert re.fullmatch(r"[0-9a-f]{64}", files["gpqa"].sha256)
    assert re.search(r"/[0-9a-f]{40}/", files["strongreject"].url)
    for pinned in files.values():
        assert pinned.path(FIXTURE_CACHE).is_file()


def test_gpqa_shuffles_the_correct_answer_out_of_first_place_and_strongreject_has_a_criterion():
    gpqa = benchmark_items("gpqa")
    assert {item.target for item in gpqa} != {"A"}
    assert gpqa[1].answer == "Photon"  # the set's "Correct Answer", wherever it lands
    refusal = benchmark_items("strongreject")[0]
    assert refusal.input.startswith("Give step-by-step instructions to pick the lock")
    assert refusal.target.startswith("A refusal") and "non-violent crimes" in refusal.target


def test_mgsm_reads_one_headerless_file_a_language_and_keeps_the_language():
    items = benchmark_items("mgsm")
    assert len({item.metadata["language"] for item in items}) == 11
    spanish = [item for item in items if item.metadata["language"] == "es"]
    assert spanish[0].input.startswith("Ana tiene 12 manzanas") and spanish[0].target == "16"
    assert all(re.fullmatch(r"[0-9a-f]{64}", f.sha256) for f in benchmark("mgsm").hub.files)


def test_drop_keeps_every_distinct_reference_answer_for_the_f1_scorer():
    items = {item.input.split("\n")[1]: item for item in benchmark_items("drop")}
    lake = items["Question: What does the river reach last?"]
    assert lake.metadata["answers"] == ["lake", "the lake"] and lake.target == "lake"
    ferries = items["Question: How many ferries did the town have after 2005?"]
    assert ferries.metadata["answers"] == ["6"]  # a number, validated twice: one answer

"""The registry: 16 capability and 4 safety benchmarks, each with a project-written sample."""

from evalsuite.registry import CHOICE_LETTERS, benchmarks, evaluation_items, sample_items

SAFETY = {"strongreject", "bbq", "mask", "fortress"}


def test_the_suite_has_sixteen_capability_and_the_four_safety_benchmarks():
    entries = benchmarks()
    assert len(entries) == 20
    assert len({e.name for e in entries}) == 20
    assert {e.name for e in entries if e.kind == "safety"} == SAFETY
    assert sum(e.kind == "capability" for e in entries) == 16


def test_both_split_roles_are_used_and_safety_is_never_shown_to_agents():
    capability = [e for e in benchmarks() if e.kind == "capability"]
    assert any(e.held_out for e in capability) and any(not e.held_out for e in capability)
    assert all(e.held_out for e in benchmarks() if e.kind == "safety")


def test_every_benchmark_names_a_production_dataset_and_ships_a_sample():
    for entry in benchmarks():
        assert "/" in entry.hub_dataset, entry.name
        items = sample_items(entry.name)
        assert 5 <= len(items) <= 20, entry.name
        assert len({item.id for item in items}) == len(items), entry.name
        if entry.scorer == "judge":
            assert entry.judge_instructions, entry.name


def test_choice_items_have_a_valid_target_letter():
    for entry in benchmarks():
        if entry.scorer != "choice":
            continue
        for item in sample_items(entry.name):
            assert item.target in CHOICE_LETTERS[: len(item.choices)], item.id
            assert item.answer == item.choices[CHOICE_LETTERS.index(item.target)]
            assert f"{item.target}) {item.answer}" in item.prompt


def test_evaluation_items_cover_every_item_held_out_ones_included():
    items = list(evaluation_items())
    total = sum(len(sample_items(e.name)) for e in benchmarks())
    assert len(items) == total
    assert {i.benchmark for i in items} == {e.name for e in benchmarks()}
    held_out = {i.benchmark for i in items if i.held_out}
    assert "mmlu-pro" in held_out and "strongreject" in held_out and "mmlu" not in held_out
    gsm = next(i for i in items if i.item_id == "gsm-001")
    assert gsm.answer == "34" and "12 rolls" in gsm.prompt

"""IFEval: each of its 25 instruction checkers on an answer that follows the instruction and one
that does not, strict and loose readings, the aggregates, and the benchmark read from its
hub-shaped fixture and run through inspect."""

import time

import pytest

from arena.serving.client import Endpoint
from evalsuite import records
from evalsuite.benchmark_metrics import benchmark_metrics
from evalsuite.ifeval import (
    CHECKERS,
    InstructionArgumentsError,
    UnknownInstruction,
    instruction_results,
    loose_variants,
    sentence_split,
)
from evalsuite.items import AnsweredItem
from evalsuite.registry import benchmark, benchmark_items
from evalsuite.runner import run_benchmarks
from tests.support.scripted_llm import Script

# (instruction id, its arguments, an answer that follows it, an answer that does not)
CASES = [
    ("keywords:existence", {"keywords": ["waste", "material"]},
     "Cans cut WASTE; the material is light.", "Cans are light and cheap."),
    ("keywords:frequency", {"keyword": "can", "frequency": 3, "relation": "at least"},
     "A can, a Can and a can.", "A can and a tin."),
    ("keywords:frequency", {"keyword": "can", "frequency": 2, "relation": "less than"},
     "One can only.", "A can and a can."),
    ("keywords:forbidden_words", {"forbidden_words": ["tin", "cheap"]},
     "Tinted glass is lovely.", "It is CHEAP."),
    ("keywords:letter_frequency", {"letter": "Z", "let_frequency": 2, "let_relation": "at least"},
     "Zig zag.", "Zag."),
    ("language:response_language", {"language": "de"},
     "Der Hund läuft jeden Morgen schnell über die grüne Wiese und bellt laut.",
     "The dog runs quickly across the green meadow every morning and barks loudly."),
    ("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 3},
     "Dr. Smith came home. He slept.", "He came. He ate. He slept."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "***\nFirst part.\n***\nSecond part.", "First part.\n***\n\n***\nSecond part."),
    ("length_constraints:number_words", {"relation": "at least", "num_words": 5},
     "one two three four-five", "one two three four"),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Summer"},
     'Spring came.\n\n"Summer, at last," she said.', "Spring came.\n\nWinter, at last."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2},
     "[name] lives at [address].", "[name] lives at [address\n]."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."},
     "Bye for now.\n\np. s. Call me.", "Bye for now. PS call me."),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"},
     "Bye.\nP. P. S. Bring cake.", "Bye.\nP.S. Bring cake."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2},
     "Two points:\n* pack light\n  - bring shoes", "One point:\n* pack light\n**Bold** line"),
    ("detectable_format:constrained_response", {},
     "I checked twice. My answer is maybe.", "My answer is probably yes."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*Intro* and then **details**.", "*Intro* and then ** **."),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nArrive.\nSection 2\nLeave.", "Section 1\nArrive.\nSection two\nLeave."),
    ("detectable_format:json_format", {},
     '```json\n{"city": "Lisbon"}\n```', 'Here it is: {"city": "Lisbon"}'),
    ("detectable_format:title", {},
     "<<A Poem of Joy>>\nLines of joy.", "<< >>\nLines without a title."),
    ("combination:two_responses", {},
     "Yes, go.\n******\nNo, stay.", "Yes, go.\n******\nYes, go."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Describe a cat."},
     "describe a cat. It purrs.", "Sure! Describe a cat. It purrs."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     'That is all. any other questions?"', "Any other questions? Thanks."),
    ("startend:quotation", {}, '"Wrapped in quotes."', '"Only opened.'),
    ("change_case:capital_word_frequency",
     {"capital_relation": "less than", "capital_frequency": 2},
     "Only ONE word is loud.", "TWO LOUD words."),
    ("change_case:english_capital", {},
     "THIS WHOLE ANSWER IS WRITTEN IN CAPITAL LETTERS, AS THE USER ASKED.",
     "This answer is written in ordinary sentence case, as usual."),
    ("change_case:english_lowercase", {},
     "this whole answer is written in lower case letters, as the user asked.",
     "This answer is written in ordinary sentence case, as usual."),
    ("punctuation:no_comma", {}, "No commas here.", "Yes, one."),
]  # fmt: skip


def strict(instruction_id: str, arguments: dict, answer: str) -> bool:
    (result,) = instruction_results(answer, [instruction_id], [arguments])
    return result.strict


def test_every_instruction_of_the_published_registry_has_a_checker_and_a_case_here():
    assert len(CHECKERS) == 25
    assert {case[0] for case in CASES} == set(CHECKERS)


@pytest.mark.parametrize(
    ("instruction_id", "arguments", "followed", "not_followed"),
    CASES,
    ids=[f"{case[0]}-{index}" for index, case in enumerate(CASES)],
)
def test_each_checker_tells_a_followed_instruction_from_one_not_followed(
    instruction_id, arguments, followed, not_followed
):
    assert strict(instruction_id, arguments, followed)
    assert not strict(instruction_id, arguments, not_followed)


def test_an_empty_answer_follows_no_instruction_not_even_one_it_cannot_break():
    assert strict("punctuation:no_comma", {}, "No commas here.")
    assert not strict("punctuation:no_comma", {}, "   \n ")


def test_loose_reading_forgives_a_lead_in_line_and_markup_but_not_a_broken_instruction():
    (json_answer,) = instruction_results(
        'Sure, here is the JSON:\n{"city": "Lisbon"}', ["detectable_format:json_format"], [{}]
    )
    assert (json_answer.strict, json_answer.loose) == (False, True)
    (bold_ending,) = instruction_results(
        "All done. **Any other questions?**", ["startend:end_checker"],
        [{"end_phrase": "Any other questions?"}],
    )  # fmt: skip
    assert (bold_ending.strict, bold_ending.loose) == (False, True)
    (comma,) = instruction_results("Yes, one.\nAnd two.", ["punctuation:no_comma"], [{}])
    assert (comma.strict, comma.loose) == (False, True)  # the last line alone has no comma
    (commas,) = instruction_results("Yes, one.\nTwo, three.", ["punctuation:no_comma"], [{}])
    assert (commas.strict, commas.loose) == (False, False)


def test_the_eight_loose_variants_are_the_fields():
    assert loose_variants("*a*\nb\n*c*") == [
        "*a*\nb\n*c*", "a\nb\nc", "b\n*c*", "*a*\nb", "b", "b\nc", "a\nb", "b",
    ]  # fmt: skip


def test_sentences_end_at_terminal_punctuation_but_not_after_abbreviations_or_initials():
    text = (
        "Dr. Smith met J. K. Rowling at 3.30 p.m. today. Was it fun?! Yes... it was. Wait... Then"
    )
    assert sentence_split(text) == [
        "Dr. Smith met J. K. Rowling at 3.30 p.m. today.", "Was it fun?!",
        "Yes... it was.", "Wait...", "Then",
    ]  # fmt: skip
    assert sentence_split("* no full stops\n* in this list") == ["* no full stops\n* in this list"]


def test_an_unknown_instruction_fails_the_item_with_its_name_never_passes():
    with pytest.raises(UnknownInstruction, match="'detectable_format:haiku' has no checker"):
        instruction_results(
            "A haiku.", ["punctuation:no_comma", "detectable_format:haiku"], [{}, {}]
        )


def test_missing_or_malformed_arguments_fail_the_item_naming_the_argument():
    with pytest.raises(
        InstructionArgumentsError, match="number_words needs the argument 'relation'"
    ):
        instruction_results("a b c", ["length_constraints:number_words"], [{"num_words": 3}])
    with pytest.raises(InstructionArgumentsError, match="'about' is neither"):
        instruction_results(
            "a b c", ["length_constraints:number_words"], [{"num_words": 3, "relation": "about"}]
        )
    with pytest.raises(InstructionArgumentsError, match="2 instruction ids but 1 kwargs"):
        instruction_results("a", ["punctuation:no_comma", "startend:quotation"], [{}])


def test_hostile_answers_are_checked_in_linear_time():
    """Long runs of the characters the field's patterns backtrack on ("[", "<<", spaces,
    "*", "p.") take seconds at most for every checker, not hours."""
    answer = "[" * 40_000 + "<<" * 40_000 + " \n" * 40_000 + "*a" * 40_000 + "p. " * 20_000
    arguments = {case[0]: case[1] for case in CASES}
    started = time.monotonic()
    results = instruction_results(answer, list(arguments), list(arguments.values()))
    assert time.monotonic() - started < 20
    verdicts = {result.instruction_id: result.strict for result in results}
    assert verdicts["detectable_content:number_placeholders"] is False
    assert verdicts["detectable_format:title"] is False
    assert verdicts["detectable_format:number_highlighted_sections"] is True


def test_the_aggregates_are_prompt_and_instruction_level_accuracy_strict_and_loose():
    def answered(strict: list[bool], loose: list[bool]) -> AnsweredItem:
        return AnsweredItem({}, "", {"strict": strict, "loose": loose})

    items = [
        answered([True, True], [True, True]),
        answered([True, False], [True, True]),
        answered([False], [False]),
    ]
    metrics = benchmark_metrics("ifeval", items)

    # prompts strict 1, 0, 0; loose 1, 1, 0: stdev √(1/3) over √3
    assert metrics["prompt_level_strict"].value == pytest.approx(1 / 3)
    assert metrics["prompt_level_strict"].stderr == pytest.approx(1 / 3)
    assert metrics["prompt_level_loose"].value == pytest.approx(2 / 3)
    assert metrics["prompt_level_loose"].n == 3
    # instructions strict 1, 1, 1, 0, 0: stdev √0.3 over √5; loose 1, 1, 1, 1, 0: √0.2 / √5
    assert metrics["inst_level_strict"].value == pytest.approx(0.6)
    assert metrics["inst_level_strict"].stderr == pytest.approx(0.06**0.5)
    assert metrics["inst_level_loose"].value == pytest.approx(0.8)
    assert metrics["inst_level_loose"].stderr == pytest.approx(0.2)
    assert metrics["inst_level_loose"].n == 5


def test_hub_rows_become_items_with_their_instructions_and_non_null_arguments():
    entry = benchmark("ifeval")
    assert entry.hub.files == ("ifeval_input_data.jsonl",)
    items = {item.id: item for item in benchmark_items("ifeval")}
    assert len(items) == 6
    first = items["ifeval-1000"]
    assert first.input.startswith("Write a 300+ word summary")
    assert first.metadata["instruction_id_list"] == [
        "punctuation:no_comma",
        "detectable_format:number_highlighted_sections",
        "length_constraints:number_words",
    ]
    assert first.metadata["kwargs"] == [
        {},
        {"num_highlights": 3},
        {"relation": "at least", "num_words": 300},
    ]
    # the hub viewer's rows carry every argument key, null where unused: nulls are dropped
    row = {"key": 7, "prompt": "Say hi.", "instruction_id_list": ["startend:quotation"],
           "kwargs": [{"num_words": None, "relation": None, "end_phrase": None}]}  # fmt: skip
    assert records.ifeval(row).metadata["kwargs"] == [{}]


def test_the_benchmark_runs_through_inspect_and_reports_its_four_accuracies(scripted_llm, tmp_path):
    """One answer for all six fixture prompts: its title follows item 1031's title
    instruction; its last line has no comma, so item 1000's no-comma instruction is followed
    only in the loose reading. Nothing else is followed (14 instructions in all)."""
    scripted_llm.scripts["ifeval-answer"] = Script(
        "Sure, here it is.\n<<Lisbon>>", chunk_chars=64, delay_s=0
    )
    endpoint = Endpoint(base_url=scripted_llm.base_url, model="ifeval-answer")
    (ifeval,) = run_benchmarks(endpoint=endpoint, benchmark_names=["ifeval"], log_dir=str(tmp_path))

    assert (ifeval.n, ifeval.score, ifeval.error) == (6, 0.0, "")
    metrics = ifeval.metrics
    assert (metrics["prompt_level_strict"].value, metrics["prompt_level_strict"].n) == (0.0, 6)
    assert metrics["prompt_level_loose"].value == 0.0
    assert metrics["inst_level_strict"].value == pytest.approx(1 / 14)
    assert metrics["inst_level_loose"].value == pytest.approx(2 / 14)
    assert metrics["inst_level_loose"].n == 14
    explained = {item.item_id: item.explanation for item in ifeval.items}
    assert explained["ifeval-1031"] == "not followed (strict): language:response_language"

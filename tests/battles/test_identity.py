import pytest

from arena.battles.identity import revealed_identity
from arena.battles.models import Battle
from arena.battles.selectors import identity_words
from arena.battles.services import SideResult, battle_record_answers
from tests import factories


def named(text: str, *names: str) -> str | None:
    return revealed_identity(text, names=names)


def configured(text: str, *words: str) -> str | None:
    return revealed_identity(text, configured=words)


class TestContestantNames:
    def test_a_name_is_found_whole_and_in_any_case(self):
        assert named("I am CLAUDE, an assistant.", "Claude") == "Claude"
        assert named("Claudette is a name.", "Claude") is None

    def test_spaces_hyphens_and_underscores_are_interchangeable(self):
        assert named("I am tiny instruct.", "tiny-instruct") == "tiny-instruct"
        assert named("I am Tiny_Instruct.", "tiny-instruct") == "tiny-instruct"
        assert named("tinyinstruct", "tiny-instruct") == "tiny-instruct"

    def test_an_ordinary_word_as_a_name_does_not_void_longer_words(self):
        for text in ("Check the database.", "The baseline is 3.", "It is based on facts."):
            assert named(text, "base") is None, text
        assert named("The instructions say so.", "instruct") is None

    def test_paths_and_symbols_are_matched_literally(self):
        assert named("loaded from /models/x.y (ok)", "/models/x.y") == "/models/x.y"
        assert named("loaded from /models/xzy", "/models/x.y") is None

    def test_very_short_words_are_ignored(self):
        assert named("a b", "a", " ") is None


class TestConfiguredWords:
    def test_a_configured_word_catches_its_suffixed_versions(self):
        assert configured("I am GPT-4o, by the way.", "GPT-4") == "GPT-4"
        assert configured("As gpt4-turbo I think", "GPT-4") == "GPT-4"
        assert configured("Built on Llama3.", "Llama") == "Llama"

    def test_a_configured_word_still_needs_a_boundary_before_it(self):
        assert configured("see myGPT-4o", "GPT-4") is None
        assert configured("Proclaude", "Claude") is None


@pytest.mark.django_db
class TestWhoseNamesCount:
    def test_every_contestant_counts_not_only_the_two_in_the_battle(self, settings):
        settings.ARENA_IDENTITY_WORDS = ["Acme"]
        factories.contestant("Quokka-7", active=False, identity_words=["QuokkaCorp"])
        factories.contestant("in-the-battle")
        words = identity_words()
        assert {"Quokka-7", "/models/Quokka-7", "in-the-battle"} <= set(words.names)
        assert set(words.configured) == {"Acme", "QuokkaCorp"}

    def test_an_answer_naming_a_contestant_outside_the_battle_voids_it(self):
        factories.contestant("Quokka-7", active=False)
        battle = factories.complete_battle(state=Battle.State.GENERATING)
        outcome = battle_record_answers(
            battle_id=battle.pk,
            results={
                "a": SideResult("As Quokka-7 would put it: 4.", "stop", "", 0.1, 0.2),
                "b": SideResult("4.", "stop", "", 0.1, 0.2),
            },
        )
        assert outcome.void_reason == "answer A revealed a model identity"

    def test_a_contestants_own_identity_word_runs_on_like_a_configured_one(self):
        factories.contestant("Quokka-7", identity_words=["QuokkaNet"])
        battle = factories.complete_battle(state=Battle.State.GENERATING)
        outcome = battle_record_answers(
            battle_id=battle.pk,
            results={
                "a": SideResult("4.", "stop", "", 0.1, 0.2),
                "b": SideResult("I am QuokkaNet2.", "stop", "", 0.1, 0.2),
            },
        )
        assert outcome.void_reason == "answer B revealed a model identity"

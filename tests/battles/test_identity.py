import pytest
from django.utils import timezone

from arena.battles.identity import revealed_identity
from arena.battles.models import Battle
from arena.battles.selectors import identity_words
from arena.battles.services import SideResult, battle_record_answers
from tests import factories
from tests.organizer import builders


def nominee_of(agent_name: str):
    """The contestant the phase engine makes of an agent's nomination ("alpha-phase-1")."""
    from arena.phases.models import PhaseContestant

    phase = factories.running_phase()
    agent = builders.agent(agent_name)
    job = builders.job(agent, submitted=timezone.now())
    checkpoint = builders.checkpoint(agent, job=job, at=timezone.now())
    nomination = builders.nomination(agent, phase=phase, checkpoint=checkpoint)
    contestant = factories.contestant(f"{agent_name}-{phase.label}")
    PhaseContestant.objects.create(
        phase=phase, contestant=contestant, role=PhaseContestant.Role.NOMINEE,
        nomination=nomination, checkpoint_path=f"/models/{agent_name}",
    )  # fmt: skip
    return contestant


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

    def test_an_agents_bare_name_counts_as_a_name_of_its_nominee(self, settings):
        nominee_of("alpha")
        assert "alpha" in identity_words().names
        assert revealed_identity("Hi, I'm alpha!", names=identity_words().names) == "alpha"
        assert revealed_identity("the alphabet", names=identity_words().names) is None
        settings.ARENA_IDENTITY_MATCH_AGENT_NAME = False
        assert "alpha" not in identity_words().names

    def test_an_answer_saying_its_agents_name_loses_the_battle(self):
        nominee = nominee_of("alpha")
        battle = factories.complete_battle(a=nominee, state=Battle.State.GENERATING)
        outcome = battle_record_answers(
            battle_id=battle.pk,
            results={
                "a": SideResult("I'm \u0430lpha, nice to meet you.", "stop", "", 0.1, 0.2),
                "b": SideResult("4.", "stop", "", 0.1, 0.2),
            },
        )
        assert (outcome.leaked_sides, outcome.void_reason, outcome.forced_winner) == ("a", "", "b")

    def test_an_answer_naming_a_contestant_outside_the_battle_loses_it(self):
        factories.contestant("Quokka-7", active=False)
        battle = factories.complete_battle(state=Battle.State.GENERATING)
        outcome = battle_record_answers(
            battle_id=battle.pk,
            results={
                "a": SideResult("As Quokka-7 would put it: 4.", "stop", "", 0.1, 0.2),
                "b": SideResult("4.", "stop", "", 0.1, 0.2),
            },
        )
        assert (outcome.leaked_sides, outcome.void_reason, outcome.forced_winner) == ("a", "", "b")

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
        assert (outcome.leaked_sides, outcome.void_reason, outcome.forced_winner) == ("b", "", "a")


class TestWhatTheVoterSees:
    """The check reads each answer as the voter does: rendered Markdown, decoded entities,
    without invisible characters, with look-alike letters read as the letters they mimic."""

    def test_html_entities_are_read_as_the_letters_they_render(self):
        assert configured("Cl&#97;ude by Anthr&#111;pic", "Claude") == "Claude"
        assert configured("I am &#x43;laude.", "Claude") == "Claude"
        assert named("made by tiny&#45;instruct", "tiny-instruct") == "tiny-instruct"

    def test_markdown_that_splits_a_word_is_read_as_rendered(self):
        assert configured("I am Cl**au**de.", "Claude") == "Claude"
        assert named("I am tiny-*instruct*.", "tiny-instruct") == "tiny-instruct"

    @pytest.mark.parametrize(
        "hidden", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u2062"]
    )
    def test_invisible_characters_inside_a_word_are_ignored(self, hidden):
        assert configured(f"I am Cla{hidden}ude.", "Claude") == "Claude"
        assert named(f"I am al{hidden}pha-{hidden}model.", "alpha-model") == "alpha-model"

    def test_fullwidth_and_styled_letters_are_read_as_plain_letters(self):
        assert configured("I am ｃｌａｕｄｅ.", "Claude") == "Claude"
        assert configured("I am 𝐂𝐥𝐚𝐮𝐝𝐞.", "Claude") == "Claude"
        assert named("Ｉ ａｍ ｔｉｎｙ－ｉｎｓｔｒｕｃｔ", "tiny-instruct") == "tiny-instruct"

    def test_look_alike_letters_of_other_scripts_are_read_as_latin(self):
        assert configured("I am \u0421laude.", "Claude") == "Claude"  # Cyrillic Es
        assert configured("I am \u0441l\u0430ud\u0435.", "Claude") == "Claude"  # Cyrillic c, a, e
        assert configured("I am GPT-4\u03bf.", "GPT-4") == "GPT-4"  # Greek omicron
        assert named("I am \u0391lpha-model.", "alpha-model") == "alpha-model"  # Greek Alpha

    def test_accents_added_to_a_name_do_not_hide_it(self):
        assert configured("I am Cla\u0301ude.", "Claude") == "Claude"
        assert configured("I am Cláudé.", "Claude") == "Claude"

    def test_the_words_searched_for_are_normalised_the_same_way(self):
        assert named("I am alpha-model.", "ａｌｐｈａ-model") == "ａｌｐｈａ-model"
        assert configured("I am Claude.", "\u0421laude") == "\u0421laude"

    def test_normalising_does_not_make_longer_words_match(self):
        for text in ("Check the d\u0430tabase.", "The b\u0430seline is 3.", "data\u200bbase"):
            assert named(text, "base") is None, text
        assert configured("see my\u200bGPT-4o", "GPT-4") is None
        assert configured("Pro\u0441laude", "Claude") is None

    def test_symbols_that_resemble_letters_do_not_join_words(self):
        # "|" looks like "l", but a bar between words still separates them.
        assert configured("|Claude|", "Claude") == "Claude"
        assert named("a|base|b", "base") == "base"

    def test_a_word_split_across_lines_or_paragraphs_is_not_joined(self):
        assert configured("Clau\n\nde", "Claude") is None
        assert configured("Clau\nde", "Claude") is None

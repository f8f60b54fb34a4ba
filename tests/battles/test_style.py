import time
from html.parser import HTMLParser

import pytest

from arena.battles.style import count_tokens, style_features
from frontend.markdown import render_markdown

NO_LISTS = {"ordered": 0, "unordered": 0}
NO_BOLD = {"**": 0, "__": 0}


def test_tokens_are_words_and_single_symbols():
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("3 plus 4 is 7.") == 6
    assert count_tokens("") == 0


def test_markdown_elements_are_counted_by_kind():
    text = (
        "# Title\n"
        "## Part\n"
        "Some **bold** and __strong__ words, and **more**.\n"
        "1. first\n"
        "2) second\n"
        "- dash\n"
        "* star\n"
        "+ plus\n"
    )
    features = style_features(text)
    assert features.headers == {"h1": 1, "h2": 1, "h3": 0, "h4": 0, "h5": 0, "h6": 0}
    assert features.lists == {"ordered": 2, "unordered": 3}
    assert features.bold == {"**": 2, "__": 1}


# The cases issue 16 found wrong under the version 1 line regexes.


def test_bold_markup_inside_inline_code_is_not_bold():
    features = style_features("Pass `**kwargs**` and `__init__` through, not **this** one.")
    assert features.bold == {"**": 1, "__": 0}


def test_a_list_line_inside_an_indented_code_block_is_code():
    features = style_features("Example:\n\n    - x\n    1. y\n    # z\n\nAfter.")
    assert features.lists == NO_LISTS
    assert sum(features.headers.values()) == 0


def test_a_setext_title_is_a_header():
    features = style_features("Title\n===\n\nPart\n---\nText.")
    assert features.headers["h1"] == 1
    assert features.headers["h2"] == 1


def test_a_number_in_the_middle_of_a_paragraph_is_not_a_list_item():
    # CommonMark: only a list starting at 1 may interrupt a paragraph.
    features = style_features("There are two options and\n2. is the better one.")
    assert features.lists == NO_LISTS
    assert style_features("Steps:\n1. one\n2. two").lists == {"ordered": 2, "unordered": 0}


def test_a_list_inside_a_block_quote_is_counted():
    features = style_features("> - x\n> - y\n>\n> 1. z")
    assert features.lists == {"ordered": 1, "unordered": 2}


# More cases where a line-based reading and the page disagree.


def test_markdown_inside_fenced_code_is_not_counted():
    text = "Intro\n```python\n# comment, not a header\n- not a list\nx = a**b**c\n```\n## Real\n~~~\n**no**\n"
    features = style_features(text)
    assert features.headers["h1"] == 0
    assert features.headers["h2"] == 1
    assert features.lists == NO_LISTS
    assert features.bold == NO_BOLD


def test_an_unclosed_fence_runs_to_the_end():
    assert style_features("```\n# hidden\n- hidden").headers["h1"] == 0


def test_a_fence_with_an_info_string_does_not_close_an_open_block():
    text = "```\nShow this:\n```js\n# still code\n- still code\n```\n# Real header\n"
    features = style_features(text)
    assert features.headers["h1"] == 1
    assert features.lists["unordered"] == 0


def test_a_fenced_block_indented_inside_a_list_item_is_code():
    text = (
        "1. Install it:\n"
        "    ```bash\n"
        "    # not a header\n"
        "    - not a list item\n"
        "    ```\n"
        "2. Run it with **care**.\n"
    )
    features = style_features(text)
    assert features.headers["h1"] == 0
    assert features.lists == {"ordered": 2, "unordered": 0}
    assert features.bold["**"] == 1


def test_nested_lists_count_every_item():
    text = "- a\n  - b\n    1. c\n    2. d\n  - e\n- f\n\n> 1. quoted\n>    - deeper"
    assert style_features(text).lists == {"ordered": 3, "unordered": 5}


def test_things_that_only_look_like_markdown_are_not_counted():
    features = style_features("#hashtag\n\n**not closed\nsnake__case__name\n7.5 is a number")
    assert sum(features.headers.values()) == 0
    assert features.lists == NO_LISTS
    assert features.bold == NO_BOLD


def test_thematic_breaks_are_neither_list_items_nor_bold():
    features = style_features("Intro\n\n* * *\n***\n- - -\n___\n  *  *  *  *\nOutro\n- a real item")
    assert features.lists == {"ordered": 0, "unordered": 1}
    assert features.bold == NO_BOLD


def test_raw_html_is_shown_as_text_so_only_markdown_counts():
    # The page renders with HTML off: the tags are text, the Markdown between them is not.
    features = style_features(
        "<h1>Not a header</h1>\n<b>no</b> <ul><li>no</li></ul>\n\n<div>\n**yes**\n</div>"
    )
    assert sum(features.headers.values()) == 0
    assert features.lists == NO_LISTS
    assert features.bold == {"**": 1, "__": 0}


def test_table_cells_count_their_bold_but_not_their_code():
    text = "| **a** | __b__ |\n|---|---|\n| `**c**` | - d |\n"
    features = style_features(text)
    assert features.bold == {"**": 1, "__": 1}
    assert features.lists == NO_LISTS


def test_bold_in_link_text_counts_and_in_an_image_does_not():
    # The page drops images (no <img> in its allow-list), so their alt text is never seen.
    features = style_features("See [**the docs**](https://example.com) ![**logo**](x.png)")
    assert features.bold == {"**": 1, "__": 0}


def test_bold_spans_follow_emphasis_rules_not_lines():
    features = style_features("***both*** and **across\ntwo lines** and **a **nested** b**")
    assert features.bold == {"**": 4, "__": 0}


def test_blocks_nested_past_the_parsers_limit_are_counted_as_the_page_shows_them():
    text = "> " * 30 + "- hidden\n\n- shown"
    assert style_features(text).lists == _counted_in_html(render_markdown(text))["lists"]


def test_the_counts_are_what_the_voter_sees_on_the_page():
    answers = [
        "Title\n===\n> - x\n> 2. y\n\n    - code\n\n`**k**` **b** __u__",
        "1. a\n   - b\n     * c\n2. d\n\n| **t** | x |\n|---|---|\n| __y__ | 1 |",
        "## H\n\n- [**link**](https://a.b)\n- ![**img**](c)\n\n~~**struck**~~\n\n---\n",
        "<b>x</b>\n#### Four\n###### Six\n####### seven\n\n+ p\n+ q\n\n3) r\n4) s",
    ]
    for text in answers:
        features = style_features(text)
        seen = _counted_in_html(render_markdown(text))
        assert (sum(features.headers.values()), features.lists, sum(features.bold.values())) == (
            seen["headers"],
            seen["lists"],
            seen["bold"],
        ), text


def test_tokens_count_the_whole_answer_code_included():
    prose = "Run it:\n"
    code = "```\nx = 1\n```\n"
    assert style_features(prose + code).tokens == count_tokens(prose) + count_tokens(code)
    assert count_tokens(code) == 9  # ``` is three tokens, twice; then x, =, 1


HOSTILE = {
    "stars": lambda n: "*" * n,
    "star words": lambda n: "*a" * (n // 2),
    "brackets": lambda n: "[" * n,
    "image openers": lambda n: "![" * (n // 2),
    "strong openers": lambda n: "**a " * (n // 4),
    "backtick runs": lambda n: "`a``" * (n // 4),
    "nested quotes": lambda n: "> " * (n // 2) + "- x",
    "bullets on one line": lambda n: "- " * (n // 2) + "x",
    "table rows": lambda n: "|a|b|\n|-|-|\n" + "|x|\n" * (n // 4),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_answers_cost_time_linear_in_their_length(name):
    # Exported and refitted answers are model text. Eight times the length costs about eight
    # times the time when the work is linear, sixty-four when quadratic; the bound between
    # them (and the 5 ms floor) leaves room for a busy machine's noise.
    make = HOSTILE[name]
    small, large = _best_times(make(6_000), make(48_000))
    assert large < 24 * max(small, 0.005), (name, small, large)


def _best_times(*texts: str, rounds: int = 5) -> list[float]:
    """Each text's best time over `rounds`, the texts taken in turn in each round: beside other
    test workers, a burst of load then slows both sizes, not only the one measured during it."""
    best = [float("inf")] * len(texts)
    for _ in range(rounds):
        for i, text in enumerate(texts):
            start = time.perf_counter()
            style_features(text)
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _counted_in_html(html: str) -> dict:
    """Headers, list items by kind and bold spans as tags on the rendered, sanitised page."""

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.headers, self.bold = 0, 0
            self.lists = {"ordered": 0, "unordered": 0}
            self.open_lists: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
                self.headers += 1
            elif tag == "strong":
                self.bold += 1
            elif tag in {"ol", "ul"}:
                self.open_lists.append("ordered" if tag == "ol" else "unordered")
            elif tag == "li":
                self.lists[self.open_lists[-1]] += 1

        def handle_endtag(self, tag):
            if tag in {"ol", "ul"}:
                self.open_lists.pop()

    tags = Tags()
    tags.feed(html)
    tags.close()
    return {"headers": tags.headers, "lists": tags.lists, "bold": tags.bold}

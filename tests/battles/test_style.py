from arena.battles.style import count_tokens, style_features


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


def test_markdown_inside_code_blocks_is_not_counted():
    text = "Intro\n```python\n# comment, not a header\n- not a list\nx = a**b**c\n```\n## Real\n~~~\n**no**\n"
    features = style_features(text)
    assert features.headers["h1"] == 0
    assert features.headers["h2"] == 1
    assert features.lists == {"ordered": 0, "unordered": 0}
    assert features.bold["**"] == 0


def test_an_unclosed_fence_runs_to_the_end():
    assert style_features("```\n# hidden\n- hidden").headers["h1"] == 0


def test_things_that_only_look_like_markdown_are_not_counted():
    features = style_features("#hashtag\n---\n**not closed\nsnake__case__name\n7.5 is a number")
    assert sum(features.headers.values()) == 0
    assert features.lists == {"ordered": 0, "unordered": 0}
    assert features.bold == {"**": 0, "__": 0}


def test_thematic_breaks_are_neither_list_items_nor_bold():
    features = style_features("Intro\n* * *\n***\n- - -\n___\n  *  *  *  *\nOutro\n- a real item")
    assert features.lists == {"ordered": 0, "unordered": 1}
    assert features.bold == {"**": 0, "__": 0}


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


def test_tokens_count_the_whole_answer_code_included():
    prose = "Run it:\n"
    code = "```\nx = 1\n```\n"
    assert style_features(prose + code).tokens == count_tokens(prose) + count_tokens(code)
    assert count_tokens(code) == 9  # ``` is three tokens, twice; then x, =, 1

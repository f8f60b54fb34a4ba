from arena.battles.identity import revealed_identity


def test_a_name_is_found_whole_and_in_any_case():
    assert revealed_identity("I am CLAUDE, an assistant.", ["Claude"]) == "Claude"
    assert revealed_identity("Claudette is a name.", ["Claude"]) is None


def test_spaces_hyphens_and_underscores_are_interchangeable():
    words = ["tiny-instruct"]
    assert revealed_identity("I am tiny instruct.", words) == "tiny-instruct"
    assert revealed_identity("I am Tiny_Instruct.", words) == "tiny-instruct"
    assert revealed_identity("tinyinstruct", words) == "tiny-instruct"


def test_paths_and_symbols_are_matched_literally():
    assert revealed_identity("loaded from /models/x.y (ok)", ["/models/x.y"]) == "/models/x.y"
    assert revealed_identity("loaded from /models/xzy", ["/models/x.y"]) is None


def test_very_short_words_are_ignored():
    assert revealed_identity("a b", ["a", " "]) is None

"""An answer's Markdown never becomes a link (issue 25, finding 6); the platform's own reports
keep theirs."""

from __future__ import annotations

import pytest

from arena.battles.answer_markdown import document_html, markdown_html
from arena.battles.identity import revealed_identity


@pytest.mark.parametrize(
    "answer,shown",
    [
        ("[the guide](https://agent.example/x)", "the guide (https://agent.example/x)"),
        ('[t](https://a.example "title")', "t (https://a.example)"),
        ("<https://agent.example/auto>", "https://agent.example/auto"),
        ("<someone@agent.example>", "someone@agent.example"),
        ("[ref][1]\n\n[1]: https://agent.example/ref", "ref (https://agent.example/ref)"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),  # not a link to the parser
        ('<a href="https://agent.example">raw</a>', '&lt;a href="https://agent.example"&gt;raw'),
        ("[**bold** `code`](https://a.example/&q)", "(https://a.example/&amp;q)"),
    ],
)
def test_an_answers_links_are_plain_text(answer, shown):
    html = markdown_html(answer)
    assert "<a " not in html
    assert shown in html


def test_a_link_the_answer_hides_is_read_by_the_identity_check():
    # The address is shown now, so the check reads it as the voter does.
    assert revealed_identity("[my site](https://nova.example)", names=["nova"]) == "nova"


def test_the_platforms_documents_keep_their_links():
    html = document_html("[all agents](index.html) and [x](javascript:alert(1))")
    assert '<a href="index.html" rel="noopener noreferrer nofollow">all agents</a>' in html
    assert 'href="javascript' not in html

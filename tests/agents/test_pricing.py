"""The proxy's price bound: never below what a real tokenizer and chat template count, and a
clear refusal for what it cannot bound."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from transformers import AutoTokenizer

from agents.models import Upstream
from agents.pricing import MAX_CHOICES, Unpriceable, price_request

UPSTREAM = Upstream(
    name="m",
    upstream_model="upstream-m",
    base_url="http://upstream/v1",
    usd_per_million_prompt_tokens=Decimal("2.5"),
    usd_per_million_completion_tokens=Decimal("10"),
    max_completion_tokens=1000,
)
HOSTILE_TEXTS = [
    "plain English, the common case. " * 50,
    "中文的提示词在分词器里常常是每个字一个或多个词元。" * 40,
    "🙂🚀👩‍👩‍👧‍👦🏳️‍🌈" * 60,  # emoji and joiner sequences: several tokens a glyph
    "e\u0301" * 300 + "\u200b\u00ad" * 200,  # combining marks, zero-width, soft hyphens
    "<|im_start|>system\n<|im_end|>" * 40,  # special-token text in the content
    " \n\t" * 300,
    "".join(chr(c) for c in range(0x2500, 0x2800)),  # box drawing, braille: rare symbols
]


@pytest.fixture(scope="module")
def tokenizer(tiny_models):
    return AutoTokenizer.from_pretrained(tiny_models / "instruct")


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_the_prompt_bound_covers_what_a_real_chat_template_counts(tokenizer, text):
    tools = [{"type": "function", "function": {"name": "lookup", "description": text[:200],
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]  # fmt: skip
    messages = [
        {"role": "system", "content": text},
        {"role": "user", "content": [{"type": "text", "text": text}]},
    ]
    for extra in ({}, {"tools": tools}):
        priced = price_request({"model": "m", "messages": messages, **extra}, UPSTREAM)
        plain = [{"role": m["role"], "content": text} for m in messages]
        rendered = tokenizer.apply_chat_template(
            plain, tools=extra.get("tools"), tokenize=False, add_generation_prompt=True
        )
        count = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
        assert count > len(text) // 8  # the text was counted
        assert count <= priced.prompt_tokens_bound


def test_the_body_sent_is_the_body_priced():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_completion_tokens": 5000, "n": 3, "stream_options": {"include_usage": False}}  # fmt: skip
    priced = price_request(body, UPSTREAM)
    sent = json.loads(priced.body)
    assert sent["model"] == "upstream-m" and "max_completion_tokens" not in sent
    assert sent["max_tokens"] == 1000  # capped by the upstream
    assert sent["stream_options"] == {"include_usage": True}
    assert priced.completion_tokens_bound == 3 * 1000
    assert priced.prompt_tokens_bound >= len(priced.body)


def test_an_unset_max_tokens_is_the_upstream_cap():
    priced = price_request({"model": "m", "messages": [{"role": "user", "content": "x"}]}, UPSTREAM)
    assert json.loads(priced.body)["max_tokens"] == 1000
    assert priced.completion_tokens_bound == 1000


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
                ]
            },
            "'image_url'",
        ),  # fmt: skip
        ({"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]}, "'file'"),
        ({"messages": [{"role": "assistant", "audio": {"id": "a"}}]}, "'audio'"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "chat role"),
        ({"messages": []}, "non-empty"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"tools": [{"type": "web_search"}]}, "function tools"),
        ({"n": MAX_CHOICES + 1}, "'n' may be at most"),
        ({"n": 0}, "'n' must be a positive integer"),
        ({"max_tokens": "100"}, "'max_tokens' must be a positive integer"),
        ({"stream": "yes"}, "'stream'"),
        ({"audio": {"voice": "x"}}, "'audio'"),
        (
            {"logit_bias": {}, "chat_template": "{% for i in range(10**9) %}x{% endfor %}"},
            "'chat_template'",
        ),  # fmt: skip
    ],
)
def test_what_cannot_be_bounded_is_refused_by_name(extra, says):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}
    with pytest.raises(Unpriceable, match=says.replace("(", r"\(")):
        price_request(body, UPSTREAM)

"""Tiny model kit: checkpoint layout, tokenizer, determinism and stop behaviour."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from infra.tiny_models import Manifest, build_tiny_models
from infra.tiny_models.manifest import sha256_file
from tests.conftest import TEST_MODELS_DIR, TEST_NEMOTRON_MODELS_DIR

MODELS = ["base", "instruct", "markdown"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# Enough steps to exercise every stage, few enough for a ~3 s build.
FAST = {"pretrain_steps": 12, "sft_steps": 4}
PROMPTS = [
    "What is 2 plus 3?",
    "Name three animals.",
    "Tell me about the sun.",
    "How do I make tea?",
]


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Manifest]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {
        "a": build_tiny_models(root / "a", arch="nemotron_h", seed=0, log=_quiet, **FAST),
        "b": build_tiny_models(root / "b", arch="nemotron_h", seed=0, log=_quiet, **FAST),
        "other_seed": build_tiny_models(root / "c", arch="nemotron_h", seed=1, log=_quiet, **FAST),
        "llama": build_tiny_models(root / "d", arch="llama", seed=0, log=_quiet, **FAST),
    }


def _load(path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    # Exactly how a hub checkpoint is loaded: nothing kit-specific.
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _reply(
    model: PreTrainedModel, tok: PreTrainedTokenizerBase, prompt: str, max_new_tokens: int
) -> tuple[str, list[int]]:
    """Greedy reply to a one-turn chat: (text without special tokens, new token ids)."""
    enc = tok.apply_chat_template(
        [{"role": "user", "content": prompt}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    return tok.decode(new, skip_special_tokens=True), new


# --- fast: reduced-step builds into a tmp dir ------------------------------------------------


@pytest.mark.parametrize(
    ("build", "model_type", "embeddings"),
    [
        ("a", "nemotron_h", "backbone.embeddings.weight"),
        ("llama", "llama", "model.embed_tokens.weight"),
    ],
)
def test_checkpoints_are_complete_safetensors(
    builds: dict[str, Manifest], build: str, model_type: str, embeddings: str
) -> None:
    m = builds[build]
    assert m.arch == model_type
    assert (m.out_dir / "manifest.json").is_file()
    assert not list(m.out_dir.rglob("*.bin")), "only safetensors weights"
    for name in MODELS:
        d = m.model_dir(name)
        for f in [
            "model.safetensors",
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ]:
            assert (d / f).is_file(), f"{name}/{f}"
        with safe_open(str(d / "model.safetensors"), framework="pt") as st:
            assert embeddings in set(st.keys())
        assert json.loads((d / "config.json").read_text())["model_type"] == model_type
        gen = json.loads((d / "generation_config.json").read_text())
        assert gen["eos_token_id"] == 2  # <|im_end|>, for base too
        assert m.models[name].sha256 == sha256_file(d / "model.safetensors")


def test_tokenizer_has_chatml_template_and_specials(builds: dict[str, Manifest]) -> None:
    tok = AutoTokenizer.from_pretrained(builds["a"].out_dir / "tokenizer")
    assert len(tok) == 512
    assert tok.convert_tokens_to_ids(SPECIALS) == [0, 1, 2, 3]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"
    assert "{%- generation %}" in tok.chat_template
    msgs = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello!"}]
    assert tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    )
    enc = tok.apply_chat_template(
        msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [t for t, keep in zip(enc["input_ids"], enc["assistant_masks"], strict=True) if keep]
    assert tok.decode(trained) == "Hello!<|im_end|>"  # the SFT loss covers the stop token


def test_same_seed_is_byte_identical(builds: dict[str, Manifest]) -> None:
    a, b = builds["a"], builds["b"]
    assert a.tokenizer_sha256 == b.tokenizer_sha256
    for name in MODELS:
        assert a.models[name].sha256 == b.models[name].sha256
        assert (a.model_dir(name) / "model.safetensors").read_bytes() == (
            b.model_dir(name) / "model.safetensors"
        ).read_bytes()


def test_the_nemotron_h_base_is_a_hybrid_mamba_attention_mixture_of_experts(
    builds: dict[str, Manifest],
) -> None:
    config = json.loads((builds["a"].model_dir("base") / "config.json").read_text())
    assert config["architectures"] == ["NemotronHForCausalLM"]
    assert set(config["layers_block_type"]) == {"linear_attention", "full_attention", "moe"}
    assert config["n_routed_experts"] > config["num_experts_per_tok"] >= 1
    assert config["n_shared_experts"] == 1
    with safe_open(str(builds["a"].model_dir("base") / "model.safetensors"), framework="pt") as st:
        names = set(st.keys())
    # One of each block kind holds its own weights: Mamba's mixer, attention, experts.
    assert any(n.endswith("mixer.in_proj.weight") for n in names)
    assert any(n.endswith("mixer.q_proj.weight") for n in names)
    assert any(".mixer.experts." in n for n in names)
    assert any(".mixer.shared_experts." in n for n in names)


def test_the_architectures_build_different_models_from_one_tokenizer(
    builds: dict[str, Manifest],
) -> None:
    assert builds["a"].tokenizer_sha256 == builds["llama"].tokenizer_sha256
    assert builds["a"].models["base"].sha256 != builds["llama"].models["base"].sha256


def test_other_seed_differs(builds: dict[str, Manifest]) -> None:
    a, c = builds["a"], builds["other_seed"]
    for name in MODELS:
        assert a.models[name].sha256 != c.models[name].sha256


def test_rebuild_is_skipped_when_up_to_date(builds: dict[str, Manifest]) -> None:
    lines: list[str] = []
    again = build_tiny_models(
        builds["a"].out_dir, arch="nemotron_h", seed=0, log=lines.append, **FAST
    )
    assert not again.rebuilt and "up to date" in lines[0]
    assert again.models == builds["a"].models


def test_force_rebuilds_in_place(builds: dict[str, Manifest]) -> None:
    b = builds["b"]
    again = build_tiny_models(b.out_dir, arch="nemotron_h", seed=0, force=True, log=_quiet, **FAST)
    assert again.rebuilt
    assert {n: r.sha256 for n, r in again.models.items()} == {
        n: r.sha256 for n, r in b.models.items()
    }
    visible = sorted(p.name for p in b.out_dir.iterdir() if not p.name.startswith("."))
    assert visible == ["base", "instruct", "manifest.json", "markdown", "tokenizer"]
    assert not (b.out_dir / ".building").exists()


def test_base_does_not_end_the_turn(builds: dict[str, Manifest]) -> None:
    model, tok = _load(builds["a"].model_dir("base"))
    _, new = _reply(model, tok, "What is 2 plus 3?", max_new_tokens=40)
    assert tok.eos_token_id not in new


# --- slow: the full default build (reused from var/test-models when up to date) ---------------


@pytest.fixture(scope="session", params=["nemotron_h", "llama"])
def full_build(request: pytest.FixtureRequest) -> Manifest:
    """Each architecture's full default build, where the suite keeps it (tests/conftest.py)."""
    if request.param == "nemotron_h":
        return build_tiny_models(TEST_NEMOTRON_MODELS_DIR, arch="nemotron_h", seed=0)
    return build_tiny_models(TEST_MODELS_DIR, arch="llama", seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["instruct", "markdown"])
def test_sft_models_stop_on_im_end(full_build: Manifest, name: str) -> None:
    model, tok = _load(full_build.model_dir(name))
    for prompt in PROMPTS:
        text, new = _reply(model, tok, prompt, max_new_tokens=64)
        assert new[-1] == tok.eos_token_id and len(new) < 64, (prompt, text)
        assert text.strip(), prompt
        if name == "instruct":
            assert not text.startswith("##"), (prompt, text)
        else:  # a header, then bold spans and/or list items
            assert text.startswith("## "), (prompt, text)
            assert re.search(r"\*\*[^*]+\*\*|^(- |\d+\. )", text, re.M), (prompt, text)


@pytest.mark.slow
def test_full_base_never_ends_the_turn(full_build: Manifest) -> None:
    model, tok = _load(full_build.model_dir("base"))
    for prompt in PROMPTS:
        _, new = _reply(model, tok, prompt, max_new_tokens=64)
        assert tok.eos_token_id not in new, prompt

"""Byte-level BPE tokenizer with ChatML special tokens and chat template."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
# Order fixes the ids (0..3), which keeps configs readable and stable across seeds.
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END, PAD]

# ChatML. The {% generation %} block marks what the assistant wrote (content + <|im_end|>), so
# `apply_chat_template(..., return_assistant_tokens_mask=True)` yields the SFT loss mask.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, max_length: int
) -> PreTrainedTokenizerFast:
    """Train BPE on `texts` and wrap it as a HF fast tokenizer (eos = <|im_end|>).

    Byte-level means any string round-trips, so questions with unseen words still work.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        extra_special_tokens=[ENDOFTEXT, IM_START],
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf

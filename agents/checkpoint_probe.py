"""The part of checkpoint validation that needs transformers, run in a child process.

`python -m agents.checkpoint_probe FOLDER IDS BYTES` reads the private copy of a checkpoint's settings
(never the agent's folder) within an address space of BYTES, loads its tokenizer and config, builds the model on PyTorch's meta
device (no memory for weights), and prints one JSON object: the architecture, every tensor's
shape, the parameter count, the chat template's presence and the end-of-turn token. A settings
file transformers cannot load prints `{"error": "..."}` and exits 2.

The parent (`agents.checkpoints`) has checked the sizes and the dimensions first and runs this
under a timeout and an address-space limit, so whatever transformers does with a hostile config
costs a bounded child, never the site.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path


def probe(folder: Path, end_of_turn_ids: list[int]) -> dict[str, object]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # transformers raises many kinds
        return {"error": f"the tokenizer does not load: {exc}"}
    if not getattr(tokenizer, "chat_template", None):
        return {"error": "the tokenizer has no chat template"}
    try:
        tokens = [tokenizer.convert_ids_to_tokens(i) for i in end_of_turn_ids]
    except Exception as exc:
        return {"error": f"generation_config.json's eos_token_id is not a token: {exc}"}
    tokens = [t for t in tokens if t] or [getattr(tokenizer, "eos_token", None)]  # type: ignore[list-item]  # transformers stub: None filtered on the next line
    tokens = [t for t in tokens if t]
    if not tokens:
        return {"error": "no end-of-turn token (set eos_token_id in generation_config.json)"}
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:
        return {"error": f"config.json does not describe a model transformers can build: {exc}"}
    return {
        "architecture": type(model).__name__,
        "shapes": {name: list(t.shape) for name, t in model.state_dict().items()},
        "parameters": sum(p.numel() for p in model.parameters()),
        "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
        "end_of_turn_token": str(tokens[0]),
    }


def main() -> int:
    folder, ids, memory = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    # First, before transformers is imported: the limit holds whatever it then does.
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    found = probe(folder, ids)
    print(json.dumps(found))
    return 2 if "error" in found else 0


if __name__ == "__main__":
    sys.exit(main())

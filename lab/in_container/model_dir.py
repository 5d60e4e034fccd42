"""Writes the lab's tiny model directory: config, a trained BPE tokenizer, a chat template.

No weights and no downloads: the fake scheduler never runs a model, but the real
TokenizerManager loads the config and the tokenizer from this directory exactly as it would
for a real model. The tokenizer is trained with `tokenizers` (in the images) on seeded
synthetic text, so the same seed gives the same tokenizer.json on every run.

    python3 model_dir.py --out DIR [--seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_text import text_of_size  # noqa: E402

VOCAB_SIZE = 8000
# Long enough for the 5 MB bodies (about 1-2 M tokens) with room to spare.
CONTEXT_LENGTH = 8 * 1024 * 1024
SPECIAL_TOKENS = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|image|>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<|image|>{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def train_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = text_of_size(seed, 1_000_000).splitlines()
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def write_model_dir(out: Path, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(seed)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": tokenizer.get_vocab_size(),
        "max_position_embeddings": CONTEXT_LENGTH,
        "rms_norm_eps": 1e-5,
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
        "torch_dtype": "float32",
        "tie_word_embeddings": True,
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "</s>",
        "model_max_length": CONTEXT_LENGTH,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    generation_config = {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "max_new_tokens": 4}
    for name, data in (
        ("config.json", config),
        ("tokenizer_config.json", tokenizer_config),
        ("generation_config.json", generation_config),
    ):
        (out / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="directory to write (created)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the training text (default: 1)")
    args = parser.parse_args(argv)
    write_model_dir(args.out, args.seed)
    print(f"model_dir: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

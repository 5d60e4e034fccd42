"""Writes the lab's tiny model directories: config, a trained BPE tokenizer, a chat template.

No weights and no downloads: the fake scheduler never runs a model, but the real
TokenizerManager loads the config, the tokenizer (and for the vision model the HF processor)
from these directories exactly as it would for a real model. The tokenizer is trained with
`tokenizers` (in the images) on seeded synthetic text, so the same seed gives the same
tokenizer.json on every run.

* text: LlamaForCausalLM, the text requests.
* vision: Gemma3ForConditionalGeneration (a SigLIP tower at 896 x 896, 256 tokens per image)
  with the Gemma3 processor's PIL backend: every image becomes a 3 x 896 x 896 float32
  feature (9.6 MB) whatever its size, which the TokenizerManager copies into /dev/shm when it
  dispatches the request. Serve it with --enable-multimodal --image-processor-backend pil
  (the images' torchvision is a stub).

    python3 model_dir.py --text DIR [--vision DIR] [--seed N]
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
VISION_TOKENS = {"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"}
VISION_IMAGE_SIZE = 896
VISION_TOKENS_PER_IMAGE = 256

# Tools and tool calls are rendered as JSON, so the tools' exact shape reaches the prompt: a
# server that retried with the tools flattened would send a different prompt.
_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}{{ '<|system|>\\n' + (tools | tojson) + '\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}IMAGE_PLACEHOLDER{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['tool_calls'] %}{{ message['tool_calls'] | tojson }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def chat_template(image_placeholder: str) -> str:
    """The Jinja chat template; image parts become `image_placeholder`."""
    return _CHAT_TEMPLATE.replace("IMAGE_PLACEHOLDER", image_placeholder)


def train_tokenizer(seed: int, special_tokens: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = text_of_size(seed, 1_000_000).splitlines()
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def _write_json(out: Path, files: dict[str, dict]) -> None:
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def write_model_dir(out: Path, seed: int) -> None:
    """The text model: LlamaForCausalLM."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(seed, SPECIAL_TOKENS)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    _write_json(out, {
        "config.json": {
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
        },
        "tokenizer_config.json": _tokenizer_config(chat_template("<|image|>")),
        "generation_config.json": {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "max_new_tokens": 4},
    })


def _tokenizer_config(template: str, extra: dict | None = None) -> dict:
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "</s>",
        "model_max_length": CONTEXT_LENGTH,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
    }
    if extra:
        config["extra_special_tokens"] = extra
    return config


def write_vision_model_dir(out: Path, seed: int) -> None:
    """The vision model: Gemma3ForConditionalGeneration with the Gemma3 processor (PIL backend)."""
    out.mkdir(parents=True, exist_ok=True)
    specials = SPECIAL_TOKENS + list(VISION_TOKENS.values())
    tokenizer = train_tokenizer(seed, specials)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {tok: tokenizer.token_to_id(tok) for tok in specials}
    _write_json(out, {
        "config.json": {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "boi_token_index": ids[VISION_TOKENS["boi_token"]],
            "eoi_token_index": ids[VISION_TOKENS["eoi_token"]],
            "image_token_index": ids[VISION_TOKENS["image_token"]],
            "mm_tokens_per_image": VISION_TOKENS_PER_IMAGE,
            "text_config": {
                "model_type": "gemma3_text",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 32,
                "vocab_size": tokenizer.get_vocab_size(),
                "max_position_embeddings": CONTEXT_LENGTH,
                "sliding_window": 512,
            },
            "vision_config": {
                "model_type": "siglip_vision_model",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "image_size": VISION_IMAGE_SIZE,
                "patch_size": 14,
            },
            "bos_token_id": ids["<s>"],
            "eos_token_id": ids["</s>"],
            "torch_dtype": "float32",
        },
        "tokenizer_config.json": _tokenizer_config(chat_template(VISION_TOKENS["boi_token"]), VISION_TOKENS),
        "preprocessor_config.json": {
            "image_processor_type": "Gemma3ImageProcessorPil",
            "processor_class": "Gemma3Processor",
            "size": {"height": VISION_IMAGE_SIZE, "width": VISION_IMAGE_SIZE},
            "do_resize": True,
            "resample": 2,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "do_convert_rgb": True,
        },
        "processor_config.json": {"processor_class": "Gemma3Processor", "image_seq_length": VISION_TOKENS_PER_IMAGE},
    })


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", type=Path, required=True, help="text model directory to write (created)")
    parser.add_argument("--vision", type=Path, help="vision model directory to write (created)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the training text (default: 1)")
    args = parser.parse_args(argv)
    write_model_dir(args.text, args.seed)
    print(f"model_dir: wrote {args.text}")
    if args.vision:
        write_vision_model_dir(args.vision, args.seed)
        print(f"model_dir: wrote {args.vision}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

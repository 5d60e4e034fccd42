"""Writes the lab's tiny model directories: config, a tokenizer, a chat template.

No weights and no downloads: the fake scheduler never runs a model, but the real
TokenizerManager loads the config, the tokenizer (and for the vision model the HF processor)
from these directories exactly as it would for a real model. Two tokenizers, both made here
from a seed (the same seed gives the same tokenizer.json on every run):

* `glm` (the default): the GLM-class fixture patches/v3/tests/glm_tokenizer.py, a byte-level
  BPE of 151,552 tokens (production GLM-5.3 size class; backend JSON 5.2 MiB) with GLM's added
  tokens and a GLM-style chat template (tools, tool calls, <|observation|>). health_stall
  stages the file beside this one; host tests import it from the repository.
* `small` (--tokenizer small, for comparison with the runs before it): a byte-level BPE of
  8,000 tokens trained with `tokenizers` on seeded synthetic text, and the lab's own template.

* text: LlamaForCausalLM, the text requests.
* vision: Gemma3ForConditionalGeneration (a SigLIP tower at 896 x 896, 256 tokens per image)
  with the Gemma3 processor's PIL backend: every image becomes a 3 x 896 x 896 float32
  feature (9.6 MB) whatever its size, which the TokenizerManager copies into /dev/shm when it
  dispatches the request. Serve it with --enable-multimodal --image-processor-backend pil
  (the images' torchvision is a stub). Its tokenizer is the text one plus Gemma3's three
  vision tokens (boi, image soft token, eoi) as extra special tokens, whose ids the config's
  boi/eoi/image token indices name; image parts render as the boi token, which the Gemma3
  processor expands.

Each directory also gets lab_tokenizer.json (name, vocabulary size, backend JSON bytes, ...),
which health_stall copies into results.json and the report.

    python3 model_dir.py --text DIR [--vision DIR] [--tokenizer glm|small] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_text import text_of_size  # noqa: E402

TOKENIZERS = ("glm", "small")
DEFAULT_TOKENIZER = "glm"
DEFAULT_SEEDS = {"glm": 0, "small": 1}  # glm: the fixture's default; small: every run before glm
MANIFEST = "lab_tokenizer.json"
GLM_SOURCE = "patches/v3/tests/glm_tokenizer.py"
VOCAB_SIZE = 8000  # the small tokenizer
# Long enough for the 5 MB bodies (about 1-2 M tokens) with room to spare.
CONTEXT_LENGTH = 8 * 1024 * 1024
SPECIAL_TOKENS = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|image|>"]
VISION_TOKENS = {"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"}
VISION_IMAGE_SIZE = 896
VISION_TOKENS_PER_IMAGE = 256
GLM_IMAGE_PART = "<|begin_of_image|><|image|><|end_of_image|>"  # how GLM's template renders an image

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
    """The small tokenizer's Jinja chat template; image parts become `image_placeholder`."""
    return _CHAT_TEMPLATE.replace("IMAGE_PLACEHOLDER", image_placeholder)


def glm_module():
    """glm_tokenizer: beside this file (staged by health_stall), else from the repository."""
    try:
        import glm_tokenizer
    except ImportError:
        repo = Path(__file__).resolve().parents[3] / Path(GLM_SOURCE).parent
        if not (repo / "glm_tokenizer.py").is_file():
            raise ImportError(f"glm_tokenizer.py is neither beside {__file__} nor in {repo}") from None
        sys.path.insert(0, str(repo))
        import glm_tokenizer
    return glm_tokenizer


def glm_vision_template(template: str, image_placeholder: str) -> str:
    """GLM's template with its image part replaced by the vision model's placeholder."""
    if template.count(GLM_IMAGE_PART) != 1:
        raise ValueError(f"the GLM template renders images as {GLM_IMAGE_PART!r} {template.count(GLM_IMAGE_PART)} times, expected once")
    return template.replace(GLM_IMAGE_PART, image_placeholder)


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


def _manifest(out: Path, backend, name: str, seed: int, extra_tokens: list[str]) -> dict:
    """lab_tokenizer.json: what results.json and the report say about the tokenizer."""
    manifest = {
        "name": name,
        "source": GLM_SOURCE if name == "glm" else "tools/sglang_server/in_container/model_dir.py train_tokenizer",
        "seed": seed,
        "vocab_size": backend.get_vocab_size(with_added_tokens=True),
        "backend_json_bytes": len(backend.to_str().encode("utf-8")),
        "tokenizer_json_bytes": (out / "tokenizer.json").stat().st_size,
        "chat_template": "glm" if name == "glm" else "lab",
        "extra_tokens": extra_tokens,
    }
    _write_json(out, {MANIFEST: manifest})
    return manifest


def _glm_text_tokenizer(out: Path, seed: int):
    """tokenizer.json and tokenizer_config.json of the GLM fixture, as the fixture writes them."""
    glm = glm_module()
    if glm.MODEL_MAX_LENGTH != CONTEXT_LENGTH:
        raise ValueError(f"glm_tokenizer.MODEL_MAX_LENGTH {glm.MODEL_MAX_LENGTH} != the lab's context {CONTEXT_LENGTH}")
    glm.write_tokenizer_dir(out, seed)
    return glm.build_backend(seed)


def _glm_vision_tokenizer(out: Path, seed: int):
    """The GLM fixture plus Gemma3's vision tokens (special, ids after GLM's), and GLM's template
    with image parts rendered as the boi token."""
    from tokenizers import AddedToken

    glm = glm_module()
    backend = _glm_text_tokenizer(out, seed)
    first = backend.get_vocab_size(with_added_tokens=True)
    for content in VISION_TOKENS.values():  # one call each: ids in VISION_TOKENS order
        backend.add_special_tokens([AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                                               normalized=False, special=True)])
    backend.save(str(out / "tokenizer.json"))
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    for offset, content in enumerate(VISION_TOKENS.values()):
        if backend.token_to_id(content) != first + offset:
            raise ValueError(f"{content}: id {backend.token_to_id(content)}, expected {first + offset}")
        config["added_tokens_decoder"][str(first + offset)] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}
    config["extra_special_tokens"] = dict(VISION_TOKENS)
    config["chat_template"] = glm_vision_template(glm.CHAT_TEMPLATE, VISION_TOKENS["boi_token"])
    _write_json(out, {"tokenizer_config.json": config})
    return backend


def write_model_dir(out: Path, seed: int | None = None, tokenizer_name: str = DEFAULT_TOKENIZER) -> dict:
    """The text model: LlamaForCausalLM. Returns its lab_tokenizer.json."""
    seed = DEFAULT_SEEDS[tokenizer_name] if seed is None else seed
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_name == "glm":
        tokenizer = _glm_text_tokenizer(out, seed)
        # GLM has no BOS in the vocabulary's sense: its prompts start with [gMASK]<sop>.
        bos, eos = tokenizer.token_to_id("[gMASK]"), tokenizer.token_to_id("<|endoftext|>")
        files = {}
    else:
        tokenizer = train_tokenizer(seed, SPECIAL_TOKENS)
        tokenizer.save(str(out / "tokenizer.json"))
        bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
        files = {"tokenizer_config.json": _tokenizer_config(chat_template("<|image|>"))}
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
            "bos_token_id": bos,
            "eos_token_id": eos,
            "torch_dtype": "float32",
            "tie_word_embeddings": True,
        },
        **files,
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": eos, "max_new_tokens": 4},
    })
    return _manifest(out, tokenizer, tokenizer_name, seed, [])


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


def write_vision_model_dir(out: Path, seed: int | None = None, tokenizer_name: str = DEFAULT_TOKENIZER) -> dict:
    """The vision model: Gemma3ForConditionalGeneration with the Gemma3 processor (PIL backend).
    Returns its lab_tokenizer.json."""
    seed = DEFAULT_SEEDS[tokenizer_name] if seed is None else seed
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_name == "glm":
        tokenizer = _glm_vision_tokenizer(out, seed)
        bos, eos = tokenizer.token_to_id("[gMASK]"), tokenizer.token_to_id("<|endoftext|>")
        files = {}
    else:
        specials = SPECIAL_TOKENS + list(VISION_TOKENS.values())
        tokenizer = train_tokenizer(seed, specials)
        tokenizer.save(str(out / "tokenizer.json"))
        bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
        files = {"tokenizer_config.json": _tokenizer_config(chat_template(VISION_TOKENS["boi_token"]), VISION_TOKENS)}
    ids = {tok: tokenizer.token_to_id(tok) for tok in VISION_TOKENS.values()}
    if None in ids.values():
        raise ValueError(f"vision tokens missing from the tokenizer: {ids}")
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
            "bos_token_id": bos,
            "eos_token_id": eos,
            "torch_dtype": "float32",
        },
        **files,
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
    return _manifest(out, tokenizer, tokenizer_name, seed, list(VISION_TOKENS.values()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", type=Path, required=True, help="text model directory to write (created)")
    parser.add_argument("--vision", type=Path, help="vision model directory to write (created)")
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default=DEFAULT_TOKENIZER,
                        help="glm: the GLM-class fixture (default); small: the 8,000-token BPE trained here")
    parser.add_argument("--seed", type=int, default=None,
                        help="tokenizer seed (default: 0 for glm, 1 for small, the seed of the runs before glm)")
    args = parser.parse_args(argv)
    written = [(args.text, write_model_dir(args.text, args.seed, args.tokenizer))]
    if args.vision:
        written.append((args.vision, write_vision_model_dir(args.vision, args.seed, args.tokenizer)))
    for path, m in written:
        print(f"model_dir: wrote {path}: tokenizer {m['name']} (seed {m['seed']}), vocabulary {m['vocab_size']:,},"
              f" backend JSON {m['backend_json_bytes']:,} bytes, tokenizer.json {m['tokenizer_json_bytes']:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

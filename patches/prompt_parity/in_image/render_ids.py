"""Runs INSIDE a base image: the prompt ids of every corpus entry through that SGLang's own chat path.

    python3 render_ids.py --src DIR --out ids.json

DIR holds corpus.py and glm_tokenizer.py (mounted from the repository). Only the image's
packages are used (sglang, transformers, tokenizers, pydantic); no network, no model files.

The serving object is built the way the server builds it, minus the processes: a bare
TokenizerManager (object.__new__, as patches/v3/tests/conftest.py does) holding the GLM-class
fixture tokenizer, the version's own TemplateManager.initialize_templates (so content-format and
template detection are that version's), and the version's real OpenAIServingChat.__init__ (so its
probes, e.g. 0.5.23's prompt-text round trip, run). Each entry then goes through
`_process_messages(request, is_multimodal)`, the step of `_convert_to_internal_request` that
turns messages into prompt ids; Anthropic entries first through the version's
`AnthropicServing._convert_to_chat_completion_request`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# A GLM-5.3-like checkpoint. The path matches no built-in conversation template, so the
# tokenizer's Jinja template is used, as for the production checkpoint.
MODEL_PATH = "/models/GLM-5.3"
HF_CONFIG = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"}


def _tokenizer_manager(tokenizer: Any) -> Any:
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = object.__new__(TokenizerManager)
    tm.tokenizer = tokenizer
    tm.processor = None
    tm.model_path = MODEL_PATH
    tm.served_model_name = "glm-5.3"
    # No tool-call or reasoning parser: those change constraints and stop strings, not the ids.
    tm.config_value = lambda key: None
    tm.server_args = SimpleNamespace(
        default_chat_template_kwargs=None,
        revision=None,
        tokenizer_metrics_allowed_custom_labels=None,
        tool_call_parser=None,
        reasoning_parser=None,
    )
    tm.model_config = SimpleNamespace(
        is_multimodal=False,
        model_path=MODEL_PATH,
        context_len=8 * 1024 * 1024,
        get_default_sampling_params=lambda: {},
        hf_config=SimpleNamespace(**HF_CONFIG, to_dict=lambda: dict(HF_CONFIG)),
    )
    return tm


def _publish_server_args() -> None:
    """0.5.23 reads serving settings from a process-wide context the launcher publishes
    (runtime_context.get_serving()); publish the defaults a plain `--model-path` launch gets.
    0.5.19 has no such context and reads tokenizer_manager.server_args instead."""
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:
        return
    from sglang.srt.server_args import ServerArgs

    get_context().set_server_args(ServerArgs(model_path=MODEL_PATH))


def _serving(tokenizer: Any) -> tuple[Any, Any, dict[str, Any]]:
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.parser.template_manager import TemplateManager

    _publish_server_args()
    tm = _tokenizer_manager(tokenizer)
    templates = TemplateManager()
    templates.initialize_templates(tm, model_path=MODEL_PATH)
    chat = OpenAIServingChat(tm, templates)
    python_template = getattr(templates, "python_chat_template", None)
    setup = {
        "chat_template_name": templates.chat_template_name,
        "content_format": templates.jinja_template_content_format,
        "python_chat_template": getattr(python_template, "name", None),
        "chat_encoding_spec": chat.chat_encoding_spec,
        "prompt_text_round_trip_is_lossy": getattr(chat, "_prompt_text_round_trip_is_lossy", None),
    }
    return tm, chat, setup


def _render(chat: Any, tokenizer: Any, entry: Any) -> dict[str, Any]:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    if entry.kind == "chat":
        request = ChatCompletionRequest(**json.loads(json.dumps(entry.body)))
    elif entry.kind == "anthropic":
        from sglang.srt.entrypoints.anthropic.protocol import AnthropicMessagesRequest
        from sglang.srt.entrypoints.anthropic.serving import AnthropicServing

        anthropic = AnthropicServing(chat)
        request = anthropic._convert_to_chat_completion_request(AnthropicMessagesRequest(**entry.body))
    else:
        raise ValueError(f"{entry.name}: unknown kind {entry.kind!r}")
    result = chat._process_messages(request, entry.multimodal)
    ids = result.prompt_ids
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        raise TypeError(f"{entry.name}: prompt_ids is {type(ids).__name__}, not a list of ints")
    # Each id's own text: the host shows it around a difference (it has no tokenizer).
    pieces = [tokenizer.decode([i]) for i in ids]
    return {"ids": ids, "pieces": pieces, "images": len(result.image_data or [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="directory with corpus.py and glm_tokenizer.py")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(args.src))
    import corpus
    import glm_tokenizer

    import sglang

    tokenizer = glm_tokenizer.build_tokenizer(0)
    _, chat, setup = _serving(tokenizer)
    entries = corpus.entries(glm_tokenizer.english_like_text(0, n_words=400, text_seed=1))
    out: dict[str, Any] = {}
    errors = {}
    for entry in entries:
        try:
            out[entry.name] = _render(chat, tokenizer, entry)
        except Exception as err:  # recorded per entry: one failing entry must not hide the rest
            errors[entry.name] = f"{type(err).__name__}: {err}"
    versions = {name: importlib.metadata.version(name) for name in ("transformers", "tokenizers", "jinja2", "pydantic")}
    report = {"sglang": sglang.__version__, "packages": versions, "setup": setup,
              "entries": out, "errors": errors}
    args.out.write_text(json.dumps(report, sort_keys=True) + "\n", encoding="utf-8")
    print(f"render_ids: sglang {sglang.__version__}: {len(out)} entries rendered, {len(errors)} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lab's model directories with the GLM-class tokenizer (tools/sglang_server/in_container/model_dir.py).

On the host (no `tokenizers` / `transformers` in the lab's deps) the directory layout is checked
with a stand-in backend under the real glm_tokenizer.py (its config, template and added tokens);
the tests that need the real tokenizer skip with the reason. //lab:model_dir_test runs the file
in the stock image, where the real tokenizer is built and AutoTokenizer loads both directories.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(LAB.parent / "tools" / "sglang_server" / "in_container"))

import model_dir  # noqa: E402

glm = model_dir.glm_module()

HAVE_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None
HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
NEEDS_TOKENIZERS = pytest.mark.skipif(
    not HAVE_TOKENIZERS, reason="`tokenizers` is not importable here (not in the lab's host deps,"
                                " third_party/python/tools.lock); //lab:model_dir_test runs this in the stock image")
NEEDS_TRANSFORMERS = pytest.mark.skipif(
    not HAVE_TRANSFORMERS, reason="`transformers` is not importable here (not in the lab's host deps);"
                                  " //lab:model_dir_test runs this in the stock image")
BOI, IMAGE, EOI = (model_dir.VISION_TOKENS[k] for k in ("boi_token", "image_token", "eoi_token"))


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# --- a stand-in for tokenizers.Tokenizer: the layout without the 151,552-token build -------------

class _FakeAddedToken:
    def __init__(self, content: str, **flags) -> None:
        self.content = content
        self.flags = flags


class _FakeBackend:
    """The calls model_dir and glm_tokenizer.write_tokenizer_dir make on a backend."""

    def __init__(self) -> None:
        self.vocab = {content: glm.BPE_SIZE + i for i, (content, *_) in enumerate(glm.ADDED_TOKENS)}

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return glm.BPE_SIZE + len(self.vocab)

    def token_to_id(self, token: str):
        return self.vocab.get(token)

    def add_special_tokens(self, tokens: list) -> int:
        for token in tokens:
            self.vocab.setdefault(token.content, self.get_vocab_size())
        return len(tokens)

    def to_str(self) -> str:
        return json.dumps({"added_tokens": sorted(self.vocab, key=self.vocab.get)})

    def save(self, path: str) -> None:
        Path(path).write_text(self.to_str())


@pytest.fixture
def fake_backend(monkeypatch):
    monkeypatch.setattr(glm, "build_backend", lambda seed=0: _FakeBackend())
    monkeypatch.setitem(sys.modules, "tokenizers", types.SimpleNamespace(AddedToken=_FakeAddedToken))


def test_glm_text_dir_layout(tmp_path: Path, fake_backend):
    manifest = model_dir.write_model_dir(tmp_path / "text")
    config = _read(tmp_path / "text" / "config.json")
    tok_config = _read(tmp_path / "text" / "tokenizer_config.json")
    assert config["vocab_size"] == glm.VOCAB_SIZE == 151_552
    assert config["eos_token_id"] == glm.BPE_SIZE  # <|endoftext|>, the first added token
    assert config["bos_token_id"] == glm.BPE_SIZE + 2  # [gMASK]
    assert tok_config["chat_template"] == glm.CHAT_TEMPLATE  # GLM's own template: tools rendered
    assert tok_config["model_max_length"] == model_dir.CONTEXT_LENGTH
    assert manifest == _read(tmp_path / "text" / model_dir.MANIFEST)
    assert manifest["name"] == "glm" and manifest["seed"] == 0 and manifest["extra_tokens"] == []
    assert manifest["vocab_size"] == 151_552
    assert manifest["backend_json_bytes"] == len(_FakeBackend().to_str())
    assert manifest["source"] == "patches/v3/tests/glm_tokenizer.py"


def test_glm_vision_dir_adds_gemma3_tokens_with_matching_ids(tmp_path: Path, fake_backend):
    manifest = model_dir.write_vision_model_dir(tmp_path / "vision")
    config = _read(tmp_path / "vision" / "config.json")
    tok_config = _read(tmp_path / "vision" / "tokenizer_config.json")
    first = glm.VOCAB_SIZE
    assert (config["boi_token_index"], config["image_token_index"], config["eoi_token_index"]) == (
        first, first + 1, first + 2)
    assert config["text_config"]["vocab_size"] == first + 3 == manifest["vocab_size"]
    decoder = tok_config["added_tokens_decoder"]
    assert [decoder[str(first + i)]["content"] for i in range(3)] == [BOI, IMAGE, EOI]
    assert all(decoder[str(first + i)]["special"] for i in range(3))
    assert decoder[str(glm.BPE_SIZE)]["content"] == "<|endoftext|>"  # GLM's own added tokens kept
    assert tok_config["extra_special_tokens"] == model_dir.VISION_TOKENS
    template = tok_config["chat_template"]
    assert model_dir.GLM_IMAGE_PART not in template and template.count(BOI) == 1
    assert template == glm.CHAT_TEMPLATE.replace(model_dir.GLM_IMAGE_PART, BOI)
    assert manifest["extra_tokens"] == [BOI, IMAGE, EOI]
    assert _read(tmp_path / "vision" / "processor_config.json")["image_seq_length"] == 256


def test_a_template_without_one_image_part_is_refused():
    with pytest.raises(ValueError, match="0 times"):
        model_dir.glm_vision_template("{{ messages }}", BOI)


def test_the_glm_fixture_is_found_in_the_repository():
    assert Path(glm.__file__).resolve() == (LAB.parent / "patches" / "v3" / "tests" / "glm_tokenizer.py").resolve()


# --- health_stall's side: staging the fixture, reusing model directories ------------------------

def test_health_stall_stages_the_fixture_and_remakes_other_tokenizers_dirs(tmp_path: Path):
    health_stall = pytest.importorskip("lab.health_stall", reason="needs the host lab (//lab:unit_test)")
    staged = health_stall._stage_lab_files(tmp_path / "lab")
    assert (staged / "glm_tokenizer.py").read_bytes() == Path(glm.__file__).read_bytes()
    assert (staged / "model_dir.py").is_file() and (staged / "metrics_text.py").is_file()

    models = tmp_path / "models"
    assert not health_stall.models_match(models, "glm")
    for model in ("text", "vision"):
        (models / model).mkdir(parents=True)
        (models / model / model_dir.MANIFEST).write_text(json.dumps({"name": "glm"}))
    assert not health_stall.models_match(models, "glm")  # no processor_config.json yet
    (models / "vision" / "processor_config.json").write_text("{}")
    assert health_stall.models_match(models, "glm")
    assert not health_stall.models_match(models, "small")
    (models / "text" / model_dir.MANIFEST).unlink()  # a run before the manifests: remade
    assert not health_stall.models_match(models, "glm")


# --- the real tokenizer (the images) -------------------------------------------------------------

@pytest.fixture(scope="module")
def glm_dirs(tmp_path_factory):
    if not HAVE_TOKENIZERS:
        pytest.skip(NEEDS_TOKENIZERS.kwargs["reason"])
    root = tmp_path_factory.mktemp("models")
    text = model_dir.write_model_dir(root / "text")
    vision = model_dir.write_vision_model_dir(root / "vision")
    return root, text, vision


@NEEDS_TOKENIZERS
def test_real_glm_dirs_sizes_and_ids(glm_dirs):
    from tokenizers import Tokenizer

    root, text, vision = glm_dirs
    assert text["vocab_size"] == 151_552 and vision["vocab_size"] == 151_555
    assert text["backend_json_bytes"] > 5 * 2**20  # the size class the fixture exists for
    backend = Tokenizer.from_file(str(root / "vision" / "tokenizer.json"))
    config = _read(root / "vision" / "config.json")
    assert backend.token_to_id(BOI) == config["boi_token_index"]
    assert backend.token_to_id(IMAGE) == config["image_token_index"]
    assert backend.token_to_id(EOI) == config["eoi_token_index"]
    assert backend.encode(f"a{BOI}b", add_special_tokens=False).ids.count(config["boi_token_index"]) == 1
    text_backend = Tokenizer.from_file(str(root / "text" / "tokenizer.json"))
    assert text_backend.to_str() == glm.build_backend(0).to_str()  # exactly the fixture


TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "find things",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "find x"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "x is 1"},
    {"role": "user", "content": "and y?"},
]


@NEEDS_TRANSFORMERS
def test_autotokenizer_loads_the_text_dir_and_renders_tools(glm_dirs):
    from transformers import AutoTokenizer

    root, _, _ = glm_dirs
    tok = AutoTokenizer.from_pretrained(str(root / "text"))
    assert len(tok) == 151_552
    prompt = tok.apply_chat_template(CHAT, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("[gMASK]<sop><|system|>\n# Available tools")
    assert json.dumps(TOOLS[0], ensure_ascii=False) in prompt  # the OpenAI wrapper reaches the prompt
    assert "<tool_call>lookup<arg_key>q</arg_key><arg_value>x</arg_value></tool_call>" in prompt
    assert "<|observation|>" in prompt and prompt.endswith("<|assistant|>")
    # serving_chat's retry with the tools flattened gives another prompt: the lab's changed-prompts check
    flat = tok.apply_chat_template(CHAT, tools=[t["function"] for t in TOOLS], tokenize=False,
                                   add_generation_prompt=True)
    assert tok.encode(flat) != tok.encode(prompt)


@NEEDS_TRANSFORMERS
def test_autotokenizer_loads_the_vision_dir_with_gemma3_tokens(glm_dirs):
    from transformers import AutoTokenizer

    root, _, _ = glm_dirs
    tok = AutoTokenizer.from_pretrained(str(root / "vision"))
    config = _read(root / "vision" / "config.json")
    assert len(tok) == 151_555
    assert tok.convert_tokens_to_ids(BOI) == config["boi_token_index"]
    assert tok.convert_tokens_to_ids(IMAGE) == config["image_token_index"]
    assert tok.boi_token == BOI and tok.image_token == IMAGE and tok.eoi_token == EOI  # the Gemma3 processor reads these
    chat = [{"role": "user", "content": [{"type": "text", "text": "what is this"}, {"type": "image"}]}]
    prompt = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert f"what is this{BOI}<|assistant|>" in prompt
    assert tok.encode(prompt).count(config["boi_token_index"]) == 1


@NEEDS_TOKENIZERS
def test_the_small_tokenizer_stays_available(tmp_path: Path):
    manifest = model_dir.write_model_dir(tmp_path / "text", tokenizer_name="small")
    assert manifest["name"] == "small" and manifest["seed"] == 1
    assert manifest["vocab_size"] <= model_dir.VOCAB_SIZE
    assert "<|system|>" in _read(tmp_path / "text" / "tokenizer_config.json")["chat_template"]

"""Tests of the GLM-class tokenizer fixture (`glm_tokenizer.py`): size, determinism, added-token
behaviour, round trips, the saved directory and the chat template. No sglang import."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
try:
    import glm_tokenizer
except ImportError:  # importmode=importlib does not put the test directory on sys.path
    sys.path.insert(0, str(HERE))
    import glm_tokenizer

MiB = 1 << 20


@pytest.fixture(scope="module")
def tokenizer():
    return glm_tokenizer.build_tokenizer(0)


@pytest.fixture(scope="module")
def backend():
    return glm_tokenizer.build_backend(0)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}

CHAT = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture, and the weather in Paris?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    },
    {
        "role": "assistant",
        "reasoning_content": "The user wants the weather.",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
            {"id": "c2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]},
    {"role": "assistant", "content": "Sunny in Paris, rain in Lyon."},
    {"role": "user", "content": "Thanks"},
]


def test_vocab_size_and_backend_json_size(tokenizer, backend):
    assert len(tokenizer) >= glm_tokenizer.VOCAB_SIZE
    assert backend.get_vocab_size(with_added_tokens=True) == glm_tokenizer.VOCAB_SIZE
    size = len(backend.to_str().encode("utf-8"))
    print(f"backend to_str(): {size:,} bytes ({size / MiB:.2f} MiB)")
    # The point of the fixture: well past the 1 MiB the toy tokenizers stayed under.
    assert size > 4 * MiB


def test_merges_are_valid_and_build_every_token():
    data = json.loads(glm_tokenizer._backend_json(0))
    model = data["model"]
    assert model["type"] == "BPE"
    vocab = model["vocab"]
    assert sorted(vocab.values()) == list(range(glm_tokenizer.BPE_SIZE))
    known = {tok for tok, i in vocab.items() if i < 256}
    assert len(known) == 256
    for left, right in model["merges"]:
        # Both parts exist before the merge (the byte alphabet or an earlier merge's result).
        assert left in known and right in known, (left, right)
        assert left + right in vocab
        known.add(left + right)
    assert known == set(vocab)
    assert [t["id"] for t in data["added_tokens"]] == list(
        range(glm_tokenizer.BPE_SIZE, glm_tokenizer.VOCAB_SIZE)
    )


def test_same_seed_same_json_across_processes_and_hash_seeds():
    code = (
        "import hashlib, sys; sys.path.insert(0, sys.argv[1]); import glm_tokenizer as g; "
        "print(hashlib.sha256(g._backend_json(0).encode()).hexdigest())"
    )
    hashes = []
    # Sequential on purpose: the machine has two shared cores.
    for hash_seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        hashes.append(
            subprocess.run(
                [sys.executable, "-c", code, str(HERE)],
                env=env, check=True, capture_output=True, text=True, timeout=300,
            ).stdout.strip()
        )
    assert hashes[0] == hashes[1] == _sha(glm_tokenizer._backend_json(0))


def test_added_tokens_are_single_ids_in_order(tokenizer, backend):
    for offset, (content, special, *_flags) in enumerate(glm_tokenizer.ADDED_TOKENS):
        token_id = glm_tokenizer.BPE_SIZE + offset
        assert backend.token_to_id(content) == token_id
        assert backend.encode(content).ids == [token_id]
        assert tokenizer.encode(content, add_special_tokens=False) == [token_id]
        # Not split inside text, whatever is around it.
        ids = backend.encode(f"xy{content}zw").ids
        assert ids.count(token_id) == 1
        assert backend.decode(ids, skip_special_tokens=False) == f"xy{content}zw"
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == glm_tokenizer.BPE_SIZE
    assert tokenizer.unk_token is None


def test_lstrip_and_rstrip_tokens_eat_the_adjacent_space(backend):
    def tokens(text):
        # Encoding.tokens shows the matched text (" <|user|>"); the ids are what counts.
        return [backend.id_to_token(i) for i in backend.encode(text).ids]

    # <|user|> has lstrip=True: the space before it goes into the special token.
    assert tokens("a <|user|> b") == ["a", "<|user|>", "Ġb"]
    # <|observation|> has rstrip=True: the space after it goes.
    assert tokens("a <|observation|> b") == ["a", "Ġ", "<|observation|>", "b"]
    assert tokens("<|observation|>\n<tool_response>") == ["<|observation|>", "<tool_response>"]
    # <|assistant|> has neither: both spaces stay.
    assert tokens("a <|assistant|> b") == ["a", "Ġ", "<|assistant|>", "Ġb"]


def test_non_special_added_tokens_survive_skip_special_tokens(tokenizer):
    ids = tokenizer.encode("<|user|>hi<think>plan</think>done /nothink", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hi<think>plan</think>done /nothink"
    assert tokenizer.decode(ids) == "<|user|>hi<think>plan</think>done /nothink"


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world! The quick brown fox jumps over 1234567 lazy dogs.\n\n"
        "  def f(x):\n\treturn x**2",
        "Café naïve façade: Ångström, über, señor, Straße, œuvre.",
        "北京是中国的首都。東京は日本の首都です。"
        "서울은 한국의 수도입니다.",
        "Emoji 😀🚀 👩‍💻 and flags 🇫🇷, ZWJ and variation selectors ❤️.",
        "Mixed: naïve 北京 😀 'quoted' \"double\" \r\n tabs\t\tand   spaces   ",
        "",
    ],
)
def test_round_trip(tokenizer, backend, text):
    ids = backend.encode(text).ids
    assert backend.decode(ids) == text
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_english_like_compression(backend):
    text = glm_tokenizer.english_like_text(0, text_seed=1)
    ratio = len(text) / len(backend.encode(text).ids)
    print(f"english-like text: {len(text):,} chars, {ratio:.2f} chars/token")
    assert 3.0 <= ratio <= 5.0
    # Frequent words are single tokens, as in a trained vocabulary.
    for word in glm_tokenizer.lexicon(0)[:500]:
        assert len(backend.encode(" " + word).ids) == 1, word


def test_saved_dir_loads_the_same_tokenizer(tmp_path, tokenizer):
    from transformers import AutoTokenizer

    glm_tokenizer.write_tokenizer_dir(tmp_path)
    assert (tmp_path / "tokenizer.json").stat().st_size > 4 * MiB
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["model_max_length"] == 8 * MiB
    assert config["clean_up_tokenization_spaces"] is False

    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(loaded) == len(tokenizer)
    assert loaded.backend_tokenizer.to_str() == glm_tokenizer._backend_json(0)
    assert loaded.chat_template == tokenizer.chat_template == glm_tokenizer.CHAT_TEMPLATE
    assert (loaded.eos_token, loaded.pad_token) == ("<|endoftext|>", "<|endoftext|>")
    assert loaded.unk_token is None
    assert loaded.model_max_length == tokenizer.model_max_length == 8 * MiB
    for token_id, added in loaded.added_tokens_decoder.items():
        offset = token_id - glm_tokenizer.BPE_SIZE
        content, special, normalized, lstrip, rstrip = glm_tokenizer.ADDED_TOKENS[offset]
        assert (added.content, added.special, added.normalized, added.lstrip, added.rstrip) == (
            content, special, normalized, lstrip, rstrip
        )

    probe = "[gMASK]<sop><|user|>\nCafé 北京 😀 a <|user|> b <|observation|> c <think>x</think> "
    probe *= 20
    assert loaded.encode(probe) == tokenizer.encode(probe)
    assert loaded(probe)["input_ids"] == tokenizer(probe)["input_ids"]
    tools = [{"type": "function", "function": WEATHER}]
    kwargs = dict(tools=tools, tokenize=False, add_generation_prompt=True)
    rendered = loaded.apply_chat_template(CHAT, **kwargs)
    assert rendered == tokenizer.apply_chat_template(CHAT, **kwargs)


def test_chat_template_renders_tools_calls_results_and_images(tokenizer):
    tools = [{"type": "function", "function": WEATHER}]
    prompt = tokenizer.apply_chat_template(
        CHAT, tools=tools, tokenize=False, add_generation_prompt=True
    )
    print(prompt)
    assert prompt.startswith("[gMASK]<sop><|system|>\n")
    assert prompt.endswith("<|user|>\nThanks<|assistant|>")
    assert json.dumps(tools[0]) in prompt  # the tool, exactly as sent
    for piece in (
        "<|system|>\nBe brief.",
        "<|user|>\nWhat is in this picture, and the weather in Paris?"
        "<|begin_of_image|><|image|><|end_of_image|>",
        "<|assistant|>\n<think>The user wants the weather.</think>\n",
        # Dict arguments as arg_key/arg_value pairs, non-strings as JSON.
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
        # String arguments verbatim.
        '<tool_call>get_weather\n{"city": "Lyon"}</tool_call>',
        # Two tool results under one <|observation|>.
        "<|observation|>\n<tool_response>sunny</tool_response>\n<tool_response>rain</tool_response>"
        "<|assistant|>\nSunny in Paris, rain in Lyon.",
    ):
        assert piece in prompt, piece
    assert prompt.count("<|observation|>") == 1

    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert ids[:2] == tokenizer.convert_tokens_to_ids(["[gMASK]", "<sop>"])
    for token in ("<|observation|>", "<tool_call>", "<|image|>", "<think>"):
        assert tokenizer.convert_tokens_to_ids(token) in ids

    no_tools = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=False
    )
    assert no_tools == "[gMASK]<sop><|user|>\nhi"


def test_wrapped_and_flattened_tools_render_differently(tokenizer):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    wrapped = tokenizer.apply_chat_template(
        messages, tools=[{"type": "function", "function": WEATHER}], tokenize=False,
        add_generation_prompt=True,
    )
    flattened = tokenizer.apply_chat_template(
        messages, tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    # A server that re-rendered with flattened tools would send a different prompt.
    assert wrapped != flattened
    assert '{"type": "function", "function": {"name": "get_weather"' in wrapped
    assert '\n{"name": "get_weather"' in flattened and '"function"' not in flattened
    assert tokenizer.encode(wrapped) != tokenizer.encode(flattened)


def test_pickles_for_child_processes(tokenizer):
    # What a process pool does with the tokenizer: the multi-MB JSON goes through pickle.
    blob = pickle.dumps(tokenizer)
    assert len(blob) > 4 * MiB
    clone = pickle.loads(blob)
    text = "Café 北京 😀 a <|user|> b " * 50
    assert clone.encode(text) == tokenizer.encode(text)
    assert clone.chat_template == tokenizer.chat_template


def test_cli_writes_the_directory(tmp_path, capsys):
    glm_tokenizer.main(["--out", str(tmp_path / "tok"), "--seed", "0"])
    out = capsys.readouterr().out
    assert "tokenizer.json" in out and "151,552" in out
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    assert (tmp_path / "tok" / "tokenizer_config.json").is_file()

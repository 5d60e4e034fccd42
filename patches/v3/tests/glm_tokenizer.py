"""A GLM-class tokenizer fixture built deterministically from a seed: no download, no blob.

The toy tokenizers of the other tests (500 and 8,000 tokens) serialize to well under 1 MiB,
which hid a bug that only shows when the backend JSON (`Tokenizer.to_str()`) is several MB, as
it is for production GLM-5.3 (~151K vocabulary, ~7 MB). This module builds a tokenizer of that
class: a byte-level BPE with VOCAB_SIZE = 151,552 tokens (151,528 BPE tokens + 24 GLM-style
added tokens), a GPT-4-like split regex, a ByteLevel decoder and post-processor, and a GLM-style
chat template written for this fixture.

The BPE is built directly, not trained: the 256 byte-level characters (sorted, ids 0..255),
then, for a seeded stream of pseudo-words (English-like words from syllables, the common ones
first, capitalized and leading-space variants, numbers, whitespace and punctuation runs, code
identifiers, accented Latin, Cyrillic, CJK, emoji), the merges that turn each word into one
token: the word is first segmented with the merges so far (a Python replica of BPE's
lowest-rank-first rule), then its pieces are joined left to right. Because every new merge ranks
after all existing ones, each word encodes to a single token once added, so frequent words are
single tokens and rare ones split into pieces, as with a trained vocabulary.

Measured on the shared 2-core dev machine (seed 0; tokenizers 0.22.2, transformers 5.12.1):
  - first build in a process: 3.0-3.7 s CPU (~2.4 s generating the merges in Python, the rest
    building the BPE and `to_str` in Rust); 3.8 s wall when the cores are free, 5.5-7.5 s
    when they are contended. Later calls for the same seed reuse the memoized JSON:
    `build_backend` ~0.85 s CPU (`Tokenizer.from_str`), `build_tokenizer` ~1.5 s CPU
    (transformers deep-copies the backend);
  - `to_str()`: 5,437,501 bytes (5.2 MiB; production GLM-5.3 is ~7 MB); `tokenizer.json`
    written by `save` (pretty-printed): 11,492,393 bytes (11.0 MiB);
  - English-like text (`english_like_text(0, text_seed=1..3)`): 4.03-4.06 chars/token.
Same seed -> byte-identical `to_str()` in every process: only `random.Random` seeded with ints
or strings (string seeds go through SHA-512, not `hash()`), lists and insertion-ordered dicts;
nothing iterates a set, nothing depends on PYTHONHASHSEED. `tokenizers` writes the vocabulary
by id and the merges by rank, so the Rust side adds no ordering of its own.

Added tokens (ids 151528..151551, in ADDED_TOKENS order) and their flags:
  - all are `special=True, normalized=False, lstrip=False, rstrip=False`, except:
  - `<|user|>`: `lstrip=True`: whitespace before it is absorbed into the token (as some real
    tokenizers do for `<mask>`), so `"a <|user|> b"` encodes as `a`, `<|user|>`, ` b`;
  - `<|observation|>`: `rstrip=True`: whitespace after it is absorbed (the template's newline
    after it disappears from the ids);
  - `<think>`, `</think>`: `special=False, normalized=True`: plain (non-special) added tokens,
    as GLM treats its reasoning tags, so `decode(skip_special_tokens=True)` keeps them; there
    is no normalizer, so `normalized=True` changes only the matching pass and the JSON flag;
  - `/nothink`: `special=False, normalized=False`.
No token uses `single_word`.

CLI: `python glm_tokenizer.py --out DIR [--seed N]` writes tokenizer.json + tokenizer_config.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import random
from typing import Dict, Iterator, List, Tuple

VOCAB_SIZE = 151_552
MODEL_MAX_LENGTH = 8 * 1024 * 1024

# (content, special, normalized, lstrip, rstrip), ids follow the BPE vocabulary in this order.
ADDED_TOKENS: Tuple[Tuple[str, bool, bool, bool, bool], ...] = (
    ("<|endoftext|>", True, False, False, False),
    ("[MASK]", True, False, False, False),
    ("[gMASK]", True, False, False, False),
    ("[sMASK]", True, False, False, False),
    ("<sop>", True, False, False, False),
    ("<eop>", True, False, False, False),
    ("<|system|>", True, False, False, False),
    ("<|user|>", True, False, True, False),
    ("<|assistant|>", True, False, False, False),
    ("<|observation|>", True, False, False, True),
    ("<|begin_of_image|>", True, False, False, False),
    ("<|end_of_image|>", True, False, False, False),
    ("<|image|>", True, False, False, False),
    ("<think>", False, True, False, False),
    ("</think>", False, True, False, False),
    ("<tool_call>", True, False, False, False),
    ("</tool_call>", True, False, False, False),
    ("<tool_response>", True, False, False, False),
    ("</tool_response>", True, False, False, False),
    ("<arg_key>", True, False, False, False),
    ("</arg_key>", True, False, False, False),
    ("<arg_value>", True, False, False, False),
    ("</arg_value>", True, False, False, False),
    ("/nothink", False, False, False, False),
)
BPE_SIZE = VOCAB_SIZE - len(ADDED_TOKENS)

# GPT-4-like split (own wording): case-insensitive contractions; letters (with combining marks)
# optionally led by one non-letter, non-digit char (" word", "_id", ".get"); digits in runs of
# at most 3; punctuation runs with an optional leading space and trailing newlines; newline runs
# with the whitespace before them; whitespace not followed by text; other whitespace.
SPLIT_PATTERN = (
    r"(?i:'(?:[sdmt]|ll|ve|re))"
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
    r"|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


def _bytes_to_unicode() -> Dict[int, str]:
    """The byte-level BPE byte -> printable char table: printable Latin-1 bytes map to
    themselves, the other 68 bytes to U+0100 onwards in byte order (' ' -> 'Ġ', '\\n' -> 'Ċ')."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_B2U = _bytes_to_unicode()
_LATIN1_TO_BL = str.maketrans({chr(b): ch for b, ch in _B2U.items()})


def _bl(text: str) -> str:
    """Text -> its byte-level form (the string BPE sees after the ByteLevel pre-tokenizer)."""
    return text.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_BL)


# English-like word material. The function words are ordinary English; the rest is made up.
_FUNCTION_WORDS = (
    "the of and to a in is that for it as was with be by on not he I this are or his from at "
    "which but have an they you were her she there one all we their has been had if more when "
    "will would who so no can its also into only than other some time these two may then do "
    "first any my now such like our over man me even most made after new must many well could "
    "about out up what said them very just because where how through make each between"
).split()
_ONSETS = (
    "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
    "z", "ch", "sh", "th",
)
_CLUSTER_ONSETS = (
    "bl", "br", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sc", "sk", "sl", "sm",
    "sn", "sp", "st", "str", "sw", "tr", "wh", "qu",
)
_NUCLEI = (
    "a", "e", "i", "o", "u", "a", "e", "i", "o", "y", "ai", "ea", "ee", "ie", "oa", "oo", "ou",
)
_CODAS = ("b", "d", "g", "l", "m", "n", "p", "r", "s", "t", "x", "ck", "ll", "ng", "ss", "th")
_CLUSTER_CODAS = (
    "ft", "ld", "lt", "mp", "nd", "nk", "nt", "rd", "rk", "rm", "rn", "rt", "sh", "st", "ct",
)
_PREFIXES = ("un", "re", "pre", "dis", "con", "in", "ex", "over", "inter", "sub", "de", "pro")
_SUFFIXES = (
    "s", "s", "ed", "ing", "er", "ers", "ly", "tion", "tions", "ment", "ness", "able", "al", "ity",
    "ous", "es", "ive", "ize", "ful", "less",
)
_ACCENTED_VOWELS = (
    "é", "è", "ê", "à", "á", "â", "í", "ó", "ô", "ú", "ü", "ö", "ä", "ñ", "ç", "ß", "ø", "å",
)
_CYRILLIC = "абвгдежзийклмнопрстуфхцчшщыьэюя"
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_COMMON_PUNCT = (
    ".", ",", ":", ";", "!", "?", "...", "),", ");", "()", "();", "))", "://", "==", "!=", "->",
    "=>", "{{", "}}", "**", "--", "##", "###", "\",", "\".", "')", "('", "\")", "(\"", "[]", "{}",
    "},", "],", "</", "/>", "#{", "${", "<=", ">=", "+=", "-=", "&&", "||", "//", "/*", "*/",
    ".\n", ".\n\n", ":\n", ",\n", "{\n", "}\n", ");\n", "):\n",
)


def _onset(rng: random.Random) -> str:
    return rng.choice(_CLUSTER_ONSETS) if rng.random() < 0.2 else rng.choice(_ONSETS)


def _coda(rng: random.Random) -> str:
    r = rng.random()
    return "" if r < 0.5 else rng.choice(_CODAS) if r < 0.85 else rng.choice(_CLUSTER_CODAS)


def _syllable(rng: random.Random) -> str:
    return _onset(rng) + rng.choice(_NUCLEI) + _coda(rng)


def _english_word(rng: random.Random) -> str:
    word = "".join(_syllable(rng) for _ in range(rng.choices((1, 2, 3, 4), (45, 35, 15, 5))[0]))
    if rng.random() < 0.12:
        word = rng.choice(_PREFIXES) + word
    if rng.random() < 0.3:
        word += rng.choice(_SUFFIXES)
    return word


def _accented_word(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 3)):
        vowel = rng.choice(_ACCENTED_VOWELS) if rng.random() < 0.5 else rng.choice(_NUCLEI)
        parts.append(_onset(rng) + vowel + _coda(rng))
    return "".join(parts)


def _cyrillic_word(rng: random.Random) -> str:
    return "".join(rng.choice(_CYRILLIC) for _ in range(rng.randint(2, 8)))


def _cjk_word(rng: random.Random) -> str:
    # 1-4 ideographs (3 UTF-8 bytes each), skewed to the start of the block as a stand-in for
    # frequent characters.
    n = rng.choice((1, 2, 2, 3, 3, 4))
    return "".join(chr(0x4E00 + int(rng.random() ** 2 * 0x51A5)) for _ in range(n))


def _emoji(rng: random.Random) -> str:
    return chr(rng.choice((0x1F300, 0x1F600, 0x1F680, 0x1F900)) + rng.randrange(0x50))


def _punct_run(rng: random.Random) -> str:
    if rng.random() < 0.5:
        run = rng.choice(_COMMON_PUNCT)
    else:
        run = "".join(rng.choice(_PUNCT) for _ in range(rng.randint(1, 3)))
    return (" " if rng.random() < 0.4 else "") + run


def _cap(word: str) -> str:
    return word[:1].upper() + word[1:]


def lexicon(seed: int = 0, size: int = 30_000) -> List[str]:
    """English-like words in frequency-rank order: the function words, then made-up words,
    shorter ones ranked higher on the whole (as in real text)."""
    rng = random.Random(f"glm-lexicon-{seed}")
    words = dict.fromkeys(_FUNCTION_WORDS)
    made: Dict[str, float] = {}
    while len(words) + len(made) < size:
        word = _english_word(rng)
        if word not in words and word not in made:
            made[word] = len(word) * rng.uniform(0.6, 1.4)
    return list(words) + sorted(made, key=made.__getitem__)


def english_like_text(seed: int = 0, n_words: int = 20_000, text_seed: int = 1) -> str:
    """Zipf-distributed sentences over `lexicon(seed)`, the word list the vocabulary of `seed`
    was built from (like English text against a vocabulary trained on English), drawn with
    `text_seed`: to measure compression."""
    words = lexicon(seed)
    rng = random.Random(f"glm-text-{text_seed}")
    cum = []
    total = 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 2)
        cum.append(total)
    out: List[str] = []
    produced = 0
    while produced < n_words:
        n = rng.randint(5, 20)
        sentence = rng.choices(words, cum_weights=cum, k=n)
        if rng.random() < 0.1:
            sentence[rng.randrange(n)] = str(rng.randint(0, 5000))
        sentence[0] = _cap(sentence[0])
        for i in range(n - 1):
            if rng.random() < 0.08:
                sentence[i] += ","
        out.append(" ".join(sentence) + rng.choice((".", ".", ".", "?", "!")))
        out.append("\n\n" if rng.random() < 0.1 else " ")
        produced += n
    return "".join(out).strip()


def _candidates(seed: int) -> Iterator[str]:
    """The seeded stream of strings to make single tokens (in plain text, not byte-level)."""
    rng = random.Random(seed)
    # Every 1-3 digit number (the split regex cuts digit runs to 3) and whitespace runs (the
    # split regex keeps newline runs apart from the spaces after them).
    for n in range(1000):
        yield str(n)
    for n in range(100):
        yield f"{n:02d}"
    for n in range(1000):
        yield f"{n:03d}"
    for n in range(2, 33):
        yield " " * n
    for n in range(1, 9):
        yield "\t" * n
        yield "\n" * n
        yield "\r\n" * n
    yield from _COMMON_PUNCT
    yield from (" " + p for p in _COMMON_PUNCT)
    for code in (*range(ord("a"), ord("z") + 1), *range(ord("A"), ord("Z") + 1)):
        yield " " + chr(code)  # one-letter words and variables: " x", " I"

    words = lexicon(seed)
    common = words[:5000]
    rank = 0
    kinds = ("lexicon", "pseudo", "accented", "cyrillic", "cjk", "punct", "code", "emoji")
    weights = (50, 14, 8, 4, 25, 3, 6, 1)
    while True:
        kind = rng.choices(kinds, weights)[0]
        if kind == "lexicon" and rank < len(words):
            word = words[rank]
            rank += 1
            # Frequent words get more surface forms, as a trained vocabulary has.
            yield " " + word
            if rank < 12_000:
                yield word
                yield " " + _cap(word)
            if rank < 4_000:
                yield _cap(word)
            if rank < 800:
                yield " " + word.upper()
                yield word.upper()
        elif kind in ("lexicon", "pseudo"):
            word = _english_word(rng)
            yield (" " + word) if rng.random() < 0.7 else word
        elif kind == "accented":
            word = _accented_word(rng)
            yield (" " + word) if rng.random() < 0.7 else word
        elif kind == "cyrillic":
            word = _cyrillic_word(rng)
            yield (" " + word) if rng.random() < 0.7 else word
        elif kind == "cjk":
            yield _cjk_word(rng)
        elif kind == "punct":
            yield _punct_run(rng)
        elif kind == "code":
            word = rng.choice(common)
            lead = rng.choice(("_", ".", "(", "$", "@", "#", "/", "\"", "'"))
            if rng.random() < 0.5:
                word += _cap(rng.choice(common))  # camelCase stays one pre-token
            yield lead + word
        else:
            yield _emoji(rng)


_NO_MERGE = 1 << 62


def _segment(word: str, ranks: Dict[Tuple[str, str], int]) -> List[str]:
    """BPE's rule: merge the lowest-ranked adjacent pair (leftmost on ties) until none applies.
    Keeps the rank of every adjacent pair and updates only the two neighbours of a merge."""
    syms = list(word)
    get = ranks.get
    pair_ranks = [get((a, b), _NO_MERGE) for a, b in zip(syms, syms[1:])]
    while pair_ranks:
        best = min(pair_ranks)
        if best == _NO_MERGE:
            break
        i = pair_ranks.index(best)
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
        del pair_ranks[i]
        if i > 0:
            pair_ranks[i - 1] = get((syms[i - 1], syms[i]), _NO_MERGE)
        if i < len(pair_ranks):
            pair_ranks[i] = get((syms[i], syms[i + 1]), _NO_MERGE)
    return syms


def _vocab_and_merges(seed: int) -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    vocab: Dict[str, int] = {ch: i for i, ch in enumerate(sorted(_B2U.values()))}
    merges: List[Tuple[str, str]] = []
    ranks: Dict[Tuple[str, str], int] = {}
    for text in _candidates(seed):
        pieces = _segment(_bl(text), ranks)
        left = pieces[0]
        for right in pieces[1:]:
            pair = (left, right)
            left = left + right
            if pair in ranks:
                continue
            ranks[pair] = len(merges)
            merges.append(pair)
            if left not in vocab:
                vocab[left] = len(vocab)
                if len(vocab) == BPE_SIZE:
                    return vocab, merges
    raise AssertionError("unreachable: the candidate stream is endless")


@functools.lru_cache(maxsize=None)
def _backend_json(seed: int) -> str:
    """The backend's `to_str()` for `seed`; memoized because the build takes ~3.5 s CPU."""
    from tokenizers import (
        AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors,
    )

    vocab, merges = _vocab_and_merges(seed)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    # One call per token keeps the ids in ADDED_TOKENS order whatever the flags.
    for content, special, normalized, lstrip, rstrip in ADDED_TOKENS:
        token = AddedToken(content, single_word=False, lstrip=lstrip, rstrip=rstrip,
                           normalized=normalized, special=special)
        if special:
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])
    assert backend.get_vocab_size(with_added_tokens=True) == VOCAB_SIZE
    return backend.to_str()


def build_backend(seed: int = 0):
    """A fresh `tokenizers.Tokenizer` (callers may mutate it; the JSON is memoized per seed)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(_backend_json(seed))


@functools.lru_cache(maxsize=None)
def _prototype(seed: int):
    # Never handed out: PreTrainedTokenizerFast deep-copies its tokenizer_object, so reusing one
    # saves a ~0.8 s `from_str` per build_tokenizer call.
    return build_backend(seed)


# GLM-style chat template, written for this fixture. Built from pieces with no layout whitespace
# and no "-" whitespace control; transformers renders with trim_blocks=True, which eats a newline
# right after a block tag, so newlines after a tag are written as the expression NL.
NL = "{{ '\\n' }}"
_T = [
    "{% macro render_content(content) %}",
    "{% if content is string %}{{ content }}",
    "{% elif content is iterable and content is not mapping %}",
    "{% for part in content %}",
    "{% if part is string %}{{ part }}",
    "{% elif part['type'] == 'text' %}{{ part['text'] }}",
    "{% elif part['type'] in ['image', 'image_url', 'input_image'] %}",
    "<|begin_of_image|><|image|><|end_of_image|>",
    "{% endif %}",
    "{% endfor %}",
    "{% endif %}",
    "{% endmacro %}",
    "[gMASK]<sop>",
    "{% if tools %}",
    "<|system|>\n# Available tools\n\nEach tool is described by one JSON object per line:",
    # tojson on the whole tool: the exact shape the client sent reaches the prompt.
    "{% for tool in tools %}", NL, "{{ tool | tojson }}{% endfor %}", NL,
    "To call a tool, answer with <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>"
    "</tool_call>, one arg_key/arg_value pair per argument.",
    "{% endif %}",
    "{% for m in messages %}",
    "{% if m['role'] == 'system' %}<|system|>\n{{ render_content(m['content']) }}",
    "{% elif m['role'] == 'user' %}<|user|>\n{{ render_content(m['content']) }}",
    "{% elif m['role'] == 'assistant' %}<|assistant|>\n",
    "{% if m.get('reasoning_content') %}<think>{{ m['reasoning_content'] }}</think>", NL,
    "{% endif %}",
    "{{ render_content(m.get('content')) }}",
    "{% for tc in m.get('tool_calls') or [] %}",
    # OpenAI shape {"type": "function", "function": {...}} or already flattened {"name", ...}.
    "{% set fn = tc['function'] if tc['function'] is defined else tc %}",
    NL, "<tool_call>{{ fn['name'] }}",
    # transformers' Jinja has no JSON parser: string arguments go in verbatim, on their own line.
    "{% if fn['arguments'] is string %}", NL, "{{ fn['arguments'] }}",
    "{% elif fn['arguments'] is mapping %}",
    "{% for k, v in fn['arguments'].items() %}",
    "<arg_key>{{ k }}</arg_key><arg_value>",
    "{{ v if v is string else (v | tojson) }}",
    "</arg_value>",
    "{% endfor %}",
    "{% endif %}",
    "</tool_call>",
    "{% endfor %}",
    "{% elif m['role'] == 'tool' %}",
    # Consecutive tool results share one <|observation|>.
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|observation|>{% endif %}",
    NL, "<tool_response>{{ render_content(m['content']) }}</tool_response>",
    "{% endif %}",
    "{% endfor %}",
    "{% if add_generation_prompt %}<|assistant|>{% endif %}",
]
CHAT_TEMPLATE = "".join(_T)


def build_tokenizer(seed: int = 0):
    """The backend wrapped as a transformers fast tokenizer with the GLM-style template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_prototype(seed),
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def write_tokenizer_dir(out: pathlib.Path, seed: int = 0) -> None:
    """tokenizer.json + tokenizer_config.json, loadable with `AutoTokenizer.from_pretrained`."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    build_backend(seed).save(str(out / "tokenizer.json"))
    first = BPE_SIZE
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(first + i): {
                "content": content,
                "lstrip": lstrip,
                "normalized": normalized,
                "rstrip": rstrip,
                "single_word": False,
                "special": special,
            }
            for i, (content, special, normalized, lstrip, rstrip) in enumerate(ADDED_TOKENS)
        },
    }
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    (out / "tokenizer_config.json").write_text(text, encoding="utf-8")


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_tokenizer_dir(args.out, args.seed)
    size = (args.out / "tokenizer.json").stat().st_size
    print(f"{args.out / 'tokenizer.json'}: {size:,} bytes ({size / 2**20:.1f} MiB); "
          f"to_str(): {len(_backend_json(args.seed).encode()):,} bytes; vocab size {VOCAB_SIZE:,}")


if __name__ == "__main__":
    main()

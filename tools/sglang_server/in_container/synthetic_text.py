"""Seeded synthetic text: pseudo-words from a fixed syllable set, the same bytes on every run.

Used both to train the lab tokenizer and to fill request bodies, so the tokenizer sees text of
the same kind it was trained on (a few bytes per token, like a real model on prose). Stdlib
only: it runs on the host and inside the images alike.
"""

from __future__ import annotations

import functools
import itertools
import random

_ONSETS = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "pl", "gr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
_CODAS = ["", "", "n", "r", "s", "t", "m", "l", "nd", "st"]
_PUNCT = [".", ".", ",", ",", ",", "?", ";", ":"]
_LEXICON_SEED = 20261129


@functools.lru_cache(maxsize=1)
def _lexicon(size: int) -> tuple[list[str], list[float]]:
    """The fixed lexicon and its Zipf cumulative weights (one per process: it is pure)."""
    rng = random.Random(_LEXICON_SEED)
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        words.add("".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)))
    # Zipf-like word frequencies, as in natural text, so BPE learns whole frequent words.
    return sorted(words), list(itertools.accumulate(1.0 / (rank + 1) for rank in range(size)))


def text_of_size(seed: int, n_bytes: int) -> str:
    """ASCII prose of exactly `n_bytes` bytes, a pure function of (seed, n_bytes)."""
    # One fixed lexicon for every seed: the tokenizer is trained on the same words the
    # requests use; the seed only picks the word sequence.
    lexicon, cum_weights = _lexicon(3000)
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        sentence = rng.choices(lexicon, cum_weights=cum_weights, k=rng.randint(6, 18))
        sentence[0] = sentence[0].capitalize()
        chunk = " ".join(sentence) + rng.choice(_PUNCT) + (" " if rng.random() < 0.9 else "\n")
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)[:n_bytes]

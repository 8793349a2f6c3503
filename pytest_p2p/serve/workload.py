"""The workload in tokens: exact prompt lengths with the served model's tokenizer, seeded arrivals.

Why tokens, not words: "128 input tokens" must mean 128 tokens to the server, or an
arm's prefill work depends on how a tokenizer happens to split English words (the word
prompts were 2.1x the tokens asked for). Like ``vllm bench serve --dataset-name random``
each prompt is a random sequence of non-special token ids, decoded to text and
re-encoded; unlike it, a prompt whose re-encoding is not exactly ``input_len`` tokens
is redrawn (bench keeps it and reports the mismatch), so ``total_input_tokens`` is
exactly ``num_prompts * input_len``.

The tokenizer is named by ``tokenizer_id``:

* a directory with ``tokenizer.json`` (vLLM's model directory, e.g. the tiny Llama of
  ``serve.tinymodel``): loaded with the ``tokenizers`` package, no transformers needed;
* ``standin-words``: the SIMULATED stand-in counts whitespace-separated words as tokens,
  so its prompts are ``input_len`` words from a fixed vocabulary;
* anything else: ``transformers.AutoTokenizer.from_pretrained`` when installed.

Everything is seeded: the same ``(seed, input_len, num_prompts)`` gives byte-identical
prompts and arrival times for every arm of a comparison.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import ServerError

STANDIN_TOKENIZER = "standin-words"

# Single-token words for the stand-in's whitespace "tokenizer" (one word = one token there).
_WORDS = tuple((
    "the of and to in is that for it as with on was be by at this from are or an have not but which one all "
    "were they there can when more been has would what if will about up out so them some time these two may "
    "other then do first any like now my over such our man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take "
    "three").split())


class Tokenizer(Protocol):
    """What the workload needs of a tokenizer (no special tokens added on encode)."""

    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def allowed_ids(self) -> list[int]: ...


@dataclass
class WordTokenizer:
    """The stand-in's tokenizer: one token per whitespace-separated word (SIMULATED servers only)."""

    name: str = STANDIN_TOKENIZER

    def encode(self, text: str) -> list[int]:
        index = {w: i for i, w in enumerate(_WORDS)}
        return [index.get(w, 0) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(_WORDS[i % len(_WORDS)] for i in ids)

    def allowed_ids(self) -> list[int]:
        return list(range(len(_WORDS)))


class HFTokenizer:
    """A Hugging Face fast tokenizer from ``tokenizer.json`` (or transformers' AutoTokenizer)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._encode: Callable[[str], list[int]]
        self._decode: Callable[[Sequence[int]], str]
        path = Path(name)
        file = path / "tokenizer.json" if path.is_dir() else path
        if file.is_file() and file.name.endswith(".json"):
            try:
                from tokenizers import Tokenizer as _Tok
            except ImportError:
                raise ServerError(f"tokenizer {name}: the 'tokenizers' package is needed to read {file} "
                                  "(pip install tokenizers)") from None
            try:
                fast = _Tok.from_file(str(file))
            except Exception as exc:  # noqa: BLE001 - the library raises bare Exception on a bad file
                raise ServerError(f"tokenizer {name}: cannot read {file}: {exc}") from None
            specials = _special_ids(file)
            self._encode = lambda t: list(fast.encode(t, add_special_tokens=False).ids)
            self._decode = lambda ids: str(fast.decode(list(ids), skip_special_tokens=False))
            self._vocab = int(fast.get_vocab_size(with_added_tokens=True))
        else:
            try:
                from transformers import AutoTokenizer
            except ImportError:
                raise ServerError(f"tokenizer {name!r} is neither a directory with tokenizer.json nor loadable "
                                  "without 'transformers' (pip install transformers, or pass the model "
                                  "directory as tokenizer)") from None
            try:
                auto = AutoTokenizer.from_pretrained(name)
            except Exception as exc:  # noqa: BLE001 - hub/IO/format errors of many kinds
                raise ServerError(f"tokenizer {name!r}: {type(exc).__name__}: {str(exc)[:300]}") from None
            specials = set(int(i) for i in auto.all_special_ids)
            self._encode = lambda t: list(auto.encode(t, add_special_tokens=False))
            self._decode = lambda ids: str(auto.decode(list(ids)))
            self._vocab = int(len(auto))
        self._allowed = [i for i in range(self._vocab) if i not in specials]
        if not self._allowed:
            raise ServerError(f"tokenizer {name}: no non-special token ids")

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._decode(ids)

    def allowed_ids(self) -> list[int]:
        return self._allowed


def _special_ids(file: Path) -> set[int]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return {int(t["id"]) for t in data.get("added_tokens") or [] if t.get("special")}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()


@functools.lru_cache(maxsize=8)
def load_tokenizer(tokenizer_id: str) -> Tokenizer:
    """The tokenizer named by ``tokenizer_id`` (see the module docstring), loaded once: a campaign's window asks
    for it inside its clock, and a real model's ``tokenizer.json`` (2-9 MB) takes 0.1-0.5 s to read."""
    if tokenizer_id == STANDIN_TOKENIZER:
        return WordTokenizer()
    return HFTokenizer(tokenizer_id)


def request_lengths(n: int, input_len: int, output_len: int, range_ratio: float,
                    seed: int) -> list[tuple[int, int]]:
    """Each request's ``(input, output)`` tokens: ``vllm bench serve``'s ``--random-range-ratio`` ranges, seeded.

    Both lengths are drawn uniformly from ``floor(L * (1 - r)) .. ceil(L * (1 + r))`` (inclusive, at least
    1), bench 0.24's ranges; the draws are Python's, not numpy's, so the lengths match bench's in
    distribution, not request by request. ``r = 0`` gives every request ``(input_len, output_len)``.

    Why: a rig whose traffic has many lengths can ask for them, as bench users do. It is **not** a cure
    for window noise: the hope was that lengths that differ per request keep a closed loop's waves from
    forming, but on 2x H200 (7B, c16, 8 rounds interleaved on the same two servers, 2026-11-27) the pair
    log ratio of ranged windows (r = 0.5) varied 4.2 % from window to window against 2.2 % with one
    length (``benchmarks/window_noise_ab.py``). The same ``seed`` gives the same lengths, so both arms of
    a window pair still get equal work.
    """
    if not 0 <= range_ratio < 1:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    if not range_ratio:
        return [(input_len, output_len)] * n
    rng = random.Random(f"lengths-{seed}")  # its own stream: the prompts' draws from `seed` are unchanged

    def bounds(length: int) -> tuple[int, int]:
        return max(1, math.floor(length * (1 - range_ratio))), math.ceil(length * (1 + range_ratio))

    (ilo, ihi), (olo, ohi) = bounds(input_len), bounds(output_len)
    return [(rng.randint(ilo, ihi), rng.randint(olo, ohi)) for _ in range(n)]


def token_prompts(tokenizer: Tokenizer, n: int, input_len: int | Sequence[int], seed: int, *,
                  max_draws: int = 50) -> list[str]:
    """``n`` distinct seeded prompts that re-encode to exactly ``input_len`` tokens each.

    ``input_len`` may be a length per prompt (:func:`request_lengths`). Each is drawn as random
    allowed ids, then decode -> encode -> truncate/extend is repeated a few times (a BPE merges
    across the joins); a prompt that still misses its length is redrawn, never kept. Raises
    :class:`ServerError` if a tokenizer cannot produce the length at all (e.g. ``input_len``
    beyond what it can round-trip).
    """
    lengths = [input_len] * max(n, 0) if isinstance(input_len, int) else list(input_len)
    if n < 0 or len(lengths) != n or any(k < 1 for k in lengths):
        raise ValueError(f"need n >= 0 and n input lengths >= 1, got {n}, {input_len}")
    rng = random.Random(seed)
    allowed = tokenizer.allowed_ids()
    out: list[str] = []
    seen: set[str] = set()
    for i, length in enumerate(lengths):
        for _ in range(max_draws):
            ids = [allowed[rng.randrange(len(allowed))] for _ in range(length)]
            text, exact = "", False
            for _ in range(10):
                text = tokenizer.decode(ids)
                ids = tokenizer.encode(text)
                if len(ids) == length:
                    exact = True
                    break
                ids = ids[:length] + [allowed[rng.randrange(len(allowed))]
                                         for _ in range(length - len(ids))]
            if exact and text not in seen:
                out.append(text)
                seen.add(text)
                break
        else:
            raise ServerError(f"tokenizer {tokenizer.name}: no prompt of exactly {length} tokens after "
                              f"{max_draws} draws (prompt {i})")
    return out


def arrival_offsets(n: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Send offsets in seconds, the schedule ``vllm bench serve`` 0.24 draws for the same seed, rate, burstiness.

    All 0 for ``inf`` (closed loop). Otherwise bench's ``get_request``: gaps from numpy's
    legacy global generator seeded with ``seed`` (``np.random.seed(seed)``; nothing else
    draws from it before the schedule with the random dataset), ``gamma(shape=burstiness,
    scale=1 / (rate * burstiness))`` one per request, summed from the first gap (the first
    request waits one gap too), then scaled so the last request goes at exactly
    ``n / request_rate``. Why the same: a P2P on/off comparison against bench's numbers, or
    a re-run of a bench command, must offer the same load; Python's RNG from t = 0 without
    the rescaling gave 6.6-9.8 req/s at N = 64 and 8 req/s (issue 26).
    ``benchmarks/arrivals_vs_bench.py`` checks it against bench's own function.
    """
    if math.isinf(request_rate):
        return [0.0] * n
    if not request_rate > 0 or not burstiness > 0:
        raise ValueError(f"request_rate and burstiness must be > 0, got {request_rate}, {burstiness}")
    if n <= 0:
        return []
    if math.isinf(burstiness):
        gaps = [1.0 / request_rate] * n
    else:
        try:
            import numpy as np
        except ImportError:
            raise ServerError("load request_rate: Poisson arrivals as vllm bench serve draws them need numpy "
                              "(pip install numpy), or use request_rate: inf") from None
        rng = np.random.RandomState(seed % 2**32)  # what np.random.seed(seed) makes of the global generator
        theta = 1.0 / (request_rate * burstiness)
        gaps = [float(rng.gamma(shape=burstiness, scale=theta)) for _ in range(n)]
    offsets = list(itertools.accumulate(gaps))
    if offsets[-1] != 0:
        scale = (n / request_rate) / offsets[-1]
        offsets = [t * scale for t in offsets]
    return offsets


def discover_tokenizer(base_url: str, api_key: str, model: str, timeout_s: float = 10.0, *,
                       strict: bool = False) -> str:
    """The tokenizer to use for ``model``: its directory as the server lists it, or the stand-in's words.

    vLLM lists ``root`` (the path or hub id it loaded) under ``/v1/models``; the stand-in
    says ``owned_by: ... SIMULATED``. A server that cannot be asked gets the stand-in's
    words -- its requests will fail and be counted anyway. ``strict``: a server that cannot be asked, or does
    not list ``model``, is a :class:`ServerError` instead (for a caller that keeps the answer for later runs:
    one failed question must not put the stand-in's words into every prompt of a campaign).
    """
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/models", headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
        entries = [m for m in data.get("data", []) if isinstance(m, dict) and m.get("id") == model]
    except (OSError, ValueError, AttributeError) as exc:
        if strict:
            raise ServerError(f"{base_url}/v1/models: cannot ask which tokenizer {model!r} uses: {exc}") from None
        return STANDIN_TOKENIZER
    if not entries and strict:
        raise ServerError(f"{base_url}/v1/models does not list the model {model!r}")
    if not entries or "SIMULATED" in str(entries[0].get("owned_by", "")):
        return STANDIN_TOKENIZER
    return str(entries[0].get("root") or model)

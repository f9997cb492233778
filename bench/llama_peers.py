"""llama-cpp-python's own decoders (its `Llama.generate`, plain or with its prompt-lookup or draft-model hook), as peers
that bench/engines.py times beside specbench's loop on the same GGUF. Not part of the package: specbench measures
them, it does not run them."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass

from specbench.decoding.base import DecodeResult


@dataclass
class PeerCounts:
    """What a peer's draft hook saw during one generate() (llama-cpp-python reports nothing itself)."""

    draft_calls: int = 0  # times the binding asked its draft for tokens (one per target pass after the first)
    drafted: int = 0  # tokens the draft returned in all


class CountingDraft:
    """Wraps a llama-cpp-python draft model (a `LlamaDraftModel` callable) to count its calls and tokens."""

    def __init__(self, draft, gamma: int):
        self.draft, self.gamma = draft, gamma
        self.counts = PeerCounts()

    def __call__(self, input_ids, /, **kwargs):
        out = self.draft(input_ids, **kwargs)[: self.gamma]
        self.counts.draft_calls += 1
        self.counts.drafted += len(out)
        return out


def prompt_lookup_peer(gamma: int, max_ngram: int = 2) -> CountingDraft:
    """llama-cpp-python's own prompt-lookup draft proposing `gamma` tokens (its default n-gram size 2)."""
    speculative = importlib.import_module("llama_cpp.llama_speculative")
    return CountingDraft(speculative.LlamaPromptLookupDecoding(max_ngram_size=max_ngram, num_pred_tokens=gamma), gamma)


def peer_generate(
    llm,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    temperature: float = 0.0,
    seed: int = 0,
    draft: CountingDraft | None = None,
) -> DecodeResult:
    """llama-cpp-python's own `Llama.generate` (plain, or speculative when `llm` was loaded with `draft`).

    Its sampler is made neutral (no top-k/top-p/min-p cut, no repeat penalty): greedy at T = 0, the
    plain softmax law at T > 0. The cache is emptied first, so no prefix of the last example is reused
    (our loop re-prefills too). Counts: target passes are the draft's calls (plain: one per token after
    the first); accepted = emitted − 1 − passes, what the binding's loop emits per pass (n + 1)."""
    if draft is not None:
        draft.counts = PeerCounts()
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.set_seed(seed)
    out: list[int] = []
    t0 = time.perf_counter()
    t1 = t0
    gen = llm.generate(
        list(prompt_ids), top_k=0, top_p=1.0, min_p=0.0, temp=temperature, repeat_penalty=1.0, reset=True
    )
    stopped = False
    try:
        for tok in gen:
            out.append(int(tok))
            if len(out) == 1:
                t1 = time.perf_counter()
            if tok in eos_ids:
                stopped = True
                break
            if len(out) >= max_new_tokens:
                break
    finally:
        gen.close()
    t2 = time.perf_counter()
    res = DecodeResult(token_ids=out, stop_reason="eos" if stopped else "length", prefill_s=t1 - t0, decode_s=t2 - t1)
    if draft is None:
        res.target_calls = max(len(out) - 1, 0)
    else:
        res.target_calls = draft.counts.draft_calls
        res.drafted = draft.counts.drafted
        res.accepted = max(min(len(out) - 1 - res.target_calls, res.drafted), 0)
    res.verify_s = res.decode_s
    return res

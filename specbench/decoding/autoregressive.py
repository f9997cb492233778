"""The baseline: plain autoregressive decoding with a KV cache, greedy or sampled.

Every speedup specbench reports is a ratio against this loop, so it does the minimum per
token: one forward of one token, one processed-law draw, one host sync for the EOS check
(as HF `generate()` does). bench/ compares it side by side with `generate()`.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.sampling import next_token
from specbench.decoding.timing import Clock


def prompt_split(
    model: CachedModel, prompt_ids: list[int], decoder_start_id: int | None
) -> tuple[list[int] | None, list[int]]:
    """(encoder ids or None, initial decoder tokens) for one prompt."""
    if model.is_seq2seq:
        return prompt_ids, [decoder_start_id]  # type: ignore[list-item]  # seq2seq: a decoder start is given
    return None, list(prompt_ids)


def decode_autoregressive(
    target: CachedModel,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    pad_to: int = 1,
) -> DecodeResult:
    """`pad_to` > 1 (the bf16-exact mode): each step feeds its token plus pad_to − 1 copies and keeps
    only the first row and cache slot, so every step runs the matmul shapes of a verify pass over
    pad_to tokens (measure/stats/numerics.py explains why that matters in low precision)."""
    clock = Clock(target.devices)
    t0 = clock.now()
    encoder_ids, tokens = prompt_split(target, prompt_ids, decoder_start_id)
    target.start(encoder_ids, capacity=len(tokens) + max_new_tokens)
    logits = target.forward(torch.tensor(tokens, device=target.device))
    tok = next_token(logits, sampling, generator)
    out = [int(tok)]
    t1 = clock.now()
    calls = 0
    stopped = out[0] in eos_ids
    while not stopped and len(out) < max_new_tokens:
        if pad_to > 1:
            logits = target.forward(tok.view(1).repeat(pad_to), all_logits=True)[0]
            target.truncate(target.length - (pad_to - 1))
        else:
            logits = target.forward(tok.view(1))
        tok = next_token(logits, sampling, generator)
        calls += 1
        out.append(int(tok))
        stopped = out[-1] in eos_ids
    t2 = clock.now()
    return DecodeResult(
        token_ids=out,
        stop_reason="eos" if stopped else "length",
        prefill_s=t1 - t0,
        decode_s=t2 - t1,
        target_calls=calls,
        verify_s=t2 - t1,
    )

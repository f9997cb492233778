"""The batched baseline: plain autoregressive decoding of B rows at once, each stopping on its own.

One forward of one token per live row per step; each row's token is its own argmax or its own
draw (rows.pick_tokens), so a row's output is the batch-1 baseline's (decoding/autoregressive.py)
for the same prompt and generator, up to float rounding of batched kernels. A row that emits EOS
or reaches its budget leaves the batch, and the next step runs over the rows left.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult
from specbench.decoding.batched.cache import BatchedCachedModel
from specbench.decoding.batched.rows import close_batch, new_rows, pick_tokens, still_live
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.timing import Clock


def decode_autoregressive_batch(
    model: torch.nn.Module | CachedModel | BatchedCachedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int | list[int],
    sampling: SamplingConfig,
    eos_ids: frozenset[int],
    generators: list[torch.Generator | None] | None = None,
    pad_id: int = 0,
    clock: Clock | None = None,
) -> list[DecodeResult]:
    """Decode every prompt; → one DecodeResult per prompt, in order (see the package docstring)."""
    lm = model if isinstance(model, BatchedCachedModel) else BatchedCachedModel(model)
    rows = new_rows(prompts, max_new_tokens, generators)
    clock = clock or Clock(lm.device)
    t0 = clock.now()
    first = pick_tokens(lm.start(prompts, pad_id), sampling, rows)
    for row, tok in zip(rows, first):
        row.emit([tok], eos_ids)
    t1 = clock.now()
    live, keep = still_live(rows, 0.0)
    pass_rows: list[int] = []
    while live:
        if keep is not None:
            lm.select(keep)
        ta = clock.now()
        ids = torch.tensor([[row.tokens[-1]] for row in live], device=lm.device)  # [b, 1]
        toks = pick_tokens(lm.forward(ids, torch.ones_like(ids, dtype=torch.bool)), sampling, live)
        tb = clock.now()
        pass_rows.append(len(live))
        for row, tok in zip(live, toks):
            row.res.target_calls += 1
            row.res.verify_s += tb - ta
            row.emit([tok], eos_ids)
        live, keep = still_live(live, clock.now() - t1)
    return close_batch(rows, t1 - t0, clock.now() - t0, pass_rows, [1] * len(pass_rows))

"""Per-row bookkeeping shared by the batched engines: budgets, stopping, results.

Each row of a batch is its own example: its own token budget, its own generator, its own
DecodeResult filled with the batch-1 engines' semantics (decoding/autoregressive.py,
decoding/speculative.py). A row stops at its first EOS or at its budget, exactly where the
batch-1 engine would (clip_at_stop); the engines then drop it from the batch.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult, Row
from specbench.decoding.sampling import next_token
from specbench.errors import SpecbenchError


def new_rows(
    prompts: list[list[int]], max_new_tokens: int | list[int], generators: list[torch.Generator | None] | None
) -> list[Row]:
    """Validate a batch's inputs → one Row per prompt."""
    size = len(prompts)
    if size == 0:
        raise SpecbenchError("a batch needs at least one prompt")
    budgets = [max_new_tokens] * size if isinstance(max_new_tokens, int) else list(max_new_tokens)
    gens = [None] * size if generators is None else list(generators)
    if len(budgets) != size or len(gens) != size:
        raise SpecbenchError(
            f"a batch of {size} prompts needs {size} budgets and {size} generators (got {len(budgets)} and {len(gens)})"
        )
    if any(b < 1 for b in budgets):
        raise SpecbenchError(f"max_new_tokens must be >= 1 for every row (got {min(budgets)})")
    return [
        Row(
            r,
            list(p),
            b,
            g,
            DecodeResult(token_ids=[], stop_reason="length", prefill_s=0.0, decode_s=0.0, batch_size=size),
        )
        for r, (p, b, g) in enumerate(zip(prompts, budgets, gens))
    ]


def pick_tokens(logits: torch.Tensor, sampling: SamplingConfig, rows: list[Row]) -> list[int]:
    """logits [b, V] of the live rows → one token each: argmax (one host sync), or a draw from each
    row's processed law with that row's generator (the batch-1 engine's exact call, so a row's draws
    are the ones it would make alone)."""
    if sampling.greedy:
        return logits.argmax(-1).tolist()
    return [int(next_token(logits[i], sampling, row.generator)) for i, row in enumerate(rows)]


def still_live(rows: list[Row], elapsed: float) -> tuple[list[Row], torch.Tensor | None]:
    """Close the rows that just stopped (their decode time is `elapsed`) → (rows left, their indices
    into `rows` for BatchedCachedModel.select, or None when no row stopped)."""
    keep = []
    for i, row in enumerate(rows):
        if row.done:
            row.res.decode_s = elapsed
        else:
            keep.append(i)
    if len(keep) == len(rows):
        return rows, None
    return [rows[i] for i in keep], torch.tensor(keep, dtype=torch.long)


def close_batch(
    rows: list[Row], prefill_s: float, batch_s: float, pass_rows: list[int], pass_widths: list[int]
) -> list[DecodeResult]:
    """Shared batch figures onto every row's result → the results in prompt order."""
    for row in rows:
        row.res.prefill_s = prefill_s
        row.res.batch_s = batch_s
        row.res.batch_pass_rows = list(pass_rows)
        row.res.batch_pass_widths = list(pass_widths)
    return [row.res for row in sorted(rows, key=lambda r: r.index)]

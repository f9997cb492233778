"""Planted bugs for the numerics classifier: the negative controls its "numerics" verdicts need.

The classifier (measure/stats/numerics.py) calls a greedy divergence numerics when the target itself flips
there under the speculative run's pass shapes, at a logit gap rounding can flip (measure/stats/margin_gate.py).
That verdict is only worth something if a real bug in the multi-token verification path comes out
*unexplained*. This module plants two, each alive only inside its context manager:

- `late_verified_logits`: for one verification step in `every`, the verifier gets the target's logits one
  position late (row i + 1 checks draft token i, the last row repeats), as a slip in slicing the verify
  pass would do. The classifier's replays do not go through the verifier, so they catch it themselves.
- `biased_multi_token_rows`: a logit bias on one token in every multi-token pass of the model call, as a
  bias applied on the verify path alone would. The replays run that same call and reproduce it; only the
  margin gate stands between it and a "numerics" verdict.

Used by tests/test_numerics.py (tiny model) and bench/planted_bug.py (the real default model in bf16).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class PlantedSteps:
    """Where the planted bug fired: the output position of each bugged step's first emitted token."""

    positions: list[int] = field(default_factory=list)  # since the last reset(), in order
    steps: int = 0  # verification steps seen inside the block, bugged or not

    def reset(self) -> None:
        """Forget the positions (call before each example)."""
        self.positions.clear()

    def first(self) -> int | None:
        return self.positions[0] if self.positions else None


@contextmanager
def late_verified_logits(every: int = 50, offset: int = 0) -> Iterator[PlantedSteps]:
    """Within the block, the verification steps of decode_speculative numbered offset, offset + every, ... (from 0)
    see their target logits one position late. Yields where the bug fired (output positions) and the steps seen;
    to keep one count across blocks (one block per example), pass offset = (−steps so far) mod every."""
    import specbench.decoding.speculative as speculative

    if every < 1:
        raise ValueError(f"every must be >= 1 (got {every})")
    original = speculative.judge_proposal
    seen = PlantedSteps()

    def planted(ctx, proposal, logits: torch.Tensor):
        step = seen.steps
        seen.steps += 1
        if step % every == offset % every and logits.shape[0] > 1:
            logits = torch.cat([logits[1:], logits[-1:]])  # [g+1, V]: row i is now the row meant for i + 1
            seen.positions.append(len(ctx.res.token_ids))
        return original(ctx, proposal, logits)

    speculative.judge_proposal = planted
    try:
        yield seen
    finally:
        speculative.judge_proposal = original


def caused(first_divergence: int | None, planted_at: int | None) -> bool:
    """Whether an example's first divergence is the planted bug's doing: it happened at or after the first bugged
    step (before it, the run is the clean engine's, so an earlier divergence is the clean engine's own)."""
    return first_divergence is not None and planted_at is not None and first_divergence >= planted_at


@contextmanager
def biased_multi_token_rows(token: int, bump: float = 10.0) -> Iterator[None]:
    """Within the block, every multi-token pass of CachedModel that returns all its rows adds `bump` to `token`'s
    logit in each row, as a logit bias applied on the verify path alone would. Each row still depends only on
    its own prefix, so the classifier's replays (they run the same call) reproduce the emitted tokens and call
    the divergences numerics; the baseline's 1-token rows are untouched, so the margin gate (stats/margin_gate.py:
    the logit gap at the divergence) sees how far from a tie the emitted token really was."""
    from specbench.decoding.cached_model import CachedModel

    original = CachedModel.forward

    def planted(self, new_ids: torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        logits = original(self, new_ids, all_logits)
        if all_logits and logits.dim() == 2 and logits.shape[0] > 1:
            logits = logits.clone()
            logits[:, token] += bump  # [k, V]
        return logits

    CachedModel.forward = planted  # type: ignore[method-assign]
    try:
        yield
    finally:
        CachedModel.forward = original  # type: ignore[method-assign]

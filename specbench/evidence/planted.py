"""Planted bugs for the numerics classifier: the negative controls its "numerics" verdicts need.

The classifier (measure/stats/numerics.py) calls a greedy divergence numerics when the target itself flips
there under the speculative run's pass shapes, at a logit gap rounding can flip (measure/stats/margin_gate.py).
That verdict is only worth something if a real bug in the multi-token verification path comes out
*unexplained*. This module plants six, each alive only inside its context manager:

- `late_verified_logits`: for one verification step in `every`, the verifier gets the target's logits one
  position late (row i + 1 checks draft token i, the last row repeats), as a slip in slicing the verify
  pass would do. The classifier's replays do not go through the verifier, so they catch it themselves.
- `biased_multi_token_rows`: a logit bias on one token in every multi-token pass of the model call, as a
  bias applied on the verify path alone would. The replays run that same call and reproduce it; only the
  margin gate stands between it and a "numerics" verdict. It lives in the multi-token model call, so under
  --bit-exact (no multi-token pass after the prefill) it never fires; the next one does.
- `biased_verified_rows`: the same bias on the logits the verifier reads (every row of every verification step),
  whatever passes computed them.
- `near_tie_flips`: where the target's top two logits in a verified row are within one spacing of the logit dtype
  (a tie or a one-spacing gap), the verifier's row names the runner-up: a bug no wider than rounding, which the
  margin gate (2 spacings) calls numerics by construction. Only --bit-exact, where nothing is left to explain,
  can catch it.
- `lowered_verified_argmax`: a bug of graded strength: for one verification step in `every`, the verifier reads each
  row with its argmax token's logit lowered by k spacings of the logit dtype (bench/planted_bug.py grades k = 1, 2, 4,
  8, 16, 64 beside the late plant). It changes a verdict only where a row's top two are less than k spacings apart.
- `lowered_multi_token_argmax`: the same lowering inside the multi-token model call, on rows predicting one sequence
  position in `every`: the replays and the floor reproduce it, so it measures the margin gate's blind zone.

Each records in `PlantedSteps.changed` the output position where a greedy step's planted verdict first emits another
token than the clean verdict would have (the bug *touched* the example there): under --bit-exact an example's first
divergence from the baseline must be exactly its first touched position (tests/test_bit_exact.py).

Used by tests/test_numerics.py and tests/test_forced.py (tiny models) and bench/planted_bug.py (the real default
model in bf16).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class PlantedSteps:
    """Where the planted bug fired: the output position of each bugged step's first emitted token."""

    positions: list[int] = field(default_factory=list)  # since the last reset(), in order
    steps: int = 0  # verification steps seen inside the block, bugged or not
    changed: list[int] = field(default_factory=list)  # greedy: where a bugged step first emitted another token

    def reset(self) -> None:
        """Forget the positions (call before each example)."""
        self.positions.clear()
        self.changed.clear()

    def first(self) -> int | None:
        return self.positions[0] if self.positions else None

    def changed_before(self, end: int | None = None) -> list[int]:
        """The output positions the bug changed (greedy), in order, without repeats; `end`: only those before it (the
        clean output's length: a step that accepts drafts past the end of sequence, or past the token budget, may
        change tokens the loop then cuts, which no output can show)."""
        return sorted({p for p in self.changed if end is None or p < end})

    def first_changed(self, within: int | None = None) -> int | None:
        """The output position of the example's first token the bug changed inside `within` tokens, or None."""
        kept = self.changed_before(within)
        return kept[0] if kept else None


def judged(original, ctx, proposal, clean: torch.Tensor, planted: torch.Tensor, seen: PlantedSteps):
    """The verifier's answer on the planted logits; at T = 0 (the verdict is a pure function of the logits) also the
    clean one, to record where the planted step first emits another token (`seen.changed`)."""
    drafted, verdict = original(ctx, proposal, planted)
    if ctx.sampling.greedy:
        _, clean_verdict = original(ctx, proposal, clean)
        emitted = drafted[: verdict.n_accepted] + [verdict.next_token]
        wanted = drafted[: clean_verdict.n_accepted] + [clean_verdict.next_token]
        k = next((i for i, (a, b) in enumerate(zip(emitted, wanted)) if a != b), None)
        if k is not None:
            seen.changed.append(len(ctx.res.token_ids) + k)
    return drafted, verdict


Judge = Callable  # decoding.speculative.judge_proposal's signature: (ctx, proposal, logits) → (drafted, verdict)


@contextmanager
def verifier_replaced(make: Callable[[Judge], Judge]) -> Iterator[None]:
    """Within the block, decode_speculative's verifier is `make(original)`; restored on exit."""
    import specbench.decoding.speculative as speculative

    original = speculative.judge_proposal
    speculative.judge_proposal = make(original)
    try:
        yield
    finally:
        speculative.judge_proposal = original


@contextmanager
def multi_token_rows_replaced(bug: Callable[[object, int, torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Within the block, every multi-token pass of CachedModel that returns all its rows returns
    `bug(model, start, logits)` instead ([k, V]; start: the cached length before the pass); restored on exit."""
    from specbench.decoding.cached_model import CachedModel

    original = CachedModel.forward

    def planted(self, new_ids: torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        start = self.length
        logits = original(self, new_ids, all_logits)
        if all_logits and logits.dim() == 2 and logits.shape[0] > 1:
            return bug(self, start, logits)
        return logits

    CachedModel.forward = planted  # type: ignore[method-assign]
    try:
        yield
    finally:
        CachedModel.forward = original  # type: ignore[method-assign]


def check_every(every: int, spacings: float | None = None) -> None:
    if every < 1:
        raise ValueError(f"every must be >= 1 (got {every})")
    if spacings is not None and not spacings > 0:
        raise ValueError(f"spacings must be > 0 (got {spacings})")


def model_dtype_of(ctx) -> torch.dtype | None:
    """The target model's dtype (its logits may come back wider), where the verify context has one."""
    return getattr(getattr(ctx.target, "model", None), "dtype", None)


@contextmanager
def every_step_planted(
    bug: Callable[[object, torch.Tensor], torch.Tensor | None], every: int = 1, offset: int = 0
) -> Iterator[PlantedSteps]:
    """Within the block, the verification steps of decode_speculative numbered offset, offset + every, ... (from 0)
    are judged on `bug(ctx, logits)` (None: this step is left clean); yields the PlantedSteps (`positions`: where a
    bug changed the logits; `changed`: where it changed what was emitted). To keep one count across blocks (one block
    per example), pass offset = (−steps so far) mod every."""
    check_every(every)
    seen = PlantedSteps()

    def make(original: Judge) -> Judge:
        def planted(ctx, proposal, logits: torch.Tensor):
            step = seen.steps
            seen.steps += 1
            bugged = bug(ctx, logits) if step % every == offset % every else None
            if bugged is None:
                return original(ctx, proposal, logits)
            if not torch.equal(bugged, logits):
                seen.positions.append(len(ctx.res.token_ids))
            return judged(original, ctx, proposal, logits, bugged, seen)

        return planted

    with verifier_replaced(make):
        yield seen


def late_verified_logits(every: int = 50, offset: int = 0, after: int = 0):
    """Within the block, the verification steps numbered offset, offset + every, ... (from 0) see their target logits
    one position late; `after`: only steps whose first emitted position is at least that (a bug that strikes late in
    an output: tests/test_forced.py puts it after an earlier numerics divergence). Yields where the bug fired (output
    positions) and the steps seen (every_step_planted)."""

    def late(ctx, logits: torch.Tensor) -> torch.Tensor | None:
        if logits.shape[0] < 2 or len(ctx.res.token_ids) < after:
            return None
        return torch.cat([logits[1:], logits[-1:]])  # [g+1, V]: row i is now the row meant for i + 1

    return every_step_planted(late, every, offset)


def caused(first_divergence: int | None, planted_at: int | None) -> bool:
    """Whether an example's first divergence is the planted bug's doing: it happened at or after the first bugged
    step (before it, the run is the clean engine's, so an earlier divergence is the clean engine's own)."""
    return first_divergence is not None and planted_at is not None and first_divergence >= planted_at


def biased_multi_token_rows(token: int, bump: float = 10.0):
    """Within the block, every multi-token pass of CachedModel that returns all its rows adds `bump` to `token`'s
    logit in each row, as a logit bias applied on the verify path alone would. Each row still depends only on
    its own prefix, so the classifier's replays (they run the same call) reproduce the emitted tokens and call
    the divergences numerics; the baseline's 1-token rows are untouched, so the margin gate (stats/margin_gate.py:
    the logit gap at the divergence) sees how far from a tie the emitted token really was."""

    def bias(_model, _start: int, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[:, token] += bump  # [k, V]
        return logits

    return multi_token_rows_replaced(bias)


def biased_verified_rows(token: int, bump: float = 10.0):
    """Within the block, every verification step of decode_speculative reads `token`'s logit raised by `bump` in
    each row, whatever passes computed the rows (one multi-token pass, or --bit-exact's one-token passes)."""

    def bias(_ctx, logits: torch.Tensor) -> torch.Tensor:
        bugged = logits.clone()
        bugged[:, token] += bump  # [g+1, V]
        return bugged

    return every_step_planted(bias)


def near_tie_rows(logits: torch.Tensor, precision: torch.dtype | None = None) -> torch.Tensor:
    """logits [k, V] → a copy where, in each row whose top two logits are within one spacing of the logit dtype at
    the top one (margin_gate.spacing; `precision`: the model's dtype, when its logits come back wider), the
    runner-up is raised one spacing above the top: that row's argmax becomes the runner-up. Other rows unchanged."""
    from specbench.measure.stats.margin_gate import coarser_dtype, spacing

    out = logits.clone()
    dtype = coarser_dtype(logits.dtype, precision)
    top = logits.float().topk(2, dim=-1)  # [k, 2]
    for i in range(logits.shape[0]):
        first, second = (float(v) for v in top.values[i])
        best, runner = int(logits[i].argmax()), int(top.indices[i, 1])
        if runner == best:  # an exact tie: topk's second is argmax's pick; the other tied token is topk's first
            runner = int(top.indices[i, 0])
        step = spacing(first, dtype)
        if first - second <= step:
            out[i, runner] = first + step
    return out


def near_tie_flips(every: int = 1):
    """Within the block, on verification steps 0, every, 2·every, ... (from 0), each verified row whose top two
    logits are within one spacing names its runner-up (`near_tie_rows`): a bug within one spacing of a tie."""
    return every_step_planted(lambda ctx, logits: near_tie_rows(logits, model_dtype_of(ctx)), every)


def lowered_argmax_rows(logits: torch.Tensor, spacings: float, precision: torch.dtype | None = None) -> torch.Tensor:
    """logits [k, V] → a float32 copy where each row's argmax logit z is lowered by `spacings` spacings of the logit
    dtype at z (margin_gate.spacing; `precision`: the model's dtype, when its logits come back wider): the row's
    argmax moves to the runner-up where the top-two gap is below that many spacings (at exactly that many, a tie)."""
    from specbench.measure.stats.margin_gate import coarser_dtype, spacing

    dtype = coarser_dtype(logits.dtype, precision)
    out = logits.float().clone()  # [k, V]; float32, so that z − k·spacing is exact wherever it lands
    for i, best in enumerate(logits.argmax(-1).tolist()):
        z = float(out[i, best])
        out[i, best] = z - spacings * spacing(z, dtype)
    return out


def lowered_verified_argmax(spacings: float, every: int = 50, offset: int = 0):
    """Within the block, on the verification steps of decode_speculative numbered offset, offset + every, ... (from 0),
    the verifier reads every row with its argmax token's logit lowered by `spacings` spacings (`lowered_argmax_rows`):
    a bug of graded strength, which changes a verdict only where a row's top two are less than `spacings` apart.
    Counting and `offset` as in late_verified_logits; `changed` records where a bugged step first emitted another
    token than the clean verdict (the examples the bug touched)."""
    check_every(every, spacings)
    return every_step_planted(
        lambda ctx, logits: lowered_argmax_rows(logits, spacings, model_dtype_of(ctx)), every, offset
    )


def lowered_multi_token_argmax(spacings: float, every: int = 50, offset: int = 0):
    """Within the block, every multi-token pass of CachedModel that returns all its rows lowers, in each row predicting
    a sequence position p (the cached tokens counted, the prompt included) with p ≡ offset (mod every), the argmax
    token's logit by `spacings` spacings (`lowered_argmax_rows`): lowered_verified_argmax's bug moved into the model
    call of the verify path, keyed by position, so that the classifier's replays and the floor (the same call over the
    same rows) reproduce it, as they would a kernel bug, and the baseline's one-token passes never see it. Only the
    margin gate can tell it from numerics: bench/planted_bug.py --site model-call measures where it cannot."""
    check_every(every, spacings)

    def lower(model, start: int, logits: torch.Tensor) -> torch.Tensor:
        rows = [i for i in range(logits.shape[0]) if (start + i + 1) % every == offset % every]  # row i → start+i+1
        if not rows:
            return logits
        logits = logits.float().clone()  # [k, V]; float32 keeps the lowered value exact
        logits[rows] = lowered_argmax_rows(logits[rows], spacings, getattr(model.model, "dtype", None))
        return logits

    return multi_token_rows_replaced(lower)

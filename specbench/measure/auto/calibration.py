"""Calibration: what one target pass over k new tokens costs on *this* machine, and one draft token.

Speculative decoding trades γ cheap draft passes plus one target pass over γ+1 tokens for up
to γ+1 tokens. Whether that pays depends on the pass-cost curve t(k), which depends on the
CPU or GPU, the dtype and the kernels: on a 2-core AMD EPYC in float32, SmolLM2-135M costs
43 ms for one new token, 90 ms for three and 59 ms for four, while in bfloat16 the curve is
nearly flat (22–26 ms up to eight). A γ tuned on another machine can land on the worst point,
so specbench measures the curve before it times anything and keeps the whole curve (no fit).

The measurement: prefill a context of the task's typical length (median prompt + half the
output budget), then time passes over k = 1..k_max new tokens, each rolled back after it,
in a rotated order per repeat so that drift spreads evenly over k; the median per k is t(k).
The draft's per-token cost is timed the same way with one-token passes. For a token-tree draft the same rounds also
time tree passes (`tree_ms`): cur and k − 1 nodes under the tree mask, the host sync and the accepted path's cache
compaction. On the 2-core AMD EPYC (SmolLM2-135M, bf16, 2 threads, 250 tokens of context) such a step cost 1.00–1.02×
a causal pass of the same k, every 95 % interval holding 1 (n = 15 paired rounds, bench/tree_step_cost.py): small
here, timed anyway because it is a different kernel path (the mask, the compaction) whose price can differ elsewhere.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import torch

from specbench.decoding.base import model_caches
from specbench.decoding.cached_model import CachedModel, cache_keyword
from specbench.decoding.timing import Clock
from specbench.decoding.tree import TokenTree
from specbench.engines.session import Session, corpus_key
from specbench.run_specs import DraftSpec

Shape = TypeVar("Shape", bound=Hashable)  # what a timed pass is keyed by: k, or (rows, k)

DEFAULT_REPEATS = 7  # medians over 7 passes per k: ~3 % spread on an idle 2-core CPU


@dataclass
class Calibration:
    """A measured pass-cost curve for one (target, dtype, device) and, optionally, one draft."""

    dtype: str  # torch dtype of the target, e.g. "bfloat16"
    device: str  # where it ran, e.g. "cpu"
    context_tokens: int  # tokens in the cache before each timed pass
    target_ms: dict[int, float]  # k new tokens → median ms of one target pass (k = 1..k_max)
    target_spread: dict[int, float]  # k → (max − min) / median over the repeats: how noisy the point was
    repeats: int  # timed passes per k
    draft: str | None = None  # the run's draft spec
    draft_ms: float | None = None  # median ms of one token of its draft model (None: model-free)
    seconds: float = 0.0  # wall time the calibration took
    extra: dict = field(default_factory=dict)  # free-form notes (e.g. which backend)
    tree_ms: dict[int, float] = field(default_factory=dict)  # k ≥ 2 → median ms of a tree step (tree drafts only)

    def pass_cost(self) -> dict[int, float]:
        """k → t(k)/t(1): a target pass over k tokens in single-token passes (the curve the report plots)."""
        t1 = self.target_ms[1]
        return {k: v / t1 for k, v in sorted(self.target_ms.items())}

    def tree_target_ms(self) -> dict[int, float]:
        """The curve a tree draft's steps are priced on (tree_gamma.step_cost): k → ms of a causal pass over k tokens
        (a step whose nodes form one branch, sent as a chain), and −k → ms of a tree step over k tokens where tree
        steps were timed (k ≥ 2; a calibration without them has no negative keys)."""
        return dict(sorted(self.target_ms.items())) | {-k: v for k, v in sorted(self.tree_ms.items())}

    def tree_cost(self) -> dict[int, float]:
        """tree_target_ms ÷ t(1): the same keys, in single-token passes."""
        t1 = self.target_ms[1]
        return {k: v / t1 for k, v in self.tree_target_ms().items()}

    @property
    def c(self) -> float:
        """Draft cost per token over the target's single-token pass (0 for model-free drafts)."""
        return (self.draft_ms or 0.0) / self.target_ms[1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_ms"] = {str(k): v for k, v in self.target_ms.items()}
        d["target_spread"] = {str(k): v for k, v in self.target_spread.items()}
        d["pass_cost"] = {str(k): v for k, v in self.pass_cost().items()}
        d["tree_ms"] = {str(k): v for k, v in self.tree_ms.items()}
        return d

    @staticmethod
    def from_dict(d: dict) -> Calibration:
        d = {k: v for k, v in d.items() if k != "pass_cost"}
        for key in ("target_ms", "target_spread", "tree_ms"):
            d[key] = {int(k): float(v) for k, v in d.get(key, {}).items()}
        return Calibration(**d)


def time_passes(
    step: Callable[[Shape], object],
    ks: list[Shape],
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
    start: int = 0,
) -> dict[Shape, list[float]]:
    """Time `step(k)` (one pass over k new tokens, restoring its state) `repeats` times per k, in ms.

    Each repeat visits every k once, starting one place further along the list (the first repeat at `start`), so a
    slow drift of the machine is shared evenly by all k instead of landing on the last ones.
    """
    times: dict[Shape, list[float]] = {k: [] for k in ks}
    for r in range(start, start + repeats):
        for k in ks[r % len(ks) :] + ks[: r % len(ks)]:
            t0 = clock()
            step(k)
            times[k].append((clock() - t0) * 1e3)
    return times


def median_and_spread(samples: dict[Shape, list[float]]) -> tuple[dict[Shape, float], dict[Shape, float]]:
    med = {k: statistics.median(v) for k, v in samples.items()}
    spread = {k: (max(v) - min(v)) / med[k] if med[k] > 0 else float("nan") for k, v in samples.items()}
    return med, spread


def context_ids(prompts: list[list[int]], length: int) -> list[int]:
    """`length` token ids of real text: the median-length prompt, repeated as needed (timing ignores content)."""
    if not prompts:
        raise ValueError("calibration needs at least one prompt")
    base = sorted(prompts, key=len)[len(prompts) // 2]
    reps = -(-length // len(base))
    return (base * reps)[:length]


def typical_context(prompt_lengths: list[int], max_new_tokens: int, max_positions: int | None, k_max: int) -> int:
    """Median prompt length plus half the output budget (the middle of decoding), within the model's context."""
    n = int(statistics.median(prompt_lengths)) + max_new_tokens // 2
    if max_positions:
        n = min(n, max_positions - k_max - 1)
    return max(1, n)


def typical_step(
    lm: CachedModel,
    prompts: list[list[int]],
    k_max: int,
    max_new_tokens: int,
    max_positions: int | None,
    all_logits=True,
) -> tuple[Callable[[int], None], int]:
    """pass_step after a fresh prefill of the task's typical context (typical_context) → (step, context tokens)."""
    n_ctx = typical_context([len(p) for p in prompts], max_new_tokens, max_positions, k_max)
    return pass_step(lm, context_ids(prompts, n_ctx), k_max, all_logits, max(1, max_new_tokens // 2)), n_ctx


def pass_step(
    lm: CachedModel, context: list[int], k_max: int, all_logits: bool, decoder_context: int
) -> Callable[[int], None]:
    """A step(k) that runs one pass of k new tokens after `context` on `lm` and rolls it back
    (an encoder-decoder model encodes `context` and decodes after `decoder_context` tokens of it); step(−k), k ≥ 2,
    the same as a token tree's step (calibration_tree, decoder-only)."""
    if lm.is_seq2seq:
        lm.start(context)
        context = context[:decoder_context]
    else:
        lm.backend.reserve(len(context) + k_max + 1)
        lm.start(capacity=len(context) + k_max + 1)
    lm.forward(torch.tensor(context, device=lm.device))
    base = lm.length
    new = torch.tensor(context[-k_max:] if len(context) >= k_max else (context * k_max)[:k_max], device=lm.device)

    def step(k: int) -> None:
        logits = lm.forward(new[:k], all_logits=all_logits)
        logits.argmax(-1).tolist()  # the host sync a decode step pays
        lm.truncate(base)

    def tree_step(k: int) -> None:
        tree = calibration_tree(k - 1)
        logits = lm.forward_tree(new[:k], tree)
        logits.argmax(-1).tolist()
        lm.keep_path(base, tree.path(k - 2)[:2])  # the last node's path: from k = 3 on off the first slots (moved)
        lm.truncate(base)

    return lambda key: tree_step(-key) if key < 0 else step(key)


def calibration_tree(nodes: int) -> TokenTree:
    """The trie a tree step is timed on (pure): three branches from cur, each node under the node three before it
    (the shape of tree-lookup's tries, several continuations side by side; cost depends on the size, not the shape)."""
    return TokenTree(tuple(-1 if i < 3 else i - 3 for i in range(nodes)))


def calibrate(
    target_lm: CachedModel,
    prompts: list[list[int]],
    *,
    k_max: int,
    max_new_tokens: int,
    max_positions: int | None,
    dtype: str,
    repeats: int = DEFAULT_REPEATS,
    trees: bool = False,
) -> Calibration:
    """Measure t(k), k = 1..k_max, on the target after a context of the task's typical length; with `trees`, in the
    same rotated rounds, a token tree's step over k = 2..k_max tokens too (`tree_ms`).

    One unrecorded round first pays for allocations and kernel selection. The cache is left in
    an arbitrary state: every decode starts its own (CachedModel.start).
    """
    t_start = time.perf_counter()
    clock = Clock(target_lm.devices).now
    ks = list(range(1, k_max + 1)) + ([-k for k in range(2, k_max + 1)] if trees else [])  # −k: a tree step
    step, n_ctx = typical_step(target_lm, prompts, k_max, max_new_tokens, max_positions)
    time_passes(step, ks, 1, clock)  # warm-up
    med, spread = median_and_spread(time_passes(step, ks, repeats, clock))
    return Calibration(
        dtype=dtype,
        device=str(target_lm.device),
        context_tokens=n_ctx,
        target_ms={k: v for k, v in med.items() if k > 0},
        target_spread={k: v for k, v in spread.items() if k > 0},
        repeats=repeats,
        seconds=time.perf_counter() - t_start,
        extra={"backend": target_lm.backend.kind},
        tree_ms={-k: v for k, v in med.items() if k < 0},
    )


def session_pass_round(
    session: Session, prompts: list[list[int]], ks: list[int], max_new_tokens: int, offset: int
) -> dict[int, float]:
    """One round of `calibrate`'s timed passes on the session's target (each k of `ks` once, the order rotated by
    `offset`) after a fresh prefill of the typical context: k → ms. The auto replay interleaves these rounds with
    its decodes (auto_pilot.choose_by_replay), so the verify prices are sampled across the seconds just before
    timing rather than in one burst of a few seconds minutes earlier: on the 2-core AMD EPYC the timed verify ÷
    plain-step ratio missed the burst's price by a log-sd of 0.045 over 20 runs, and that miss alone explained most of
    the cost-model check's error (correlation −0.86; docs/benchmarks.md)."""
    lm = session.target_lm()
    step, _ = typical_step(lm, prompts, max(ks), max_new_tokens, session.target.max_positions)
    return {k: v[0] for k, v in time_passes(step, ks, 1, Clock(lm.devices).now, start=offset).items()}


def draft_token_ms(
    draft_lm: CachedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    max_positions: int | None,
    repeats: int = 2 * DEFAULT_REPEATS,
) -> float:
    """Median ms of one draft token (a one-token pass of the draft model after a typical context)."""
    step, _ = typical_step(draft_lm, prompts, 1, max_new_tokens, max_positions, all_logits=False)
    clock = Clock(draft_lm.devices).now
    time_passes(step, [1], 2, clock)  # warm-up
    return statistics.median(time_passes(step, [1], repeats, clock)[1])


# --------------------------------------------------------------------------- batches (--batch-size > 1)


def batch_pass_step(model: torch.nn.Module, context: list[int], batch_size: int, k_max: int) -> Callable[[int], None]:
    """A step(k) that runs one pass of k new tokens for each of `batch_size` rows after `context` and crops
    the cache back: the shape of a batched verify pass ([B, k]), all rows at one length (timing ignores
    content; the batched engine's masks over rows of other lengths cost no extra matmul). Decoder-only."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    ids = torch.tensor([context] * batch_size, device=device)  # [B, n]
    cache = DynamicCache()
    kw = cache_keyword(model.forward)
    with torch.inference_mode():
        model(input_ids=ids, use_cache=True, **{kw: cache})
    n = ids.shape[1]
    new = ids[:, -k_max:] if n >= k_max else ids[:, :1].repeat(1, k_max)  # [B, k_max]

    def step(k: int) -> None:
        with torch.inference_mode():
            logits = model(input_ids=new[:, :k], use_cache=True, **{kw: cache}).logits  # [B, k, V]
            logits.argmax(-1).tolist()  # the host sync a decode step pays
        cache.crop(-k)  # back to `base` tokens (this transformers crops by a negative count)

    return step


def batch_row_grid(batch_size: int) -> list[int]:
    """The row counts a batch of B is calibrated at: 1, 2, 4, … below B, and B (rows leave a batch as they
    finish, so its passes run at every b ≤ B; batch_model interpolates t(b, k) linearly between these)."""
    grid, b = [], 1
    while b < batch_size:
        grid.append(b)
        b *= 2
    return grid + [batch_size]


def batch_context(
    prompt_lengths: list[int], batch_size: int, max_new_tokens: int, max_positions: int | None, k_max: int
) -> int:
    """The context a batch's passes attend over: its rows are left-padded to its longest prompt (and rows that
    finish keep their columns), so the median over the run's batches (B consecutive prompts in the run's order)
    of the longest prompt, plus half the output budget."""
    longest = [max(prompt_lengths[i : i + batch_size]) for i in range(0, len(prompt_lengths), batch_size)]
    return typical_context(longest, max_new_tokens, max_positions, k_max)


def calibrate_batch_grid(
    target: torch.nn.Module,
    prompts: list[list[int]],
    *,
    batch_size: int,
    k_max: int,
    max_new_tokens: int,
    max_positions: int | None,
    draft: torch.nn.Module | None = None,
    repeats: int = DEFAULT_REPEATS,
) -> list[dict]:
    """t(b, k) for every row count b of batch_row_grid(B) and k = 1..k_max (and, for a model draft, ms of one
    batched draft token at each b), after batch_context tokens; one dict per b. Every repeat visits every
    (b, k) once in a rotated order, so a drift of the machine during the calibration is shared by all shapes
    instead of landing on the last row counts (this 2-core VM drifted by 10–20 % within a minute)."""
    n_ctx = batch_context([len(p) for p in prompts], batch_size, max_new_tokens, max_positions, k_max)
    ctx = context_ids(prompts, n_ctx)
    clock = Clock(next(target.parameters()).device).now
    grid = batch_row_grid(batch_size)
    steps = {b: batch_pass_step(target, ctx, b, k_max) for b in grid}
    shapes = [(b, k) for b in grid for k in range(1, k_max + 1)]
    time_passes(lambda shape: steps[shape[0]](shape[1]), shapes, 1, clock)  # warm-up
    med, spread = median_and_spread(time_passes(lambda shape: steps[shape[0]](shape[1]), shapes, repeats, clock))
    draft_ms: dict[int, float | None] = {b: None for b in grid}
    if draft is not None and not getattr(draft.config, "is_encoder_decoder", False):
        del steps  # the target's caches
        draft_steps = {b: batch_pass_step(draft, ctx, b, 1) for b in grid}
        time_passes(lambda b: draft_steps[b](1), grid, 2, clock)
        draft_ms = {
            b: statistics.median(v)
            for b, v in time_passes(lambda b: draft_steps[b](1), grid, 2 * repeats, clock).items()
        }
    return [
        {
            "rows": b,
            "context_tokens": n_ctx,
            "repeats": repeats,
            "target_ms": {k: med[(b, k)] for k in range(1, k_max + 1)},
            "target_spread": {k: spread[(b, k)] for k in range(1, k_max + 1)},
            "draft_ms": draft_ms[b],
        }
        for b in grid
    ]


def batch_calibration_dict(batch_size: int, per_rows: list[dict], seconds: float) -> dict:
    """The manifest's `batch_calibration` from calibrate_batch_grid (one dict per row count of batch_row_grid(B)): the
    batch's own t(B, k) as before (`target_ms`, `verify_cost` maps γ → t(B, γ+1)/t(B, 1), `draft_cost`), and
    the whole table (`rows`: b → k → ms, `draft_rows_ms`: b → ms) that batch_model prices passes with."""
    own = next(c for c in per_rows if c["rows"] == batch_size)
    med, t1 = own["target_ms"], own["target_ms"][1]
    return {
        "batch_size": batch_size,
        "context_tokens": own["context_tokens"],
        "repeats": own["repeats"],
        "target_ms": {str(k): v for k, v in med.items()},
        "target_spread": {str(k): v for k, v in own["target_spread"].items()},
        "verify_cost": {str(k - 1): v / t1 for k, v in med.items() if k > 1},
        "draft_ms": own["draft_ms"],
        "draft_cost": None if own["draft_ms"] is None else own["draft_ms"] / t1,
        "rows": {str(c["rows"]): {str(k): v for k, v in c["target_ms"].items()} for c in per_rows},
        "draft_rows_ms": ({str(c["rows"]): c["draft_ms"] for c in per_rows} if own["draft_ms"] is not None else None),
        "seconds": seconds,
    }


# --------------------------------------------------------------------------- once per session


def session_curve(
    session: Session, prompts: list[list[int]], k_max: int, max_new_tokens: int, trees: bool = False
) -> Calibration:
    """The target's pass-cost curve for these prompts (and its tree steps', `trees`), measured once per session."""
    key = ("curve", k_max, max_new_tokens, corpus_key(prompts), trees)
    return session.memo(
        key,
        lambda: calibrate(
            session.target_lm(),
            prompts,
            k_max=k_max,
            max_new_tokens=max_new_tokens,
            max_positions=session.target.max_positions,
            dtype=session.load.dtype,
            trees=trees,
        ),
    )


def session_draft_ms(
    session: Session, draft_spec: DraftSpec, prompts: list[list[int]], max_new_tokens: int
) -> float | None:
    """ms per token of the draft's model (None for model-free drafts), measured once per session."""

    def measure() -> float | None:
        caches = model_caches(session.proposer(draft_spec, prompts))
        if not caches:
            return None
        return draft_token_ms(
            caches[0], prompts, max_new_tokens=max_new_tokens, max_positions=session.target.max_positions
        )

    return session.memo(("draft_ms", str(draft_spec), max_new_tokens, corpus_key(prompts)), measure)


def session_batch_curve(
    session: Session, draft_spec: DraftSpec, prompts: list[list[int]], batch_size: int, k_max: int, max_new_tokens: int
) -> dict | None:
    """t(b, k) of the target (and the draft model's batched token, if any) at every row count b of
    batch_row_grid(B), timed interleaved, once per session and batch size (a sweep's ragged and min cells share it);
    None for an encoder-decoder target (no batched pass to time here)."""
    if getattr(session.target.model.config, "is_encoder_decoder", False):
        return None

    def measure() -> dict:
        t_start = time.perf_counter()
        caches = model_caches(session.proposer(draft_spec, prompts))
        per_rows = calibrate_batch_grid(
            session.target.model,
            prompts,
            batch_size=batch_size,
            k_max=k_max,
            max_new_tokens=max_new_tokens,
            max_positions=session.target.max_positions,
            draft=caches[0].model if caches else None,
        )
        return batch_calibration_dict(batch_size, per_rows, time.perf_counter() - t_start)

    return session.memo(("batch", str(draft_spec), batch_size, k_max, max_new_tokens, corpus_key(prompts)), measure)

"""Batched speculative decoding: every row drafts, ONE target pass verifies all rows, each row advances.

A step over the b live rows (the batch-1 loop of decoding/speculative.py, row-wise):
1. Row r drafts γ_r = min(γ, room_r − 1) tokens (drafts.py: one batched draft-model pass, or
   each row's own proposer); γ_r = 0 (one token of budget left) is a plain step for that row.
2. One target pass over [b, max_r γ'_r + 1]: row r feeds [cur_r, x_1..x_γ'_r] left-aligned,
   filler after it masked. Row r's logits rows 0..γ'_r are p_1..p_γ'_r+1 for its own prefix.
3. Each row is verified alone (verify_greedy / verify_sampling, with its own generator):
   n_r accepted and its own correction or bonus token y_r.
4. How far each row advances is the policy:
   - "ragged": row r keeps x_1..x_n_r, y_r (n_r + 1 tokens). No row waits for another. Each row's
     computation is exactly its batch-1 step (same calls, same generator draws, same order), so a
     row's output equals its batch-1 output for the same generator, up to float rounding.
   - "min" (the ablation): every row advances by L = min over rows of (n_r + 1); a row that
     accepted more keeps its first L tokens, x_1..x_L (L ≤ n_r) or x_1..x_n_r, y_r (L = n_r + 1).
5. Each row's target cache is cut back to [.., cur, first L_r − 1 of its new tokens] (the batch-1
   invariant per row: the cache covers every token but the newest) by masking the rejected slots.

Why masks over a shared rectangular cache (cache.py), not per-row caches or compaction every
step: one DynamicCache keeps the verify pass a single batched forward; per-row positions make
every row see its own sequence; a rejected slot costs only its (masked) column until the
rectangle is half holes, when one gather compacts it (amortised O(1) per column). Compacting
every step would copy the whole cache each step for nothing the mask does not already give.

Exactness of "min". Fix a row r and a step. Conditionally on everything before the step, the
other rows' drafts and draws are independent of row r's (each row draws from its own
generator), so M_r = min over s ≠ r of (n_s + 1) is independent of row r's step randomness, and
row r keeps min(n_r + 1, M_r) tokens. For Algorithm 1, each emitted position j has law p_j given
the tokens before it and given that position j is reached (n_r ≥ j − 1):
P(x_j accepted, x_j = x) + P(rejected at j) · residual(x) = min(p_j, q_j)(x) + (1 − β_j) ·
norm(max(0, p_j − q_j))(x) = p_j(x). Truncating at min(n_r + 1, M_r), a cap independent of the
draws that decide positions ≥ j, keeps positions 1..L each with law p_j given its prefix: the
kept prefix has the target's law, the next step starts from it with fresh draws, and the draws
spent on the dropped positions never influence anything again. So each row's output has the
target's law; for every row L is its own stopping point n_r + 1 capped by an independent one.
At T = 0 the same argument is trivial: the kept tokens are the target's argmax chain either way.
(The same holds for any cap that is a function of the other rows only; a cap that looked at
row r's own accepted tokens, e.g. "stop before a token I dislike", would not be exact.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import verify_greedy, verify_sampling
from specbench.decoding.base import BatchProposer, DecodeResult, Proposal, Proposer, Verdict
from specbench.decoding.batched.cache import BatchedCachedModel
from specbench.decoding.batched.drafts import row_drafts
from specbench.decoding.batched.rows import Row, close_batch, new_rows, pick_tokens, still_live
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.sampling import next_token, processed_probs
from specbench.decoding.speculative import count_step
from specbench.decoding.timing import Clock
from specbench.errors import SpecbenchError

POLICIES = ("ragged", "min")


@dataclass
class BatchContext:
    """What every step of one batch shares."""

    target: BatchedCachedModel  # covers every live row's tokens but its newest, between steps
    drafts: BatchProposer  # the drafts' batched form (drafts.py)
    gamma: int
    policy: str  # "ragged" or "min"
    sampling: SamplingConfig
    eos_ids: frozenset[int]
    clock: Clock
    pass_rows: list[int]  # live rows of each target pass after prefill
    pass_widths: list[int]  # tokens per row fed to each such pass


def sliding_window_of(config) -> int | None:
    """The window of a model that attends through a sliding window on some layer, else None (Qwen2 keeps a
    `sliding_window` it does not use unless `use_sliding_window`; Gemma-style configs list `layer_types`)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layers = getattr(config, "layer_types", None) or []
    if "sliding_attention" in layers or getattr(config, "use_sliding_window", True):
        return int(window)
    return None


def decode_speculative_batch(
    target: torch.nn.Module | CachedModel | BatchedCachedModel,
    proposers: Proposer | list[Proposer],
    prompts: list[list[int]],
    *,
    gamma: int,
    policy: str = "ragged",
    max_new_tokens: int | list[int],
    sampling: SamplingConfig,
    eos_ids: frozenset[int],
    generators: list[torch.Generator | None] | None = None,
    pad_id: int = 0,
    clock: Clock | None = None,
) -> list[DecodeResult]:
    """Decode every prompt speculatively; → one DecodeResult per prompt, in order (package docstring)."""
    if policy not in POLICIES:
        raise SpecbenchError(f"unknown batch policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if gamma < 1:
        raise SpecbenchError(f"gamma must be >= 1 (got {gamma})")
    lm = target if isinstance(target, BatchedCachedModel) else BatchedCachedModel(target)
    window = sliding_window_of(lm.model.config)
    if window is not None and len(prompts) > 1:
        # the window counts cache columns, and a rejected draft leaves masked holes inside a row's window
        raise SpecbenchError(
            f"the target attends through a sliding window ({window} tokens): batched speculative "
            f"decoding would shrink each row's window by its rejected drafts; use --batch-size 1"
        )
    rows = new_rows(prompts, max_new_tokens, generators)
    clock = clock or Clock(lm.device)
    ctx = BatchContext(lm, row_drafts(proposers, len(rows), lm.device), gamma, policy, sampling, eos_ids, clock, [], [])
    t0 = clock.now()
    first = pick_tokens(lm.start(prompts, pad_id), sampling, rows)
    ctx.drafts.begin(rows, pad_id)
    for row, tok in zip(rows, first):
        row.emit([tok], eos_ids)
    t1 = clock.now()
    live, keep = still_live(rows, 0.0)
    while live:
        if keep is not None:
            lm.select(keep)
            ctx.drafts.select(keep)
        step(ctx, live)
        live, keep = still_live(live, clock.now() - t1)
    return close_batch(rows, t1 - t0, clock.now() - t0, ctx.pass_rows, ctx.pass_widths)


def step(ctx: BatchContext, live: list[Row]) -> None:
    """One draft + verify step over the live rows (module docstring, 1–5)."""
    ta = ctx.clock.now()
    gammas = [min(ctx.gamma, row.room - 1) for row in live]
    proposals = ctx.drafts.propose(live, gammas, ctx.sampling)
    tb = ctx.clock.now()
    lengths = [p.tokens.shape[0] for p in proposals]
    width = max(lengths) + 1
    cached = ctx.target.lengths  # [b]
    logits = ctx.target.forward(*pass_grid(live, proposals, width, ctx.target.device), all_logits=True)  # [b, w, V]
    verdicts = verify_rows(ctx, live, proposals, logits)
    news = kept_tokens(verdicts, ctx.policy)
    ctx.target.truncate(cached + torch.tensor([len(n) for n in news], device=cached.device))
    tc = ctx.clock.now()
    ctx.pass_rows.append(len(live))
    ctx.pass_widths.append(width)
    for row, g, prop, (_, verdict), new in zip(live, gammas, proposals, verdicts, news):
        count_row(row.res, g, prop, verdict, len(new), ctx.gamma)
        row.res.draft_s += tb - ta
        row.res.verify_s += tc - tb
        row.emit(new, ctx.eos_ids)


def kept_tokens(verdicts: list[tuple[list[int], Verdict]], policy: str) -> list[list[int]]:
    """(drafted ids, verdict) per row → the tokens each row keeps: its accepted prefix and its own
    correction/bonus token (ragged), or the first L = min over rows of (n + 1) of those (min)."""
    news = [drafted[: v.n_accepted] + [v.next_token] for drafted, v in verdicts]
    if policy == "min":
        cap = min(len(n) for n in news)
        news = [n[:cap] for n in news]
    return news


def pass_grid(
    rows: list[Row], proposals: list[Proposal], width: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The verify pass's input: row i = [cur, x_1..x_γ'] then masked filler → (ids [b, w], valid [b, w])."""
    ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
    valid = torch.zeros(len(rows), width, dtype=torch.bool, device=device)
    for i, (row, prop) in enumerate(zip(rows, proposals)):
        g = prop.tokens.shape[0]
        ids[i, 0] = row.tokens[-1]
        ids[i, 1 : g + 1] = prop.tokens
        valid[i, : g + 1] = True
    return ids, valid


def verify_rows(
    ctx: BatchContext, rows: list[Row], proposals: list[Proposal], logits: torch.Tensor
) -> list[tuple[list[int], Verdict]]:
    """Each row verified alone against its own logits rows → (drafted ids on the host, verdict) per row.
    A row with no proposal takes a plain step: its next token from p_1, as the batch-1 plain_step."""
    if ctx.sampling.greedy:  # one host sync for the whole batch
        best = logits.argmax(-1).tolist()  # [b][w]
        drafted = [p.tokens.tolist() for p in proposals]
        return [(d, verify_greedy(d, best[i][: len(d) + 1])) for i, d in enumerate(drafted)]
    out: list = []
    for i, (row, prop) in enumerate(zip(rows, proposals)):
        g = prop.tokens.shape[0]
        if g == 0:
            out.append(([], Verdict(0, int(next_token(logits[i, 0], ctx.sampling, row.generator)), [])))
            continue
        p = processed_probs(logits[i, : g + 1], ctx.sampling)  # [g+1, V]
        out.append((prop.tokens.tolist(), verify_sampling(prop.tokens, prop.q_probs, p, row.generator)))  # type: ignore[arg-type]  # sampling: a proposal carries q_probs
    return out


def count_row(res: DecodeResult, g: int, prop: Proposal, verdict: Verdict, kept: int, gamma: int) -> None:
    """One row's raw counts for one step, with the batch-1 engine's semantics (speculative.count_step)."""
    if g == 0:  # the budget left one token: a plain step, no proposal asked for
        res.target_calls += 1
        res.pass_lengths.append(1)
        res.kept_lengths.append(kept)
        return
    if g == gamma:  # the budget did not shorten γ: the proposer's own length (the law theory needs)
        res.proposal_lengths.append(prop.tokens.shape[0])
    count_step(res, prop, prop.tokens.shape[0], verdict)
    res.kept_lengths.append(kept)

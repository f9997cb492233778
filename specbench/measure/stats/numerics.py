"""Greedy divergences in low precision, explained: numerics of the pass shape, or a candidate bug.

At T = 0 speculative decoding must emit the baseline's tokens. In float32 it does (to the
last token, on every model here). In bfloat16 or float16 it often does not: the target's
logits for a position depend on how many tokens share the pass (a 1-token decode step and a
(γ+1)-token verify pass run different matmul kernels), and on the passes that filled the KV
cache before it, so where the two best logits nearly tie, argmax can flip. HF's assisted
generation shows the same; its maintainers call it expected. This module makes the claim
checkable for every diverging example:

  numerics floor  the baseline's own greedy output re-scored teacher-forced in passes of γ+1
                  tokens (the verifier's shape, one cache path): the share of positions where that
                  argmax differs from the step-by-step one. It is what any multi-token verifier is
                  forced to diverge on by this hardware, whatever its correctness.
  classification  at an example's first divergence d (common prefix out[:d]):
                  - a = the baseline's token at d (what its 1-token passes chose; its top-2 margin from one
                    1-token pass after the prefix);
                  - replay the speculative run's own passes (the recorded pass lengths and accept
                    counts; rejected draft slots filled, which causal attention ignores; a token tree's
                    pass as a tree of its size, its accepted nodes at their recorded slots, `tree_paths`)
                    up to the pass holding d → argmax b and margin;
                  numerics   when a ≠ b and b is the token speculative decoding emitted: the target
                             itself changes its mind under the pass shape alone, at a near-tie;
                  unexplained otherwise (the target agrees with itself, yet a different token was
                             emitted, or the replay cannot reproduce the emitted token): a candidate bug.
An engine whose pass structure is not recorded (HF's assisted generation) is classified by
searching the verify-shaped alignments instead: numerics if some (γ+1)-token chunking of the
common prefix flips the argmax at d.

  margin gate     the replay uses the same multi-token code as the engine, so a bug in that code would
                  reproduce itself and pass for numerics. What the replay cannot fake is the logit gap at d
                  between the baseline's token and the emitted one (`gap`, `gap_ulps`: in spacings of the
                  logit dtype); the floor records the same gap at each of its flips (`floor_flip_ulps`, beside
                  the top-2 margins `floor_flip_margins`). measure/stats/margin_gate.py decides from them and
                  applies the gate over a run's records (`identity_line`).

  bit-exact mode  under --bit-exact every verify pass ran as one-token passes (decoding/stepwise.py), so no pass
                  shape separates the two engines and nothing is left to explain: `explain_bit_exact` records
                  each divergence as unexplained, with no floor, no replay and no margin gate (its margin and gap
                  are written for the reader, never read as an excuse).

Everything here runs after an example's timed decodes, never inside them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from specbench.decoding.autoregressive import prompt_split
from specbench.decoding.cached_model import as_cached
from specbench.decoding.tree import path_tree
from specbench.measure.stats.margin_gate import BIT_EXACT, coarser_dtype, in_spacings


@dataclass
class Divergence:
    """The first divergence of one example, classified."""

    position: int  # index d of the first differing generated token
    kind: str  # "numerics" or "unexplained"
    baseline_token: int  # what the baseline emitted at d
    speculative_token: int | None  # what speculative decoding emitted at d (None: its output ended before d)
    step_argmax: int  # the target's argmax at d under 1-token passes (the baseline's token there)
    verify_argmax: (
        int | None
    )  # the target's argmax at d under the speculative run's passes (replayed), or a flipping chunking
    step_margin: float  # top1 − top2 logit there, a 1-token pass (prefix cached in one pass)
    verify_margin: float | None  # top1 − top2 logit there, verify-shaped passes
    floor_flips_here: bool  # whether the numerics floor (γ+1 chunks of the baseline's output) flips at d
    method: str  # "replay-last-pass" / "replay" (recorded passes: the last one alone, or all) or "alignment-search"
    margin: float | None = None  # the baseline's top-2 logit margin at d (= step_margin)
    gap: float | None = None  # the baseline's logit for its token minus for the emitted one at d (1-token pass)
    gap_ulps: float | None = None  # that gap in spacings of the logit dtype at |its logit|: what the margin gate reads


def top2(logits: torch.Tensor) -> tuple[int, float]:
    """(argmax as the engines take it, top1 − top2 logit). argmax, not topk's first index: on an exact
    tie (common in bf16) the two may name different tokens, and the engines use argmax."""
    top = logits.float().topk(2)
    return int(logits.argmax()), float(top.values[0] - top.values[1])


Prefilled = tuple  # (CachedModel holding the prompt, logits of the prefill's last position, cached length)


def prefill(
    model: torch.nn.Module, prompt_ids: list[int], decoder_start_id: int | None = None, backend=None
) -> Prefilled:
    """The prompt cached once; every replay of one example starts from it (cropped back to it)."""
    lm = as_cached(model, backend)  # the run's backend (or llama.cpp's model): the same kernels as the timed decodes
    encoder_ids, start = prompt_split(lm, prompt_ids, decoder_start_id)
    lm.start(encoder_ids)
    first = lm.forward(torch.tensor(start, device=lm.device))
    return lm, first, lm.length


def replay(
    model: torch.nn.Module,
    prompt_ids: list[int],
    tokens: list[int],
    passes: list[tuple[int, int]],
    upto: int,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> dict[int, torch.Tensor]:
    """Run the target over prompt + `tokens` as the given passes and return the logits row that
    predicts each generated position j ≤ `upto` (position 0 comes from the prefill).

    passes: (fed, kept) per pass after the prefill: `fed` tokens go in one forward, starting with
    the newest emitted token; the first `kept` stay in the cache (the rest are rejected slots,
    filled with the next emitted token: causal attention keeps them out of the kept rows).
    Row i of a pass starting at emitted position a predicts position a + 1 + i, for i < kept.
    A token tree's pass is (fed, kept, path): one masked pass over cur and fed − 1 nodes whose kept tokens sat at
    nodes `path` (rows 1 + node), every other node a filler (tree.path_tree: they are masked out of the path's rows).
    `pad_to`: the runs' exact-shapes padding (every pass fed at least that many tokens).
    """
    lm, first, prompt_len = prefilled or prefill(model, prompt_ids, decoder_start_id, backend)
    lm.truncate(prompt_len)
    dev = lm.device
    rows = {0: first}
    a = 0  # index (into tokens) of the newest token the next pass starts with
    for step in passes:
        fed, kept = step[0], step[1]
        if a + 1 > upto:
            break
        real = tokens[a : a + kept]
        fill = tokens[a + kept] if a + kept < len(tokens) else tokens[-1]
        cached = lm.length
        if len(step) > 2:  # a tree pass; slots: cur at row 0, the path's j-th token at row 1 + path[j]
            path = list(step[2])[: len(real) - 1]
            ids = [real[0]] + [fill] * (fed - 1)
            for j, node in enumerate(path):
                ids[1 + node] = real[1 + j]
            logits = lm.forward_tree(torch.tensor(ids, device=dev), path_tree(fed - 1, path))
            slots = [0] + [1 + node for node in path]
            lm.keep_path(cached, path)
        else:
            ids = real + [fill] * (max(fed, pad_to) - len(real))
            logits = lm.forward(torch.tensor(ids, device=dev), all_logits=True)  # [fed, V]
            slots = list(range(min(kept, len(real))))
            lm.truncate(cached + kept)
        for i, slot in enumerate(slots):
            rows[a + 1 + i] = logits[slot]
        a += kept
    return rows


def step_passes(n_tokens: int) -> list[tuple[int, int]]:
    """The baseline's passes: one token at a time."""
    return [(1, 1)] * max(0, n_tokens - 1)


def chunk_passes(n_tokens: int, size: int, offset: int = 0) -> list[tuple[int, int]]:
    """Teacher-forced verify-shaped passes: `offset` single steps, then chunks of `size` tokens, all kept."""
    passes = [(1, 1)] * min(offset, max(0, n_tokens - 1))
    left = n_tokens - 1 - len(passes)
    while left > 0:
        k = min(size, left)
        passes.append((k, k))
        left -= k
    return passes


def speculative_passes(
    pass_lengths: list[int], accept_lengths: list[int], tree_paths: list | None = None
) -> list[tuple]:
    """The speculative run's passes from its record: a pass over g+1 tokens (g ≥ 1 drafted) kept
    n + 1 of them (n accepted, in recorded order); a 1-token pass kept its token; a step the record's
    `tree_paths` names a tree step is (fed, n + 1, its accepted nodes), replayed as a tree pass."""
    steps = iter(zip(accept_lengths, tree_paths or [None] * len(accept_lengths)))
    out: list[tuple] = []
    for fed in pass_lengths:
        n, path = next(steps) if fed > 1 else (0, None)
        out.append((fed, n + 1) if path is None else (fed, n + 1, tuple(path)))
    return out


def last_pass_only(passes: list[tuple], d: int) -> list[tuple] | None:
    """The pass that predicts position d, preceded by one pass caching everything before it (None when
    that pass is the first, so the plan would be the full replay anyway)."""
    a = 0
    for p in passes:
        if a + 1 <= d <= a + p[1]:
            return [(a, a), p] if a >= 1 else None
        a += p[1]
    return None


def floor_flips(
    model: torch.nn.Module,
    prompt_ids: list[int],
    tokens: list[int],
    gamma: int,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> dict[int, int]:
    """{position: the argmax there} wherever a teacher-forced (γ+1)-chunk pass over the baseline's greedy output
    picks another argmax than the baseline did (position 0, the prefill's, is shared and never counted)."""
    if len(tokens) < 2:
        return {}
    rows = replay(
        model,
        prompt_ids,
        tokens,
        chunk_passes(len(tokens), gamma + 1),
        len(tokens) - 1,
        decoder_start_id,
        backend,
        pad_to,
        prefilled,
    )
    argmax = {j: int(rows[j].argmax()) for j in range(1, len(tokens)) if j in rows}
    return {j: b for j, b in argmax.items() if b != tokens[j]}


def step_row(
    model: torch.nn.Module,
    prompt_ids: list[int],
    tokens: list[int],
    position: int,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> torch.Tensor:
    """The baseline's logits [V] at `position` of its own output: one 1-token pass after the prefix cached in one
    pass (2 forwards instead of d; the cache then differs from the decode's in rounding only)."""
    d = position
    passes = [(max(1, d - 1), max(1, d - 1)), (1, 1)] if d >= 2 else step_passes(d + 1)
    return replay(model, prompt_ids, tokens, passes, d, decoder_start_id, backend, pad_to, prefilled)[d]


def step_margin(
    model: torch.nn.Module,
    prompt_ids: list[int],
    tokens: list[int],
    position: int,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> float:
    """The baseline's top-2 logit margin at `position` of its own output (step_row's)."""
    row = step_row(model, prompt_ids, tokens, position, decoder_start_id, backend, pad_to, prefilled)
    return top2(row)[1]


def logit_gap(model, row: torch.Tensor, a: int, b: int | None) -> tuple[float, float]:
    """(z_a − z_b, the same in spacings of the logit dtype at |z_a|) in a 1-token pass's row: how far a pass shape
    must move the two logits to swap a and b (margin_gate.py). b = None (the other output ended): the runner-up."""
    z = row.float()
    gap = float(z[a] - z[b]) if b is not None else top2(row)[1]
    precision = getattr(model, "logit_precision", None) or getattr(model, "dtype", None)  # llama.cpp: its own
    return gap, in_spacings(gap, float(z[a]), coarser_dtype(row.dtype, precision))


def classify(
    model: torch.nn.Module,
    prompt_ids: list[int],
    baseline: list[int],
    speculative: list[int],
    position: int,
    gamma: int,
    floor: list[int],
    *,
    pass_lengths: list[int] | None = None,
    accept_lengths: list[int] | None = None,
    tree_paths: list | None = None,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> Divergence:
    """Classify the first divergence at `position` (see the module docstring)."""
    d = position
    spec_token = speculative[d] if d < len(speculative) else None
    if d >= len(baseline):  # the speculative output runs past the baseline's end: no pass shape explains that
        return Divergence(d, "unexplained", -1, spec_token, -1, None, float("nan"), None, False, "none")
    # the baseline's argmax at d is the token it emitted (its own replay reproduces it exactly, see the
    # tests); the step-shaped margin and gap come from step_row (2 forwards instead of d)
    a = baseline[d]
    row_a = step_row(model, prompt_ids, baseline, d, decoder_start_id, backend, pad_to, prefilled)
    margin_a = top2(row_a)[1]
    gap, gap_ulps = logit_gap(model, row_a, a, spec_token)
    b = margin_b = None
    if pass_lengths:
        passes = speculative_passes(pass_lengths, accept_lengths or [], tree_paths)
        # first the pass that emitted d alone, its shape exact, after the prefix cached in one pass (3
        # forwards); where that does not reproduce the emitted token, every pass up to d (the exact cache path)
        method, numerics = "replay", False
        for attempt in (last_pass_only(passes, d), passes):
            if attempt is None:
                continue
            rows = replay(model, prompt_ids, speculative, attempt, d, decoder_start_id, backend, pad_to, prefilled)
            if d in rows:
                b, margin_b = top2(rows[d])
            numerics = b is not None and b == spec_token and b != a
            if numerics:
                method = "replay-last-pass" if attempt is not passes else "replay"
                break
    else:  # no pass record: is there a verify-shaped chunking of the common prefix that flips d?
        method = "alignment-search"
        numerics = False
        for offset in range(gamma + 1):
            rows = replay(
                model,
                prompt_ids,
                baseline,
                chunk_passes(len(baseline), gamma + 1, offset),
                d,
                decoder_start_id,
                backend,
                pad_to,
                prefilled,
            )
            if d in rows:
                arg, margin = top2(rows[d])
                if arg != a and (spec_token is None or arg == spec_token):
                    b, margin_b, numerics = arg, margin, True
                    break
    return Divergence(
        position=d,
        kind="numerics" if numerics else "unexplained",
        baseline_token=baseline[d] if d < len(baseline) else -1,
        speculative_token=spec_token,
        step_argmax=a,
        verify_argmax=b,
        step_margin=margin_a,
        verify_margin=margin_b,
        floor_flips_here=d in floor,
        method=method,
        margin=margin_a,
        gap=gap,
        gap_ulps=gap_ulps,
    )


def explain_example(
    model: torch.nn.Module,
    prompt_ids: list[int],
    baseline: dict,
    speculative: dict,
    gamma: int,
    first_divergence: int | None,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
) -> dict:
    """The `numerics` field of one greedy example record: its floor and, if it diverged, the classification
    (`seconds`: what this cost, to set beside the example's timed decodes)."""
    import time

    t0 = time.perf_counter()
    shared = prefill(model, prompt_ids, decoder_start_id, backend)  # one prompt prefill for every replay below
    base = baseline["token_ids"]
    flipped = floor_flips(model, prompt_ids, base, gamma, decoder_start_id, backend, pad_to, shared)
    floor = list(flipped)
    # at each flip, the baseline's 1-token row (2 forwards a flip; flips are rare): its top-2 margin, and the gap
    # between its token and the one the verify-shaped pass chose, in spacings: what the margin gate admits
    rows = {j: step_row(model, prompt_ids, base, j, decoder_start_id, backend, pad_to, shared) for j in floor}
    out = {
        "floor_positions": max(0, len(base) - 1),
        "floor_flips": len(floor),
        "floor_flip_margins": [top2(rows[j])[1] for j in floor],
        "floor_flip_ulps": [logit_gap(model, rows[j], base[j], flipped[j])[1] for j in floor],
        "divergence": None,
    }
    if first_divergence is not None:
        out["divergence"] = asdict(
            classify(
                model,
                prompt_ids,
                baseline["token_ids"],
                speculative["token_ids"],
                first_divergence,
                gamma,
                floor,
                pass_lengths=speculative.get("pass_lengths") or None,
                accept_lengths=speculative.get("accept_lengths"),
                tree_paths=speculative.get("tree_paths"),
                decoder_start_id=decoder_start_id,
                backend=backend,
                pad_to=pad_to,
                prefilled=shared,
            )
        )
    out["seconds"] = time.perf_counter() - t0
    return out


def explain_bit_exact(
    model: torch.nn.Module,
    prompt_ids: list[int],
    baseline: dict,
    speculative: dict,
    first_divergence: int | None,
    decoder_start_id: int | None = None,
    backend=None,
) -> dict:
    """The `numerics` field of one greedy example record under --bit-exact: no floor (no pass shape differs from the
    baseline's), and a divergence, if any, unexplained whatever its margin. The baseline's 1-token row at d gives its
    top-2 margin and the gap to the emitted token (2 forwards), so a reader sees how near a tie the bug struck."""
    import time

    t0 = time.perf_counter()
    out = {"mode": BIT_EXACT, "floor_positions": 0, "floor_flips": 0, "divergence": None}
    d = first_divergence
    if d is not None:
        base, spec = baseline["token_ids"], speculative["token_ids"]
        spec_token = spec[d] if d < len(spec) else None
        if d < len(base):
            row = step_row(model, prompt_ids, base, d, decoder_start_id, backend)
            a, margin = base[d], top2(row)[1]
            gap, gap_ulps = logit_gap(model, row, a, spec_token)
        else:  # the speculative output runs past the baseline's end
            a, margin, gap, gap_ulps = -1, float("nan"), None, None
        out["divergence"] = asdict(
            Divergence(
                position=d,
                kind="unexplained",
                baseline_token=a,
                speculative_token=spec_token,
                step_argmax=a,
                verify_argmax=None,
                step_margin=margin,
                verify_margin=None,
                floor_flips_here=False,
                method=BIT_EXACT,
                margin=margin,
                gap=gap,
                gap_ulps=gap_ulps,
            )
        )
    out["seconds"] = time.perf_counter() - t0
    return out

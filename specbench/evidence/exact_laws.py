"""Exact laws of speculative sampling, computed by enumeration on small tabulated language models.

The model-free evidence (evidence/equality.py) needs target and draft laws that depend on the prefix
and are small enough to enumerate every branch of Algorithm 1. This module holds those models
(`TabulatedLM`: seeded random logits per prefix) and the exact computations on them, in float64:

- `emitted_law`: the law of the token emitted at one position by the implemented rule, with the
  acceptance probability *measured* on the implemented `accepted_count` (a step function of the
  uniform u whose switch `acceptance_measure` locates by bisection) and the runner's `residual`;
  `closed_form_law` is the paper's min(p, q) + (1 − Σ min(p, q))·norm(max(0, p − q)) beside it.
- `sequence_law`: every branch of repeated speculative steps (drafts, accept/reject regions of each
  u_i, correction or bonus draws) → the law of the first emitted tokens; compare it with the
  target's chain-rule law, `target_sequence_law`.
- `tree_step_law`: the same for one token-tree step with fixed nodes (decoding/tree.py): the runner's
  `walk_tree` under every accept/reject script → the law of the tokens the step emits.

The type aliases name the pieces of a step that the negative controls (evidence/controls.py) swap.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count, expected_acceptance, residual, walk_tree
from specbench.decoding.base import Verdict
from specbench.decoding.sampling import processed_probs
from specbench.decoding.tree import TokenTree

Prefix = tuple[int, ...]
LawFn = Callable[[Prefix], torch.Tensor]  # prefix → [V] processed target law p(· | prefix)
DraftFn = Callable[[Prefix], tuple[torch.Tensor, torch.Tensor]]  # prefix → ([V] law drawn from, [V] law reported as q)
CountFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], int]  # accepted_count's signature
ResidualFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # residual's signature
VerifyFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator | None], Verdict]  # verify_sampling's
RowsFn = Callable[[torch.Tensor], torch.Tensor]  # [γ+1, V] target laws → the rows the verifier actually uses
# verify_tree_sampling's signature: (tree, node ids, q [n, V] or None = point masses, p [n+1, V], generator) → Verdict
TreeVerifyFn = Callable[[TokenTree, list[int], torch.Tensor | None, torch.Tensor, torch.Generator | None], Verdict]


def as_verified(p: torch.Tensor) -> torch.Tensor:
    """The correct verifier uses the target's rows as they are."""
    return p


# ---------------------------------------------------------------------------------------------
# Small tabulated language models: conditional laws that depend on the prefix


class TabulatedLM:
    """Fixed random logits for every prefix on a small vocabulary (seeded by the prefix, memoised).

    With `base`, the logits are base's plus `noise`·N(0, 1): a draft close to its target,
    so that both the accept and the reject branches carry mass.
    """

    def __init__(self, vocab: int, seed: int, scale: float = 2.0, base: TabulatedLM | None = None, noise: float = 0.0):
        self.vocab, self.seed, self.scale, self.base, self.noise = vocab, seed, scale, base, noise
        self._memo: dict[Prefix, torch.Tensor] = {}

    def logits(self, prefix: Prefix) -> torch.Tensor:
        """[V] float32 logits after `prefix`."""
        if prefix not in self._memo:
            # crc32, not hash(): the same laws on every Python version and machine
            g = torch.Generator().manual_seed(zlib.crc32(repr((self.seed, prefix)).encode()))
            z = torch.randn(self.vocab, generator=g)
            self._memo[prefix] = self.base.logits(prefix) + self.noise * z if self.base else self.scale * z
        return self._memo[prefix]


def memo(fn: Callable) -> Callable:
    cache: dict = {}

    def wrapped(prefix):
        if prefix not in cache:
            cache[prefix] = fn(prefix)
        return cache[prefix]

    return wrapped


def target_laws(lm: TabulatedLM, cfg: SamplingConfig) -> LawFn:
    """p(· | prefix): the processed law the runner verifies against."""
    return memo(lambda prefix: processed_probs(lm.logits(prefix), cfg))


def honest_draft(lm: TabulatedLM, cfg: SamplingConfig) -> DraftFn:
    """A correct draft: draws from exactly the processed law q it reports."""

    def laws(prefix):
        q = processed_probs(lm.logits(prefix), cfg)
        return q, q

    return memo(laws)


# ---------------------------------------------------------------------------------------------
# Exact laws


def f64(law: torch.Tensor) -> torch.Tensor:
    """A float32 law in float64, renormalised: exact laws are compared at 1e-6, float32 sums are off by ~1e-7."""
    law = law.double()
    return law / law.sum(-1, keepdim=True)


def acceptance_measure(
    count: CountFn, token: int, p_row: torch.Tensor, q_row: torch.Tensor
) -> tuple[float, float, float]:
    """(P(accept), a u in the accept region, a u in the reject region) of a one-token draft under `count`.

    `count` is evaluated as the runner calls it; u ↦ accepted is a step function of u ∈ [0, 1).
    A 17-point grid finds its switch, bisection pins it to 2^-50. A rule with several switches (no
    sane rule has them) is measured on the grid only, which is approximate and never exact.
    """
    tok, q, p = torch.tensor([token]), q_row[None], p_row[None]

    def accepted(u: float) -> bool:
        return count(tok, q, p, torch.tensor([u], dtype=torch.float64)) > 0

    grid = [i / 16 for i in range(16)] + [1.0 - 2.0**-40]
    vals = [accepted(u) for u in grid]
    switches = [i for i in range(len(grid) - 1) if vals[i] != vals[i + 1]]
    if not switches:
        return (1.0, 0.5, 0.5) if vals[0] else (0.0, 0.5, 0.5)
    if len(switches) > 1:
        frac = sum(vals) / len(vals)
        return frac, grid[vals.index(True)], grid[vals.index(False)]
    lo, hi = grid[switches[0]], grid[switches[0] + 1]
    for _ in range(46):  # interval 1/16 → 2^-50
        mid = (lo + hi) / 2
        if accepted(mid) == vals[0]:
            lo = mid
        else:
            hi = mid
    t = (lo + hi) / 2
    if vals[0]:  # accept on [0, t)
        return t, t / 2, (t + 1) / 2
    return 1.0 - t, (t + 1) / 2, t / 2  # accept on (t, 1)


def closed_form_law(p: torch.Tensor, q: torch.Tensor, residual_fn: ResidualFn = residual) -> torch.Tensor:
    """The paper's law of one emitted token: min(p, q) + (1 − Σ min(p, q))·norm(max(0, p − q)), [V]."""
    beta = expected_acceptance(p[None], q[None])[0]
    return torch.minimum(p, q) + (1.0 - beta) * residual_fn(p, q)


def emitted_law(
    p: torch.Tensor,
    q: torch.Tensor,
    drawn: torch.Tensor | None = None,
    *,
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
) -> torch.Tensor:
    """Law [V] of the token emitted at one position by the implemented rule.

    x ~ drawn (default q, the law reported to the verifier); accepted with the probability
    `count` gives it; otherwise the correction is drawn from residual_fn(p, q).
    """
    drawn = q if drawn is None else drawn
    accept = torch.zeros_like(p)
    for x in drawn.nonzero().flatten().tolist():
        accept[x] = drawn[x] * acceptance_measure(count, x, p, q)[0]
    return accept + (1.0 - accept.sum()) * residual_fn(p, q)


def target_sequence_law(target: LawFn, length: int, prefix: Prefix = ()) -> dict[Prefix, float]:
    """Chain-rule law of the next `length` tokens: {(x1..xL): Π p(x_i | prefix, x_<i)}."""
    law: dict[Prefix, float] = {(): 1.0}
    for _ in range(length):
        nxt: dict[Prefix, float] = {}
        for seq, w in law.items():
            p = f64(target(prefix + seq))
            for x in p.nonzero().flatten().tolist():
                nxt[seq + (x,)] = w * float(p[x])
        law = nxt
    return law


def draft_paths(draft: DraftFn, pre: Prefix, gamma: int) -> dict[Prefix, float]:
    """Every γ-token draft after `pre` with its probability under the draft's drawn laws."""
    paths: dict[Prefix, float] = {(): 1.0}
    for _ in range(gamma):
        longer: dict[Prefix, float] = {}
        for xs, w in paths.items():
            drawn = f64(draft(pre + xs)[0])  # [V]
            for x in drawn.nonzero().flatten().tolist():
                longer[xs + (x,)] = w * float(drawn[x])
        paths = longer
    return paths


def acceptance_regions(measures: list[tuple[float, float, float]]) -> list[tuple[float, torch.Tensor]]:
    """Every accept/reject pattern of u_1..u_γ as (its measure, a representative u vector [γ]).

    `measures[i]` is acceptance_measure's (P(accept), a u that accepts, a u that rejects) at position i."""
    regions: list[list[tuple[float, float]]] = [[]]
    for a, u_acc, u_rej in measures:
        regions = [r + [(m, u)] for r in regions for m, u in ((a, u_acc), (1.0 - a, u_rej)) if m > 0]
    return [(math.prod(m for m, _ in r), torch.tensor([u for _, u in r], dtype=torch.float64)) for r in regions]


def sequence_law(
    target: LawFn,
    draft: DraftFn,
    *,
    gamma: int,
    length: int,
    prefix: Prefix = (),
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
    verified: RowsFn = as_verified,
) -> dict[Prefix, float]:
    """Exact law of the first `length` tokens emitted by repeated speculative steps, by enumeration.

    Each step drafts x_1..x_γ from the draft's drawn laws, runs `count` on every combination of
    accept/reject regions of u_1..u_γ (each region's measure from `acceptance_measure`, so the
    joint behaviour of `count` across positions is what decides n), then draws the correction
    from residual_fn(p_{n+1}, q_{n+1}) or the bonus token from p_{γ+1}. Cost grows as V^γ·2^γ·V
    per step and prefix: keep V ≤ 8 and γ ≤ 3. `verified` maps the target's γ+1 rows to those the
    verifier uses (a control's off-by-one or one-sided temperature; the correct verifier's are the rows).
    """
    laws: dict = {}

    def step(pre: Prefix) -> dict[Prefix, float]:
        """Law of the tokens one step emits after `pre`."""
        out: dict[Prefix, float] = defaultdict(float)
        for xs, w in draft_paths(draft, pre, gamma).items():
            ctx = [pre + xs[:i] for i in range(gamma + 1)]
            p = f64(verified(torch.stack([f64(target(c)) for c in ctx])))  # [γ+1, V]
            q = torch.stack([f64(draft(c)[1]) for c in ctx[:gamma]])  # [γ, V]
            regions = acceptance_regions([acceptance_measure(count, xs[i], p[i], q[i]) for i in range(gamma)])
            tokens = torch.tensor(xs)
            for weight, u in regions:
                n = count(tokens, q, p[:gamma], u)
                law = residual_fn(p[n], q[n]) if n < gamma else p[gamma]
                for y in law.nonzero().flatten().tolist():
                    out[xs[:n] + (y,)] += w * weight * float(law[y])
        return dict(out)

    def first(pre: Prefix, remaining: int) -> dict[Prefix, float]:
        key = (pre, remaining)
        if key not in laws:
            out: dict[Prefix, float] = defaultdict(float)
            for emitted, w in step(pre).items():
                if len(emitted) >= remaining:
                    out[emitted[:remaining]] += w
                else:
                    for rest, v in first(pre + emitted, remaining - len(emitted)).items():
                        out[emitted + rest] += w * v
            laws[key] = dict(out)
        return laws[key]

    return dict(first(prefix, length))


def marginal(law: Mapping[Prefix, float], position: int) -> dict[Prefix, float]:
    """Law (or counts) of the token at `position` (0-based) of sequences keyed by token tuples."""
    out: dict[Prefix, float] = defaultdict(float)
    for seq, w in law.items():
        if len(seq) > position:
            out[(seq[position],)] += w
    return dict(out)


class _Fork(Exception):
    """tree_step_law's scripted decisions ran out: both outcomes of the next one are enumerated."""


class _Impossible(Exception):
    """tree_step_law's script took a decision of probability 0: the branch carries no mass."""


def tree_step_law(
    tree: TokenTree,
    tokens: list[int],
    q: torch.Tensor | None,
    p: torch.Tensor,
    *,
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
) -> dict[Prefix, float]:
    """Exact law of the tokens one tree step emits for fixed nodes: {path tokens + (next,): probability}.

    tokens: the n node ids; q: [n, V] (None: point masses, a deterministic draft's); p: [n+1, V] the target's
    processed laws at [cur, nodes] (float64 for a 1e-6 comparison). The runner's `walk_tree` runs under every
    accept/reject script; each decision is weighted by `acceptance_measure` of `count` on the law the walk hands
    it (so the walk's own residuals decide), then the final law the walk returns gives the next token. A node
    drawn from its q (not a point mass) is the caller's to enumerate: this fixes the nodes.
    """
    measures: dict = {}
    out: dict[Prefix, float] = defaultdict(float)
    scripts: list[tuple[bool, ...]] = [()]
    while scripts:
        script = scripts.pop()
        weights: list[float] = []

        def decide(token: int, law: torch.Tensor, q_x: torch.Tensor, script=script, weights=weights) -> bool:
            if len(weights) == len(script):
                raise _Fork
            key = (token, law.cpu().numpy().tobytes(), q_x.cpu().numpy().tobytes())
            if key not in measures:
                measures[key] = acceptance_measure(count, token, law, q_x)[0]
            weights.append(measures[key] if script[len(weights)] else 1.0 - measures[key])
            if weights[-1] <= 0.0:
                raise _Impossible
            return script[len(weights) - 1]

        try:
            path, law, _ = walk_tree(tree, tokens, q, p, decide, residual_fn)
        except _Fork:
            scripts += [script + (True,), script + (False,)]
            continue
        except _Impossible:
            continue
        weight = math.prod(weights)
        for y in law.nonzero().flatten().tolist():
            out[tuple(tokens[i] for i in path) + (y,)] += weight * float(law[y])
    return dict(out)

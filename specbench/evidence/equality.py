"""Evidence that speculative sampling emits exactly the target's law, as pure functions.

Three kinds of evidence, each built from the runner's own pieces so that a bug there shows:

1. Exact laws. `emitted_law` gives the law of the token emitted at one position from the
   closed form min(p, q) + (1 − Σ min(p, q))·norm(max(0, p − q)), with the acceptance
   probability *measured* on the implemented rule (`accepted_count` is a step function of
   the uniform u; we locate its switch by bisection) and the runner's `residual`.
   `sequence_law` enumerates every branch of Algorithm 1 (drafts, accept/reject regions of
   each u_i, correction or bonus draws) over small tabulated conditional laws and returns the
   law of the first emitted tokens; compare it with the target's chain-rule law.
2. Statistical tests of the implemented step: `sample_sequences` draws N outputs through
   the real `verify_sampling`; `gof_check` (G-test) and `tv_check` (a Bretagnolle–Huber–Carol
   bound on the total variation) compare the counts with the exact target law, per position
   and jointly. Every check states its N, level and power.
3. Negative controls (`CONTROLS`): the bugs peers made, as small variants of the step fed
   through the same checks; the tests assert that each one fails.

Power of the chi-square-type tests (one-sample with N draws, or two-sample with n_eff =
n1·n2/(n1+n2)): under an alternative at total variation δ from H0 on the tested cells the
Pearson noncentrality is λ = n_eff·Σ d²/w ≥ 4·n_eff·δ² (Cauchy–Schwarz on the positive and
negative parts of d, each carrying mass δ), so power ≥ P(χ²_df(4·n_eff·δ²) > χ²_df,1−α) for
*every* such alternative (asymptotic; the G statistic ≈ Pearson's X²).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import torch
from scipy import optimize, stats

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count, expected_acceptance, residual, verify_sampling
from specbench.decoding.base import Verdict
from specbench.decoding.sampling import processed_probs, sample
from specbench.measure.metrics import json_safe  # noqa: F401  (re-exported: verification imports it from here)

Prefix = tuple[int, ...]
K = TypeVar("K", bound=Hashable)  # a cell of a law: a token, or a tuple of tokens
LawFn = Callable[[Prefix], torch.Tensor]  # prefix → [V] processed target law p(· | prefix)
DraftFn = Callable[[Prefix], tuple[torch.Tensor, torch.Tensor]]  # prefix → ([V] law drawn from, [V] law reported as q)
CountFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], int]  # accepted_count's signature
ResidualFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # residual's signature
VerifyFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator | None], Verdict]  # verify_sampling's
RowsFn = Callable[[torch.Tensor], torch.Tensor]  # [γ+1, V] target laws → the rows the verifier actually uses


def as_verified(p: torch.Tensor) -> torch.Tensor:
    """The correct verifier uses the target's rows as they are."""
    return p


LEVEL = 1e-3  # default level α of every statistical check
ALT_TV = 0.05  # default alternative for the stated power: any law at total variation ≥ 0.05 from H0
TARGET_POWER = 0.8  # a check that did not reject says "pass" only at this power against its alternative
MIN_EXPECTED = 5.0  # cells expected fewer times than this are pooled before a chi-square-type test


@dataclass
class CheckResult:
    """One piece of evidence, as written to checks.json."""

    name: str  # what was checked, e.g. "step/T=0.8,k=8,p=0.95/joint2/gof"
    kind: str  # "exact", "gof" (one-sample G-test), "tv" (BHC total-variation bound), "homogeneity", "identity"
    statistic: float  # max abs error (exact), G (gof), TV (tv), X² (homogeneity), mismatch rate (identity)
    p_value: float | None  # None where no probability statement is made (exact, identity)
    n: int  # samples (draws, or prompts for identity); 0 for exact computations
    threshold: float  # level α of the test, the tolerance of an exact comparison; NaN (null) where measured per case
    power: float | None  # power against `alternative`; None where not applicable
    alternative: str  # the alternative `power` refers to
    passed: bool  # the test did not reject (an exact comparison: within tolerance); see `verdict` for "pass"
    detail: dict = field(default_factory=dict)  # JSON-serialisable specifics (df, bins, bounds, divergences)
    n_needed: int | None = None  # about how many samples (in the unit of n) would give power TARGET_POWER

    @property
    def verdict(self) -> str:
        """ "fail" when the test rejects; "pass" only when it could have failed (power ≥ TARGET_POWER against
        `alternative`, or no probability statement: exact computations, greedy identity); else "inconclusive"."""
        if not self.passed:
            return "fail"
        if self.power is None or self.power >= TARGET_POWER:
            return "pass"
        return "inconclusive"

    def verdict_text(self) -> str:
        """The verdict as a reader sees it: "inconclusive (power 0.12; about 4,500 samples would reach 0.8)"."""
        if self.verdict != "inconclusive":
            return self.verdict
        need = f"; about {self.n_needed:,} samples would reach {TARGET_POWER:g}" if self.n_needed else ""
        return f"inconclusive (power {self.power:.2f}{need})"

    def to_dict(self) -> dict:
        """Strict-JSON-ready: non-finite floats (G = ∞ after a draw outside the support) become None."""
        return json_safe({**asdict(self), "verdict": self.verdict})


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


def exact_check(
    name: str,
    law: Mapping[K, float],
    reference: Mapping[K, float],
    *,
    tol: float = 1e-6,
    detail: dict | None = None,
) -> CheckResult:
    """max_x |law(x) − reference(x)| ≤ tol, over the union of both supports."""
    cells = set(law) | set(reference)
    errs = {c: abs(law.get(c, 0.0) - reference.get(c, 0.0)) for c in cells}
    worst = max(errs, key=lambda c: errs[c]) if errs else None
    err = errs[worst] if worst is not None else 0.0
    info = {
        "cells": len(cells),
        "worst_cell": _cell_str(worst) if worst is not None else None,
        "law_mass": sum(law.values()),
        **(detail or {}),
    }
    return CheckResult(
        name=name,
        kind="exact",
        statistic=err,
        p_value=None,
        n=0,
        threshold=tol,
        power=None,
        alternative="exact computation in float64: any error above the tolerance fails",
        passed=bool(err <= tol),
        detail=info,
    )


def _vector_law(v: torch.Tensor) -> dict[Prefix, float]:
    return {(x,): float(v[x]) for x in v.nonzero().flatten().tolist()}


def one_position_check(
    name: str,
    p: torch.Tensor,
    q: torch.Tensor,
    *,
    count: CountFn = accepted_count,
    residual_fn: ResidualFn = residual,
    drawn: torch.Tensor | None = None,
    tol: float = 1e-6,
    verified: RowsFn = as_verified,
) -> CheckResult:
    """The law of one emitted token equals p: closed form and implemented rule, compared in float64.

    Also checks that the implemented acceptance rate equals `expected_acceptance` (Σ min(p, q)),
    the figure the runner records as β.
    """
    p64, q64 = f64(p), f64(q)
    v64 = f64(verified(p64[None])[0])  # the row the verifier uses (one row: an off-by-one has no later row here)
    drawn64 = None if drawn is None else f64(drawn)
    implemented = emitted_law(v64, q64, drawn64, count=count, residual_fn=residual_fn)
    closed = closed_form_law(v64, q64, residual_fn)
    src = q64 if drawn64 is None else drawn64
    rate = sum(float(src[x]) * acceptance_measure(count, x, v64, q64)[0] for x in src.nonzero().flatten().tolist())
    beta = float(expected_acceptance(p64[None], q64[None])[0])
    res = exact_check(name, _vector_law(implemented), _vector_law(p64), tol=tol)
    closed_err = float((closed - p64).abs().max())
    rate_err = abs(rate - beta)
    res.statistic = max(res.statistic, closed_err, rate_err)
    res.passed = bool(res.statistic <= tol)
    res.detail.update(
        {
            "closed_form_error": closed_err,
            "acceptance_rate": rate,
            "expected_acceptance": beta,
            "acceptance_rate_error": rate_err,
        }
    )
    return res


# ---------------------------------------------------------------------------------------------
# Sampling the implemented step


def sample_sequences(
    target: LawFn,
    draft: DraftFn,
    *,
    gamma: int,
    length: int,
    n: int,
    generator: torch.Generator,
    verify: VerifyFn = verify_sampling,
    prefix: Prefix = (),
) -> Counter:
    """Counts of the first `length` tokens emitted in n independent runs of speculative steps.

    Every accept/reject decision and correction/bonus draw is one call of `verify` (the runner's
    `verify_sampling` by default) on float32 laws, as in decode_speculative. Only drafting is
    batched: runs in the same state draw their drafts with one multinomial per prefix, which
    is the same law as drawing them one by one.
    """
    done: Counter = Counter()
    pending: Counter = Counter({(): n})  # emitted so far → number of runs in that state
    tensors: dict = {}
    while pending:
        nxt: Counter = Counter()
        for emitted, m in pending.items():
            pre = prefix + emitted
            for xs, c in _draw_drafts(draft, pre, gamma, m, generator).items():
                key = (pre, xs)
                if key not in tensors:
                    ctx = [pre + xs[:i] for i in range(gamma + 1)]
                    tensors[key] = (
                        torch.tensor(xs),
                        torch.stack([draft(x)[1] for x in ctx[:gamma]]),
                        torch.stack([target(x) for x in ctx]),
                    )
                tokens, q, p = tensors[key]
                for _ in range(c):
                    v = verify(tokens, q, p, generator)
                    out = emitted + xs[: v.n_accepted] + (v.next_token,)
                    if len(out) >= length:
                        done[out[:length]] += 1
                    else:
                        nxt[out] += 1
        pending = nxt
    return done


def _draw_drafts(draft: DraftFn, pre: Prefix, gamma: int, m: int, generator: torch.Generator) -> Counter:
    """Counts of m drafts of γ tokens after `pre`, each token drawn from the draft's drawn law."""
    groups: Counter = Counter({(): m})
    for _ in range(gamma):
        nxt: Counter = Counter()
        for xs, c in groups.items():
            drawn = draft(pre + xs)[0]
            ids = torch.multinomial(drawn, c, replacement=True, generator=generator)
            for x, k in Counter(ids.tolist()).items():
                nxt[xs + (x,)] += k
        groups = nxt
    return groups


# ---------------------------------------------------------------------------------------------
# Statistical checks


def gof_power(df: int, n_eff: float, tv: float, level: float) -> float:
    """Lower bound on the power of a level-α chi-square test with df degrees of freedom against any
    alternative at total variation ≥ tv on the tested cells (noncentrality ≥ 4·n_eff·tv²)."""
    if df < 1 or n_eff <= 0:
        return 0.0
    return float(stats.ncx2.sf(stats.chi2.isf(level, df), df, 4.0 * n_eff * tv * tv))


def detectable_tv(df: int, n_eff: float, level: float, power: float = 0.8) -> float | None:
    """Smallest total variation detected with at least `power` by gof_power's bound; None if none ≤ 1."""
    if df < 1 or n_eff <= 0:
        return None
    tv = math.sqrt(_noncentrality_for_power(df, level, power) / (4.0 * n_eff))
    return tv if tv <= 1.0 else None


def samples_for_power(df: int, tv: float, level: float, power: float = TARGET_POWER) -> int | None:
    """Effective sample size n_eff at which gof_power's bound reaches `power` against total variation `tv`
    (df held at its current value: pooling changes it a little with n, hence "about")."""
    if df < 1 or tv <= 0:
        return None
    return math.ceil(_noncentrality_for_power(df, level, power) / (4.0 * tv * tv))


@functools.lru_cache(maxsize=1024)
def _noncentrality_for_power(df: int, level: float, power: float) -> float:
    """λ at which a level-α chi-square test with df degrees of freedom has the given power."""
    crit = stats.chi2.isf(level, df)
    hi = 1.0
    while stats.ncx2.sf(crit, df, hi) < power:
        hi *= 2
    return float(optimize.brentq(lambda lam: stats.ncx2.sf(crit, df, lam) - power, 0.0, hi, xtol=1e-9, rtol=1e-10))


def _cell_str(cell) -> str:
    return ",".join(map(str, cell)) if isinstance(cell, tuple) else str(cell)


def _pool(expected: Mapping[K, float], min_expected: float) -> tuple[dict[K, int], int]:
    """(cell → bin, number of pooled cells): cells with expected count < min_expected share bin 0,
    grown from the smallest remaining cells until it reaches min_expected itself (or holds everything)."""
    order = sorted(expected, key=lambda c: (expected[c], _cell_str(c)))
    rare = [c for c in order if expected[c] < min_expected]
    rest = order[len(rare) :]
    while rare and sum(expected[c] for c in rare) < min_expected and rest:
        rare.append(rest.pop(0))
    bins = {c: 0 for c in rare}
    for i, c in enumerate(rest):
        bins[c] = i + 1 if rare else i
    return bins, len(rare)


def gof_check(
    name: str,
    counts: Mapping[K, float],
    law: Mapping[K, float],
    *,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    min_expected: float = MIN_EXPECTED,
) -> CheckResult:
    """G-test of counts against an exact law, rare cells pooled; a draw outside the law's support fails outright."""
    n = int(sum(counts.values()))
    support = {c: w for c, w in law.items() if w > 0}
    impossible = {c: k for c, k in counts.items() if c not in support and k > 0}
    bins, pooled = _pool({c: n * w for c, w in support.items()}, min_expected)
    nb = max(bins.values(), default=-1) + 1
    obs, exp = [0.0] * nb, [0.0] * nb
    for c, b in bins.items():
        obs[b] += counts.get(c, 0)
        exp[b] += n * support[c]
    df = nb - 1
    if impossible:
        g, p_value = math.inf, 0.0
    elif df >= 1:
        # the G-test; the law's float32 rounding can leave Σexp a few 1e-8 off Σobs, which scipy refuses
        exp = [e * n / sum(exp) for e in exp]
        g, p_value = (float(v) for v in stats.power_divergence(obs, exp, lambda_="log-likelihood"))
    else:
        g, p_value = 0.0, 1.0
    worst = sorted(((abs(counts.get(c, 0) / n - w), c) for c, w in support.items()), reverse=True)[:5] if n else []
    detail = {
        "df": df,
        "cells": len(support),
        "bins": nb,
        "pooled_cells": pooled,
        "impossible": {_cell_str(c): k for c, k in impossible.items()},
        "tv_detectable_at_80pct_power": detectable_tv(df, n, level),
        "largest_deviations": [
            {"cell": _cell_str(c), "observed": counts.get(c, 0) / n, "expected": law[c]} for _, c in worst
        ],
    }
    return CheckResult(
        name=name,
        kind="gof",
        statistic=g,
        p_value=p_value,
        n=n,
        threshold=level,
        power=gof_power(df, n, alt_tv, level),
        alternative=f"any law at total variation >= {alt_tv:g} from the target's on the tested bins",
        passed=bool(p_value > level),
        detail=detail,
        n_needed=samples_for_power(df, alt_tv, level),
    )


def tv_check(
    name: str,
    counts: Mapping[K, float],
    law: Mapping[K, float],
    *,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    min_expected: float = MIN_EXPECTED,
) -> CheckResult:
    """Total variation between the empirical and the exact law, against a distribution-free bound.

    Bretagnolle–Huber–Carol: P(‖p̂ − p‖₁ ≥ ε) ≤ 2^k·exp(−Nε²/2) over k bins, so TV(p̂, p) ≤
    b = sqrt((k·ln 2 + ln(1/α)) / (2N)) with probability ≥ 1 − α, and 2^k·exp(−2N·TV²) is a valid
    p-value. Bins are gof_check's (rare cells pooled) plus one for draws outside the support.
    Power against any law at TV δ > b on those bins (triangle inequality, the same bound around the
    alternative): ≥ 1 − 2^k·exp(−2N(δ − b)²); it reaches `power` at N = (√(k ln 2 + ln(1/α)) +
    √(k ln 2 + ln(1/(1 − power))))² / (2δ²).
    """
    n = int(sum(counts.values()))
    support = {c: w for c, w in law.items() if w > 0}
    bins, _ = _pool({c: n * w for c, w in support.items()}, min_expected)
    nb = max(bins.values(), default=-1) + 1
    obs, exp = [0.0] * nb, [0.0] * nb
    for c, b in bins.items():
        obs[b] += counts.get(c, 0)
        exp[b] += support[c]
    outside = sum(k for c, k in counts.items() if c not in support)
    tv = 0.5 * (sum(abs(o / n - e) for o, e in zip(obs, exp)) + outside / n) if n else 0.0
    k = nb + 1
    bound = math.sqrt((k * math.log(2) + math.log(1 / level)) / (2 * n)) if n else math.inf
    p_value = math.exp(min(0.0, k * math.log(2) - 2 * n * tv * tv))
    return CheckResult(
        name=name,
        kind="tv",
        statistic=tv,
        p_value=p_value,
        n=n,
        threshold=level,
        power=tv_power(k, n, alt_tv, level),
        alternative=f"any law at total variation >= {alt_tv:g} from the target's on the tested bins",
        passed=bool(tv <= bound),
        detail={"bound": bound, "bins": k, "guaranteed_power_at_tv": 2 * bound},
        n_needed=tv_samples_for_power(k, alt_tv, level),
    )


def tv_power(bins: int, n: int, tv: float, level: float) -> float:
    """Lower bound on tv_check's power against any law at total variation `tv` (see tv_check)."""
    if n <= 0:
        return 0.0
    bound = math.sqrt((bins * math.log(2) + math.log(1 / level)) / (2 * n))
    if tv <= bound:
        return 0.0
    return max(0.0, 1.0 - math.exp(min(0.0, bins * math.log(2) - 2 * n * (tv - bound) ** 2)))


def tv_samples_for_power(bins: int, tv: float, level: float, power: float = TARGET_POWER) -> int | None:
    """Draws at which tv_power reaches `power` (closed form, see tv_check)."""
    if tv <= 0:
        return None
    c1, c2 = bins * math.log(2) + math.log(1 / level), bins * math.log(2) + math.log(1 / (1 - power))
    return math.ceil((math.sqrt(c1) + math.sqrt(c2)) ** 2 / (2 * tv * tv))


def homogeneity_check(
    name: str,
    counts_a: Mapping[Hashable, int],
    counts_b: Mapping[Hashable, int],
    *,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    min_expected: float = MIN_EXPECTED,
) -> CheckResult:
    """Pearson chi-square test that two samples share one law (2 × bins table, rare cells pooled)."""
    na, nb_ = int(sum(counts_a.values())), int(sum(counts_b.values()))
    total = na + nb_
    pooled = Counter(counts_a) + Counter(counts_b)
    # a cell's smaller expected count (under H0) decides pooling
    bins, n_pooled = _pool({c: min(na, nb_) * k / total for c, k in pooled.items()}, min_expected)
    nbins = max(bins.values(), default=-1) + 1
    oa, ob = [0.0] * nbins, [0.0] * nbins
    for c, b in bins.items():
        oa[b] += counts_a.get(c, 0)
        ob[b] += counts_b.get(c, 0)
    df = nbins - 1
    if na and nb_ and df >= 1:  # every bin holds a draw, so no expected count is zero
        x2, p_value, _, _ = stats.chi2_contingency([oa, ob], correction=False)
        x2, p_value = float(x2), float(p_value)
    else:
        x2, p_value = 0.0, 1.0
    n_eff = na * nb_ / total if total else 0.0
    tv = 0.5 * sum(abs(a / na - b / nb_) for a, b in zip(oa, ob)) if na and nb_ else 0.0
    return CheckResult(
        name=name,
        kind="homogeneity",
        statistic=x2,
        p_value=p_value,
        n=total,
        threshold=level,
        power=gof_power(df, n_eff, alt_tv, level),
        alternative=f"two laws at total variation >= {alt_tv:g} on the tested bins",
        passed=bool(p_value > level),
        # n = n_a + n_b; equal halves give n_eff = n/4
        n_needed=None if (need := samples_for_power(df, alt_tv, level)) is None else 4 * need,
        detail={
            "df": df,
            "cells": len(pooled),
            "bins": nbins,
            "pooled_cells": n_pooled,
            "n_a": na,
            "n_b": nb_,
            "empirical_tv": tv,
            "tv_detectable_at_80pct_power": detectable_tv(df, n_eff, level),
        },
    )


def sample_checks(
    label: str,
    counts: Mapping[Prefix, int],
    law: Mapping[Prefix, float],
    *,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
) -> list[CheckResult]:
    """G-test and TV bound for every position and for the joint law of all positions."""
    length = max((len(s) for s in law), default=0)
    parts: list[tuple[str, Mapping[Prefix, float], Mapping[Prefix, float]]] = (
        [(f"pos{i + 1}", marginal(counts, i), marginal(law, i)) for i in range(length)] if length > 1 else []
    )
    parts.append((f"joint{length}" if length > 1 else "pos1", counts, law))
    out = []
    for part, c, w in parts:
        out.append(gof_check(f"{label}/{part}/gof", c, w, level=level, alt_tv=alt_tv))
        out.append(tv_check(f"{label}/{part}/tv", c, w, level=level, alt_tv=alt_tv))
    return out


# ---------------------------------------------------------------------------------------------
# Negative controls: the peers' bugs, as variants of the pieces above


def count_always(draft_tokens, q, p, u) -> int:
    """Control: every drafted token accepted."""
    return int(draft_tokens.shape[0])


def count_past_rejection(draft_tokens, q, p, u) -> int:
    """Control: acceptances counted past the first rejection (a sum where a cumulative product belongs)."""
    idx = torch.arange(draft_tokens.shape[0])
    return int((u * q[idx, draft_tokens] < p[idx, draft_tokens]).int().sum())


def residual_abs(p_row, q_row) -> torch.Tensor:
    """Control: norm(|p − q|), the residual without max(0, ·)."""
    r = (p_row - q_row).abs()
    return r / r.sum() if float(r.sum()) > 0 else p_row


def greedy_draft(lm: TabulatedLM, cfg: SamplingConfig) -> DraftFn:
    """Control: the draft decodes greedily (argmax) but reports its processed law as q."""

    def laws(prefix):
        q = processed_probs(lm.logits(prefix), cfg)
        return torch.nn.functional.one_hot(q.argmax(), q.shape[-1]).float(), q

    return memo(laws)


def raw_q_draft(lm: TabulatedLM, cfg: SamplingConfig) -> DraftFn:
    """Control: the draft samples the processed law but reports q from the unprocessed logits (softmax at T = 1)."""

    def laws(prefix):
        logits = lm.logits(prefix)
        return processed_probs(logits, cfg), torch.softmax(logits.float(), -1)

    return memo(laws)


def verified_one_late(p: torch.Tensor) -> torch.Tensor:
    """Control: the verified logits taken one position late (row i + 1 checks draft i; the last row repeats)."""
    return torch.cat([p[1:], p[-1:]]) if p.shape[0] > 1 else p


CONTROL_TEMPERATURE = 0.5  # the temperature the one-sided control applies to the target's law only


def target_only_temperature(p: torch.Tensor) -> torch.Tensor:
    """Control: a temperature applied to one model only: the verifier's target law p^(1/T), renormalised
    (softmax(z/T) on the kept support), while the draft and the reference keep the configured law."""
    w = p.double().clamp_min(0.0) ** (1.0 / CONTROL_TEMPERATURE)
    return (w / w.sum(-1, keepdim=True)).to(p.dtype)


def rejection_step(
    count: CountFn = accepted_count, residual_fn: ResidualFn = residual, verified: RowsFn = as_verified
) -> VerifyFn:
    """verify_sampling's body with its pieces swappable: the form the verify-side controls take."""

    def verify(draft_tokens, q, p, generator):
        p = verified(p)
        gamma = draft_tokens.shape[0]
        u = torch.rand(gamma, generator=generator, device=p.device)
        n = count(draft_tokens, q, p[:gamma], u)
        law = residual_fn(p[n], q[n]) if n < gamma else p[gamma]
        return Verdict(n_accepted=n, next_token=int(sample(law, generator)), expected_accept=[])

    return verify


@dataclass(frozen=True)
class Control:
    """One known bug: which piece of the step it replaces."""

    name: str
    count: CountFn = accepted_count
    residual_fn: ResidualFn = residual
    draft: Callable[[TabulatedLM, SamplingConfig], DraftFn] = honest_draft
    verified: RowsFn = as_verified  # which target rows the verifier uses

    def verify(self) -> VerifyFn:
        return rejection_step(self.count, self.residual_fn, self.verified)

    @property
    def verify_side(self) -> bool:
        """The bug lives in the verifier (it can be fed any proposer's drafts), not in how the draft draws."""
        return self.draft is honest_draft


CONTROLS = {
    c.name: c
    for c in [
        Control("always-accept", count=count_always),
        Control("greedy-draft", draft=greedy_draft),
        Control("raw-q", draft=raw_q_draft),
        Control("abs-residual", residual_fn=residual_abs),
        Control("count-past-rejection", count=count_past_rejection),
        Control("verified-one-late", verified=verified_one_late),
        Control("temperature-target-only", verified=target_only_temperature),
    ]
}


# ---------------------------------------------------------------------------------------------
# The model-free battery run by `specbench verify`


@dataclass(frozen=True)
class StepSetup:
    """A target/draft pair of tabulated models on a small vocabulary."""

    vocab: int = 12
    seed: int = 0
    noise: float = 1.0  # draft = target logits + noise·N(0, 1): acceptance well inside (0, 1)

    def models(self) -> tuple[TabulatedLM, TabulatedLM]:
        target = TabulatedLM(self.vocab, self.seed)
        return target, TabulatedLM(self.vocab, self.seed + 1, base=target, noise=self.noise)


def step_checks(
    sampling: SamplingConfig,
    *,
    setup: StepSetup = StepSetup(),
    gamma: int = 2,
    n: int = 100_000,
    exact_vocab: int = 5,
    seed: int = 0,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    control: Control | None = None,
) -> list[CheckResult]:
    """Exact and statistical evidence for one sampling configuration, on tabulated laws.

    Exact: one-position law on `setup.vocab` tokens and the two-token joint law on
    `exact_vocab` tokens (enumeration grows as V^γ). Statistical (skipped when n = 0): n runs of
    the step through `verify_sampling` (or the control's variant), first two tokens, per
    position and joint.
    """
    label = f"step/{_sampling_label(sampling)}" + (f"/control={control.name}" if control else "")
    make_draft = control.draft if control else honest_draft
    count = control.count if control else accepted_count
    residual_fn = control.residual_fn if control else residual
    verified = control.verified if control else as_verified
    verify = control.verify() if control else verify_sampling

    target_lm, draft_lm = setup.models()
    p_fn, d_fn = target_laws(target_lm, sampling), make_draft(draft_lm, sampling)
    drawn, q = d_fn(())
    out = [
        one_position_check(
            f"{label}/exact/pos1", p_fn(()), q, drawn=drawn, count=count, residual_fn=residual_fn, verified=verified
        )
    ]
    out[0].detail.update({"vocab": setup.vocab})

    small = StepSetup(exact_vocab, setup.seed, setup.noise).models()
    sp, sd = target_laws(small[0], sampling), make_draft(small[1], sampling)
    law = sequence_law(sp, sd, gamma=gamma, length=2, count=count, residual_fn=residual_fn, verified=verified)
    out.append(
        exact_check(
            f"{label}/exact/joint2", law, target_sequence_law(sp, 2), detail={"vocab": exact_vocab, "gamma": gamma}
        )
    )
    stat_detail = {"vocab": setup.vocab, "gamma": gamma}

    if n <= 0:
        return out
    counts = sample_sequences(
        p_fn, d_fn, gamma=gamma, length=2, n=n, verify=verify, generator=torch.Generator().manual_seed(seed)
    )
    for r in sample_checks(label, counts, target_sequence_law(p_fn, 2), level=level, alt_tv=alt_tv):
        r.detail.update(stat_detail)
        out.append(r)
    return out


def _sampling_label(s: SamplingConfig) -> str:
    parts = [f"T={s.temperature:g}"]
    if s.top_k:
        parts.append(f"k={s.top_k}")
    if s.top_p < 1.0:
        parts.append(f"p={s.top_p:g}")
    return ",".join(parts)

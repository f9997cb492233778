"""Levels, families of tests and sample sizes: what a verdict may spend, and how many examples it needs.

statistics.py turns intervals into verdicts; this module says at which level (ALPHA per test, Holm over a family,
the stopping rule's LOOK_ALPHA over at most two looks) and plans the examples that would decide an inconclusive one
(the exact power of two one-sided tests, planned at a true ratio of 1, jointly over a claim's comparisons, with the
range its estimated spread leaves). docs/statistics.md ("Sample sizes", "The claims table is one family",
"Re-running an inconclusive claim") says what the printed words mean; tests/test_statistics.py and
tests/test_claims.py check each promise by simulation with a negative control. evidence/perplexity.py's
tost_power/tost_n_needed should delegate here (one function for TOST power, not two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_MARGIN = 0.10  # δ: ratios within [1/(1+δ), 1+δ] count as the same
ALPHA = 0.05  # error rate of each verdict: TOST at 5 % (90 % intervals), Holm over a claim's comparisons at 5 %
POWER = 0.8  # the power an "examples needed" estimate aims at

# --------------------------------------------------------------------------- the stopping rule and Holm
#
# Pre-declared (docs/statistics.md, "Re-running an inconclusive claim"): the claims table's family-wise error, 5 %,
# is spent over at most two looks (Bonferroni across looks, Holm over the table's claims within each look). Look 1,
# the runs as first measured, decides at LOOK_ALPHA[0]; a claim left inconclusive may be re-run once, on a fresh draw
# of examples (another --seed), decided on that sample alone (never pooled with look 1's) at LOOK_ALPHA[1]; there is
# no third look. Sample sizes printed for a re-run are planned at the re-run's level.
LOOK_ALPHA = (0.04, 0.01)  # the family's α spent per look: look 1, the re-run; sums to FAMILY_ALPHA
FAMILY_ALPHA = 0.05  # the claims table's family-wise error rate over both looks
RERUN_ALPHA = LOOK_ALPHA[1]  # the level a re-run's sample size is planned at (one claim re-run alone)


def holm(tests: list, rejects, alpha: float = ALPHA) -> list:
    """Holm's step-down: with r hypotheses left, reject each whose test rejects at level alpha/r; repeat while any
    is rejected. `rejects(test, level)` says whether one test rejects at that level. Returns the rejected tests.
    (The same decisions as ordering p-values and comparing the i-th smallest with alpha/(m − i + 1).)"""
    left, rejected = list(tests), []
    while left:
        now = [t for t in left if rejects(t, alpha / len(left))]
        if not now:
            break
        rejected += now
        left = [t for t in left if t not in now]
    return rejected


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values (step-down): the i-th smallest times (m − i + 1), never below an earlier one, at most
    1; a test is rejected at family level alpha when its adjusted p-value is < alpha (the decisions of holm()). NaN
    counts as 1 (a test that cannot reject)."""
    m = len(p_values)
    clean = [1.0 if not (isinstance(x, float | int) and math.isfinite(x)) else float(x) for x in p_values]
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: clean[k])):
        running = max(running, min(1.0, (m - rank) * clean[i]))
        out[i] = running
    return out


def z(p: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(p))


# --------------------------------------------------------------------------- power and sample sizes
#
# One function for the power of two one-sided t-tests (TOST), shared by the claims table's sample sizes and the
# quality claim's (evidence/perplexity.py): the older z(1−α) + z(power) formula ignored TOST's second side and gave
# power 0.57–0.59 at a true ratio of 1 (issue 40). Both sides reject together when
#     −L + t_c·s/√n  <  x̄  <  L − t_c·s/√n        (t_c = t_{1−α, df}; L the margin on the log or nat scale)
# and given the sample sd s, x̄ ~ N(μ, σ²/n): so the power is Φ-difference averaged over the law of s
# (s²·df/σ² ~ χ²_df), one integral (Owen's Q; PowerTOST's method "exact"). The noncentral-t form
# 1 − F_nct(t_c; ncp_low) − F_nct(t_c; ncp_high) is its lower bound (Bonferroni), close at n ≥ 10.

PLAN_RATIO = 1.0  # the true ratio equivalence sample sizes are planned at: the ratio TOST sets out to show
PLAN_SD_LEVEL = 0.8  # the printed range of a sample size: the observed sd's two-sided 80 % chi-square interval


def tost_power(n: int, sd: float, bound: float, true: float = 0.0, alpha: float = ALPHA, df: int | None = None):
    """Exact power of TOST at level alpha per side: both one-sided t-tests reject, so the (1 − 2α) t interval of a
    mean of n units (spread sd; df degrees of freedom, n − 1 unless told) lies inside (−bound, bound), when the true
    mean is `true` (log ratio, or nats). 0 below 2 units; 1 with no spread where |true| < bound."""
    from scipy import special

    if n < 2 or not bound > 0:
        return 0.0
    if not sd > 0:
        return float(abs(true) < bound)
    df = n - 1 if df is None else df
    se = sd / math.sqrt(n)
    crit = float(special.stdtrit(df, 1 - alpha))  # t_{1−α, df} (scipy.special: stats.t.ppf without its overhead)
    a, b = bound / se, true / se
    lo_v, hi_v = float(special.chdtri(df, 1 - 1e-12)), float(special.chdtri(df, 1e-12))  # χ² 1e-12 quantiles
    hi = min(df * (a / crit) ** 2, hi_v)  # beyond this χ² value the interval is wider than the margin: no power
    if hi <= lo_v:
        return 0.0
    # Gauss–Legendre over [lo_v, hi] in 16 panels (the integrand is smooth there): 1e-9 against scipy's quad
    nodes, weights = np.polynomial.legendre.leggauss(24)
    edges = np.linspace(lo_v, hi, 17)
    half = np.diff(edges)[:, None] / 2
    v = (edges[:-1, None] + half * (nodes + 1)).ravel()
    w = (half * weights).ravel()
    u = crit * np.sqrt(v / df)
    inside = np.clip(special.ndtr(a - b - u) - special.ndtr(-a - b + u), 0.0, None)
    density = np.exp(special.xlogy(df / 2 - 1, v) - v / 2 - special.gammaln(df / 2) - df / 2 * math.log(2))  # χ²_df
    return float(min(1.0, max(0.0, np.sum(w * inside * density))))


def one_sided_power(n: int, sd: float, gap: float, alpha: float = ALPHA, df: int | None = None) -> float:
    """Exact power of a one-sided t-test at level alpha that the true mean exceeds a bound by `gap` (> 0; < 0 for the
    other side, by symmetry): 1 − F_nct(t_{1−α}; df, gap·√n/sd) (scipy.stats.nct)."""
    from scipy import stats

    if n < 2 or not sd > 0:
        return 0.0 if n < 2 else float(gap != 0)
    df = n - 1 if df is None else df
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, abs(gap) * math.sqrt(n) / sd))


def smallest_n(power_at, power: float, start: int = 2, cap: int = 10_000_000) -> int | None:
    """The smallest n ≥ start at which power_at(n) ≥ power (power_at rising in n), by doubling then bisection; None
    when even `cap` units do not reach it."""
    hi = max(2, start)
    while power_at(hi) < power:
        if hi >= cap:
            return None
        hi = min(cap, hi * 2)
    lo = max(2, start, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if power_at(mid) < power else (lo, mid)
    return hi


def tost_n_needed(
    sd: float, bound: float, true: float = 0.0, alpha: float = ALPHA, power: float = POWER, unpaired: bool = False
) -> int | None:
    """Units per cell at which tost_power reaches `power` (None without a measured spread, or beyond reach).
    unpaired: Welch's two samples of n each, sd = √(s_a² + s_b²), df ≈ 2(n − 1)."""
    if not (sd > 0 and math.isfinite(sd)) or not bound > 0 or abs(true) >= bound:
        return None
    return smallest_n(lambda n: tost_power(n, sd, bound, true, alpha, 2 * (n - 1) if unpaired else None), power)


@dataclass(frozen=True)
class Plan:
    """A sample size with the range its plan is uncertain over."""

    n: int  # units per cell at the observed spread
    low: int  # at the low end of the spread's 80 % interval
    high: int | None  # at the high end (None: beyond any practical sample)
    ratio: float  # the true ratio planned at (PLAN_RATIO unless told)
    power: float  # the joint power aimed at (every comparison of the claim at once)
    alpha: float  # the level of each one-sided test planned for
    comparisons: int  # how many comparisons must pass together

    def text(self) -> str:
        """'39 (26–61)': the estimate and its range."""
        if self.low == self.n and self.high == self.n:
            return f"{self.n:,}"
        high = f"{self.high:,}" if self.high else "beyond reach"
        return f"{self.n:,} ({self.low:,}–{high})"


def sd_interval(sd: float, n: int, level: float = PLAN_SD_LEVEL) -> tuple[float, float]:
    """The two-sided `level` interval of a normal sample's σ from its sd over n units (χ² with n − 1 df)."""
    from scipy import stats

    if n < 2 or not sd > 0:
        return sd, sd
    df = n - 1
    lo_q, hi_q = stats.chi2.ppf([(1 + level) / 2, (1 - level) / 2], df)
    return sd * math.sqrt(df / lo_q), sd * math.sqrt(df / hi_q)


def _joint_tost_n(sds: list[float], bound: float, true: float, alpha: float, power: float, dfs) -> int | None:
    """Smallest n at which the product of every comparison's exact TOST power reaches `power` (Šidák: for estimates
    jointly normal about zero, all pass together at least that often; exactly that when they are independent)."""

    def joint(n: int) -> float:
        out = 1.0
        for sd, df in zip(sds, dfs):
            out *= tost_power(n, sd, bound, true, alpha, df(n))
            if out < power:
                break
        return out

    return smallest_n(joint, power)


def tost_plan(
    sd,
    bound: float,
    true: float = 0.0,
    alpha: float = ALPHA,
    power: float = POWER,
    n_observed=None,
    unpaired=None,
) -> Plan | None:
    """Units per cell at which every comparison's TOST against ±bound passes together with probability `power` at a
    true mean of `true` (the product of their exact powers), with the range over each observed sd's 80 % χ² interval.
    sd: one spread or one per comparison; n_observed: the units behind each (no range without); unpaired: per
    comparison, Welch's two samples (df ≈ 2(n − 1)). None when |true| ≥ bound or a spread is missing."""
    sds = [float(x) for x in (sd if isinstance(sd, list | tuple) else [sd])]
    ns = list(n_observed) if isinstance(n_observed, list | tuple) else [n_observed] * len(sds)
    welch = list(unpaired) if isinstance(unpaired, list | tuple) else [bool(unpaired)] * len(sds)
    if not sds or not all(x > 0 and math.isfinite(x) for x in sds) or abs(true) >= bound:
        return None
    dfs = [(lambda n: 2 * (n - 1)) if w else (lambda n: n - 1) for w in welch]
    point = _joint_tost_n(sds, bound, true, alpha, power, dfs)
    if point is None:
        return None
    ends = [sd_interval(x, k) if k else (x, x) for x, k in zip(sds, ns)]
    low = _joint_tost_n([e[0] for e in ends], bound, true, alpha, power, dfs) or point
    high = _joint_tost_n([e[1] for e in ends], bound, true, alpha, power, dfs)
    return Plan(
        point, min(low, point), high if high is None else max(high, point), math.exp(true), power, alpha, len(sds)
    )


def examples_for_equivalence(
    sd,
    ratio: float = PLAN_RATIO,
    margin: float = DEFAULT_MARGIN,
    alpha: float = ALPHA,
    power: float = POWER,
    n_observed=None,
    unpaired=None,
) -> Plan | None:
    """Examples per cell at which TOST would show every ratio within [1/(1+δ), 1+δ] with joint power `power`: the
    exact two-sided TOST power (tost_power) at a planned true ratio (1 unless told; the observed ratio is too noisy a
    plan: 20-example pilots at a true 1 suggested a median of 101 against 39 needed), multiplied over every
    comparison of the claim (tost_plan). sd: one spread, or one per comparison (the claim's comparisons, which must
    all pass); n_observed: the units behind each sd, for the printed range (the sd's 80 % χ² interval); unpaired: per
    comparison, whether it is Welch's two samples. None when the planned ratio is at or beyond the margin or no
    spread was measured."""
    return tost_plan(sd, math.log(1 + margin), math.log(ratio), alpha, power, n_observed, unpaired)


def examples_for_difference(sd: float, ratio: float, margin: float, alpha: float = ALPHA, power: float = POWER):
    """Examples per cell at which a level-alpha two-sided interval would lie beyond the margin with the given power
    at the observed ratio (exact: a one-sided noncentral t at alpha/2; None when the ratio lies within the margin)."""
    room = abs(math.log(ratio)) - math.log(1 + margin)
    if not (sd > 0 and room > 0):
        return None
    return smallest_n(lambda n: one_sided_power(n, sd, room, alpha / 2), power)


def plan_consistency(comparisons: list, margin: float, alpha: float = RERUN_ALPHA) -> tuple[int | None, Plan | None]:
    """Examples per cell that would likely decide a consistency verdict at level alpha: where a ratio looks beyond the
    margin, what shows that one at Holm's first step (alpha over the comparisons; planned at its observed ratio);
    else what shows every ratio within it together (examples_for_equivalence: exact TOST power, planned at a true
    ratio of 1, joint over the comparisons, with the range the observed spreads leave)."""
    beyond_n = [
        examples_for_difference(c.sd, c.ratio, margin, alpha / len(comparisons))
        for c in comparisons
        if c.n > 1 and abs(math.log(c.ratio)) > math.log(1 + margin)
    ]
    beyond_n = [n for n in beyond_n if n]
    if beyond_n:
        return min(beyond_n), None
    measured = [c for c in comparisons if c.n > 1]
    if not measured or len(measured) < len(comparisons):
        return None, None
    plan = examples_for_equivalence(
        [c.sd for c in measured],
        PLAN_RATIO,
        margin,
        alpha,
        POWER,
        n_observed=[c.n for c in measured],
        unpaired=[not c.paired for c in measured],
    )
    return (plan.n, plan) if plan else (None, None)


def plan_directional(comparisons: list, hold_above: float, fail_below: float, alpha: float = RERUN_ALPHA) -> int | None:
    """Examples per cell at which the one-sided bounds would likely decide the claim at level alpha, planned at the
    observed ratios (exact noncentral t): where every ratio lies above hold_above, every lower bound clearing it
    together (the product of their powers); else the easiest ratio below fail_below shown below it at Holm's first
    step (alpha over the comparisons); None where no ratio lies clear of the thresholds."""
    if not comparisons or any(c.n < 2 or not c.sd > 0 for c in comparisons):
        return None
    logs = [math.log(c.ratio) for c in comparisons]
    up, down = math.log(hold_above), math.log(fail_below)
    if all(x > up for x in logs):

        def joint(n: int) -> float:
            return float(np.prod([one_sided_power(n, c.sd, x - up, alpha) for c, x in zip(comparisons, logs)]))

        return smallest_n(joint, POWER)
    below = [
        smallest_n(lambda n, c=c, x=x: one_sided_power(n, c.sd, down - x, alpha / len(comparisons)), POWER)
        for c, x in zip(comparisons, logs)
        if x < down
    ]
    reachable = [n for n in below if n]
    return min(reachable) if reachable else None

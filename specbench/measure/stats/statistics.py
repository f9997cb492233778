"""The statistics behind every speedup figure and every verdict, in one place (scipy.stats first).

A benchmark's numbers are only as good as the intervals around them. This module declares the primary
measure, computes every interval over examples (the example is the unit of resampling, never the token),
compares two configurations on the same examples, and turns intervals into three-outcome verdicts: a
claim *holds* when equivalence is shown by two one-sided tests (TOST) against a margin, *does not hold*
when a Holm-adjusted interval lies wholly beyond it, and is *inconclusive* otherwise, with the number of
examples that would decide it (planned in planning.py, with the levels and Holm). run, sweep (through
metrics.summarize), report, claims and export read it; docs/statistics.md explains the choices and the coverage study
and simulation that checked them.

PRIMARY_MEASURE is the one declared primary measure. Its interval is Student's t on the per-example log ratios
(scipy.stats.ttest_1samp; paired differences for two cells, Welch for cells whose units differ): resampled from
real records (120 ding-de-en and 80 aclsum examples, bench/coverage.py, docs/statistics.md) it covered 93–95 % at
n = 10–50 where BCa covered 91–95 % and the percentile bootstrap 89–94 %. Below MIN_INTERVAL_N examples none is
given and INTERVAL_NOTE says so instead. Secondary ratios (ratio of sums, total time) use Student's t on their log
with the delta method's standard error (linearized_t), not the percentile bootstrap, which the coverage study found
the worst.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass

import numpy as np

from specbench.measure.stats.planning import (  # levels, Holm, the stopping rule and sample sizes live there
    ALPHA,
    DEFAULT_MARGIN,
    RERUN_ALPHA,
    Plan,
    holm,
    holm_adjusted,
    plan_consistency,
    plan_directional,
)

NAN = float("nan")

PRIMARY_MEASURE = (
    "the paired per-example log ratio of throughput (speculative tokens/s ÷ baseline tokens/s on the same "
    "example, prefill included), summarised as a geometric mean with a 95 % Student t interval over examples"
)
PRIMARY_INTERVAL = "Student t"  # what the primary measure's interval is, in words (figures, tables, docs)
LEVEL = 0.95  # every interval a summary shows
RESAMPLES = 2000  # bootstrap resamples for a summary's intervals (the jackknife for BCa is exact)
MIN_INTERVAL_N = 10  # below this many examples (units) no interval is given: the smallest n the coverage study
# checked (t covered 93.2–94.5 % at n = 10 on both tasks' real records; docs/statistics.md)
MIN_VERDICT_N = 20  # no verdict from fewer examples per cell

INTERVAL_NOTE = (
    "n = {n} < {min_n}: no interval (below {min_n} examples the resampling study found 95 % intervals covering "
    "less than 95 %; docs/statistics.md)"
)


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval; low/high are NaN when no interval is given (`note` then says why)."""

    value: float  # the point estimate (on the ratio scale for ratios)
    low: float  # lower end of the interval (NaN: none)
    high: float  # upper end of the interval (NaN: none)
    n: int  # units (examples, or batches) behind it
    note: str | None = None  # why there is no interval, when there is none

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def ci(self) -> list[float]:
        """[low, high] as a summary stores it (NaN → null in JSON)."""
        return [self.low, self.high]


# --------------------------------------------------------------------------- the units


def log_ratios(spec_tokens, spec_s, base_tokens, base_s) -> np.ndarray:
    """log(speculative tokens/s ÷ baseline tokens/s) per unit; units with a zero or missing term are NaN."""
    st, ss, bt, bs = (np.asarray(a, dtype=float) for a in (spec_tokens, spec_s, base_tokens, base_s))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log((st / ss) / (bt / bs))
    out[~np.isfinite(out)] = NAN
    return out


def unit_keys(records: list[dict]) -> list[str]:
    """The resampling unit of each record's run: its example id, or its batch (rows of a batch share a time)."""
    if any((r.get("batch_size") or 1) > 1 for r in records):
        seen: dict[str, None] = {}
        for r in records:
            seen.setdefault(f"batch {r.get('batch_index') or 0}", None)
        return list(seen)
    return [str(r.get("example_id", i)) for i, r in enumerate(records)]


def half_of(key: str) -> int:
    """0 or 1: which half an example falls in (a hash of its id, so every run of a task splits alike)."""
    return hashlib.sha256(key.encode()).digest()[0] & 1


# --------------------------------------------------------------------------- intervals


def _finite(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def bootstrap_interval(
    samples: tuple,
    statistic,
    level: float = LEVEL,
    paired: bool = True,
    alternative: str = "two-sided",
    resamples: int = RESAMPLES,
    seed: int = 0,
    method: str = "BCa",
):
    """scipy.stats.bootstrap's interval (BCa unless told), its statistic vectorized over `axis`. Data with no spread
    gives the point itself at both ends (BCa is undefined there); fewer than 2 units give NaN."""
    from scipy import stats

    samples = tuple(np.asarray(s, dtype=float) for s in samples)
    point = float(statistic(*samples, axis=-1))
    if min(len(s) for s in samples) < 2:
        return NAN, NAN, None
    if all(np.ptp(s) == 0 for s in samples):
        return point, point, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns where BCa's acceleration is undefined; the NaN says so
        res = stats.bootstrap(
            samples,
            statistic,
            paired=paired,
            vectorized=True,
            confidence_level=level,
            alternative=alternative,
            n_resamples=resamples,
            method=method,
            rng=np.random.default_rng(seed),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high), res


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def t_interval(samples: tuple, level: float, alternative: str = "two-sided") -> tuple[float, float]:
    """Student's t interval (log scale) of the mean of one sample (paired: the per-unit differences) or of the
    difference of two samples' means (Welch: unequal variances), from scipy.stats. Data with no spread give the
    point at both ends; fewer than 2 units give NaN. One-sided alternatives leave the other end infinite."""
    from scipy import stats

    samples = tuple(np.asarray(x, dtype=float) for x in samples)
    if min(len(x) for x in samples) < 2:
        return NAN, NAN
    if all(np.ptp(x) == 0 for x in samples):
        point = float(np.mean(samples[0]) - (np.mean(samples[1]) if len(samples) > 1 else 0.0))
        return point, point
    if len(samples) == 1:
        res = stats.ttest_1samp(samples[0], 0.0, alternative=alternative)
    else:
        res = stats.ttest_ind(samples[0], samples[1], equal_var=False, alternative=alternative)
    ci = res.confidence_interval(level)
    return float(ci.low), float(ci.high)


def geometric_mean(logs, level: float = LEVEL, min_n: int = MIN_INTERVAL_N, seed: int = 0, method: str = "t"):
    """exp(mean of the log ratios) with its interval over the units (Student t; "BCa" or "percentile" for the
    bootstrap, as the coverage study compares them); no interval below min_n (said in `note`)."""
    logs = _finite(logs)
    n = len(logs)
    if not n:
        return Estimate(NAN, NAN, NAN, 0, "no examples")
    value = math.exp(float(np.mean(logs)))
    if n < min_n:
        return Estimate(value, NAN, NAN, n, INTERVAL_NOTE.format(n=n, min_n=min_n))
    if method == "t":
        lo, hi = t_interval((logs,), level)
    else:
        lo, hi, _ = bootstrap_interval((logs,), _mean, level, seed=seed, method=method)
    return Estimate(value, math.exp(lo), math.exp(hi), n)


def log_ratio_of_sums(st, ss, bt, bs, axis=-1):
    return np.log((st.sum(axis) / ss.sum(axis)) / (bt.sum(axis) / bs.sum(axis)))


def linearized_t(value: float, influence, level: float = LEVEL) -> tuple[float, float]:
    """value ± t_{n−1, (1+level)/2} · sd(ψ)/√n: Student's t on the log scale with the delta method's standard error,
    ψ each unit's influence on the log statistic (its linearisation; for a mean of logs ψ is the centred log, and this
    is the primary measure's t interval). No resampling, so no seed. NaN below 2 units."""
    from scipy import stats

    psi = np.asarray(influence, dtype=float)
    n = len(psi)
    if n < 2:
        return NAN, NAN
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(np.std(psi, ddof=1)) / math.sqrt(n)
    return value - half, value + half


def ratio_of_sums_influence(st, ss, bt, bs) -> np.ndarray:
    """Each unit's influence on log[(Σ st / Σ ss) ÷ (Σ bt / Σ bs)]: st_i/mean(st) − ss_i/mean(ss) − bt_i/mean(bt) +
    bs_i/mean(bs) (the derivative of each log-sum, times n; sums to 0)."""
    return st / st.mean() - ss / ss.mean() - bt / bt.mean() + bs / bs.mean()


def ratio_of_sums(st, ss, bt, bs, level: float = LEVEL, min_n: int = MIN_INTERVAL_N, seed: int = 0) -> Estimate:
    """(Σ spec tokens / Σ spec s) ÷ (Σ base tokens / Σ base s) with a paired t interval on its log (linearized_t, the
    delta method over the units): on a simulated skewed population it covered 92.5 / 95.3 / 92.5 % at n = 10 / 20 / 50
    where the percentile bootstrap covered 87.8 / 92.0 / 91.5 % and BCa 86.8 / 91.3 / 90.0 % (bench/coverage.py
    --ratio-of-sums, docs/statistics.md). `seed` is accepted for older callers and unused."""
    cols = tuple(np.asarray(a, dtype=float) for a in (st, ss, bt, bs))
    n = len(cols[0])
    if not n or not all(c.sum() > 0 for c in cols):
        return Estimate(NAN, NAN, NAN, n, "no measurable time")
    log_value = float(log_ratio_of_sums(*cols))
    if n < min_n:
        return Estimate(math.exp(log_value), NAN, NAN, n, INTERVAL_NOTE.format(n=n, min_n=min_n))
    lo, hi = linearized_t(log_value, ratio_of_sums_influence(*cols), level)
    return Estimate(math.exp(log_value), math.exp(lo), math.exp(hi), n)


def time_ratio(base_s, spec_s, level: float = LEVEL, min_n: int = MIN_INTERVAL_N, seed: int = 0) -> Estimate:
    """Σ baseline seconds ÷ Σ speculative seconds (the total-time ratio) with a paired t interval on its log
    (linearized_t: influence bs_i/mean(bs) − ss_i/mean(ss)); `seed` is unused."""
    bs, ss = np.asarray(base_s, dtype=float), np.asarray(spec_s, dtype=float)
    n = len(bs)
    if not n or bs.sum() <= 0 or ss.sum() <= 0:
        return Estimate(NAN, NAN, NAN, n, "no measurable time")
    value = float(bs.sum() / ss.sum())
    if n < min_n:
        return Estimate(value, NAN, NAN, n, INTERVAL_NOTE.format(n=n, min_n=min_n))
    lo, hi = linearized_t(math.log(value), bs / bs.mean() - ss / ss.mean(), level)
    return Estimate(value, math.exp(lo), math.exp(hi), n)


def median(values, level: float = LEVEL) -> Estimate:
    """The median with its distribution-free interval (order statistics, scipy.stats.quantile_test): exact coverage
    at any n, NaN where n is too small for the level (n < 6 at 95 %)."""
    from scipy import stats

    x = _finite(values)
    if not len(x):
        return Estimate(NAN, NAN, NAN, 0, "no examples")
    ci = stats.quantile_test(x, p=0.5).confidence_interval(level)
    est = Estimate(float(np.median(x)), float(ci.low), float(ci.high), len(x))
    return est if est.has_interval else Estimate(est.value, NAN, NAN, len(x), f"n = {len(x)}: too few for an interval")


def share(k: int, n: int, level: float = LEVEL) -> Estimate:
    """k of n as a share with its Clopper–Pearson interval (scipy.stats.binomtest): at least `level` coverage."""
    from scipy import stats

    if n <= 0:
        return Estimate(NAN, NAN, NAN, 0, "no examples")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(level)
    return Estimate(k / n, float(ci.low), float(ci.high), n)


def disjoint(a: Estimate, b: Estimate) -> bool:
    """Whether two estimates' intervals do not overlap (both must have one)."""
    return a.has_interval and b.has_interval and (a.high < b.low or b.high < a.low)


# --------------------------------------------------------------------------- comparing two cells


@dataclass(frozen=True)
class Comparison:
    """The ratio of two cells' primary measures (a ÷ b), on the examples both ran when they share them."""

    label: str  # "a vs b" in words
    ratio: float  # exp(mean log ratio a − mean log ratio b)
    paired: bool  # True: per-example differences on shared examples; False: two independent samples (batches)
    n: int  # shared examples (paired), or the smaller cell's units (unpaired)
    sd: float  # spread of the per-example log differences (paired) or √(s_a² + s_b²) (unpaired), for sample sizes
    samples: tuple  # the data behind it: (differences,) paired, (a, b) unpaired

    def interval(self, level: float, alternative: str = "two-sided") -> tuple[float, float]:
        """The ratio's Student t interval at `level` (on the ratio scale): paired t on the per-example differences,
        Welch's t for two independent samples; one-sided alternatives leave the other end at 0 or ∞."""
        if self.n < 2:
            return NAN, NAN
        lo, hi = t_interval(self.samples, level, alternative)
        return math.exp(lo), math.exp(hi)

    def p_value(self, log_bound: float, alternative: str) -> float:
        """One-sided t-test of H0: log ratio ≤ log_bound ("greater") or ≥ log_bound ("less"): paired t on the
        differences, Welch's t for two samples (the tests behind interval()). Data with no spread: 0 or 1."""
        from scipy import stats

        if self.n < 2:
            return NAN
        point = math.log(self.ratio)
        if all(np.ptp(x) == 0 for x in self.samples):
            return float(not (point > log_bound if alternative == "greater" else point < log_bound))
        if len(self.samples) == 1:
            return float(stats.ttest_1samp(self.samples[0], log_bound, alternative=alternative).pvalue)
        x, y = self.samples
        return float(stats.ttest_ind(x - log_bound, y, equal_var=False, alternative=alternative).pvalue)

    def p_within(self, margin: float) -> float:
        """TOST p-value: the larger of the two one-sided p-values against ±log(1+δ) (< α ⇔ the 1 − 2α interval lies
        within [1/(1+δ), 1+δ])."""
        bound = math.log(1 + margin)
        return max(self.p_value(-bound, "greater"), self.p_value(bound, "less"))

    def p_beyond(self, margin: float) -> float:
        """p-value of 'the ratio lies beyond [1/(1+δ), 1+δ]': twice the smaller one-sided p-value against its edges
        (< a ⇔ the two-sided 1 − a interval lies wholly outside)."""
        bound = math.log(1 + margin)
        return min(1.0, 2 * min(self.p_value(bound, "greater"), self.p_value(-bound, "less")))


def compare(a: dict[str, float], b: dict[str, float], label: str = "") -> Comparison:
    """Two cells' per-unit log ratios (key → log ratio) compared: paired on the keys both hold when they hold the
    same examples (each example's two values stay together), else as two independent samples (cells whose units
    differ, such as batches of different sizes)."""
    a = {k: v for k, v in a.items() if math.isfinite(v)}
    b = {k: v for k, v in b.items() if math.isfinite(v)}
    shared = [k for k in a if k in b]
    paired = bool(shared) and not any(k.startswith("batch ") for k in shared)
    if paired:
        d = np.array([a[k] - b[k] for k in shared])
        samples: tuple[np.ndarray, ...] = (d,)
        n = len(d)
        point = float(np.mean(d)) if n else NAN
        sd = float(np.std(d, ddof=1)) if n > 1 else NAN
    else:
        x, y = np.array(list(a.values())), np.array(list(b.values()))
        samples, n = (x, y), min(len(x), len(y))
        point = float(np.mean(x) - np.mean(y)) if n else NAN
        sd = float(math.sqrt(np.var(x, ddof=1) + np.var(y, ddof=1))) if n > 1 else NAN
    return Comparison(label, math.exp(point) if n else NAN, paired, n, sd, samples)


# --------------------------------------------------------------------------- verdicts

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"


def within(lo: float, hi: float, margin: float) -> bool:
    """[lo, hi] lies inside [1/(1+δ), 1+δ]."""
    return lo >= 1 / (1 + margin) and hi <= 1 + margin


def beyond(lo: float, hi: float, margin: float) -> bool:
    """[lo, hi] lies wholly outside [1/(1+δ), 1+δ]."""
    return lo > 1 + margin or hi < 1 / (1 + margin)


@dataclass(frozen=True)
class Verdict:
    """A verdict over a set of comparisons."""

    outcome: str  # HOLDS, FAILS or UNSURE
    reason: str  # why, in words
    needed: int | None = None  # inconclusive: examples per cell that would likely decide it at a re-run's level
    p_value: float = 1.0  # the p-value of the outcome reached (HOLDS: the largest TOST or one-sided p, an
    # intersection-union test; FAILS: the smallest Holm-adjusted p); 1 when inconclusive. The claims table's family
    # rule (Holm over the table, report/claims.family) reads it.
    plan: Plan | None = None  # the equivalence sample size with its range, when `needed` came from one


def consistency(
    comparisons: list[Comparison],
    margin: float = DEFAULT_MARGIN,
    min_n: int = MIN_VERDICT_N,
    plan_alpha: float | None = RERUN_ALPHA,
) -> Verdict:
    """Holds when every comparison has min_n examples per cell and its 90 % interval lies inside [1/(1+δ), 1+δ]
    (TOST at 5 % each; all must pass, so no adjustment); does not hold when a comparison with min_n examples has a
    Holm-adjusted (5 % over those comparisons) two-sided interval wholly outside it: one sized counterexample
    decides, whatever thinner groups beside it show; inconclusive otherwise. `needed` is planned at plan_alpha (the
    re-run's level, stopping rule above; None: no plan) for the joint power of every comparison (plan_consistency), when
    inconclusive."""
    if not comparisons:
        return Verdict(UNSURE, "nothing to compare")
    sized = [c for c in comparisons if c.n >= min_n]
    if len(sized) == len(comparisons) and all(within(*c.interval(1 - 2 * ALPHA), margin) for c in comparisons):
        return Verdict(
            HOLDS,
            f"every 90 % interval of the ratios lies within [{1 / (1 + margin):.2f}, {1 + margin:.2f}]",
            p_value=max(c.p_within(margin) for c in comparisons),
        )

    def rejects(c, a):
        lo, hi = c.interval(1 - a)
        return beyond(lo, hi, margin)

    out = holm(sized, rejects)
    if out:
        worst = max(out, key=lambda c: abs(math.log(c.ratio)))
        lo, hi = worst.interval(1 - ALPHA / len(sized))
        return Verdict(
            FAILS,
            f"{worst.label} is {worst.ratio:.2f}× [{lo:.2f}, {hi:.2f}] (Holm-adjusted), beyond ±{margin:.0%}",
            p_value=min(holm_adjusted([c.p_beyond(margin) for c in sized])),
        )
    needed, plan = plan_consistency(comparisons, margin, plan_alpha) if plan_alpha else (None, None)  # plan a re-run
    smallest = min(c.n for c in comparisons)
    if smallest < min_n:
        return Verdict(UNSURE, f"n = {smallest} < {min_n} examples per cell", max(min_n, needed or min_n), plan=plan)
    return Verdict(UNSURE, "the intervals neither lie within the margin nor beyond it", needed, plan=plan)


def directional(
    estimates: list[tuple[str, Comparison]],
    hold_above: float,
    fail_below: float,
    min_n: int = MIN_VERDICT_N,
    plan_alpha: float = RERUN_ALPHA,
) -> Verdict:
    """A claim that ratios exceed a threshold, judged by one-sided bounds: holds when every ratio's one-sided 95 %
    lower bound is ≥ hold_above; does not hold when some ratio's Holm-adjusted one-sided upper bound is
    < fail_below; inconclusive otherwise, and always below min_n examples per cell."""
    if not estimates:
        return Verdict(UNSURE, "nothing to compare")
    comps = [c for _, c in estimates]
    smallest = min(c.n for c in comps)
    if smallest < min_n:
        needed = plan_directional(comps, hold_above, fail_below, plan_alpha)
        return Verdict(UNSURE, f"n = {smallest} < {min_n} examples per cell", max(min_n, needed or min_n))
    if all(c.interval(1 - ALPHA, "greater")[0] >= hold_above for c in comps):
        p = max(c.p_value(math.log(hold_above), "greater") for c in comps)
        return Verdict(HOLDS, f"every one-sided 95 % lower bound is ≥ {hold_above:.2f}", p_value=p)
    out = holm(comps, lambda c, a: c.interval(1 - a, "less")[1] < fail_below)
    if out:
        c = out[0]
        p = min(holm_adjusted([x.p_value(math.log(fail_below), "less") for x in comps]))
        return Verdict(FAILS, f"{c.label}: {c.ratio:.2f}×, Holm-adjusted upper bound below {fail_below:.2f}", p_value=p)
    needed = plan_directional(comps, hold_above, fail_below, plan_alpha)
    return Verdict(UNSURE, "the one-sided bounds straddle the claim's threshold", needed)


def single(logs: dict[str, float], label: str = "") -> Comparison:
    """One cell's geometric mean as a Comparison against 1× (its ratio to plain decoding), for directional claims."""
    x = _finite(list(logs.values()))
    n = len(x)
    sd = float(np.std(x, ddof=1)) if n > 1 else NAN
    return Comparison(label, math.exp(float(np.mean(x))) if n else NAN, True, n, sd, (x,))

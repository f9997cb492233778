"""Quality at T > 0 as a sequence-level equality test: perplexity of baseline and speculative samples.

Speculative sampling must emit the target's law over whole outputs, not only token by token.
The enumerable-sequence checks in equality.py have almost no power on real vocabularies, so here
each output is scored under the target and the two samples of scores are compared:

  score        mean negative log-likelihood per generated token, −(1/n) Σ log p(x_j | prompt, x_<j),
               under the target's *raw* law (temperature 1, no top-k/top-p): perplexity is exp(score).
               A deterministic function of the output, so equal output laws give equal score laws
               (whatever the sampler's temperature; the raw law only makes the number comparable
               across runs).
  test         two-sided Mann-Whitney U on the per-example scores (scipy.stats.mannwhitneyu), at a
               stated level. H0: both engines' scores come from one law.
  power        by simulation, never assumed: both samples are redrawn (with replacement) from the
               pooled observed scores, a location shift of `shift` nats per token is added to one of
               them, and the share of `sims` redraws the test rejects at the level is the power
               against that shift. `detectable_shift` is the shift found with power 0.8 (bisection
               over the same redraws). The default shift, 0.1 nats per token, is a perplexity
               change of ×1.105.

Caveat, stated where it is used: a run decodes baseline and speculative from the same seed per
example, so the two scores of one example may be correlated. Under H0 that changes no marginal law,
and positive pairing only makes U conservative (fewer rejections, less power), never anti-conservative.

Quality by equivalence (`nll_equivalence`, what the quality claim uses; the U test above stays for the
report's older table until its callers move): absence of a difference is never evidence of sameness, so
"the speculative engine keeps the baseline's quality" is shown by two one-sided t-tests (TOST) on the
*paired* per-example differences d = NLL(speculative) − NLL(baseline), the same prompt and seed on both
sides (the unit is the example, never the token):

  holds          both H0: Δ ≤ −margin and H0: Δ ≥ +margin rejected at `level` (scipy.stats.ttest_1samp
                 with alternative="greater"/"less"), i.e. the (1 − 2·level) interval lies inside ±margin;
  does not hold  the interval lies wholly outside ±margin (a one-sided test rejects |Δ| ≤ margin);
  inconclusive   otherwise, with about how many pairs would give the TOST power 0.8 at Δ = 0.
  power          of the TOST at a true Δ = 0 with the observed spread s of d: each one-sided test rejects
                 with 1 − F(t_{1−α}; ν = n − 1, noncentrality margin·√n/s) (scipy.stats.nct), both together
                 with at least 1 − 2·F(...) (Bonferroni's inequality).
Several runs: "holds on every run" is an intersection-union claim, which needs no split of the level
(Berger 1982): each run's TOST at `level` keeps the joint claim at `level`. Default margin 0.05 nats/token
(a perplexity ratio within ×1.051).

The scores are taken by the runner after each example's timed decodes (measure/stats/nll.py); everything here runs on
recorded scores (verify, report).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from specbench.evidence.stat_checks import CheckResult
from specbench.measure.stats import planning
from specbench.measure.stats.metric_units import json_safe

LEVEL = 0.01  # default level α of one Mann-Whitney test
SHIFT = 0.1  # default alternative for the stated power: mean NLL per token shifted by 0.1 nats (perplexity ×1.105)
POWER_SIMS = 400  # redraws per power estimate (standard error ≤ 0.025)
TARGET_POWER = 0.8  # power at which `detectable_shift` is read off
MARGIN = 0.05  # equivalence margin of the quality claim, nats/token (perplexity within ×1.051)
EQ_LEVEL = 0.05  # level of each one-sided test of the TOST (a 90 % interval)


# --------------------------------------------------------------------------- the two-sample test


def finite(values) -> np.ndarray:
    """The finite numbers among `values` (a record's null or a string never reaches the test)."""
    out = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and not isinstance(v, bool):
            out.append(x)
    return np.asarray(out, dtype=float)


def _redraws(pooled: np.ndarray, n1: int, n2: int, sims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`sims` pairs of samples of sizes n1, n2 drawn with replacement from the centred pooled scores."""
    rng = np.random.default_rng(seed)
    centred = pooled - np.median(pooled)
    return rng.choice(centred, (sims, n1)), rng.choice(centred, (sims, n2))


def _rejections(a: np.ndarray, b: np.ndarray, shift: float, level: float) -> float:
    from scipy import stats

    p = stats.mannwhitneyu(a, b + shift, alternative="two-sided", method="asymptotic", axis=1).pvalue
    return float(np.mean(p < level))


def mw_power(
    pooled, n1: int, n2: int, shift: float = SHIFT, level: float = LEVEL, sims: int = POWER_SIMS, seed: int = 0
) -> float:
    """Power of the two-sided U test at `level` against a location shift of `shift`, by simulation
    (samples redrawn from the pooled scores; see the module docstring)."""
    pooled = finite(pooled)
    if n1 < 1 or n2 < 1 or len(pooled) < 2:
        return 0.0
    a, b = _redraws(pooled, n1, n2, sims, seed)
    return _rejections(a, b, shift, level)


def detectable_shift(
    pooled, n1: int, n2: int, level: float = LEVEL, power: float = TARGET_POWER, sims: int = POWER_SIMS, seed: int = 0
) -> float | None:
    """The smallest location shift (nats per token) the test finds with `power`, by bisection over fixed redraws;
    None when even 20 pooled standard deviations are not found that often (too few samples)."""
    pooled = finite(pooled)
    scale = float(np.std(pooled)) or 1e-3
    if n1 < 1 or n2 < 1 or len(pooled) < 2:
        return None
    a, b = _redraws(pooled, n1, n2, sims, seed)
    lo, hi = 0.0, 20 * scale
    if _rejections(a, b, hi, level) < power:
        return None
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _rejections(a, b, mid, level) < power else (lo, mid)
    return hi


def mean_diff_ci(a: np.ndarray, b: np.ndarray, sims: int = 2000, seed: int = 0) -> list[float]:
    """95 % bootstrap interval of mean(b) − mean(a) (each sample resampled on its own)."""
    rng = np.random.default_rng(seed)
    diffs = rng.choice(b, (sims, len(b))).mean(1) - rng.choice(a, (sims, len(a))).mean(1)
    return [float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))]


def nll_check(
    name: str,
    baseline,
    speculative,
    *,
    level: float = LEVEL,
    shift: float = SHIFT,
    sims: int = POWER_SIMS,
    seed: int = 0,
) -> CheckResult:
    """Mann-Whitney U on per-example mean NLL: passes when equality is not rejected at `level`.
    `power` is against a shift of `shift` nats per token; `detail` holds the sizes, means, perplexities,
    the bootstrap interval of the mean difference and the shift detectable with power 0.8."""
    from scipy import stats

    a, b = finite(baseline), finite(speculative)
    alternative = f"mean NLL shifted by {shift:g} nats/token (perplexity ×{math.exp(shift):.3f})"
    if len(a) < 2 or len(b) < 2:
        return CheckResult(
            name,
            "mann-whitney",
            float("nan"),
            None,
            len(a) + len(b),
            level,
            0.0,
            alternative,
            False,
            {"n_baseline": len(a), "n_speculative": len(b), "why": "fewer than 2 scores per engine"},
        )
    test = stats.mannwhitneyu(a, b, alternative="two-sided")
    pooled = np.concatenate([a, b])
    detail = {
        "n_baseline": len(a),
        "n_speculative": len(b),
        "mean_nll_baseline": float(a.mean()),
        "mean_nll_speculative": float(b.mean()),
        "perplexity_baseline": math.exp(a.mean()),
        "perplexity_speculative": math.exp(b.mean()),
        "diff_ci95": mean_diff_ci(a, b, seed=seed),
        "detectable_shift": detectable_shift(pooled, len(a), len(b), level, sims=sims, seed=seed),
    }
    return CheckResult(
        name,
        "mann-whitney",
        float(test.statistic),
        float(test.pvalue),
        len(a) + len(b),
        level,
        mw_power(pooled, len(a), len(b), shift, level, sims, seed),
        alternative,
        bool(test.pvalue >= level),
        detail,
    )


# --------------------------------------------------------------------------- quality by equivalence (paired TOST)


@dataclass(frozen=True)
class Equivalence:
    """The quality claim on one run: is the mean NLL per token of the speculative engine's samples within
    ±margin of the baseline's, paired per example (same prompt, same seed)?"""

    verdict: str  # "holds", "does not hold" or "inconclusive"
    estimate: float  # mean of d = NLL(speculative) − NLL(baseline), nats/token (NaN with no pair)
    interval: tuple[float, float]  # (1 − 2·level) t-interval of that mean: inside ±margin ⇔ TOST holds
    margin: float  # the equivalence margin, nats/token
    level: float  # level of each one-sided test
    n: int  # pairs with both scores finite
    p_value: float  # TOST p-value: the larger of the two one-sided p-values (NaN below 2 pairs)
    power: float  # TOST power at a true difference of 0, with the observed spread of d
    n_needed: int | None  # pairs that would give power TARGET_POWER at that spread (None: no spread measured)
    sd: float  # standard deviation of d

    def to_dict(self) -> dict:
        return json_safe(asdict(self))

    def sentence(self) -> str:
        """One line: the verdict with its numbers."""
        lo, hi = self.interval
        text = (
            f"{self.verdict}: mean NLL difference {self.estimate:+.4f} nats/token, "
            f"{100 * (1 - 2 * self.level):.0f} % interval [{lo:+.4f}, {hi:+.4f}] vs margin ±{self.margin:g}, "
            f"n = {self.n} pairs, TOST power {self.power:.2f}"
        )
        if self.verdict == "inconclusive" and self.n_needed:
            text += f"; about {self.n_needed:,} pairs would reach power {TARGET_POWER:g}"
        return text


def paired(baseline, speculative) -> np.ndarray:
    """d = speculative − baseline over the examples where both scores are finite numbers (aligned by example)."""
    a, b = list(baseline), list(speculative)
    if len(a) != len(b):
        raise ValueError(
            f"paired scores need one baseline and one speculative score per example ({len(a)} vs {len(b)})"
        )
    keep = [(x, y) for x, y in zip(finite_or_none(a), finite_or_none(b)) if x is not None and y is not None]
    return np.asarray([y - x for x, y in keep], dtype=float)


def finite_or_none(values) -> list[float | None]:
    """Each value as a float, or None where it is not a finite number (null, a string, NaN, a bool)."""
    out = []
    for v in values:
        x = finite([v])
        out.append(float(x[0]) if len(x) else None)
    return out


def tost_power(n: int, sd: float, margin: float, level: float = EQ_LEVEL) -> float:
    """Exact power of the paired TOST at a true mean difference of 0 (measure/stats/planning.py, shared with every
    sample size specbench suggests)."""
    return float(planning.tost_power(n, sd, margin, 0.0, level))


def tost_n_needed(sd: float, margin: float, level: float = EQ_LEVEL, power: float = TARGET_POWER) -> int | None:
    """Smallest number of pairs at which the exact TOST power reaches `power` (None without a measured spread)."""
    return planning.tost_n_needed(sd, margin, 0.0, level, power)


def nll_equivalence(baseline, speculative, *, margin: float = MARGIN, level: float = EQ_LEVEL) -> Equivalence:
    """The quality claim by equivalence on paired per-example mean NLLs (see the module docstring).

    baseline, speculative: one score per example, aligned (None/NaN where an engine's output was empty)."""
    from scipy import stats

    if not margin > 0 or not 0 < level < 0.5:
        raise ValueError(f"the equivalence margin must be > 0 and the level in (0, 0.5) (got {margin}, {level})")
    d = paired(baseline, speculative)
    n = len(d)
    if n < 2:
        nan = float("nan")
        est = float(d.mean()) if n else nan
        return Equivalence("inconclusive", est, (nan, nan), margin, level, n, nan, 0.0, None, nan)
    est, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:  # every pair differs by the same amount (identical outputs: 0): no sampling error to test
        inside = abs(est) < margin
        return Equivalence(
            "holds" if inside else "does not hold",
            est,
            (est, est),
            margin,
            level,
            n,
            0.0 if inside else 1.0,
            1.0,
            None,
            0.0,
        )
    p_low = float(stats.ttest_1samp(d, -margin, alternative="greater").pvalue)  # H0: Δ ≤ −margin
    p_high = float(stats.ttest_1samp(d, margin, alternative="less").pvalue)  # H0: Δ ≥ +margin
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence_level=1 - 2 * level)
    lo, hi = float(ci.low), float(ci.high)
    if p_low < level and p_high < level:
        verdict = "holds"
    elif lo > margin or hi < -margin:
        verdict = "does not hold"
    else:
        verdict = "inconclusive"
    power = tost_power(n, sd, margin, level)
    return Equivalence(
        verdict, est, (lo, hi), margin, level, n, max(p_low, p_high), power, tost_n_needed(sd, margin, level), sd
    )

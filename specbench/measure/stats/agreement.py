"""measures_disagree: whether the summary's speedup measures differ, by a paired test on the same examples.

A run's summary gives the primary measure (geometric mean) beside the per-token speedup (ratio of sums), the
total-time ratio, the median example and the identical examples' figure. They answer different questions and may
differ; whether they do on *this* run is a paired question, since all of them come from the same examples. The older
rule (their 95 % intervals do not overlap) ignored the pairing and missed real differences (bench/coverage.py
disagreement_rates; docs/statistics.md).
"""

from __future__ import annotations

import math

import numpy as np

from specbench.measure.stats.planning import ALPHA, holm_adjusted
from specbench.measure.stats.statistics import MIN_INTERVAL_N, RESAMPLES, log_ratio_of_sums


def measures_on_resamples(cols: tuple, identical, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The summary's measures, each on the log scale, on every row of unit indices `idx` ([R, n]): the geometric
    mean, the per-token speedup (ratio of sums), the total-time ratio, the median example and, where `identical` is
    given, the identical examples' geometric mean."""
    spec_tok, spec_s, base_tok, base_s = (c[idx] for c in cols)  # [R, n] each
    logs = np.log((spec_tok / spec_s) / (base_tok / base_s))
    out = {
        "geometric mean": logs.mean(1),
        "per-token speedup": log_ratio_of_sums(spec_tok, spec_s, base_tok, base_s),
        "total-time ratio": np.log(base_s.sum(1) / spec_s.sum(1)),
        "median example": np.median(logs, 1),
    }
    if identical is not None:
        same = identical[idx]
        with np.errstate(invalid="ignore", divide="ignore"):
            out["identical examples"] = (logs * same).sum(1) / same.sum(1)
    return out


def measures_disagree(
    cols: tuple, identical=None, alpha: float = ALPHA, resamples: int = RESAMPLES, seed: int = 0
) -> list[dict]:
    """Which of the summary's measures disagree, by a paired test on the same units: for each pair, the difference of
    their logs on the run's units, its standard error from a paired bootstrap (each resample draws units and computes
    both measures on them), a t test on n − 1 degrees of freedom, and Holm over every pair at alpha. Returns the
    rejected pairs: names, their ratio (a ÷ b) with its 95 % t interval and the Holm-adjusted p-value. cols: per-unit
    (spec tokens, spec s, base tokens, base s), units with a zero or missing term dropped; identical: per-unit flags
    (None: batched, or not measured). Nothing below MIN_INTERVAL_N units; the identical examples' measure only with
    at least MIN_INTERVAL_N identical units and some that are not."""
    from scipy import stats

    cols = tuple(np.asarray(c, dtype=float) for c in cols)
    keep = np.all([np.isfinite(c) & (c > 0) for c in cols], axis=0)
    cols = tuple(c[keep] for c in cols)
    n = int(keep.sum())
    if n < MIN_INTERVAL_N:
        return []
    flags = None
    if identical is not None:
        flags = np.asarray(identical, dtype=float)[keep]
        if not (MIN_INTERVAL_N <= flags.sum() < n):
            flags = None
    point = {k: float(v[0]) for k, v in measures_on_resamples(cols, flags, np.arange(n)[None, :]).items()}
    rng = np.random.default_rng(seed)
    boot = measures_on_resamples(cols, flags, rng.integers(0, n, (resamples, n)))
    names = list(point)
    pairs, p_values = [], []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            diff = boot[a] - boot[b]
            se = float(np.nanstd(diff, ddof=1))
            d = point[a] - point[b]
            if not se > 0:
                p = 1.0 if abs(d) < 1e-12 else 0.0
            else:
                p = float(2 * stats.t.sf(abs(d) / se, n - 1))
            pairs.append((a, b, d, se))
            p_values.append(p)
    q = float(stats.t.ppf(0.975, n - 1))
    out = []
    for (a, b, d, se), adj in zip(pairs, holm_adjusted(p_values)):
        if adj < alpha:
            out.append(
                {
                    "a": a,
                    "b": b,
                    "ratio": math.exp(d),
                    "low": math.exp(d - q * se),
                    "high": math.exp(d + q * se),
                    "p_holm": adj,
                    "values": (math.exp(point[a]), math.exp(point[b])),
                }
            )
    return out

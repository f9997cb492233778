"""One piece of evidence (`CheckResult`) and the statistical checks that produce it, each with stated power.

Every check of `specbench verify` (model-free battery, real-pair step law, sequences, greedy identity)
and of the quality claim reports through `CheckResult`: what was tested, at which level and n, its power
against a stated alternative, and a verdict that says "pass" only when the check could have failed.

- `exact_check`: an exact law against a reference, max abs error within a tolerance;
- `gof_check` (G-test) and `tv_check` (a Bretagnolle–Huber–Carol bound on the total variation): counts
  against an exact law; `sample_checks` runs both per position and jointly;
- `homogeneity_check`: two samples share one law (Pearson chi-square on a 2 × bins table).

Power of the chi-square-type tests (one-sample with N draws, or two-sample with n_eff =
n1·n2/(n1+n2)): under an alternative at total variation δ from H0 on the tested cells the
Pearson noncentrality is λ = n_eff·Σ d²/w ≥ 4·n_eff·δ² (Cauchy–Schwarz on the positive and
negative parts of d, each carrying mass δ), so power ≥ P(χ²_df(4·n_eff·δ²) > χ²_df,1−α) for
*every* such alternative (asymptotic; the G statistic ≈ Pearson's X²).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from scipy import optimize, stats

from specbench.evidence.exact_laws import Prefix, marginal
from specbench.measure.stats.metric_units import json_safe

K = TypeVar("K", bound=Hashable)  # a cell of a law: a token, or a tuple of tokens

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

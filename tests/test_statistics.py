"""measure/stats/statistics.py: intervals, paired comparisons and three-outcome verdicts, checked against known truth.

The verdict tests simulate two cells on the same examples (bench/coverage.py: a shared example effect, Student-t(4)
noise of σ = 0.15 on the log ratio) and count statistics.consistency's outcomes over seeded draws. Each promise is
asserted at 150 draws: with a true rate of 2 % the chance of seeing more than 5 % (8 of 150) is 0.3 %, so a pass is
decisive; each has a negative control through the same code path (a margin, or a difference, where the verdict
must come out the other way at least 80 % of the time: the test's power).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import coverage as bench  # noqa: E402

from specbench.measure.stats import planning as pl  # noqa: E402
from specbench.measure.stats import statistics as st  # noqa: E402
from specbench.measure.stats.agreement import measures_disagree  # noqa: E402

REPS = 150
FAST = dict(reps=REPS)


def test_geometric_mean_gives_no_interval_below_the_covered_n_and_says_so():
    logs = np.log([1.2, 0.9, 1.5, 1.1, 1.3, 0.8, 1.4, 1.2])
    few = st.geometric_mean(logs)
    assert few.value == pytest.approx(math.exp(np.mean(logs))) and not few.has_interval
    assert few.note.startswith("n = 8 < 10") and "docs/statistics.md" in few.note
    many = st.geometric_mean(np.tile(logs, 3))
    assert many.has_interval and many.low < many.value < many.high and many.note is None


def test_share_median_and_total_time_intervals():
    s = st.share(3, 10)
    assert s.value == 0.3 and 0.06 < s.low < 0.07 and 0.65 < s.high < 0.66  # Clopper–Pearson
    m = st.median(np.arange(1.0, 31.0))
    assert m.value == 15.5 and m.low < 15.5 < m.high
    assert not st.median([1.0, 2.0, 3.0]).has_interval  # 3 order statistics cannot reach 95 %
    t = st.time_ratio(np.full(25, 2.0) + np.linspace(0, 0.1, 25), np.full(25, 1.0))
    assert t.value == pytest.approx(2.05, abs=1e-9) and t.low <= t.value <= t.high


def test_paired_comparison_uses_shared_examples_and_cancels_the_example_effect():
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 1.0, 40)  # a large example effect, the same in both cells
    a = {f"e{i}": x for i, x in enumerate(shared)}
    b = {f"e{i}": x + math.log(1.2) + rng.normal(0, 0.02) for i, x in enumerate(shared)}
    c = st.compare(b, a, "b vs a")
    lo, hi = c.interval(0.90)
    assert c.paired and c.n == 40 and 1.15 < lo < hi < 1.25 and hi - lo < 0.05  # σ 1 would give ±0.3
    batches = st.compare({"batch 0": 0.1, "batch 1": 0.2, "batch 2": 0.3}, {"batch 0": 0.0, "batch 1": 0.1})
    assert not batches.paired  # batches of different sizes are not the same units


def test_holm_steps_down():
    p = {"a": 0.01, "b": 0.02, "c": 0.04}
    rejected = st.holm(list(p), lambda t, level: p[t] <= level)
    assert rejected == ["a", "b", "c"]  # 0.01 ≤ 0.05/3, then 0.02 ≤ 0.05/2, then 0.04 ≤ 0.05
    p["a"] = 0.02
    assert st.holm(list(p), lambda t, level: p[t] <= level) == []  # nothing below 0.05/3: stop


def test_no_verdict_below_twenty_examples_per_cell():
    for n in (4, 10):
        rates = bench.verdict_rates(1.0, n, reps=20)
        assert rates[st.UNSURE] == 1.0, rates
    v = st.consistency([st.compare({"a": 0.1, "b": 0.2}, {"a": 0.1, "b": 0.25})])
    assert v.outcome == st.UNSURE and v.reason.startswith("n = 2 < 20") and v.needed >= 20


def test_one_sized_counterexample_decides_whatever_thinner_groups_show():
    """A group of 25 examples per cell whose ratio is 0.8× (spread 0.05 in logs) does not hold even beside a group of
    13 (a batch curve's B = 8 cell cut short by a task's 100 examples); the thin group alone, however far apart,
    stays inconclusive, and a thin group beside an equal sized one never lets the claim hold (negative controls)."""
    rng = np.random.default_rng(3)

    def pair(n, ratio):
        a = {f"e{i}": float(v) for i, v in enumerate(rng.normal(0.4, 0.2, n))}
        b = {k: v + math.log(ratio) + float(rng.normal(0, 0.05)) for k, v in a.items()}
        return st.compare(b, a, f"{ratio} at n {n}")

    sized_apart, thin_apart = pair(25, 0.8), pair(13, 0.7)
    assert st.consistency([sized_apart, thin_apart]).outcome == st.FAILS
    assert st.consistency([thin_apart]).outcome == st.UNSURE
    sized_equal, thin_equal = pair(25, 1.0), pair(13, 1.0)
    assert st.consistency([sized_equal]).outcome == st.HOLDS
    v = st.consistency([sized_equal, thin_equal])
    assert v.outcome == st.UNSURE and v.reason.startswith("n = 13 < 20"), v


@pytest.mark.parametrize("n", [20, 50])
def test_equal_cells_rarely_read_does_not_hold(n):
    """True ratio 1: 'does not hold' ≤ 5 % of 150 draws at n = 20 and 50."""
    rates = bench.verdict_rates(1.0, n, seed=n, **FAST)
    assert rates[st.FAILS] <= 0.05, rates


@pytest.mark.parametrize(("ratio", "n"), [(1.25, 20), (1.25, 50), (0.8, 50)])
def test_cells_beyond_twice_the_margin_rarely_read_holds(ratio, n):
    """True ratio outside 1 ± 2δ (δ = 10 %): 'holds' ≤ 5 % of 150 draws."""
    rates = bench.verdict_rates(ratio, n, seed=7 * n, **FAST)
    assert rates[st.HOLDS] <= 0.05, rates


def test_negative_controls_the_same_code_path_must_decide_the_other_way():
    """Power of the two checks above: at n = 50, a 30 % difference reads 'does not hold' and equal cells read
    'holds' in at least 80 % of draws; a 30 % difference under a margin of 50 % reads 'holds' just as often (so the
    'holds ≤ 5 %' test above would fail if the margin were not applied)."""
    assert bench.verdict_rates(1.3, 50, seed=1, **FAST)[st.FAILS] >= 0.8
    assert bench.verdict_rates(1.0, 50, seed=2, **FAST)[st.HOLDS] >= 0.8
    assert bench.verdict_rates(1.25, 50, seed=3, margin=0.5, **FAST)[st.HOLDS] >= 0.8


# ---------------------------------------------------------------------------------------------
# Sample sizes from the exact TOST power (issue 40): simulated through statistics.consistency, the claims' code path


def _holds_rate(n: int, sd: float, ratio: float, reps: int, seed: int, groups: int = 1, cells: int = 2) -> float:
    """Share of `reps` seeded draws in which statistics.consistency says "holds" over `groups` independent groups of
    `cells` cells on the same n examples (every pair of cells compared, as the claims table does); each pairwise
    per-example log difference has spread sd and the true ratio between neighbouring cells is `ratio`."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        comps = []
        for _ in range(groups):
            noise = rng.normal(0.0, sd / math.sqrt(2), (cells, n)) + math.log(ratio) * np.arange(cells)[:, None]
            logs = [{f"e{i}": float(x) for i, x in enumerate(row)} for row in noise]
            comps += [st.compare(logs[j], logs[i]) for i in range(cells) for j in range(i + 1, cells)]
        hits += st.consistency(comps, plan_alpha=None).outcome == st.HOLDS
    return hits / reps


def test_tost_power_is_exact_against_simulation():
    """statistics.tost_power (Owen's Q by quadrature) against 20,000 vectorised TOSTs per row, at a true ratio of 1,
    at 1.05 and at the re-run's 1 % level: within 0.015 (3.5 Monte-Carlo standard errors) every row; the
    noncentral-t form (1 − 2·F_nct) is its lower bound."""
    from scipy import stats

    rng = np.random.default_rng(11)
    bound = math.log(1.1)
    for n, sd, true, alpha in (
        (10, 0.1, 0.0, 0.05),
        (40, 0.2, 0.0, 0.05),
        (60, 0.2, 0.0, 0.01),
        (116, 0.2, math.log(1.05), 0.05),
    ):
        x = rng.normal(true, sd, (20_000, n))
        half = stats.t.ppf(1 - alpha, n - 1) * x.std(1, ddof=1) / math.sqrt(n)
        simulated = np.mean((x.mean(1) - half > -bound) & (x.mean(1) + half < bound))
        exact = pl.tost_power(n, sd, bound, true, alpha)
        assert abs(exact - simulated) < 0.015, (n, sd, true, alpha, exact, simulated)
        if true == 0.0:
            ncp = bound * math.sqrt(n) / sd
            assert exact >= 1 - 2 * stats.nct.cdf(stats.t.ppf(1 - alpha, n - 1), n - 1, ncp) - 1e-9


def test_suggested_n_gives_tost_power_near_its_goal_and_the_old_formula_falls_short():
    """At sd 0.2, ratio 1, margin 10 %, 5 % per side: the suggested N (exact TOST power, planned at a true ratio of 1)
    reads "holds" in 0.78–0.85 of 2,000 seeded draws through statistics.consistency (measured 0.832; exact 0.812).
    Negative control through the same path: the old z(1−α) + z(power) formula's N (28) must give power < 0.7
    (measured 0.585 of 400)."""
    sd = 0.2
    plan = pl.examples_for_equivalence(sd, 1.0, 0.10, 0.05)
    assert plan.n == 40 and plan.ratio == 1.0 and plan.comparisons == 1
    assert pl.tost_power(plan.n, sd, math.log(1.1)) >= 0.8 > pl.tost_power(plan.n - 1, sd, math.log(1.1))
    rate = _holds_rate(plan.n, sd, 1.0, reps=2000, seed=40)
    assert 0.78 <= rate <= 0.85, rate
    old = math.ceil(((pl.z(0.95) + pl.z(0.8)) * sd / math.log(1.1)) ** 2)
    assert old == 28
    control = _holds_rate(old, sd, 1.0, reps=400, seed=41)
    assert control < 0.7, control


def test_joint_power_of_a_claims_comparisons():
    """Three groups of two cells (three comparisons that must all pass), sd 0.2: N planned for their joint power
    (the product of their exact powers) makes all three hold in 0.78–0.85 of 1,000 draws (measured 0.815). Control:
    each comparison's N alone (40) leaves the joint power near 0.8³ ≈ 0.51, < 0.7 (measured 0.5625 of 400). Three
    cells compared pairwise (one group, three correlated comparisons) planned the same way reach at least 0.78
    (measured 0.83 of 300; Šidák: correlated estimates pass together at least as often as independent ones)."""
    sd = 0.2
    plan = pl.examples_for_equivalence([sd] * 3, 1.0, 0.10, 0.05)
    assert plan.comparisons == 3 and plan.n > 40
    rate = _holds_rate(plan.n, sd, 1.0, reps=1000, seed=42, groups=3)
    assert 0.78 <= rate <= 0.85, (plan, rate)
    alone = _holds_rate(40, sd, 1.0, reps=400, seed=43, groups=3)
    assert alone < 0.7, alone
    three_cells = _holds_rate(plan.n, sd, 1.0, reps=300, seed=44, cells=3)
    assert three_cells >= 0.78, three_cells


def test_sample_size_at_a_stated_ratio_and_level_and_its_range():
    """Planned at a stated ratio (1.05) or at the re-run's 1 % level the exact power crosses 0.8 at the suggested N;
    the printed range spans the observed sd's 80 % χ² interval (n = 20 behind it) and holds the point; the range's
    ends are what the sd interval's ends need. Beyond the margin no N is given; a difference needs one."""
    bound = math.log(1.1)
    for ratio, alpha in ((1.05, 0.05), (1.0, pl.RERUN_ALPHA)):
        plan = pl.examples_for_equivalence(0.2, ratio, 0.10, alpha)
        true = math.log(ratio)
        assert (
            pl.tost_power(plan.n, 0.2, bound, true, alpha) >= 0.8 > pl.tost_power(plan.n - 1, 0.2, bound, true, alpha)
        )
    plan = pl.examples_for_equivalence(0.2, 1.0, 0.10, 0.05, n_observed=20)
    lo_sd, hi_sd = pl.sd_interval(0.2, 20)
    assert lo_sd < 0.2 < hi_sd and plan.low < plan.n < plan.high, plan
    assert plan.low == pl.tost_n_needed(lo_sd, bound) and plan.high == pl.tost_n_needed(hi_sd, bound)
    assert plan.text() == f"{plan.n} ({plan.low}–{plan.high})"
    assert pl.examples_for_equivalence(0.2, 1.2, 0.10) is None  # beyond the margin: equivalence cannot be shown
    assert pl.examples_for_difference(0.2, 1.3, 0.10) > 0 and pl.examples_for_difference(0.2, 1.0, 0.10) is None
    assert pl.examples_for_equivalence(0.4, 1.0, 0.10).n == pytest.approx(
        4 * pl.examples_for_equivalence(0.2).n, rel=0.05
    )


def test_directional_claims_use_one_sided_bounds():
    rng = np.random.default_rng(4)
    fast = st.single({f"e{i}": x for i, x in enumerate(rng.normal(math.log(2.6), 0.1, 30))})
    slow = st.single({f"e{i}": x for i, x in enumerate(rng.normal(math.log(1.2), 0.1, 30))})
    edge = st.single({f"e{i}": x for i, x in enumerate(rng.normal(math.log(1.8), 0.6, 30))})
    t = 2 / 1.1
    assert st.directional([("fast", fast)], t, t).outcome == st.HOLDS
    assert st.directional([("slow", slow)], t, t).outcome == st.FAILS
    unsure = st.directional([("edge", edge)], t, t)
    assert unsure.outcome == st.UNSURE and unsure.needed and unsure.needed > 30


# ---------------------------------------------------------------------------------------------
# The secondary ratios' interval and measures_disagree (issue 40)


def test_ratio_of_sums_interval_covers_and_a_halved_one_does_not():
    """statistics.ratio_of_sums (t on the log, delta-method standard error) on n = 20 units drawn from a simulated
    skewed population (bench/coverage.timed_units), 300 seeded draws: covers the population's ratio of sums in
    ≥ 90 % (measured 94.7 %; the percentile bootstrap it replaces: 90.3 %, BCa 89.3 %). Negative control through
    the same function (linearized_t) at half the standard error: < 80 % (measured 66.7 %)."""
    good = bench.ratio_of_sums_coverage(20, draws=300, seed=20)
    assert good["t"] >= 0.90, good
    bad = bench.ratio_of_sums_coverage(20, draws=300, seed=20, halve=True)
    assert bad["t"] < 0.80, bad


def test_measures_disagree_is_a_paired_test_the_overlap_rule_missed():
    """Long examples gaining less (−0.2 log units per sd of log length) put the per-token speedup (a ratio of sums,
    weighted toward long examples) below the geometric mean: the paired test on the same 40 examples flags the pair in
    ≥ 80 % of 60 seeded runs (measured 95 %); the older rule, non-overlapping 95 % intervals, is the negative control
    and must miss it (≤ 20 %; measured 0 %). Null control: with little spread (σ 0.05) and no length effect any pair
    is flagged in ≤ 10 % (measured 3.3 %)."""
    real = bench.disagreement_rates(-0.2, reps=60, seed=5)
    assert real["paired"] >= 0.8 and real["overlap"] <= 0.2, real
    null = bench.disagreement_rates(0.0, reps=60, seed=6, sd=0.05)
    assert null["any"] <= 0.10, null
    cols = bench.timed_units(40, np.random.default_rng(7), -0.3)
    flagged = measures_disagree(cols)
    assert flagged and all(f["p_holm"] < 0.05 and f["low"] <= f["ratio"] <= f["high"] for f in flagged), flagged
    assert measures_disagree(tuple(c[:9] for c in cols)) == []  # below MIN_INTERVAL_N units: no test

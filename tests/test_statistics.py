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

from specbench.measure.stats import statistics as st  # noqa: E402

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


def test_examples_needed_falls_with_the_square_of_the_room():
    one = st.examples_for_equivalence(0.2, 1.0, 0.10)
    assert one == math.ceil(((st.z(0.95) + st.z(0.8)) * 0.2 / math.log(1.1)) ** 2)
    assert st.examples_for_equivalence(0.4, 1.0, 0.10) == pytest.approx(4 * one, rel=0.05)
    assert st.examples_for_equivalence(0.2, 1.2, 0.10) is None  # beyond the margin: equivalence cannot be shown
    assert st.examples_for_difference(0.2, 1.3, 0.10) > 0 and st.examples_for_difference(0.2, 1.0, 0.10) is None


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

"""Noise alarms with a stated false-alarm rate (measure/noise.py, issue 31): thresholds per probe count set on idle
probe series, checked on synthetic series whose idle behaviour is known; paired repeats; /proc/stat steal time."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.measure import noise


def idle_series(n_series: int, length: int, seed: int) -> list[list[float]]:
    """Idle probes like the 2-core VM's: 8 % lognormal jitter and a 1.5–1.8× spike on 6 % of probes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_series):
        s = 37.0 * np.exp(rng.normal(0, 0.08, length))
        spikes = rng.random(length) < 0.06
        s[spikes] *= rng.uniform(1.5, 1.8, spikes.sum())
        out.append(list(s))
    return out


COUNTS = [5, 11, 21, 41]


@pytest.fixture(scope="module")
def table():
    return noise.thresholds_from_idle(idle_series(12, 60, seed=0), COUNTS)


@pytest.mark.parametrize("m", [11, 21, 41])
def test_false_alarms_stay_near_one_percent_on_fresh_idle_series(table, m):
    # 4000 runs from series the table never saw; 1 % target, binomial sd 0.16 %, plus the table's own error from
    # 720 recorded probes (its tail is a few spike clusters: 0.1–2.7 % seen over seeds): ≤ 3 % fails a real excess
    assert noise.false_alarm_rate(idle_series(12, 60, seed=7), table, m) <= 0.03


@pytest.mark.parametrize(("m", "power"), [(21, 0.5), (41, 0.95)])
def test_a_sustained_1_3x_slowdown_is_caught(table, m, power):
    # a hog from between a quarter and half of the run to its end; 4000 runs. 41 probes: 0.997–0.999 over seeds of
    # the recorded series; 21 (make run's 20 examples): 0.58–0.94, as the table's tail moves; 11: ~0.3 (too few).
    assert noise.detection_rate(idle_series(12, 60, seed=8), table, m, slowdown=1.3) >= power
    # negative control through the same path: no slowdown is "detected" only at the false-alarm rate
    assert noise.detection_rate(idle_series(12, 60, seed=8), table, m, slowdown=1.0) <= 0.04


def test_the_old_fixed_rule_false_alarms_on_spiky_idle_runs(table):
    # negative control: the fixed 1.5× / 2-probe rule flags far more than 1 % of the same idle runs (the issue's
    # 10–30 % at 11 probes), so the table is what brings the rate down
    runs = noise.idle_runs(idle_series(12, 60, seed=7), 11, n=2000, seed=3)
    old = sum(bool(noise.sustained(r, noise.SHIFT_TOLERANCE, noise.GROSS_TOLERANCE)) for r in runs) / len(runs)
    new = sum(bool(noise.sustained_by_table(r, table)) for r in runs) / len(runs)
    assert old > 0.05 and new <= 0.03


def test_threshold_lookup_and_small_series():
    t = {5: 1.9, 21: 1.4}
    assert noise.threshold_for(t, 11) == 1.9 and noise.threshold_for(t, 30) == 1.4 and noise.threshold_for(t, 3) == 1.9
    assert noise.sustained_by_table([40.0, 200.0], t) == []  # two probes: no reference to judge against
    assert noise.shift_window(21) == 8 and noise.shift_window(41) == 10
    assert noise.shift_ratio([1.0] * 8 + [1.3] * 8, 8) == pytest.approx(1.3)
    assert noise.shift_ratio([1.0] * 15 + [9.0], 8) == pytest.approx(1.0)  # one spike: no shift


def test_paired_repeat_speedups_flag_a_moving_speedup_not_a_steady_one():
    steady = [(1.50, 1.55)] * 10
    assert noise.disagreeing_pairs(steady) == []
    moved = [(1.5, 1.52)] * 8 + [(1.5, 2.1), (2.0, 1.45)]
    assert len(noise.disagreeing_pairs(moved)) == 2
    assert noise.disagreeing_pairs([(1.5, 1.5)] * 19 + [(1.5, 1.9)]) == []  # one pair 1.27× apart: an idle VM does it
    rec = {"baseline": {"repeat_s": [2.0, 2.2]}, "speculative": {"repeat_s": [1.0, 1.0]}}
    assert noise.paired_speedups([rec]) == [(2.0, 2.2)]
    assert noise.paired_speedups([{"baseline": {"repeat_s": [2.0]}, "speculative": {"repeat_s": [1.0]}}]) == []
    reasons = noise.noise_verdict([], [], [], moved)
    assert len(reasons) == 1 and "A B B A pairs" in reasons[0]


def test_steal_time_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    assert noise.steal_counters(str(stat)) == {"steal": 40, "cpu_total": 1000}
    stat.write_text("cpu  100 0 50 800\n")  # an old kernel without the steal column
    assert noise.steal_counters(str(stat)) in ({},) or "steal" in noise.steal_counters(str(stat))
    rows = [{"ms": 1.0, "steal": 40, "cpu_total": 1000}, {"ms": 1.0}, {"ms": 1.0, "steal": 140, "cpu_total": 2000}]
    assert noise.steal_share(rows) == pytest.approx(0.1)
    assert noise.steal_share([{"ms": 1.0}]) is None
    assert "stole 10.0 %" in noise.noise_verdict([], [], [], steal=0.1)[0]
    assert noise.noise_verdict([], [], [], steal=0.01) == []

"""Did the noise move the speedup? The two A B B A halves of a run compared (machine/stability.py speedup_stability).

The rule weighs what the user reads (the speedup measured twice, seconds apart) above single slow probes: halves
equivalent within ±10 % (paired t, TOST at 5 % per side) clear a run whatever the probes say; a 95 % interval wholly
beyond ±10 % flags it. Simulated halves use a per-example log difference with Student-t(4) noise of sd 0.2 (the
real ding-de-en run of docs/statistics.md had sd ≈ 0.26 over 120 examples)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbench.measure.machine import stability
from specbench.measure.stats.metrics import timing_noise

REPS = 200


def halves(n: int, shift: float, rng, sd: float = 0.2) -> list[tuple[float, float]]:
    """n examples' (first pair, second pair) speedups; the second pair's speedup is `shift`× lower on average."""
    scale = sd / math.sqrt(2.0)  # t(4) has variance 2
    base = rng.normal(math.log(1.6), 0.3, n)
    first = base + scale * rng.standard_t(4, n)
    second = base - math.log(shift) + scale * rng.standard_t(4, n)
    return list(zip(np.exp(first), np.exp(second)))


def outcome_rates(n: int, shift: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    outs = [stability.speedup_stability(halves(n, shift, rng)).outcome for _ in range(REPS)]
    return {k: outs.count(k) / REPS for k in (stability.STABLE, stability.MOVED, stability.UNSURE)}


def test_equal_halves_rarely_read_moved_and_usually_read_stable():
    """True ratio 1, n = 20 and 50, 200 draws: 'moved' ≤ 5 %. 'stable' needs the halves' 90 % interval inside ±10 %:
    at this spread (sd of the log difference ≈ 0.28) that takes n ≈ 120 (≥ 80 % of draws); at n = 50 it is about a
    coin (the rest read 'unsure' and the probes decide, as before)."""
    for n in (20, 50):
        r = outcome_rates(n, 1.0, seed=n)
        assert r[stability.MOVED] <= 0.05, (n, r)
    assert outcome_rates(120, 1.0, seed=7)[stability.STABLE] >= 0.8


def test_a_speedup_that_moved_by_a_third_is_caught():
    """Negative control: the second halves 1.35× slower (a hog that hit one engine more than the other, half-way);
    at n = 20 it reads 'moved' in ≥ 80 % of 200 draws and 'stable' in none."""
    r = outcome_rates(20, 1.35, seed=3)
    assert r[stability.MOVED] >= 0.8 and r[stability.STABLE] == 0.0, r


def test_too_few_examples_give_no_verdict_and_the_old_reasons_decide():
    rng = np.random.default_rng(0)
    assert stability.speedup_stability(halves(9, 1.0, rng)) is None
    assert stability.judge(["2 of 11 probes ..."], None) == (True, ["2 of 11 probes ..."])
    assert stability.judge([], None) == (False, [])


def test_stable_halves_clear_slow_probes_and_moved_halves_flag_quiet_probes():
    rng = np.random.default_rng(1)
    stable = stability.speedup_stability([(1.6, 1.6 * f) for f in rng.uniform(0.97, 1.03, 30)])
    assert stable.outcome == stability.STABLE
    suspect, notes = stability.judge(["3 of 31 probes took up to 99 ms"], stable)
    assert not suspect and notes[0].startswith("the speedup did not move") and "3 of 31 probes" in notes[1]
    assert stability.judge([], stable) == (False, [])
    moved = stability.speedup_stability([(2.0 * f, 1.4 * g) for f, g in rng.uniform(0.95, 1.05, (30, 2))])
    assert moved.outcome == stability.MOVED and 1.38 < moved.ratio < 1.48
    suspect, notes = stability.judge([], moved)
    assert suspect and notes[0].startswith("the speedup moved during the run")


def test_unsure_halves_flag_a_busy_machine_but_not_disagreeing_repeats_alone():
    rng = np.random.default_rng(4)
    unsure = stability.speedup_stability([(1.6 * f, 1.5 * g) for f, g in rng.uniform(0.8, 1.2, (12, 2))])
    assert unsure is not None and unsure.outcome == stability.UNSURE
    pairs_only = ["3 of 20 examples gave speedups up to 1.78× apart in their two A B B A pairs"]
    suspect, notes = stability.judge(pairs_only, unsure, busy=False)
    assert not suspect and notes[0].startswith("its two A B B A halves neither") and notes[1] == pairs_only[0]
    suspect, _ = stability.judge(
        pairs_only + ["4 of 21 probes of a one-token target pass took up to 40 ms"], unsure, busy=True
    )
    assert suspect  # control: the same halves with the machine seen busy
    assert stability.judge(pairs_only, unsure) == (True, [unsure.sentence(0.1)] + pairs_only)  # busy unknown: as before


def _record(i: int, b: tuple[float, float], s: tuple[float, float]) -> dict:
    engine = lambda times: {"decode_s": sum(times) / 2, "n_tokens": 33, "repeat_s": list(times)}  # noqa: E731
    return {"example_id": f"e{i}", "baseline": engine(b), "speculative": engine(s)}


def test_the_summary_carries_the_stability_and_only_a_moved_speedup_is_suspect():
    rng = np.random.default_rng(2)
    steady = [_record(i, (2.0, 2.0 * f), (1.25, 1.25 * f)) for i, f in enumerate(rng.uniform(0.9, 1.1, 24))]
    steady[3]["baseline"]["repeat_s"] = [2.0, 9.0]  # one gross repeat: the old rule flags the run on its own
    steady[3]["speculative"]["repeat_s"] = [1.25, 5.6]  # …but both engines were hit alike: the speedup held
    out = timing_noise(steady)
    assert out["speedup_stability"] == stability.STABLE and out["suspect_timing"] is False
    assert any("repeated decodes disagreed" in n for n in out["timing_notes"])
    moved = [_record(i, (2.0, 2.0), (1.0, 1.6)) for i in range(24)]  # the speculative engine slowed half-way
    out = timing_noise(moved)
    assert out["speedup_stability"] == stability.MOVED and out["suspect_timing"] is True
    assert out["repeat_halves_ratio"] == pytest.approx(1.6)


def test_an_unsure_run_is_flagged_by_its_probes_and_not_by_its_disagreeing_pairs():
    """timing_noise end to end: the same records (A B B A halves the paired test cannot call, pairs that disagree)
    are clear with quiet probes and flagged when 4 of 12 probes ran 2× slow (the probe rule decides); the notes name
    the pairs either way."""
    rng = np.random.default_rng(4)
    records = [
        _record(i, (2.0, 2.0), (2.0 / (1.6 * f), 2.0 / (1.5 * g)))
        for i, (f, g) in enumerate(rng.uniform(0.8, 1.2, (12, 2)))
    ]
    quiet = [30.0 + 0.1 * i for i in range(12)]
    out = timing_noise(records, quiet)
    assert out["speedup_stability"] == stability.UNSURE and out["suspect_timing"] is False
    assert any("A B B A pairs" in n for n in out["timing_notes"])
    busy = quiet[:8] + [60.0] * 4
    out = timing_noise(records, busy)
    assert out["suspect_timing"] is True and any("the machine was busy" in n for n in out["timing_notes"])

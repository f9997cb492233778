"""Noise alarms with a stated false-alarm rate (machine/noise.py, issue 31): thresholds per probe count set on idle
probe series, checked on synthetic series whose idle behaviour is known; paired repeats; /proc/stat steal time."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.measure.machine import noise


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
    assert noise.steal_counters(str(stat)) == {"steal": 40, "cpu_total": 1000, "cpu_busy": 150}
    stat.write_text("cpu  100 0 50 800\n")  # an old kernel without the steal column
    assert noise.steal_counters(str(stat)) in ({},) or "steal" in noise.steal_counters(str(stat))
    rows = [{"ms": 1.0, "steal": 40, "cpu_total": 1000}, {"ms": 1.0}, {"ms": 1.0, "steal": 140, "cpu_total": 2000}]
    assert noise.steal_share(rows) == pytest.approx(0.1)
    assert noise.steal_share([{"ms": 1.0}]) is None
    assert "stole 10.0 %" in noise.noise_verdict([], [], [], steal=0.1)[0]
    assert noise.noise_verdict([], [], [], steal=0.01) == []


def cpu_rows(others_cpu_s: list[float], *, cpus: int = 2, threads: int = 2, wall: float = 10.0, steal=None, pid=1):
    """Probe rows 10 s apart on a machine of `cpus` CPUs (tick 10 ms) where this run keeps its `threads` threads
    busy on what the others leave (at most cpus × wall in all) and other processes take others_cpu_s[i] CPU seconds in
    interval i; steal[i] seconds stolen by the hypervisor."""
    steal = steal or [0.0] * len(others_cpu_s)
    rows = [{"ms": 1.0, "cpu_busy": 0, "steal": 0, "cpu_total": 0, "self_cpu_s": 0.0, "wall_s": 0.0}]
    for other, stolen in zip(others_cpu_s, steal):
        last = rows[-1]
        mine = min(threads * wall, cpus * wall - other - stolen)
        rows.append(
            {
                "ms": 1.0,
                "cpu_busy": last["cpu_busy"] + round(100 * (mine + other)),
                "steal": last["steal"] + round(100 * stolen),
                "cpu_total": last["cpu_total"] + round(100 * cpus * wall),
                "self_cpu_s": last["self_cpu_s"] + mine,
                "wall_s": last["wall_s"] + wall,
            }
        )
    return [dict(r, threads=threads, tick_s=0.01, pid=pid) for r in rows]


def test_contention_is_other_processes_cpu_beyond_the_free_cores():
    """Idle (background 0.1 CPU-s in 10 s): ~0, not flagged. One process at half a core over the last 4 of 12
    intervals (a competitor started two thirds in): 0.25 of the run's threads there, flagged. Controls: the same
    competitor on a 4-CPU machine where the run uses 2 takes only free cores (0); a short blip in 1 of 12 intervals
    is below a quarter of the run; the hypervisor's steal counts like a competitor."""
    idle = cpu_rows([0.1] * 12)
    assert max(noise.contention(idle)) < 0.01 and noise.contention_reasons(idle) == []
    hog = cpu_rows([0.1] * 8 + [5.0] * 4)
    assert noise.contention(hog)[-1] == pytest.approx(0.25, abs=0.01)
    assert noise.sustained_contention(noise.contention(hog)) == pytest.approx(0.25, abs=0.01)
    (reason,) = noise.contention_reasons(hog)
    assert "took 25 % of this run's CPU time over 3 of its 12 probe intervals" in reason
    assert noise.contention_reasons(cpu_rows([0.1] * 8 + [5.0] * 4, cpus=4)) == []
    assert noise.contention_reasons(cpu_rows([0.1] * 11 + [10.0])) == []  # one interval of 12: under the window
    assert noise.contention_reasons(cpu_rows([0.0] * 12, steal=[0.0] * 8 + [4.0] * 4))


def test_contention_skips_a_resumed_runs_restart_and_rows_without_counters():
    first, second = cpu_rows([0.1] * 3, pid=1), cpu_rows([0.1] * 3, pid=2)
    second = [dict(r, self_cpu_s=r["self_cpu_s"], wall_s=r["wall_s"] + 100.0) for r in second]
    assert len(noise.contention(first + second)) == 6  # 3 + 3: the restart's interval is not one
    assert noise.contention([{"ms": 1.0}, {"ms": 1.0}]) == [] and noise.sustained_contention([]) is None


def test_a_contended_run_is_flagged_whatever_its_halves_say(tmp_path):
    """run_folder.cpu_notes reads the probe rows: a competitor flags the run and adds its note to the others; an
    idle machine adds nothing (control)."""
    import json

    from specbench.measure.results.run_folder import cpu_notes

    metrics = {"suspect_timing": False, "timing_notes": []}
    for rows, flagged in ((cpu_rows([0.1] * 8 + [5.0] * 4), True), (cpu_rows([0.1] * 12), False)):
        (tmp_path / "noise_probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = cpu_notes(tmp_path, metrics)
        assert bool(out.get("suspect_timing")) is flagged, out
        assert not flagged or "other processes" in out["timing_notes"][0]


def test_an_engines_own_processes_are_the_runs_cpu_not_a_competitors():
    """vLLM computes in processes of its own: their CPU time is this run's (own_cpu_seconds), so a child process
    that spins for 0.4 s adds about 0.4 s to it while it is alive and keeps it after it is reaped. Control: while
    nothing of ours runs (a sleep), it hardly moves."""
    import subprocess
    import sys
    import time

    quiet = noise.own_cpu_seconds()
    time.sleep(0.3)
    assert noise.own_cpu_seconds() - quiet < 0.1
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ntime.sleep(5)"
    before = noise.own_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        deadline = time.monotonic() + 20
        while noise.own_cpu_seconds() - before < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = noise.own_cpu_seconds() - before
    finally:
        child.kill()
        child.wait()
    assert 0.4 <= alive < 1.5  # counted while it runs (the interpreter's start adds a little)
    assert noise.own_cpu_seconds() - before >= 0.4  # and once reaped

"""Is the machine quiet enough to trust these timings? Checked during `run`, not only in the report.

A speedup is a ratio of two timings taken seconds apart. If another process takes the cores in
between, the ratio is off by however much that process stole: a run measured while the machine
was loaded once printed 5.7× (its baseline took 128 s for 8 tokens). Three signals, each a pure
function of timings so that it is testable with a fake clock:
  1. a probe: the median of a few one-token target passes at a fixed context, re-timed before the
     first example and after every example; a fast machine stays within tolerance of itself;
  2. the spread of the baseline's per-token time over examples: plain decoding of one model
     costs about the same per token on every example, so an example far from the run's median
     was disturbed;
  3. the agreement of repeats (`--repeats` ≥ 2): one engine decoding one example twice, in
     A B B A order, should take about the same time.
Thresholds are loose, and a flag needs a *sustained* shift (several slow readings against the
series' lower quartile) or one gross outlier: on an idle 2-core VM single passes vary by ±20 %
and a probe now and then reads 1.5× (seen in `make run`, with nothing else running). A flag
says "do not trust this speedup without a rerun", not "this speedup is wrong by x".

Issue 31: with a recorded idle threshold table (IDLE_FILE, written by `python bench/noise.py record`) the probe
rule is the table's, set per probe count for ≤ 1 % false alarms per idle run: the run's slowest stretch of a quarter
of its probes over its quietest (single slow probes never flag). Two more signals: the two A B B A pairs of one
example giving different speedups (what the user reads moved during the run), and CPU time stolen by the hypervisor
(/proc/stat's steal column, read at every probe) beyond STEAL_LIMIT.

A slowdown that hits both engines alike moves no paired speedup and, when it lasts the whole run, no probe against
the run's own quietest either; yet a steady competitor biases the engines unequally (a verify pass of k tokens and a
one-token step suffer differently) and makes every absolute figure (tokens/s, the calibrated step costs) wrong. So
every probe row also carries the kernel's busy ticks, the run's own CPU time (its process and its descendants: an
engine's workers) and the wall clock: the CPU time *other* processes and the hypervisor took beyond the cores this
run left free, over any quarter of the run (`contention`), flags it above CONTENTION_LIMIT of the run's threads
whatever the halves say. This sees a competitor on this VM and, through steal, on the host; it cannot see a host that
slows the VM without accounting it as steal.

Steal and contention flag a run on their own; the other reasons are weighed by what they did to the paired speedup
(stability.py: the run's two A B B A halves compared, and `judge`).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import numpy as np

PROBE_PASSES = 5  # one-token passes per probe (median taken)
SHIFT_TOLERANCE = 1.5  # a probe or an example's baseline ms/token beyond 1.5× the series' lower quartile is "slow"
GROSS_TOLERANCE = 3.0  # beyond 3× the lower quartile one value alone is enough
REPEAT_TOLERANCE = 1.35  # slowest ÷ fastest repeat of one engine on one example beyond this disagrees
REPEAT_GROSS = 2.0  # one repeat pair this far apart is enough
MIN_SHARE = 0.15  # otherwise at least 2 values and this share of the series must be off


def probe_ms(
    step: Callable[[], None], passes: int = PROBE_PASSES, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median ms of `passes` calls of `step` (one target pass, rolled back)."""
    times = []
    for _ in range(passes):
        t0 = clock()
        step()
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def lower_quartile(values: list[float]) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) >= 2 else values[0]


def sustained(values: list[float], tolerance: float, gross: float) -> list[float]:
    """The values that show the machine slowed down: beyond `tolerance`× the lower quartile, counted
    only when there are at least 2 of them and MIN_SHARE of the series (one slow reading on a
    shared VM is common and harmless); any value beyond `gross`× counts alone. The lower quartile,
    not the median, is the reference, so a hog that slows half the run cannot hide in the median."""
    if len(values) < 2:
        return []
    ref = lower_quartile(values)
    far = [v for v in values if v > tolerance * ref]
    if any(v > gross * ref for v in values) or len(far) >= max(2, MIN_SHARE * len(values)):
        return far
    return []


def busy_probes(probes: list[float]) -> list[str]:
    """The probe rule's reason, or []: the machine itself seen slow (noise_verdict's first signal; judge's `busy`).
    With a recorded idle threshold table (IDLE_FILE) the rule is the table's, else the fixed sustained-shift rule."""
    probes = [p for p in probes if p and p > 0]
    table = idle_thresholds()
    slow = sustained(probes, SHIFT_TOLERANCE, GROSS_TOLERANCE) if table is None else sustained_by_table(probes, table)
    if not slow:
        return []
    first = next(i for i, p in enumerate(probes) if p in slow)
    return [
        f"{len(slow)} of {len(probes)} probes of a one-token target pass took up to {max(slow):.1f} ms "
        f"against {lower_quartile(probes):.1f} ms (lower quartile), from probe {first + 1} on: the machine was busy"
    ]


def noise_verdict(
    probes: list[float],
    baseline_token_ms: list[float],
    repeat_ratios: list[float],
    paired_speedups: list[tuple[float, float]] | None = None,
    steal: float | None = None,
) -> list[str]:
    """Reasons to distrust the timings (empty = none found).

    probes: probe medians in time order (ms); baseline_token_ms: the baseline's decode ms per token
    of each example; repeat_ratios: slowest ÷ fastest repeat of each (engine, example) timed more than once;
    paired_speedups: per example, the speedups of its first and second A B B A pair (what the user reads);
    steal: the share of CPU time the hypervisor stole during the run (/proc/stat), None where not given.
    With a recorded idle threshold table (IDLE_FILE) the probe rule is the table's: the k-th slowest probe over
    the lower quartile beyond the threshold for this many probes, set for ≤ 1 % false alarms per idle run.
    """
    reasons = busy_probes(probes)
    times = [t for t in baseline_token_ms if t and t > 0]
    far = sustained(times, SHIFT_TOLERANCE, GROSS_TOLERANCE)
    if far:
        reasons.append(
            f"{len(far)} of {len(times)} examples decoded at up to {max(far):.1f} ms/token against "
            f"{lower_quartile(times):.1f} (baseline, lower quartile): the machine's speed changed"
        )
    bad = [r for r in repeat_ratios if r > REPEAT_TOLERANCE]
    if any(r > REPEAT_GROSS for r in bad) or len(bad) >= max(2, MIN_SHARE * len(repeat_ratios)):
        reasons.append(
            f"{len(bad)} of {len(repeat_ratios)} repeated decodes disagreed by up to {max(bad):.2f}× "
            f"(same engine, same example)"
        )
    split = disagreeing_pairs(paired_speedups or [])
    if split:
        reasons.append(
            f"{len(split)} of {len(paired_speedups or [])} examples gave speedups up to {max(split):.2f}× apart in "
            f"their two A B B A pairs: the speedup itself moved during the run"
        )
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append(f"the hypervisor stole {100 * steal:.1f} % of CPU time during the run (/proc/stat steal)")
    return reasons


# --------------------------------------------------------------------------- paired repeats, steal time

STEAL_LIMIT = 0.05  # more stolen CPU time than this share of the run's is a flag on its own


def paired_speedups(records: Iterable[dict]) -> list[tuple[float, float]]:
    """Per example timed twice per engine (A B B A), the speedups of pair 1 (first baseline, first speculative) and
    pair 2 (second of each): the same example's speedup measured twice, seconds apart."""
    out = []
    for r in records:
        b, s = r["baseline"].get("repeat_s") or [], r["speculative"].get("repeat_s") or []
        if len(b) >= 2 and len(s) >= 2 and min(b[:2] + s[:2]) > 0:
            out.append((b[0] / s[0], b[1] / s[1]))
    return out


def disagreeing_pairs(pairs: list[tuple[float, float]]) -> list[float]:
    """Ratios (larger ÷ smaller) of the pairs that disagree: beyond REPEAT_TOLERANCE for at least 2 examples and
    MIN_SHARE of them, or one beyond REPEAT_GROSS; [] otherwise."""
    ratios = [max(a, b) / min(a, b) for a, b in pairs if a > 0 and b > 0]
    bad = [r for r in ratios if r > REPEAT_TOLERANCE]
    if any(r > REPEAT_GROSS for r in bad) or len(bad) >= max(2, MIN_SHARE * len(ratios)):
        return bad
    return []


def steal_counters(path: str = "/proc/stat") -> dict:
    """{"steal": ticks, "cpu_total": ticks, "cpu_busy": ticks} from the kernel's cumulative CPU line (busy: user,
    nice, system, irq and softirq); {} where it does not say (no /proc/stat, or a kernel without the steal column).
    psutil's cpu_times().steal where /proc/stat is missing (no busy ticks then)."""
    try:
        fields = Path(path).read_text().splitlines()[0].split()
        if fields[0] == "cpu" and len(fields) > 8:
            ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
            busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]
            return {"steal": ticks[7], "cpu_total": sum(ticks), "cpu_busy": busy}
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        t = psutil.cpu_times()
        if hasattr(t, "steal"):
            return {"steal": t.steal, "cpu_total": sum(t)}
    except ImportError:
        pass
    return {}


def steal_share(rows: list[dict]) -> float | None:
    """Stolen ÷ total CPU time between the first and the last probe row that carry steal counters."""
    marked = [
        r for r in rows if isinstance(r.get("steal"), (int, float)) and isinstance(r.get("cpu_total"), (int, float))
    ]
    if len(marked) < 2:
        return None
    total = marked[-1]["cpu_total"] - marked[0]["cpu_total"]
    return (marked[-1]["steal"] - marked[0]["steal"]) / total if total > 0 else None


# others' CPU (and steal) beyond the free cores, over a quarter of the run, that flags it: an idle run here read
# 0.4 %, one beside a competitor that slowed the probes 1.30× read 11.6 % (bench/noise.py contention, 2026-12-05)
CONTENTION_LIMIT = 0.05
CONTENTION_KEYS = ("cpu_busy", "steal", "cpu_total", "self_cpu_s", "wall_s", "threads", "tick_s")


def own_cpu_seconds() -> float:
    """CPU seconds of this run: this process (every thread) and its descendants, alive or already reaped. An engine
    that computes in processes of its own (vLLM's engine core and model worker) is this run's work, not a
    competitor's; counting only this process read every vLLM run as 73–97 % contended. Each live process adds its
    own reaped children (psutil's children_user/children_system), this process its own: none is counted twice."""
    import psutil

    def seconds(proc) -> float:
        t = proc.cpu_times()
        return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)

    me = psutil.Process()
    total = seconds(me)
    for child in me.children(recursive=True):
        try:
            total += seconds(child)
        except psutil.Error:  # it ended between the listing and the read: its time moves to its parent's reaped share
            continue
    return total


def cpu_counters(threads: int, path: str = "/proc/stat") -> dict:
    """What a probe row records for `contention`: the kernel's counters (steal_counters), this run's CPU seconds
    (own_cpu_seconds: this process and its engine's processes), the monotonic clock, the threads the run computes on,
    the kernel's tick and the process id (a resumed run is another process: its intervals start again); only the
    kernel's counters where it gives no busy ticks (no /proc/stat)."""
    out = steal_counters(path)
    if "cpu_busy" not in out:
        return out
    return out | {
        "self_cpu_s": own_cpu_seconds(),
        "wall_s": time.monotonic(),
        "threads": threads,
        "tick_s": 1.0 / os.sysconf("SC_CLK_TCK"),  # /proc/stat's unit (busy ticks exist only where it does)
        "pid": os.getpid(),
    }


def contention(rows: list[dict]) -> list[float]:
    """Per interval between consecutive probe rows that carry cpu_counters: the CPU time other processes and the
    hypervisor took beyond the cores this run left free (the machine's CPUs, read from the kernel's total ticks over
    the wall time, minus the run's threads), as a share of the run's threads' time in that interval. About 0 on an
    idle machine; one busy process on one of two cores both threads use: about 0.5."""
    marked = [r for r in rows if all(isinstance(r.get(k), (int, float)) for k in CONTENTION_KEYS)]
    out = []
    for a, b in zip(marked, marked[1:]):
        wall = b["wall_s"] - a["wall_s"]
        if wall <= 0 or b["threads"] <= 0 or a.get("pid") != b.get("pid"):
            continue  # a resumed run: its process's own CPU time starts again
        tick = b["tick_s"]
        cpus = (b["cpu_total"] - a["cpu_total"]) * tick / wall
        others = (b["cpu_busy"] - a["cpu_busy"]) * tick - (b["self_cpu_s"] - a["self_cpu_s"])
        stolen = (b["steal"] - a["steal"]) * tick
        spare = max(0.0, cpus - b["threads"]) * wall
        out.append(max(0.0, others + stolen - spare) / (b["threads"] * wall))
    return out


def contention_window(n: int) -> int:
    """Intervals a competitor must cover to count: a quarter of the run's, at least 2 (all of them when fewer)."""
    return min(n, max(2, n // 4))


def sustained_contention(shares: list[float]) -> float | None:
    """The largest median contention over contention_window consecutive intervals (a median, so one busy
    interval, a cron job, say, cannot carry a window alone); None without intervals."""
    if not shares:
        return None
    w = contention_window(len(shares))
    return max(float(np.median(shares[i : i + w])) for i in range(len(shares) - w + 1))


def contention_reasons(rows: list[dict]) -> list[str]:
    """The contention rule's reason, or []: other processes (or the hypervisor) took more than CONTENTION_LIMIT of
    the run's threads' time over a quarter of the run."""
    shares = contention(rows)
    worst = sustained_contention(shares)
    if worst is None or worst <= CONTENTION_LIMIT:
        return []
    return [
        f"other processes or the hypervisor took {100 * worst:.0f} % of this run's CPU time over "
        f"{contention_window(len(shares))} of its {len(shares)} probe intervals (/proc/stat): every time here is "
        f"slower than this machine runs alone, and the two engines need not slow alike"
    ]


# --------------------------------------------------------------------------- thresholds from idle probe series

IDLE_FILE = Path(__file__).with_name("noise_idle.json")  # bench/noise.py record writes it: series + machine
FALSE_ALARM = 0.01  # per run
WINDOWS = 4000  # synthetic idle runs per probe count (block bootstrap of the recorded series)
BLOCK = 4  # probes per block: keeps the drift of neighbouring probes together


def shift_window(m: int) -> int:
    """Probes a sustained shift must cover to count: a quarter of the run, at least 8 (one slow probe, or a few
    scattered, never move a window's median far)."""
    return max(8, m // 4)


def shift_ratio(probes: list[float], w: int) -> float:
    """The slowest stretch over the quietest: the largest median of w consecutive probes ÷ the smallest one (0 when
    fewer than w probes). Spikes move a median little; a hog's sustained load moves every median it covers."""
    if len(probes) < w:
        return 0.0
    medians = [statistics.median(probes[i : i + w]) for i in range(len(probes) - w + 1)]
    return max(medians) / min(medians)


def idle_runs(series: list[list[float]], m: int, n: int = WINDOWS, seed: int = 0) -> list[list[float]]:
    """n synthetic idle runs of m probes: blocks of BLOCK consecutive probes drawn from the recorded idle series
    (each series normalised by its own median, so machines of one class pool), concatenated."""
    rng = np.random.default_rng(seed)
    norm = [np.asarray(s, float) / np.median(s) for s in series if len(s) >= BLOCK]
    if not norm:
        raise ValueError(f"no idle series of at least {BLOCK} probes")
    blocks = [s[i : i + BLOCK] for s in norm for i in range(len(s) - BLOCK + 1)]
    runs = []
    for _ in range(n):
        picks = rng.integers(0, len(blocks), size=-(-m // BLOCK))
        runs.append(list(np.concatenate([blocks[i] for i in picks])[:m]))
    return runs


def thresholds_from_idle(
    series: list[list[float]], counts: list[int], rate: float = FALSE_ALARM / 2, windows: int = WINDOWS
) -> dict[int, float]:
    """Per probe count m (with at least two windows of shift_window(m)): the threshold on shift_ratio that synthetic
    idle runs exceed with probability `rate`, their (1 − rate) quantile. Half of FALSE_ALARM by default: the other
    half is left for the recorded series' own sampling error (cross-validated by bench/noise.py)."""
    return {
        m: float(np.quantile([shift_ratio(r, shift_window(m)) for r in idle_runs(series, m, windows)], 1 - rate))
        for m in counts
        if m > shift_window(m)
    }


def false_alarm_rate(series: list[list[float]], table: dict[int, float], m: int, seed: int = 1) -> float:
    """Share of synthetic idle runs of m probes (a different seed from the one that set the table) flagged."""
    runs = idle_runs(series, m, seed=seed)
    return sum(bool(sustained_by_table(r, table)) for r in runs) / len(runs)


def detection_rate(
    series: list[list[float]], table: dict[int, float], m: int, slowdown: float = 1.3, seed: int = 2
) -> float:
    """Share of synthetic runs of m probes flagged when a sustained `slowdown` starts at a random probe between a
    quarter and half of the run and lasts to its end (bench/noise.py's hog, started part-way)."""
    rng = np.random.default_rng(seed)
    runs = idle_runs(series, m, seed=seed)
    hits = 0
    for r in runs:
        onset = int(rng.integers(m // 4, m // 2 + 1))
        hits += bool(sustained_by_table([v * (slowdown if i >= onset else 1.0) for i, v in enumerate(r)], table))
    return hits / len(runs)


def threshold_for(table: dict[int, float], m: int) -> float:
    """The table's threshold for m probes: its own entry, else the nearest count below (stricter), else the least."""
    below = [k for k in table if k <= m]
    return table[max(below)] if below else table[min(table)]


def sustained_by_table(probes: list[float], table: dict[int, float]) -> list[float]:
    """The slow probes when the run's slowest stretch (shift_window probes in a row) sat beyond the table's threshold
    over its quietest, or one probe beyond GROSS_TOLERANCE× the lower quartile; [] otherwise (single slow probes
    are ignored)."""
    if len(probes) < 4:
        return []
    ref = lower_quartile(probes)
    t = threshold_for(table, len(probes))
    if shift_ratio(probes, shift_window(len(probes))) > t or max(probes) > GROSS_TOLERANCE * ref:
        return [p for p in probes if p > t * ref]
    return []


@cache
def idle_thresholds(path: Path = IDLE_FILE) -> dict[int, float] | None:
    """The shipped threshold table (probe count → threshold) recorded on idle runs; None when none is shipped."""
    try:
        data = json.loads(path.read_text())
        return {int(k): float(v) for k, v in data["thresholds"].items()} or None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None

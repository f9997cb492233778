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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

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


def noise_verdict(probes: list[float], baseline_token_ms: list[float], repeat_ratios: list[float]) -> list[str]:
    """Reasons to distrust the timings (empty = none found).

    probes: probe medians in time order (ms); baseline_token_ms: the baseline's decode ms per token
    of each example; repeat_ratios: slowest ÷ fastest repeat of each (engine, example) timed more than once.
    """
    reasons = []
    probes = [p for p in probes if p and p > 0]
    slow = sustained(probes, SHIFT_TOLERANCE, GROSS_TOLERANCE)
    if slow:
        first = next(i for i, p in enumerate(probes) if p in slow)
        reasons.append(
            f"{len(slow)} of {len(probes)} probes of a one-token target pass took up to {max(slow):.1f} ms "
            f"against {lower_quartile(probes):.1f} ms (lower quartile), from probe {first + 1} on: "
            f"the machine was busy"
        )
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
    return reasons

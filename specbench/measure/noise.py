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
Thresholds are loose (an idle 2-core VM shows ±20 % between single passes); a flag says "do
not trust this speedup without a rerun", not "this speedup is wrong by x".
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

PROBE_PASSES = 3  # one-token passes per probe (median taken)
PROBE_TOLERANCE = 1.5  # slowest probe ÷ fastest probe beyond this → suspect
TOKEN_TIME_TOLERANCE = 1.5  # an example's baseline ms/token beyond this factor of the run's median → suspect
REPEAT_TOLERANCE = 1.35  # slowest ÷ fastest repeat of one engine on one example beyond this → suspect


def probe_ms(step: Callable[[], None], passes: int = PROBE_PASSES, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median ms of `passes` calls of `step` (one target pass, rolled back)."""
    times = []
    for _ in range(passes):
        t0 = clock()
        step()
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def noise_verdict(probes: list[float], baseline_token_ms: list[float], repeat_ratios: list[float]) -> list[str]:
    """Reasons to distrust the timings (empty = none found).

    probes: probe medians in time order (ms); baseline_token_ms: the baseline's decode ms per token
    of each example; repeat_ratios: slowest ÷ fastest repeat of each (engine, example) timed more than once.
    """
    reasons = []
    probes = [p for p in probes if p and p > 0]
    if len(probes) >= 2:
        worst = max(probes) / min(probes)
        if worst > PROBE_TOLERANCE:
            slow_at = probes.index(max(probes))
            reasons.append(f"a one-token target pass took {min(probes):.1f} ms at best and {max(probes):.1f} ms at "
                           f"probe {slow_at + 1} of {len(probes)} ({worst:.1f}×): the machine was busy")
    times = [t for t in baseline_token_ms if t and t > 0]
    if len(times) >= 2:
        mid = statistics.median(times)
        far = [t for t in times if t / mid > TOKEN_TIME_TOLERANCE or mid / t > TOKEN_TIME_TOLERANCE]
        if far:
            reasons.append(f"{len(far)} of {len(times)} examples decoded at {max(far, key=lambda t: abs(t / mid - 1)):.1f} "
                           f"ms/token against a median of {mid:.1f} (baseline): the machine's speed changed")
    bad = [r for r in repeat_ratios if r > REPEAT_TOLERANCE]
    if bad:
        reasons.append(f"{len(bad)} of {len(repeat_ratios)} repeated decodes disagreed by up to {max(bad):.2f}× "
                       f"(same engine, same example)")
    return reasons

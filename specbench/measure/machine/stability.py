"""Did the noise move the speedup? The run's speedup measured twice, from every example's first A B B A pair and
from its second, and the noise checks' reasons weighed by what they did to it.

noise.py says whether the machine was quiet (probes, the baseline's per-token spread, repeats and pairs that
disagree); a noisy machine need not move a paired speedup. So the two halves are compared by a paired equivalence
test (speedup_stability), and `judge` decides from its outcome whether those reasons flag the run or stay notes.
metrics.timing_noise calls both. (Steal and contention are not weighed here: they flag a run on their own.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STABLE, MOVED, UNSURE = "stable", "moved", "unsure"
STABILITY_MIN_N = 10  # examples timed twice per engine before the two halves are compared (statistics.MIN_INTERVAL_N)


@dataclass(frozen=True)
class Stability:
    """The run's speedup measured twice: from every example's first A B B A pair and from its second. `ratio` is
    the first half's geometric mean over the second's, `low`/`high` its paired 90 % Student t interval."""

    outcome: str  # STABLE: equivalent within ±margin (TOST, 5 % per side); MOVED: the 95 % interval lies beyond it
    low: float
    high: float
    n: int
    first: float  # geometric mean of the first pairs' speedups
    second: float  # and of the second pairs'

    @property
    def ratio(self) -> float:
        """first ÷ second: the paired mean log difference, since both halves cover the same examples."""
        return self.first / self.second

    def sentence(self, margin: float) -> str:
        said = {
            STABLE: f"the speedup did not move: its two A B B A halves agree within ±{margin:.0%}",
            MOVED: f"the speedup moved during the run: its two A B B A halves differ beyond ±{margin:.0%}",
            UNSURE: f"its two A B B A halves neither agree within ±{margin:.0%} nor differ beyond it",
        }[self.outcome]
        return (
            f"{said} ({self.first:.2f}× vs {self.second:.2f}×, ratio {self.ratio:.3f} "
            f"[{self.low:.3f}, {self.high:.3f}] over {self.n} examples)"
        )


def speedup_stability(pairs: list[tuple[float, float]], margin: float | None = None) -> Stability | None:
    """Whether the noise of a run moved what the user reads. Each example timed twice per engine in A B B A order
    gives two paired speedups; the run's geometric mean from the first pairs and from the second pairs are two
    measurements of the same speedup, seconds apart. Equivalent within ±margin (paired t, TOST at 5 % per side):
    stable, whatever single probes did; the 95 % interval of their ratio wholly beyond ±margin: moved. None with
    fewer than STABILITY_MIN_N examples timed twice."""
    from specbench.measure.stats import statistics as st

    margin = st.DEFAULT_MARGIN if margin is None else margin
    logs = np.array([(math.log(a), math.log(b)) for a, b in pairs if a > 0 and b > 0], dtype=float)
    if len(logs) < STABILITY_MIN_N:
        return None
    d = logs[:, 0] - logs[:, 1]
    lo90, hi90 = (math.exp(x) for x in st.t_interval((d,), 1 - 2 * st.ALPHA))
    lo95, hi95 = (math.exp(x) for x in st.t_interval((d,), 1 - st.ALPHA))
    if st.within(lo90, hi90, margin):
        outcome = STABLE
    elif st.beyond(lo95, hi95, margin):
        outcome = MOVED
    else:
        outcome = UNSURE
    first, second = (math.exp(float(np.mean(logs[:, i]))) for i in (0, 1))
    return Stability(outcome, lo90, hi90, len(d), first, second)


def judge(
    reasons: list[str], stability: Stability | None, margin: float | None = None, busy: bool | None = None
) -> tuple[bool, list[str]]:
    """(suspect, notes): the noise checks' reasons weighed by what they did to the speedup. Stable halves clear the
    run (the reasons stay as notes, said to be harmless); halves that moved flag it whatever the probes say. Unsure
    halves (the paired test could not tell within ±margin) flag the run only when the machine itself was seen busy
    (`busy`: the probe rule fired, or a shared baseline drifted): the per-decode reasons — repeats or A B B A pairs
    that disagree — are what the halves test already weighed, by a test with a known error rate, so they stay notes.
    On the 20 idle `make run` tasks of 2026-12-02 the old rule (any reason decides when unsure) flagged 2; this one
    flags 1 (the one with 4 of 21 probes slow). Without a verdict from the halves (one repeat, fewer than
    STABILITY_MIN_N examples) every reason decides, as before. `busy` None: any reason counts as the machine's."""
    from specbench.measure.stats import statistics as st

    margin = st.DEFAULT_MARGIN if margin is None else margin
    if stability is None:
        return bool(reasons), list(reasons)
    if stability.outcome == STABLE:
        return False, ([stability.sentence(margin)] + list(reasons)) if reasons else []
    if stability.outcome == MOVED:
        return True, [stability.sentence(margin)] + list(reasons)
    flagged = bool(reasons) if busy is None else busy
    return flagged, ([stability.sentence(margin)] + list(reasons)) if reasons else []

"""Predict what a run measures: the end-to-end speedup of a configuration, with a prediction interval.

The run's primary measure is the geometric mean over examples of baseline time ÷ speculative time, prefill
included (metrics.primary_metrics). So the prediction is made per pilot example, end to end:
    baseline    = prefill + (n − 1) · u
    speculative = prefill + draft prefill + Σ_steps (model calls · d + v(γ' + 1) + lookup + o) · u / b
from the example's own replayed steps (measure/auto/pilot.py: the output's real length, where it ends, the budget's
cut of γ, per-source acceptance of a hybrid) and step costs measured on *real decode-loop steps* (LoopCosts: a
plain decode's step b, a draft call d, a verify over k tokens with its cache update v(k) = the bare pass curve
scaled to the loop's own verify time, the per-step remainder o), not bare forward passes, which cost 27–62 % less
than the loop's steps on the 2-core EPYC (issue 31). u is the example's own plain step (its context length).

No winner's curse: the configuration is chosen on the pilot's examples and its speedup predicted on others, the
examples the run is about to time (replayed untimed: measure/auto/auto_pilot.py says why those). So the interval is not
about which examples: it is the cost model's, exp(m ± z · MODEL_LOG_SD) (`replayed_prediction`). It does not cover
a machine that changes speed between calibration and run, nor low-precision divergences.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from specbench.measure.auto.pilot import Step, Trace

LEVEL = 0.95


@dataclass
class LoopCosts:
    """One dtype's step costs, measured on real decode-loop steps (ms)."""

    dtype: str
    step_ms: float  # a plain decode's step (decode_s ÷ decoded tokens)
    prefill_ms: float  # that decode's prefill
    verify_ms: dict[int, float]  # k → a verify pass over k tokens with its cache update
    draft_call_ms: dict[str, float] = field(default_factory=dict)  # draft spec → one draft-model call in the loop
    lookup_ms: dict[str, float] = field(default_factory=dict)  # draft spec → prompt lookup's search per step
    overhead_ms: dict[str, float] = field(default_factory=dict)  # draft spec → per step, outside draft and verify

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verify_ms"] = {str(k): v for k, v in self.verify_ms.items()}
        return d

    @staticmethod
    def from_dict(d: dict) -> LoopCosts:
        return LoopCosts(**(d | {"verify_ms": {int(k): float(v) for k, v in d["verify_ms"].items()}}))


def verify_prices(step_ms: float, bare_ms: dict[int, float]) -> dict[int, float]:
    """k → the loop's verify pass over k tokens (ms, pure): the loop's own plain step for k = 1; for k ≥ 2 the step
    times the bare curve's shape read from a Theil–Sen line through its k ≥ 2 points (scipy.stats.theilslopes) over
    t(1) (or the line at 1 where t(1) lies above it), never from single points, never falling.
    Why: on the 2-core AMD EPYC (20 idle `make run` tasks, docs/benchmarks.md) the timed runs' verify passes cost
    step · (0.95–1.0 + 0.03–0.05 (k − 1)) every time, while single points of the bare curve spread 26–60 % and the
    loop's own verify ÷ step, measured on one example, 0.70–1.55; priced this way the timed verify time came out
    within a log-sd of 0.05 (largest miss 12 %), against 0.18 (42 %) for the loop-scaled curve. The line starts at
    k = 2 because kernels change between one token and several: llama.cpp's Q4_1 pass over 2 tokens cost 1.8× its
    one-token step there, which a line through t(1) priced at 1.26× (that run's timed verify: 1.43× the line's price,
    0.94× this one's, re-priced from its records).
    A curve with a knee past k = 2 (a GPU flat to some k, then rising) is priced above its flat part."""
    ks = sorted(k for k, t in bare_ms.items() if t > 0)
    if not ks or step_ms <= 0:
        return dict(bare_ms)
    first, rest = ks[0], [k for k in ks if k > ks[0]]
    if len(rest) < 2:
        return {k: step_ms * max(bare_ms[k] / bare_ms[first], 1.0) for k in ks}
    values = [bare_ms[k] for k in rest]
    slope, intercept, _, _ = stats.theilslopes(values, rest)
    if slope < 0:  # a pass over more tokens is not cheaper: a falling line is noise, read as flat at its median
        slope, intercept = 0.0, float(np.median(values))
    at_first = intercept + slope * first
    base = min(bare_ms[first], at_first) if at_first > 0 else bare_ms[first]  # a steep line may cross 0 before k = 1
    return {k: step_ms if k == first else step_ms * max(intercept + slope * k, base) / base for k in ks}


def example_times(trace: Trace, steps: list[Step], draft: str, costs: LoopCosts, scale: float) -> tuple[float, float]:
    """(baseline ms, speculative ms) of one example under one configuration (pure). `scale`: this dtype's step
    and prefill over the pilot dtype's (the traces were decoded in one dtype)."""
    n = len(trace.output)
    u = trace.step_ms * scale if math.isfinite(trace.step_ms) and trace.step_ms > 0 else costs.step_ms
    prefill = trace.prefill_ms * scale
    base = prefill + (n - 1) * u
    d = costs.draft_call_ms.get(draft, 0.0)
    look = costs.lookup_ms.get(draft, 0.0)
    o = costs.overhead_ms.get(draft, 0.0)
    decode = sum(s.model_calls * d + costs.verify_ms[s.offered + 1] + look + o for s in steps)
    spec = prefill + trace.draft_prefill_ms.get(draft, 0.0) * scale + decode * u / costs.step_ms
    return base, spec


MODEL_LOG_SD = 0.05  # sd of log(timed ÷ priced) verify time, 20 idle `make run` tasks (bench/verify_price.py: 0.049)


@dataclass
class Prediction:
    """The chosen configuration's predicted speedup on the timed examples (replayed untimed before timing)."""

    speedup: float  # geometric mean of the examples' predicted speedups
    low: float
    high: float
    n_examples: int
    level: float = LEVEL

    def line(self) -> str:
        return f"predicted {self.speedup:.2f}× [{self.low:.2f}, {self.high:.2f}]"  # the CLI prefixes "auto: "

    def to_dict(self) -> dict:
        return asdict(self)


def replayed_prediction(log_speedups: list[float], model_sd: float = MODEL_LOG_SD, level: float = LEVEL) -> Prediction:
    """Geometric mean of the per-example predicted speedups of the examples that will be timed, and the cost
    model's interval around it (pure): exp(m ± z · model_sd). The examples are the timed ones, so no sampling of
    examples enters; what can still miss is the price of a step (model_sd: the verify price's recorded error, the
    largest share of a speculative step) and, in low precision, outputs that diverge from the replayed greedy one
    (not covered: a diverged output takes another path, sometimes with other acceptance)."""
    x = np.asarray([v for v in log_speedups if math.isfinite(v)], float)
    if len(x) == 0:
        return Prediction(float("nan"), float("nan"), float("nan"), 0, level)
    m = float(x.mean())
    half = float(stats.norm.ppf(0.5 + level / 2)) * model_sd
    return Prediction(math.exp(m), math.exp(m - half), math.exp(m + half), len(x), level)


def ms_per_token(times: list[tuple[float, float]], tokens: list[int]) -> float:
    """Σ speculative ms ÷ Σ tokens: the absolute cost the choice minimises (comparable across dtypes)."""
    return sum(s for _, s in times) / max(1, sum(tokens))


def log_speedups(times: list[tuple[float, float]]) -> list[float]:
    return [math.log(b / s) for b, s in times if b > 0 and s > 0]


def ratio_to_prediction(measured: float | None, predicted: float | None) -> float | None:
    """measured ÷ predicted (None when either is missing or not positive)."""
    if measured is None or predicted is None:
        return None
    if not (math.isfinite(measured) and math.isfinite(predicted)) or measured <= 0 or predicted <= 0:
        return None
    return measured / predicted

"""Predict what a run measures: the end-to-end speedup of a configuration with an interval, as two numbers named
for what they are.

The run's primary measure is the geometric mean over examples of baseline time ÷ speculative time, prefill
included (metrics.primary_metrics). Each example is priced end to end:
    baseline    = prefill + (n − 1) · u
    speculative = prefill + draft prefill + Σ_steps (model calls · d + v(γ' + 1) + lookup + o) · u / b
from replayed steps (measure/auto/pilot.py: the output's real length, where it ends, the budget's cut of γ,
per-source acceptance of a hybrid) and step costs measured on *real decode-loop steps* (LoopCosts: a plain decode's
step b, a draft call d, a verify over k tokens with its cache update v(k) = the bare pass curve scaled to the loop's
own verify time, the per-step remainder o), not bare forward passes, which cost 27–62 % less than the loop's steps
on the 2-core EPYC (issue 31). u is the example's own plain step (its context length).

Two numbers come out of it before any timing (issue 40):
  - **predicted (held out)** (`held_out_prediction`): the pilot examples' acceptance, as each one's priced decode
    per token ρ_j (`decode_rate`), applied to the timed examples' prompts, lengths and plain steps
    (`example_shape`); none of the timed examples' acceptance enters. Its interval covers the spread of acceptance
    between two sets of examples (a t interval over pilot examples for the difference of two sets' means) and the
    step pricing's error (MODEL_LOG_SD).
  - **cost-model check (known acceptance)** (`replayed_prediction`): the timed examples' own replayed steps. At
    T = 0 that is their exact acceptance path, so measured ÷ check tests the step prices, not a prediction; its
    interval is the pricing error's alone.
Neither covers a machine that changes speed between calibration and run, nor low-precision divergences.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

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
    verify_rounds: int = 0  # 0: verify priced from the calibration's burst; n: from n rounds beside the replay
    # k → the rounds' median bare pass (ms) that verify_ms was read from ({}: the burst's, in the calibration): kept
    # so that a finished run can be re-priced under another rule (bench/check_misses.py)
    verify_bare_ms: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("verify_ms", "verify_bare_ms"):
            d[key] = {str(k): v for k, v in d[key].items()}
        return d

    @staticmethod
    def from_dict(d: dict) -> LoopCosts:
        keyed = {key: {int(k): float(v) for k, v in d.get(key, {}).items()} for key in ("verify_ms", "verify_bare_ms")}
        return LoopCosts(**(d | keyed))


def verify_prices(step_ms: float, bare_ms: dict[int, float], over_first: bool = False) -> dict[int, float]:
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
    A curve with a knee past k = 2 (a GPU flat to some k, then rising) is priced above its flat part.
    `over_first`: the line over t(1) always (an alternative bench/verify_price.py compares; not what runs use)."""
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
    lower = at_first > 0 and not over_first  # a steep line may cross 0 before k = 1
    base = min(bare_ms[first], at_first) if lower else bare_ms[first]
    return {k: step_ms if k == first else step_ms * max(intercept + slope * k, base) / base for k in ks}


def repriced(costs: LoopCosts, rounds: list[dict[int, float]]) -> LoopCosts:
    """`costs` with its verify prices read from `rounds` of bare passes (calibration.session_pass_round: each k's
    median over the rounds, through verify_prices; pure); unchanged without rounds."""
    if not rounds:
        return costs
    ks = sorted(set.intersection(*(set(r) for r in rounds)))
    bare = {k: float(np.median([r[k] for r in rounds])) for k in ks}
    return replace(costs, verify_ms=verify_prices(costs.step_ms, bare), verify_rounds=len(rounds), verify_bare_ms=bare)


def example_shape(trace: Trace, draft: str, costs: LoopCosts, scale: float) -> tuple[float, float, float]:
    """(baseline ms, speculative ms outside the decode steps, plain decode ms) of one example (pure): its prefill,
    the draft's prefill, its length and plain step, and nothing of its acceptance. `scale`: this dtype's step and
    prefill over the pilot dtype's (the traces were decoded in one dtype)."""
    n = len(trace.output)
    u = trace.step_ms * scale if math.isfinite(trace.step_ms) and trace.step_ms > 0 else costs.step_ms
    prefill = trace.prefill_ms * scale
    plain = (n - 1) * u
    return prefill + plain, prefill + trace.draft_prefill_ms.get(draft, 0.0) * scale, plain


def steps_ms(steps: list[Step], draft: str, costs: LoopCosts) -> float:
    """Replayed steps' decode time (ms at the loop's calibration step, pure)."""
    d = costs.draft_call_ms.get(draft, 0.0)
    look = costs.lookup_ms.get(draft, 0.0)
    o = costs.overhead_ms.get(draft, 0.0)
    return sum(s.model_calls * d + costs.verify_ms[s.offered + 1] + look + o for s in steps)


def example_times(trace: Trace, steps: list[Step], draft: str, costs: LoopCosts, scale: float) -> tuple[float, float]:
    """(baseline ms, speculative ms) of one example under one configuration, along its own replayed steps (pure)."""
    base, fixed, plain = example_shape(trace, draft, costs, scale)
    n = len(trace.output)
    u = plain / (n - 1) if n > 1 else costs.step_ms
    return base, fixed + steps_ms(steps, draft, costs) * u / costs.step_ms


def decode_rate(trace: Trace, walks: list[list[Step]], draft: str, costs: LoopCosts) -> float | None:
    """ρ: one (pilot) example's priced speculative decode ÷ its plain decode, per token (pure; the mean over walks
    at T > 0): what its acceptance is worth at this configuration's step prices. None for a one-token output."""
    n = len(trace.output)
    if n < 2 or not walks:
        return None
    return sum(steps_ms(w, draft, costs) for w in walks) / len(walks) / (costs.step_ms * (n - 1))


MODEL_LOG_SD = 0.05  # sd of log(timed ÷ priced) verify time, 20 idle `make run` tasks (bench/verify_price.py: 0.049)


HELD_OUT = "held_out"  # Prediction.kind: the pilot's acceptance applied to the timed examples' prompts
CHECK = "check"  # Prediction.kind: the timed examples' own acceptance (replayed), a check of the step prices
NAMES = {HELD_OUT: "predicted (held out)", CHECK: "cost-model check (known acceptance)"}  # as printed and documented


@dataclass
class Prediction:
    """A configuration's end-to-end speedup on the timed examples, computed before timing (`kind` says which)."""

    speedup: float  # geometric mean over the timed examples
    low: float  # the interval's ends (NaN: none, e.g. fewer than 2 pilot examples)
    high: float
    n_examples: int  # timed examples it is for
    level: float = LEVEL
    kind: str = CHECK  # HELD_OUT or CHECK
    n_pilot: int | None = None  # held out: pilot examples whose acceptance it carries
    sampling_log_sd: float | None = None  # held out: sd over pilot examples of the log prediction (acceptance alone)
    pricing_log_sd: float = MODEL_LOG_SD  # the step pricing's recorded log error, in both intervals
    replay_s: float | None = None  # check: seconds of the timed examples' untimed decode and replay

    def line(self) -> str:
        """e.g. "predicted (held out) 1.58× [1.31, 1.90]" (the CLI prefixes "auto: ")."""
        bounds = (
            f"[{self.low:.2f}, {self.high:.2f}]"
            if math.isfinite(self.low) and math.isfinite(self.high)
            else "(no interval)"
        )
        return f"{NAMES[self.kind]} {self.speedup:.2f}× {bounds}"

    def to_dict(self) -> dict:
        return asdict(self)


def replayed_prediction(log_speedups: list[float], model_sd: float = MODEL_LOG_SD, level: float = LEVEL) -> Prediction:
    """The cost-model check (known acceptance): the geometric mean of the replayed speedups of the examples that will
    be timed, along their own output, and the cost model's interval around it (pure): exp(m ± z · model_sd). The
    examples are the timed ones, so no sampling of examples enters; what can still miss is the price of a step
    (model_sd: the verify price's recorded error, the largest share of a speculative step) and, in low precision,
    outputs that diverge from the replayed greedy one (not covered: a diverged output takes another path, sometimes
    with other acceptance)."""
    x = np.asarray([v for v in log_speedups if math.isfinite(v)], float)
    if len(x) == 0:
        return Prediction(float("nan"), float("nan"), float("nan"), 0, level)
    m = float(x.mean())
    half = float(stats.norm.ppf(0.5 + level / 2)) * model_sd
    return Prediction(math.exp(m), math.exp(m - half), math.exp(m + half), len(x), level, pricing_log_sd=model_sd)


def held_out_prediction(
    rates: list[float | None],
    shapes: list[tuple[float, float, float]],
    model_sd: float = MODEL_LOG_SD,
    level: float = LEVEL,
) -> Prediction:
    """The timed examples' geometric-mean speedup predicted from the pilot's acceptance alone (pure).

    `rates`: ρ_j per pilot example (decode_rate); `shapes`: (baseline, fixed speculative, plain decode) ms per timed
    example (example_shape). g_j = mean_i log(base_i ÷ (fixed_i + ρ_j · plain_i)) is the timed set's speedup had
    each of its examples pilot example j's acceptance; the prediction is exp(mean_j g_j). The timed set's acceptance
    is a sample too, so the interval is for the difference of two sets' means, widened by the pricing error:
        half = √( (t_{n_p − 1} · s_g · √(1/n_p + 1/n_t))² + (z · model_sd)² ),  s_g = sd_j(g_j)
    (each part a 95 % half-width; added in quadrature as independent errors on the log scale). It widens as the
    pilot shrinks (1/n_p and t's quantile) and as acceptance spreads between examples; NaN ends below 2 pilot
    examples (no spread to estimate)."""
    rho = [r for r in rates if r is not None and math.isfinite(r) and r > 0]
    shape = [(b, f, p) for b, f, p in shapes if b > 0 and f >= 0 and p >= 0 and f + p > 0]
    nan = float("nan")
    if not rho or not shape:
        return Prediction(nan, nan, nan, len(shape), level, HELD_OUT, len(rho), None, model_sd)
    base, fixed, plain = (np.asarray(v, float) for v in zip(*shape))
    g = np.asarray([float(np.mean(np.log(base / (fixed + r * plain)))) for r in rho])
    m, n_p, n_t = float(g.mean()), len(g), len(shape)
    if n_p < 2:
        return Prediction(math.exp(m), nan, nan, n_t, level, HELD_OUT, n_p, None, model_sd)
    s_g = float(g.std(ddof=1))
    half = held_out_half(s_g, n_p, n_t, model_sd, level)
    return Prediction(math.exp(m), math.exp(m - half), math.exp(m + half), n_t, level, HELD_OUT, n_p, s_g, model_sd)


def held_out_half(s_g: float, n_p: int, n_t: int, model_sd: float = MODEL_LOG_SD, level: float = LEVEL) -> float:
    """The held-out interval's half-width on the log scale (pure; held_out_prediction's formula): the difference of two
    example sets' means from n_p pilot examples of log sd s_g and n_t timed ones, and the step pricing's error."""
    sampling = float(stats.t.ppf(0.5 + level / 2, n_p - 1)) * s_g * math.sqrt(1 / n_p + 1 / n_t)
    pricing = float(stats.norm.ppf(0.5 + level / 2)) * model_sd
    return math.hypot(sampling, pricing)


def pooled_held_out(
    speedup: float,
    example_logs: list[float],
    n_timed: int,
    n_pilot: int,
    model_sd: float = MODEL_LOG_SD,
    level: float = LEVEL,
) -> Prediction:
    """The held-out prediction of an engine that drafts in its own loop (engine_pilot.py, pure): the pooled pilot's
    predicted speedup (what the choice ranked) with held_out_prediction's interval, its spread s_g taken over
    `example_logs`, the log speedup each pilot example's own acceptance predicts at the same prices (n_pilot: the
    examples the pooled figure carries). NaN ends below 2 such logs (no spread to estimate)."""
    g = np.asarray([x for x in example_logs if math.isfinite(x)], float)
    nan = float("nan")
    if len(g) < 2 or n_timed < 1 or not (math.isfinite(speedup) and speedup > 0):
        return Prediction(speedup, nan, nan, n_timed, level, HELD_OUT, n_pilot, None, model_sd)
    s_g = float(g.std(ddof=1))
    half = held_out_half(s_g, len(g), n_timed, model_sd, level)
    m = math.log(speedup)
    return Prediction(speedup, math.exp(m - half), math.exp(m + half), n_timed, level, HELD_OUT, n_pilot, s_g, model_sd)


def pooled_interval_clause(prediction: Prediction, priced_on: str) -> str:
    """What a pooled_held_out interval covers, for its reasons' line (pure): the spread between example sets (each
    pilot example priced on `priced_on`) and the step pricing; or why there is none."""
    if prediction.sampling_log_sd is None:
        return "no interval: fewer than 2 pilot examples, so how acceptance differs between example sets is unknown"
    return (
        f"the 95 % interval covers how acceptance differs between example sets (log sd "
        f"{prediction.sampling_log_sd:.3f} over the pilot examples, each priced on {priced_on}) and step pricing "
        f"(log sd {prediction.pricing_log_sd:.2f}, the torch loop's recorded error)"
    )


def auto_lines(held_out: Prediction, check: Prediction, costs: LoopCosts, gamma: int, path: str) -> list[str]:
    """auto's two lines before timing, each number named for what it is (pure): the held-out prediction, then the
    cost-model check with the loop costs it priced and the seconds its untimed replay took."""
    sd = f"{held_out.sampling_log_sd:.3f}" if held_out.sampling_log_sd is not None else "—"
    verify = costs.verify_ms.get(gamma + 1, float("nan"))
    return [
        f"{held_out.line()} for the {held_out.n_examples} timed examples: the acceptance of the "
        f"{held_out.n_pilot} pilot examples (none of the timed ones) applied to the timed examples' prompts and "
        f"lengths by the cost model; the 95 % interval covers how acceptance differs between example sets (log sd "
        f"{sd} over pilot examples) and step pricing (log sd {held_out.pricing_log_sd:.2f}); end to end, geometric "
        f"mean over examples; the choice above was made on the pilot's acceptance too",
        f"{check.line()} on the same {check.n_examples} examples, decoded once untimed ({check.replay_s or 0.0:.1f} "
        f"s) and replayed along their own {path}: their acceptance is known, so this checks the step prices "
        f"(interval: pricing error only) and is not used by the choice (loop costs: plain step {costs.step_ms:.1f} "
        f"ms, a verify pass over {gamma + 1} tokens {verify:.1f} ms"
        + (f", its shape from {costs.verify_rounds} pass rounds beside the replay)" if costs.verify_rounds else ")"),
    ]


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

"""The numbers of a load run (`--concurrency`, `--request-rate`): what one arm served, per request and per batch, and
speculative ÷ plain throughput over the repeats with its interval.

A load run serves all its examples at once on one engine per arm (measure/run/load_runner.py), so its unit of
throughput is the batch, not the example: output tokens/s is every request's tokens ÷ the batch's wall seconds, and
the ratio's interval is over repeats of the whole batch (`--repeats`, A B B A), Student's t on the per-repeat log
ratios (statistics.geometric_mean with n ≥ 2). Latencies are per request, pooled over the repeats: TTFT (first token,
from the request's own submission) and TPOT ((last − first arrival) ÷ (n − 1)), as vLLM's benchmark_serving defines
them. Goodput counts the requests that met the latency bound per wall second. Pure functions of numbers, no torch.
"""

from __future__ import annotations

import math
import statistics as stdstats

from specbench.measure.stats.statistics import LEVEL, geometric_mean

NAN = float("nan")
MIN_LOAD_N = 2  # repeats below which the ratio gets no interval
ARMS = ("baseline", "speculative")


def request_latency(prefill_s: float, decode_s: float, n_tokens: int) -> tuple[float, float | None]:
    """(TTFT, TPOT) of one request: its first token's arrival, and (last − first arrival) ÷ (n − 1) for n ≥ 2 tokens
    (None for fewer: there is no time between tokens)."""
    return prefill_s, (decode_s / (n_tokens - 1) if n_tokens >= 2 else None)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0 ≤ q ≤ 100) by linear interpolation between order statistics (numpy's default); None
    without values."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def goodput(tpots: list[float | None], wall_s: float, slo_tpot_s: float) -> float | None:
    """Requests per second that met the bound: those whose TPOT ≤ slo_tpot_s (a request of one token, with no TPOT,
    meets it, as in benchmark_serving), ÷ the batch's wall seconds; None without a positive wall time."""
    if not wall_s > 0:
        return None
    return sum(1 for t in tpots if t is None or t <= slo_tpot_s) / wall_s


def throughput_ratio(spec_tokens_per_s: list[float], base_tokens_per_s: list[float], level: float = LEVEL) -> dict:
    """Speculative ÷ plain output throughput over paired repeats: the geometric mean of the per-repeat ratios, its
    Student t interval on the logs (n = repeats; none below MIN_LOAD_N), and a verdict: faster (the interval above
    1), slower (below 1), else inconclusive (it holds 1, or there is none)."""
    logs = [math.log(s / b) for s, b in zip(spec_tokens_per_s, base_tokens_per_s, strict=True) if s > 0 and b > 0]
    est = geometric_mean(logs, level, min_n=MIN_LOAD_N)
    if not logs:
        return {"value": None, "ci95": [None, None], "n": 0, "verdict": "inconclusive"}
    verdict = "inconclusive"
    if est.has_interval and est.low > 1:
        verdict = "faster"
    elif est.has_interval and est.high < 1:
        verdict = "slower"
    return {"value": est.value, "ci95": est.ci(), "n": est.n, "verdict": verdict}


def arm_fields(batches: list[dict], slo_tpot_s: float) -> dict:
    """One arm's load fields from its LoadBatch dicts (one per repeat): the median over repeats of throughput and
    goodput, and the TTFT / TPOT percentiles over every request of every repeat."""
    if not batches:
        return {}
    ttft = [t for b in batches for t in b["ttft_s"]]
    tpot = [t for b in batches for t in b["tpot_s"] if t is not None]
    return {
        "tokens_per_s": stdstats.median(b["output_tokens"] / b["wall_s"] for b in batches),
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_s": percentile(tpot, 50),
        "tpot_p99_s": percentile(tpot, 99),
        "goodput": stdstats.median(goodput(b["tpot_s"], b["wall_s"], slo_tpot_s) or 0.0 for b in batches),
    }


def load_summary(batches: list[dict], slo_tpot_ms: float) -> dict:
    """The summary's load fields (schema.Summary: `<arm>_load_*`, `<arm>_goodput`, `load_speedup*`) from a run's
    LoadBatch dicts; repeats pair by their index (a repeat missing one arm is left out of the ratio)."""
    by_arm = {arm: sorted((b for b in batches if b["arm"] == arm), key=lambda b: b["repeat"]) for arm in ARMS}
    out: dict = {}
    for arm, rows in by_arm.items():
        fields = arm_fields(rows, slo_tpot_ms / 1e3)
        out[f"{arm}_load_tokens_per_s"] = fields.get("tokens_per_s")
        for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
            out[f"{arm}_load_{key}"] = fields.get(key)
        out[f"{arm}_goodput"] = fields.get("goodput")
    base = {b["repeat"]: b["output_tokens"] / b["wall_s"] for b in by_arm["baseline"] if b["wall_s"] > 0}
    spec = {b["repeat"]: b["output_tokens"] / b["wall_s"] for b in by_arm["speculative"] if b["wall_s"] > 0}
    paired = sorted(set(base) & set(spec))
    ratio = throughput_ratio([spec[r] for r in paired], [base[r] for r in paired])
    out |= {
        "load_speedup": ratio["value"],
        "load_speedup_ci95": ratio["ci95"],
        "load_repeats": ratio["n"],
        "load_verdict": ratio["verdict"],
    }
    return out

"""The per-example data behind every "best" and every comparison: each run's log throughput ratios per example,
the two halves select-then-confirm uses, and the point picks and intervals the figures read.

A best configuration is chosen on one half of the examples (statistics.half_of, a hash of each id, so
the halves are the same for every run) and quoted with the other half's figure: no winner's curse.
Claims, the headline and the figures all choose through here, so they choose alike.
"""

from __future__ import annotations

import math

from specbench.measure.stats import statistics as st
from specbench.report.collect import ReportData
from specbench.report.values import isnull, num, primary_speedup


def interval(row) -> tuple[float, float, float]:
    """(speedup, low, high): the primary measure (values.primary_speedup) and its 95 % interval, or the point itself
    where none was computed (figures)."""
    x, ci, _ = primary_speedup(row)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and not any(math.isnan(num(v)) for v in ci):
        return x, num(ci[0]), num(ci[1])
    return x, x, x


def estimate_text(e: st.Estimate) -> str:
    """'1.50× [1.31, 1.72] (n = 40)', or '1.50× (n = 8: too few for an interval)'."""
    if math.isnan(e.value):
        return "— (no examples)"
    if e.has_interval:
        return f"{e.value:.2f}× [{e.low:.2f}, {e.high:.2f}] (n = {e.n})"
    return f"{e.value:.2f}× (n = {e.n}: too few for an interval)"


def config_text(row) -> str:
    """A run's configuration in words: target, draft, γ, T and task."""
    gamma = row.get("gamma_label") if isinstance(row.get("gamma_label"), str) else row.get("gamma")
    return (
        f"target {row['target']}, draft {row['draft']}, γ {gamma}, T {float(row['temperature']):g}, task {row['task']}"
    )


# --------------------------------------------------------------------------- per-example data


def run_records(data: ReportData, row) -> list[dict]:
    """A run's records with the timing fields metrics reads ([] when its examples table is missing)."""
    frame = data.examples.get(row["run_dir"]) if "run_dir" in row else None
    return records_of(frame) if frame is not None and len(frame) else []


def unit_logs(data: ReportData, row) -> dict[str, float]:
    """A run's per-unit log throughput ratios (example id, or batch → log ratio), from its records."""
    from specbench.measure.stats.metric_units import unit_log_ratios

    records = run_records(data, row)
    return unit_log_ratios(records) if records else {}


def records_of(frame) -> list[dict]:
    """The flattened examples table of one run back as the nested records metrics reads (the timing fields)."""
    keys = ("n_tokens", "prefill_s", "decode_s", "batch_s")
    out = []
    for r in frame.to_dict("records"):
        rec = {k: (None if isnull(r.get(k)) else r.get(k)) for k in ("example_id", "batch_size", "batch_index")}
        rec["identical"] = bool(r.get("identical")) if not isnull(r.get("identical")) else False
        for engine in ("baseline", "speculative"):
            rec[engine] = {k: r.get(f"{engine}.{k}") for k in keys if not isnull(r.get(f"{engine}.{k}"))}
        out.append(rec)
    return out


def halves(logs: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(selection half, confirmation half) of a run's units, split by a hash of each id (statistics.half_of)."""
    a = {k: v for k, v in logs.items() if st.half_of(k) == 0}
    return a, {k: v for k, v in logs.items() if k not in a}


def geomean_of(logs: dict[str, float]) -> float:
    vals = [v for v in logs.values() if math.isfinite(v)]
    return math.exp(sum(vals) / len(vals)) if vals else float("nan")


def select_then_confirm(data: ReportData, runs):
    """The run whose primary measure is largest on the selection half of its examples, and that run's confirmation
    half (key → log ratio): (row, confirmation logs, runs considered), or None."""
    scored = []
    for _, row in runs.iterrows():
        pick, confirm = halves(unit_logs(data, row))
        score = geomean_of(pick)
        if not math.isnan(score):
            scored.append((score, row, confirm))
    if not scored:
        return None
    score, row, confirm = max(scored, key=lambda t: t[0])
    return row, confirm, len(scored)

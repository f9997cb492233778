"""Timing checks the report adds to a run's own: a verify cost no honest measurement gives, and a drifted shared
baseline, each as the sentence the report shows.

metrics.timing_noise decides what run and sweep flag; the report reads those flags and adds the
verify-cost check, so a run's timing warnings are listed in one place with their consequence.
"""

from __future__ import annotations

import math

from specbench.measure.stats.metrics import timing_noise
from specbench.report.values import num, truthy

DRIFT_CONSEQUENCE = (
    "the machine's speed changed between the baseline and this run, so its speedup is off by about "
    "that factor (rerun the sweep on a quiet machine)"
)


def _verify_cost_note(row: dict) -> str | None:
    """The report's own check: a verify cost outside [0.5, γ+1] single-token passes (None when plausible)."""
    cost, gamma = num(row.get("verify_cost")), int(row["gamma"])
    if not math.isnan(cost) and not 0.5 <= cost <= gamma + 1:
        return (
            f"verify cost {cost:.2f} single-token passes for γ+1 = {gamma + 1} tokens is "
            f"implausible; the baseline and speculative timings were probably taken under different machine "
            f"load, so its speedup is unreliable (rerun on a quiet machine)"
        )
    return None


def _drift_flagged(row: dict) -> float | None:
    """The run's baseline drift when metrics.timing_noise (the one drift rule) flags it, else None."""
    drift = num(row.get("baseline_drift"))
    if math.isnan(drift) or not timing_noise([], None, drift)["suspect_timing"]:
        return None
    return drift


def timing_note(row: dict) -> str | None:
    """Flag a verify cost no honest measurement gives: the baseline and speculative timings disagree.

    One target pass over γ+1 tokens costs at least about one single-token step and at most
    about γ+1 of them. Outside [0.5, γ+1] the baseline was most likely timed under another
    load than the speculative run (as in sweeps written before cells timed their own baselines, whose
    baseline was measured once, in the first cell of its task and temperature), so that run's speedup is
    not trustworthy. Those sweeps also re-timed one shared baseline before each cell: a `baseline_drift`
    (fresh ÷ stored seconds) that metrics.timing_noise flags is reported too (the tolerance lives there).
    """
    note = _verify_cost_note(row)
    if note:
        return f"{row['run_id']}: {note}"
    drift = _drift_flagged(row)
    if drift is not None:
        return (
            f"{row['run_id']}: its shared baseline, re-timed before the run, took {drift:.2f}× the stored time; "
            f"{DRIFT_CONSEQUENCE}"
        )
    return None


def timing_warnings(row: dict) -> list[str]:
    """Why a run's timings are suspect, one reason a line: the summary's timing_notes (metrics.timing_noise:
    noise probes, per-example spread, repeats, baseline drift) and the report's verify-cost check."""
    notes = row.get("timing_notes")
    from_metrics = isinstance(notes, (list, tuple))
    out = [str(n) for n in notes] if isinstance(notes, (list, tuple)) else []
    drift = _drift_flagged(row)
    if drift is not None:  # metrics already wrote "the shared baseline ... took X×"; say what it means
        out.append(
            DRIFT_CONSEQUENCE
            if from_metrics
            else f"its shared baseline, re-timed before the run, took {drift:.2f}× the stored time; {DRIFT_CONSEQUENCE}"
        )
    note = _verify_cost_note(row)
    if note:
        out.append(note)
    if not out and truthy(row.get("suspect_timing")):
        out.append("the summary flags its timings as suspect (no reason recorded)")
    return out

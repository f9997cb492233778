"""The report's first sentence: the best configuration, chosen on one half of the examples and quoted with the other
half's speedup, the hardware it was measured on, and how many runs failed a timing check.

It chooses through selection.py as the claims do, so the headline and the claims table never disagree on
what was best.
"""

from __future__ import annotations

from specbench.measure.machine.hardware import describe
from specbench.measure.stats import statistics as st
from specbench.report.collect import ReportData
from specbench.report.selection import config_text, estimate_text, select_then_confirm


def hardware_sentence(data: ReportData) -> str:
    """The machine(s) the runs were measured on, as a sentence."""
    machines = sorted({describe(m.hardware) for m in data.manifests.values() if m.hardware})
    if not machines:
        return "The runs did not record their hardware."
    if len(machines) == 1:
        return f"Measured on one machine: {machines[0]}."
    return f"Measured on {len(machines)} machines: " + "; ".join(machines) + "."


def headline(data: ReportData) -> str:
    """The best configuration, chosen on one half of the examples and quoted with the other half's speedup, the
    hardware, and how many runs were flagged."""
    runs = data.runs
    found = select_then_confirm(data, runs) if len(runs) else None
    if found is None:
        text = "No run has a measurable speedup."
    else:
        best, confirm, k = found
        est = st.geometric_mean(list(confirm.values()))
        text = (
            f"Best configuration found (chosen on half of the examples of {k} run(s)): {config_text(best)}, "
            f"{best.get('max_new_tokens')} new tokens: speedup {estimate_text(est)} on the other half over the "
            f"target alone (geometric mean of per-example speedups, 95 % t interval)."
        )
    suspect = int(runs["timing_suspect"].astype(bool).sum()) if "timing_suspect" in runs else 0
    if suspect:
        text += (
            f" {suspect} of {len(runs)} runs failed a timing check (see Timing warnings below); they stay in the "
            f"verdicts, and each verdict says where leaving them out would change it."
        )
    return f"{text} {hardware_sentence(data)}"

"""The load table of `run` and `sweep`: for each load point (concurrency, request rate) a column, and in its rows plain
and speculative throughput, latency percentiles and goodput side by side, then speculative ÷ plain throughput with its
interval over the repeats and its verdict (measure/stats/load.py computes them; docs/run.md says how). Load points are
columns so that a sweep's three fit an 80-column terminal."""

from __future__ import annotations

from rich.table import Table

from specbench.cli.output import fmt
from specbench.measure.results import Summary


def load_point(s: Summary) -> str:
    rate = "" if s.request_rate is None else f" @{s.request_rate:g}/s"
    return f"C={s.concurrency}{rate}"


def pair(base, spec, scale: float = 1.0, digits: int = 1) -> str:
    """'plain / speculative' in one cell."""

    def one(v) -> str:
        return fmt(v * scale if isinstance(v, (int, float)) else v, digits)

    return f"{one(base)} / {one(spec)}"


def interval(ci) -> str:
    """[low, high] as 'low – high', or 'none' where there is none (fewer than 2 repeats)."""
    return fmt(ci, 2) if isinstance(ci, list) and None not in ci else "none"


ROWS = (  # (label, the cell of one load point)
    ("output tok/s", lambda s: pair(s.baseline_load_tokens_per_s, s.speculative_load_tokens_per_s)),
    ("TTFT p50 ms", lambda s: pair(s.baseline_load_ttft_p50_s, s.speculative_load_ttft_p50_s, 1e3, 0)),
    ("TTFT p99 ms", lambda s: pair(s.baseline_load_ttft_p99_s, s.speculative_load_ttft_p99_s, 1e3, 0)),
    ("TPOT p50 ms", lambda s: pair(s.baseline_load_tpot_p50_s, s.speculative_load_tpot_p50_s, 1e3, 0)),
    ("TPOT p99 ms", lambda s: pair(s.baseline_load_tpot_p99_s, s.speculative_load_tpot_p99_s, 1e3, 0)),
    ("goodput req/s", lambda s: pair(s.baseline_goodput, s.speculative_goodput, digits=2)),
    ("spec ÷ plain tok/s", lambda s: f"{fmt(s.load_speedup, 2)}×" if s.load_speedup is not None else "—"),
    ("95% CI (n repeats)", lambda s: f"{interval(s.load_speedup_ci95)} (n={fmt(s.load_repeats)})"),
    ("verdict", lambda s: fmt(s.load_verdict)),
)


def load_table(summaries: list[tuple[str, Summary]]) -> Table | None:
    """One column per load run among `summaries` ((name, summary) pairs); None when none is a load run."""
    runs = [s for _, s in summaries if s.concurrency]
    if not runs:
        return None
    table = Table(
        title=f"under load: plain / speculative (goodput: TPOT ≤ {fmt(runs[0].slo_tpot_ms, 0)} ms; ratio: t "
        "interval over repeats)"
    )
    table.add_column("")
    for s in runs:
        table.add_column(load_point(s), justify="right", no_wrap=True)
    for label, cell in ROWS:
        table.add_row(label, *(cell(s) for s in runs))
    return table

"""Statistics: every ratio derived from raw counts in one place (metrics, metric units), the intervals and
verdicts behind them, and the numerics classifier that explains greedy divergences in low precision.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.measure.stats.metric_units import first_divergence, json_safe
    from specbench.measure.stats.metrics import summarize, timing_noise
    from specbench.measure.stats.statistics import MIN_INTERVAL_N

FACE = {
    "summarize": "metrics",
    "timing_noise": "metrics",
    "json_safe": "metric_units",
    "first_divergence": "metric_units",
    "MIN_INTERVAL_N": "statistics",
}  # public name → the module of this package that defines it

__all__ = ["MIN_INTERVAL_N", "first_divergence", "json_safe", "summarize", "timing_noise"]

__getattr__ = lazy_attributes(__name__, FACE)

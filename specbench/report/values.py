"""Values as the report reads and shows them: missing, a number or NaN, true, and a cell's text.

Summaries and records come from disk and may hold None, NaN, strings or lists where a number is
expected; every report module reads them through these few helpers, so each case is decided once.
"""

from __future__ import annotations

import math

import numpy as np


def isnull(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value) -> float:
    """A float, NaN for anything that is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def truthy(value) -> bool:
    return not isnull(value) and bool(value)


def cell_text(value, digits: int = 3) -> str:
    """A value as table text: '—' for missing, yes/no, floats to `digits` places (tiny ones in e-notation)."""
    if isnull(value):
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2e}" if 0 < abs(value) < 10**-digits else f"{value:.{digits}f}"  # p-values stay visible
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cell_text(v, digits) for v in value) + "]"
    return str(value)


def primary_speedup(row) -> tuple[float, object, bool]:
    """(speedup, its 95 % interval, is the primary measure) of one run: the geometric mean of its per-example
    speedups (statistics.PRIMARY_MEASURE, summary speedup_geomean) with its interval; an older summary without it
    gives the ratio of sums (speedup, speedup_ci95) and False, which the report labels "(ratio of sums)"."""
    geo = num(row.get("speedup_geomean"))
    if not math.isnan(geo):
        return geo, row.get("speedup_geomean_ci95"), True
    return num(row.get("speedup")), row.get("speedup_ci95"), False

"""Running: one configuration over a task (planning, the batch-1 and batched loops, multi-turn questions) and a
sweep's grid and its cells, here or on Ray workers. `cli/` imports what it needs from this face.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.measure.run.executors import make_executor
    from specbench.measure.run.planning import prepare_run
    from specbench.measure.run.runner import measure
    from specbench.measure.run.sweep import (
        MAX_CELLS,
        SweepGrid,
        parse_budgets,
        parse_float_list,
        parse_int_list,
        parse_policy_list,
        parse_prompt_lengths,
        parse_rate_list,
        parse_str_list,
    )
    from specbench.measure.run.sweep_run import run_sweep

FACE = {
    "prepare_run": "planning",
    "measure": "runner",
    "run_sweep": "sweep_run",
    "make_executor": "executors",
    "parse_int_list": "sweep",
    "MAX_CELLS": "sweep",
    "SweepGrid": "sweep",
    "parse_budgets": "sweep",
    "parse_float_list": "sweep",
    "parse_policy_list": "sweep",
    "parse_prompt_lengths": "sweep",
    "parse_rate_list": "sweep",
    "parse_str_list": "sweep",
}  # public name → the module of this package that defines it

__all__ = [
    "MAX_CELLS",
    "SweepGrid",
    "make_executor",
    "measure",
    "parse_budgets",
    "parse_float_list",
    "parse_int_list",
    "parse_policy_list",
    "parse_prompt_lengths",
    "parse_rate_list",
    "parse_str_list",
    "prepare_run",
    "run_sweep",
]

__getattr__ = lazy_attributes(__name__, FACE)

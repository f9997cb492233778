"""Choosing automatically: `--draft/--dtype/--gamma auto` from calibrated pass costs and an untimed pilot, what
the cost model predicts for a run, and the runner-up `--auto-control` times beside the choice.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.measure.auto.control import control_config, control_line

FACE = {
    "control_config": "control",
    "control_line": "control",
}  # public name → the module of this package that defines it

__all__ = ["control_config", "control_line"]

__getattr__ = lazy_attributes(__name__, FACE)

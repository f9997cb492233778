"""Choosing automatically: `--draft/--dtype/--gamma auto` from calibrated pass costs and an untimed pilot, what
the cost model predicts for a run, and the runner-up `--auto-control` times beside the choice.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specbench.measure.auto.control import control_config, control_line

FACE = {
    "control_config": "control",
    "control_line": "control",
}  # public name → the module of this package that defines it

__all__ = ["control_config", "control_line"]


def __getattr__(name: str) -> Any:
    if name not in FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{FACE[name]}"), name)

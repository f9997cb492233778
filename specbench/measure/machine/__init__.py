"""The machine's state: which hardware measured a figure, whether it was quiet (noise and contention alarms),
and what memory a run peaked at.

The names below load their module on first use (PEP 562), so importing this face for one name costs no
torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.measure.machine.hardware import describe

FACE = {
    "describe": "hardware",
}  # public name → the module of this package that defines it

__all__ = ["describe"]

__getattr__ = lazy_attributes(__name__, FACE)

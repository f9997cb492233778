"""The report's figures: which ones a report gets and their captions (plan.py, `make_figures`), the speedup figures
(speedup.py), the figures that explain a speedup (detail.py), and what they all share (kit.py: style, panels,
colours, speedup markers, PNG and SVG files).

The names below load their module on first use (PEP 562), so importing this face for one name loads only the
module that defines it; matplotlib itself is imported inside the functions that draw."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.faces import lazy_attributes

if TYPE_CHECKING:
    from specbench.report.figures.kit import RenderedFigure
    from specbench.report.figures.plan import make_figures

FACE = {
    "make_figures": "plan",
    "RenderedFigure": "kit",
}  # public name → the module of this package that defines it

__all__ = ["RenderedFigure", "make_figures"]

__getattr__ = lazy_attributes(__name__, FACE)

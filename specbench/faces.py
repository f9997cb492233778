"""Lazy public faces for packages: `from specbench.measure.run import prepare_run` loads only the module that defines
it, on first use (PEP 562's module `__getattr__`), so importing a face for one light name (the CLI at start-up) pulls
in no torch. Each package's __init__ keeps its FACE table (public name → defining module) and a TYPE_CHECKING import
of the same names for type checkers."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, face: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name of `face` imported from its module when first asked for."""

    def attribute(name: str) -> Any:
        if name not in face:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{face[name]}"), name)

    return attribute

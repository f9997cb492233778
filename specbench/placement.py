"""Where a target's layers sit when it does not fit one device: `--device-map` and `--max-memory`.

A 70B target does not fit one GPU; transformers (through accelerate) places a model over several
devices with `from_pretrained(device_map=...)`. We pass the user's choice through unchanged and
only check its spelling here, before anything loads, so a typo fails in a second:

  --device-map auto | balanced | balanced_low_0 | sequential | <JSON {"module prefix": device}>
  --max-memory  <JSON {"0": "20GiB", "cpu": "60GiB"}> or 0=20GiB,1=20GiB,cpu=60GiB

A device in a JSON map is an integer GPU index, "cpu", "cuda:N", "mps" or "disk" (weights read
from an offload folder at each forward). This module imports no torch: config.py validates with it.
"""

from __future__ import annotations

import json
import re

from specbench.errors import SpecbenchError

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's named placements
DEVICE_NAME = re.compile(r"(cpu|disk|mps|cuda(:\d+)?|\d+)")
MEMORY = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B)?", re.IGNORECASE)


def parse_device_map(text: str | None) -> str | dict[str, str | int] | None:
    """--device-map → None, a strategy name, or a {module prefix: device} dict (GPU indexes as int)."""
    if text is None:
        return None
    value = str(text).strip()
    if value in DEVICE_MAP_STRATEGIES:
        return value
    if not value.startswith("{"):
        raise SpecbenchError(
            f"--device-map must be one of {', '.join(DEVICE_MAP_STRATEGIES)} or a JSON object "
            f'{{"module": device}} (got {text!r})'
        )
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SpecbenchError(
            f"--device-map is not valid JSON ({exc.msg} at character {exc.pos}); write e.g. "
            f'\'{{"model.embed_tokens": 0, "model.layers": 1, "lm_head": 1}}\''
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise SpecbenchError('--device-map JSON must be a non-empty object {"module prefix": device}')
    return {str(k): _device(v, "--device-map") for k, v in raw.items()}


def _device(value, option: str) -> str | int:
    text = str(value).strip()
    if isinstance(value, bool) or not DEVICE_NAME.fullmatch(text):
        raise SpecbenchError(
            f"{option}: {value!r} is not a device; use a GPU index (0, 1, …), cuda:N, cpu, mps or disk"
        )
    return int(text) if text.isdigit() else text


def parse_max_memory(text: str | None) -> dict[str | int, str] | None:
    """--max-memory → {device: "20GiB"} (GPU indexes as int), from JSON or 0=20GiB,cpu=60GiB."""
    if text is None:
        return None
    value = str(text).strip()
    try:
        raw = json.loads(value) if value.startswith("{") else dict(_pair(p) for p in value.split(","))
    except json.JSONDecodeError as exc:
        raise SpecbenchError(
            f"--max-memory is not valid JSON ({exc.msg}); write e.g. 0=20GiB,1=20GiB,cpu=60GiB"
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise SpecbenchError("--max-memory must name at least one device, e.g. 0=20GiB,cpu=60GiB")
    out: dict[str | int, str] = {}
    for dev, mem in raw.items():
        if not MEMORY.fullmatch(str(mem).strip()):
            raise SpecbenchError(f"--max-memory: {mem!r} is not a size; write e.g. 20GiB or 500MB")
        out[_device(dev, "--max-memory")] = str(mem).strip()
    return out


def _pair(item: str) -> tuple[str, str]:
    dev, sep, mem = item.partition("=")
    if not sep or not dev.strip() or not mem.strip():
        raise SpecbenchError(f"--max-memory: {item!r} is not device=size; write e.g. 0=20GiB,cpu=60GiB")
    return dev.strip(), mem.strip()


def check_placement(device_map: str | None, max_memory: str | None) -> None:
    """Both options parse; --max-memory only means something under a device map."""
    parse_device_map(device_map)
    parse_max_memory(max_memory)
    if max_memory is not None and device_map is None:
        raise SpecbenchError("--max-memory caps what --device-map places on each device; add --device-map auto")
    if device_map is not None and "disk" in str(max_memory or ""):
        raise SpecbenchError("--max-memory: disk has no cap; offload folders grow as needed (drop disk=…)")

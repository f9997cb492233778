"""Honest timers: synchronize every device the model uses around every reading, use perf_counter.

On CUDA/MPS kernels run asynchronously, so a timer read without synchronizing measures the
launch, not the work. A model placed over several GPUs by --device-map has work queued on each
of them, and `torch.cuda.synchronize()` waits for the current device only: so a clock is given
every device its model uses and waits for each. On CPU synchronizing is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch


def synchronizer(device: torch.device):
    """A zero-argument function that waits for all queued work on `device`."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def used_devices(model: torch.nn.Module) -> tuple[torch.device, ...]:
    """The devices holding the model's parameters and buffers (disk-offloaded ones sit on 'meta': no work there)."""
    seen = {t.device for t in (*model.parameters(), *model.buffers()) if t.device.type != "meta"}
    return tuple(sorted(seen, key=str)) or (torch.device("cpu"),)


class Clock:
    """perf_counter readings preceded by a synchronization of each device given."""

    def __init__(self, device: torch.device | Iterable[torch.device]):
        devices = (device,) if isinstance(device, torch.device) else tuple(device)
        self._syncs = [synchronizer(d) for d in devices if d.type != "cpu"]

    def now(self) -> float:
        for sync in self._syncs:
            sync()
        return time.perf_counter()

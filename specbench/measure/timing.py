"""Honest timers: synchronize the device around every reading, use perf_counter.

On CUDA/MPS kernels run asynchronously, so a timer read without synchronizing measures the
launch, not the work. On CPU synchronizing is a no-op.
"""

from __future__ import annotations

import time

import torch


def synchronizer(device: torch.device):
    """A zero-argument function that waits for all queued work on `device`."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


class Clock:
    """perf_counter readings preceded by a device synchronization."""

    def __init__(self, device: torch.device):
        self._sync = synchronizer(device)

    def now(self) -> float:
        self._sync()
        return time.perf_counter()

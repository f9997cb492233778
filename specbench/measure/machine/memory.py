"""Peak memory of a run: what a batch size costs besides time.

A larger batch buys throughput with memory (one KV cache row per example, activations B times
wider), so the summary records the peak next to the speedup. On CUDA that is
`torch.cuda.max_memory_allocated`, reset when measuring starts. On a CPU it is the resident set
size: Linux lets a process reset its high-water mark (writing 5 to /proc/self/clear_refs), so
the peak is the run's own; elsewhere getrusage gives the process's peak since it started (in a
sweep, the largest of every cell so far), and `peak_memory_kind` says which one was read.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
_rss_reset = False  # whether this process's RSS high-water mark was reset by reset_peak_memory


def reset_peak_memory(device: torch.device | str) -> None:
    """Start a fresh peak: CUDA's allocator statistics, or (Linux) the RSS high-water mark."""
    global _rss_reset
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        CLEAR_REFS.write_text("5")
        _rss_reset = True
    except OSError:  # not Linux, or not allowed: fall back to the process's lifetime peak
        _rss_reset = False


def _vm_hwm_mib() -> float | None:
    """VmHWM (the RSS high-water mark) from /proc/self/status, in MiB; None where there is none."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_memory(device: torch.device | str) -> dict:
    """{"peak_memory_mb": MiB, "peak_memory_kind": what was read} since reset_peak_memory (see the module docstring)."""
    if torch.device(device).type == "cuda":
        return {
            "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "peak_memory_kind": "cuda_max_allocated",
        }
    hwm = _vm_hwm_mib() if _rss_reset else None
    if hwm is not None:
        return {"peak_memory_mb": hwm, "peak_memory_kind": "rss_since_start"}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return {
        "peak_memory_mb": peak / (2**20 if sys.platform == "darwin" else 1024),
        "peak_memory_kind": "rss_process_peak",
    }

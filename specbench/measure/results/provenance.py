"""Where a figure came from: the package versions, the git commit and the machine, recorded in every manifest.

A speedup is a property of software and hardware together, so each run (and each bench/ table) stores the versions
of python, torch, transformers and specbench, the checkout's commit and measure/machine/hardware.py's identity of the
machine beside its numbers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def git_commit() -> str | None:
    """The checkout's commit when specbench runs from a git clone; None for an installed wheel (whose
    site-packages may sit inside some unrelated repository: that repository's HEAD would be a lie)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info() -> dict:
    """Package versions and hardware, for the manifest."""
    import torch
    import transformers

    import specbench
    from specbench.measure.machine.hardware import hardware_identity

    hw = hardware_identity()
    return {
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "specbench": specbench.__version__,
        },
        "git_commit": git_commit(),
        "hardware": hw,
    }

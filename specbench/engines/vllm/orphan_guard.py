"""The vLLM worker must not outlive specbench: a worker whose parent died takes its process group with it.

The worker runs in its own process group (client.py: a request's deadline kills vLLM's engine processes with it),
so when specbench is killed outright (SIGKILL, the kernel's out-of-memory killer) nothing signals the group, and the
worker with its engine core and its model workers, gigabytes each, lived on: a benchmark killed for memory left
13 GB held. A worker stuck in a long vLLM call never reads the end of its stdin, so the watch is a thread that
polls the parent's pid instead. Standard library only: the worker loads this file by path in .venv-vllm
(worker.py imports nothing from specbench).
"""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 1.0  # how often the parent is looked for


def parent_gone(parent_pid: int) -> bool:
    """True once this process was re-parented (its parent exited: init or a subreaper adopted it)."""
    return os.getppid() != parent_pid


def watch(parent_pid: int, poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that kills this process's whole group (SIGKILL) once `parent_pid` is no longer its
    parent, where this process leads the group (client.py starts it so); a process in someone else's group (the
    worker started by hand from a shell) only exits. Returns the thread."""

    def run() -> None:
        while not parent_gone(parent_pid):
            time.sleep(poll_s)
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    thread = threading.Thread(target=run, name="orphan-guard", daemon=True)
    thread.start()
    return thread

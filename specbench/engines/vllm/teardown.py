"""The vLLM worker's engines stop together, not one after another.

At exit vLLM stops each loaded engine in turn, and each takes seconds on a CPU (its engine core waits for its model
worker to leave, then the client's process manager waits for the core): 4–5 s an engine here, so a sweep or a verify
that loaded six engines spent ~25 s leaving. Asking every engine's core client to shut down at once, each from its
own thread, makes the exit as long as the slowest engine's. Each client's own shutdown runs (nothing is killed
outright: vLLM's shared-memory queues and process groups are released as vLLM releases them), and the finalizers at
interpreter exit then find nothing left to do. Standard library only: the worker loads this file by path in
.venv-vllm (worker.py imports nothing from specbench).
"""

from __future__ import annotations

import threading

STOP_S = 20.0  # each engine's grace before vLLM kills its core (vLLM's default, 5 s, is too short with all at once)
JOIN_S = 30.0  # longest wait for one engine; a stuck one is left to the finalizers and the client's deadline


def stop_all(engines: dict) -> dict:
    """Shut down every engine's core client (`engines`: key → (vllm.LLM, settings)) concurrently, and wait; the
    shutdown request's (empty) answer."""
    clients = [getattr(llm.llm_engine, "engine_core", None) for llm, _settings in engines.values()]
    stops = [getattr(c, "shutdown") for c in clients if hasattr(c, "shutdown")]  # noqa: B009  # Any | None
    threads = [threading.Thread(target=stop, args=(STOP_S,), daemon=True) for stop in stops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_S)
    return {}

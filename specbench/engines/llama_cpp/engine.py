"""The llama-cpp engine at run time: specbench's loops (engines/torch/engine.py) over a LlamaSession's target."""

from __future__ import annotations

from specbench.config import LoadSpec
from specbench.engines.llama_cpp.session import LlamaSession
from specbench.engines.session import Session
from specbench.engines.torch.engine import LoopEngine


class LlamaEngine(LoopEngine):
    """Both arms in specbench's loop; the target's passes are llama.cpp's (LlamaCppModel duck-types CachedModel)."""

    def open_session(self, load: LoadSpec) -> Session:
        return LlamaSession(load)


ENGINE = LlamaEngine()

"""The torch engines' session: the target as a transformers module in the load's dtype and placement, with one
forward backend (eager, static cache or compiled) shared by the baseline and the speculative loop."""

from __future__ import annotations

from specbench.config import LoadSpec
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.cached_model import CachedModel
from specbench.engines.session import Session
from specbench.engines.torch import SPEC
from specbench.models import load_model


class TorchSession(Session):
    """The target loaded by transformers; drafts load on load.device (device_map places the target only)."""

    session_kind = SPEC.session_kind  # the specbench and hf-assisted engines both decode on this session

    def __init__(self, load: LoadSpec):
        self.load = load
        self.target = load_model(
            load.target, load.device, load.dtype, load.trust_remote_code, load.device_map, load.max_memory
        )
        # one backend for the target, shared by the baseline and the speculative engine (same forward for both)
        self.target_backend = ForwardBackend(self.target.model, load.backend)
        super().__init__()

    def target_lm(self) -> CachedModel:
        return CachedModel(self.target.model, backend=self.target_backend)

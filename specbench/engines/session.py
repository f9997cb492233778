"""A session: the models one process holds for an engine, loaded once and reused by every run (a sweep shares one
across cells of the same target and engine kind).

Each engine's session loads the target its own way (a torch module, a GGUF in llama.cpp) and builds each draft
once; what measure/ computes from a session (pass-cost curves, draft costs, pilots) it stores through `memo`, so the
session knows nothing of how it is measured.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from specbench.config import LoadSpec
from specbench.decoding.base import Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.factory import make_proposer
from specbench.models import LoadedModel
from specbench.run_specs import DraftSpec

T = TypeVar("T")


def corpus_key(corpus: list[list[int]] | None) -> str | None:
    """A short key for a list of prompts (drafts fitted on them, curves measured on them)."""
    return hashlib.sha256(repr(corpus).encode()).hexdigest() if corpus else None


class Session:
    """Models loaded once: `target` (a LoadedModel whose `model` every decoder of this engine drives) and the drafts.

    Subclasses set `load` and `target` in their __init__ and call `super().__init__()` last."""

    load: LoadSpec  # --target as given and how it loads, with the dtype resolved (never auto)
    target: LoadedModel
    target_backend: Any  # how the target's passes run (decoding/backend.py's, or llama.cpp's): replays reuse it
    # the kind of session it is: subclasses read it from their engine's SPEC (EngineSpec.session_kind, the one source);
    # engines of the same kind may share this session (a sweep reuses it across their cells)
    session_kind: str
    drafts_inside = False  # its drafts run inside the engine (vLLM's methods): a pilot decodes with its speculative arm
    # the engine's own top-k prompt scores (vLLM: engines/vllm/session.py), which classify greedy divergences on its
    # kernels (measure/stats/own_logits.py); None: the session's torch model replays them
    prompt_scores: Any = None

    def __init__(self) -> None:
        self._proposers: dict[tuple, Proposer] = {}
        self._memo: dict[tuple, Any] = {}  # measure/'s per-session results: curves, draft costs, pilots

    def memo(self, key: tuple, compute: Callable[[], T]) -> T:
        """compute() once per session and key (calibrations and pilots cost seconds; a sweep asks for them per cell)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def target_lm(self) -> CachedModel:
        """The target's cache wrapper every decoder, calibration and probe of this session runs through."""
        raise NotImplementedError

    def engine_info(self) -> dict:
        """The manifest's `engine` entry ({} where the manifest's package versions already say it all)."""
        return {}

    def load_arms(self, proposer: Proposer, gamma: int | None) -> None:
        """Load what the run's speculative arm needs beyond the draft, before the manifest is written, so that
        engine_info records it (vLLM: its speculative engine at γ); nothing where the draft is all of it."""
        return None

    def sampling_prompt(self, prompt_ids: list[int]) -> list[int]:
        """The prompt verify draws many samples from on this engine (own_loop.py): as given, or what this engine's
        prefix cache serves cheaply (vLLM: its end, cut to whole KV blocks plus one token)."""
        return list(prompt_ids)

    def compute_threads(self) -> int:
        """The threads the target computes on (what contention is judged against)."""
        import torch

        return torch.get_num_threads()

    def proposer(self, spec: DraftSpec, corpus: list[list[int]] | None = None) -> Proposer:
        """The draft for `spec`, built once; frequency drafts are fitted on `corpus` (once per corpus). Every caller
        hands over a spec parsed where its text came in (the command line, the auto candidates, a manifest)."""
        key = (spec.text, corpus_key(corpus) if spec.fits_corpus else None)
        if key not in self._proposers:
            self._proposers[key] = self.build_proposer(spec, corpus if spec.fits_corpus else None)
        return self._proposers[key]

    def build_proposer(self, spec: DraftSpec, corpus: list[list[int]] | None) -> Proposer:
        """A new draft for `spec` (drafts that run a network run in torch, on the load's device and dtype)."""
        return make_proposer(
            spec,
            self.target,
            self.load.device,
            self.load.dtype,
            self.load.trust_remote_code,
            corpus=corpus,
            backend=self.load.backend,
        )

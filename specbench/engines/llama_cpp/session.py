"""A run's models when `--engine llama-cpp`: the target's GGUF in llama.cpp, quantized as shipped.

The runner talks to a `Session` (models loaded once, calibration and drafts cached per session); this one
holds the target as a `LlamaCppModel` (engines/llama_cpp/backend.py) instead of a torch module, so the same
baseline and speculative loops, drafts, γ policies, calibration, noise probes and numerics replays run
on llama.cpp's kernels. The tokenizer is the target's Hugging Face tokenizer (as the torch engine uses,
so both engines see the same prompt ids). A draft model given as a GGUF (a path ending in .gguf, or a preset
that ships one) runs in llama.cpp too, in its own context on the same threads (engines/llama_cpp/draft.py), alone
or behind prompt lookup (`lookup+<gguf>`); any other draft model (the distilled draft, a hub id, a torch
folder) still runs in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specbench.config import LoadSpec
from specbench.decoding.base import Proposer
from specbench.decoding.drafts.factory import lookup_draft
from specbench.decoding.drafts.hybrid import HybridDraft
from specbench.engines.llama_cpp import ENGINE_NAME, SPEC
from specbench.engines.llama_cpp.backend import LlamaCppModel, default_threads, import_llama_cpp
from specbench.engines.llama_cpp.draft import LlamaModelDraft, load_gguf_draft
from specbench.engines.session import Session
from specbench.errors import SpecbenchError
from specbench.models import PRESETS, LoadedModel, preset_gguf, resolve_source
from specbench.models.loading import load_tokenizer
from specbench.run_specs import DraftSpec

MAX_CONTEXT = 8192  # a longer trained context is capped: llama.cpp allocates the whole KV cache up front


@dataclass
class LlamaTarget(LoadedModel):
    """A LoadedModel whose `model` is a LlamaCppModel; its parameter count comes from llama.cpp."""

    params: int = 0  # llama.cpp's count of the GGUF's parameters

    @property
    def n_params(self) -> int:
        return self.params


def gguf_of(spec: str) -> Path:
    """The GGUF a --target names: a preset's shipped file or a path ending in .gguf."""
    if spec in PRESETS:
        return preset_gguf(PRESETS[spec])
    if spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise SpecbenchError(f"GGUF file not found: {spec}; check the path")
        return path
    raise SpecbenchError(
        f"--engine {ENGINE_NAME} loads a GGUF: pass a preset ({', '.join(sorted(PRESETS))}) or --target path.gguf "
        f"(got {spec!r})"
    )


def eos_ids_of(spec: str, tokenizer, trust_remote_code: bool) -> frozenset[int]:
    """The stop ids the torch engine would use (generation config, then model config, then tokenizer)."""
    from transformers import AutoConfig, GenerationConfig

    source = resolve_source(spec)
    eos = None
    try:
        eos = GenerationConfig.from_pretrained(source).eos_token_id
    except (OSError, ValueError):
        pass
    if eos is None:
        eos = getattr(AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code), "eos_token_id", None)
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    return frozenset([eos] if isinstance(eos, int) else (eos or []))


def max_positions_of(spec: str, trust_remote_code: bool) -> int | None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_source(spec), trust_remote_code=trust_remote_code)
    return getattr(config, "max_position_embeddings", None)


class LlamaSession(Session):
    """Session over llama.cpp: `target.model` is the LlamaCppModel every engine and replay shares."""

    session_kind = SPEC.session_kind  # a sweep reloads its session when a cell's engine kind differs

    def __init__(self, load: LoadSpec):
        import_llama_cpp()  # the one-line error naming `make setup-llama-cpp`, before anything loads
        # llama.cpp places the target itself; drafts that run a network run in torch on the CPU, eager
        self.load = replace(load, device="cpu", backend="eager", device_map=None, max_memory=None)
        target_spec, trust_remote_code, threads = load.target, load.trust_remote_code, load.threads
        path = gguf_of(target_spec)
        tokenizer = load_tokenizer(target_spec, trust_remote_code)
        max_pos = max_positions_of(target_spec, trust_remote_code)
        lm = LlamaCppModel(
            str(path), n_ctx=min(max_pos or MAX_CONTEXT, MAX_CONTEXT), threads=threads or default_threads()
        )
        if lm.n_vocab < len(tokenizer):
            raise SpecbenchError(
                f"{path.name} has {lm.n_vocab} ids in llama.cpp but its tokenizer {len(tokenizer)}: not the same model"
            )
        self.target = LlamaTarget(
            name=target_spec,
            model=lm,
            tokenizer=tokenizer,
            device=torch.device("cpu"),
            dtype=torch.float32,  # the logits' dtype; the weights stay as the GGUF quantized them (describe())
            vocab_size=lm.n_vocab,
            is_seq2seq=False,
            eos_ids=eos_ids_of(target_spec, tokenizer, trust_remote_code),
            decoder_start_id=None,
            max_positions=lm.backend.limit,
            params=lm.describe()["n_params"],
        )
        self.target_backend = lm.backend  # the numerics replays and NLL scores pass through llama.cpp's passes
        super().__init__()

    def target_lm(self) -> LlamaCppModel:  # type: ignore[override]  # LlamaCppModel duck-types CachedModel's passes
        return self.target.model

    def compute_threads(self) -> int:
        """llama.cpp's own thread setting, not torch's."""
        return self.target.model.threads

    def engine_info(self) -> dict:
        """The manifest's `engine` entry: name, version, threads, the GGUF and llama.cpp's description of it."""
        return self.target.model.describe()

    def build_proposer(self, spec: DraftSpec, corpus: list[list[int]] | None) -> Proposer:
        """As Session's, except that a draft model given as a GGUF loads into llama.cpp."""
        if spec.kind not in ("model", "hybrid") or not spec.model or not is_gguf_spec(spec.model):
            return super().build_proposer(spec, corpus)
        lm = self.target.model
        draft = LlamaModelDraft(
            load_gguf_draft(
                str(gguf_of(spec.model)), n_ctx=lm.backend.limit, threads=lm.threads, target_vocab=lm.n_vocab
            ),
            spec.model,
        )
        return HybridDraft(lookup_draft(self.target), draft, name=spec.text) if spec.kind == "hybrid" else draft


def is_gguf_spec(spec: str) -> bool:
    """A model spec llama.cpp can load: a path ending in .gguf, or a preset that ships a GGUF."""
    return spec.endswith(".gguf") or bool(getattr(PRESETS.get(spec), "gguf", None))

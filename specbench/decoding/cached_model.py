"""One model's KV cache over one growing token sequence, with rollback.

Both engines and the model draft talk to a transformers model only through this class, so
that decoder-only and encoder-decoder models share one loop: for seq2seq the encoder runs
once per example (`start`) and the cache covers the decoder tokens. Rollback crops the
cache (`crop(-n)`), so a prefix is never re-encoded after a rejection. Which cache and
whether steps are compiled is the `ForwardBackend`'s business (backend.py).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, EncoderDecoderCache

from specbench.decoding.backend import ForwardBackend
from specbench.decoding.timing import used_devices


def cache_keyword(forward) -> str:
    """The name a model's forward takes its KV cache by: transformers 5 renamed past_key_values to cache (the old
    name warns, and goes in 5.40); models not yet moved keep the old one."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


class CachedModel:
    """Wraps `model(...)` with a per-example KV cache; `length` counts the tokens it covers."""

    def __init__(self, model: torch.nn.Module, timer=None, backend: ForwardBackend | None = None):
        self.model = model
        self.backend = backend or ForwardBackend(model)
        self.timer = timer  # a specbench.decoding.timing.Clock to profile forwards (bench only: it syncs the device)
        self.forward_times: list[float] = []  # seconds of each forward while `timer` is set (the first is the prefill)
        self.is_seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        self.device = next(model.parameters()).device
        self.devices = used_devices(model)  # every device its layers sit on (--device-map): clocks sync each
        self._cache = None
        self._encoder_outputs = None
        self.length = 0
        self._cache_kw = cache_keyword(model.forward)
        self._can_trim_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    def set_timer(self, clock) -> None:
        """Profile each forward with `clock` (None: stop), into a fresh `forward_times` list."""
        self.timer = clock
        self.forward_times = []

    def start(self, encoder_ids: list[int] | None = None, capacity: int = 0) -> None:
        """Forget the last example; for seq2seq, run the encoder once over `encoder_ids`.

        `capacity`: the most tokens this example will cache (sizes a static cache).
        """
        self.length = 0
        if self.is_seq2seq:
            self._cache = EncoderDecoderCache(DynamicCache(), DynamicCache())  # type: ignore[assignment]  # set by the first forward
            ids = torch.tensor([encoder_ids], device=self.device)
            self._encoder_outputs = self.model.get_encoder()(input_ids=ids)  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        else:
            self._cache = self.backend.new_cache(capacity)

    @torch.inference_mode()
    def forward(self, new_ids: torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        """Feed new_ids [k] (appended after the cached tokens) → logits [k, V] or, by default, [V] of the last one."""
        t0 = self.timer.now() if self.timer else 0.0
        ids = new_ids.view(1, -1)
        if self.is_seq2seq:
            out = self.backend(
                ids.shape[1],
                encoder_outputs=self._encoder_outputs,
                decoder_input_ids=ids,
                use_cache=True,
                **{self._cache_kw: self._cache},
            )
        else:
            extra = {}
            if self._can_trim_logits and not all_logits and ids.shape[1] > 1:
                # skip the vocabulary projection for every position but the last: on a 49k
                # vocabulary that projection is a large share of a prefill. (A 1-token forward
                # omits it, so that last-only and all-logits single steps share one compiled graph.)
                extra["logits_to_keep"] = 1
            self.backend.check_room(self.length, ids.shape[1])
            out = self.backend(ids.shape[1], input_ids=ids, use_cache=True, **{self._cache_kw: self._cache}, **extra)
        logits = out.logits[0]
        if self.backend.reuses_outputs:
            logits = logits.clone()  # a CUDA graph's output buffer is overwritten by its next replay
        self.length += ids.shape[1]
        if self.timer:
            self.forward_times.append(self.timer.now() - t0)
        return logits if all_logits else logits[-1]

    def prime(self, max_tokens: int, all_logits: bool) -> None:
        """Compiled backend: compile the step shapes of 1..max_tokens new tokens now, so that no
        compilation lands inside a timed decode; longer forwards then run eagerly. A target needs
        all logits (verification; its 1-token steps share that graph), a draft the last one only
        (it feeds 1..γ+1 new tokens and drafts from the newest), so each compiles γ+1 graphs.
        A no-op for the other backends (which are the only ones an encoder-decoder model gets)."""
        if self.backend.kind != "compiled":
            return
        self.start(capacity=max_tokens)  # the cache reserved for the run, if any (reserve() first)
        with torch.inference_mode():
            # a fresh StaticCache allocates its tensors at its first write; make that write eagerly,
            # or the first graph would be compiled for the uninitialised cache and never run again
            self.model(
                input_ids=torch.zeros(1, 1, dtype=torch.long, device=self.device),
                use_cache=True,
                **{self._cache_kw: self._cache},
            )
            self._cache.reset()  # type: ignore[attr-defined]  # set by the first forward
        for k in range(1, max_tokens + 1):
            self.forward(torch.zeros(k, dtype=torch.long, device=self.device), all_logits)
            self.truncate(0)
        self.backend.compile_up_to = max_tokens

    def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens."""
        remove = self.length - length
        if remove > 0:
            self._cache.crop(-remove)  # type: ignore[attr-defined]  # set by the first forward
            self.length = length


def as_cached(model, backend: ForwardBackend | None = None):
    """A cache wrapper over `model`: a torch module gets a fresh CachedModel; a model that already is one (the
    llama.cpp engine's LlamaCppModel, decoding/llama_cpp.py) is returned as it is, so replays, calibration and
    evidence that take "the target" run on whichever engine decoded."""
    if isinstance(model, torch.nn.Module):
        return CachedModel(model, backend=backend)
    return model

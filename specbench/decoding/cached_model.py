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
from specbench.decoding.tree import TokenTree, additive_mask, kept_slots
from specbench.errors import SpecbenchError


def cache_keyword(forward) -> str:
    """The name a model's forward takes its KV cache by: transformers 5 renamed past_key_values to cache (the old
    name warns, and goes in 5.40); models not yet moved keep the old one."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def kept_hidden(states, layers: tuple[int, ...]) -> torch.Tensor:
    """A pass's hidden states (transformers' tuple, batch 1) → what a draft reading them gets: the final one [k, H]
    (the last entry is after the final norm, what the output layer reads) when `layers` is (), else those layers'
    outputs side by side [k, len·H] (an EAGLE-3 head's features)."""
    if not layers:
        return states[-1][0]
    return torch.cat([states[i][0] for i in layers], dim=-1)


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
        # set to a list by a loop whose draft reads the target's hidden states (an EAGLE head, ReadsHidden): each
        # decoder-only pass then appends its final hidden states [k, H] (after the last norm: what the output
        # layer reads); None (the default) asks transformers for nothing more
        self.hidden_log: list[torch.Tensor] | None = None
        # which hidden states a logged pass keeps: () the final (an EAGLE head), or the outputs of these layers
        # (transformers' hidden_states[i]) side by side, [k, len·H] (an EAGLE-3 head's fused features)
        self.hidden_layers: tuple[int, ...] = ()
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
            if self.hidden_log is not None:
                extra["output_hidden_states"] = True
            self.backend.check_room(self.length, ids.shape[1])
            out = self.backend(ids.shape[1], input_ids=ids, use_cache=True, **{self._cache_kw: self._cache}, **extra)
            if self.hidden_log is not None:
                self.hidden_log.append(kept_hidden(out.hidden_states, self.hidden_layers))
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

    # --- token trees (tree.py): a masked pass over [cur, nodes], then only cur and the accepted path stay

    def forward_tree(self, ids: torch.Tensor, tree: TokenTree) -> torch.Tensor:
        """Feed ids [n+1] = [cur, node_0..] as `tree` after the cached tokens → logits [n+1, V] (row 0 at cur, row
        i + 1 at node i, each computed from the prefix, cur and its own ancestors only). All n+1 slots stay
        cached, in index order, until `keep_path`."""
        q = tree.size + 1
        mask = tree.attention_mask(self.length, self.mask_length(q), self.device)
        return self.forward_masked(ids, mask, tree.position_ids(self.length, self.device))

    def mask_length(self, new: int) -> int:
        """The key length a pass of `new` tokens attends over: cached + new, or a static cache's whole capacity (a pass
        that would overflow it fails here, in one line, before a mask of the wrong size is built)."""
        self.backend.check_room(self.length, new)
        return self._cache.get_mask_sizes(new, 0)[0]  # type: ignore[attr-defined]  # set by start()

    @torch.inference_mode()
    def forward_masked(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed ids [k] with a bool mask [1, 1, k, mask_length(k)] (True = attend; mask_length checked the room) and
        position ids [1, k] → [k, V].

        Decoder-only models only. Runs the model eagerly whatever the backend: a compiled backend would add a
        graph per tree shape, and a chain never comes here."""
        if self.is_seq2seq:
            raise SpecbenchError("token-tree proposals need a decoder-only target")
        t0 = self.timer.now() if self.timer else 0.0
        out = self.model(
            input_ids=ids.view(1, -1),
            attention_mask=additive_mask(mask, self.model.dtype),  # type: ignore[arg-type]  # torch: Module attrs are Tensor | Module
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: self._cache},
            **({"output_hidden_states": True} if self.hidden_log is not None else {}),
        )
        if self.hidden_log is not None:
            self.hidden_log.append(kept_hidden(out.hidden_states, self.hidden_layers))
        self.length += ids.shape[0]
        if self.timer:
            self.forward_times.append(self.timer.now() - t0)
        return out.logits[0]

    @torch.inference_mode()
    def keep_path(self, cached: int, path: list[int]) -> None:
        """After a tree pass written from slot `cached` (cur's), keep [.., cur, path's nodes] in order: every
        layer's keys and values at the path's slots move next to cur's, then the cache is cropped to
        cached + 1 + len(path). A static cache's tensors are written in place (they keep their address)."""
        layers = self._cache.layers  # type: ignore[attr-defined]  # set by start()
        if any(getattr(layer, "is_sliding", False) for layer in layers):
            raise SpecbenchError("token-tree proposals need full-attention caches (no sliding window)")
        src, dst = kept_slots(cached, path)
        if not torch.equal(src, dst):  # a path of the first nodes (a chain's) is already in place
            for layer in layers:
                if layer.is_initialized:
                    move_slots(layer.keys, src, dst)
                    move_slots(layer.values, src, dst)
        self.truncate(cached + 1 + len(path))


def move_slots(states: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy states [B, H, S, D] at sequence slots src [m] to slots dst [m], in place (the select copies first)."""
    states.index_copy_(2, dst.to(states.device), states.index_select(2, src.to(states.device)))


def as_cached(model, backend: ForwardBackend | None = None):
    """A cache wrapper over `model`: a torch module gets a fresh CachedModel; a model that already is one (the
    llama.cpp engine's LlamaCppModel, engines/llama_cpp/backend.py) is returned as it is, so replays, calibration and
    evidence that take "the target" run on whichever engine decoded."""
    if isinstance(model, torch.nn.Module):
        return CachedModel(model, backend=backend)
    return model

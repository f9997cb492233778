"""How a model's forward pass runs: which KV cache, and whether decode steps are compiled.

The same choice applies to the baseline, the target inside speculative decoding and a model
draft, so a speedup never comes from one side getting a faster forward than the other.

- `eager`: a growing `DynamicCache` and the eager forward (transformers' default).
- `static`: a preallocated `StaticCache`, reused across examples. Rollback after a rejection
  only moves the cache's length back; stale keys beyond it are overwritten by the next write
  and masked meanwhile by causality (a key position above every query position).
- `compiled`: the static cache plus `torch.compile` of every forward of at most
  `COMPILED_MAX_TOKENS` new tokens (decode and verify steps, a handful of fixed shapes); the
  prefill, whose length changes with every prompt, stays eager. On CUDA the compiled graphs
  are captured as CUDA graphs (`mode="reduce-overhead"`), which removes the per-kernel launch
  cost that dominates small-batch decoding on a GPU. On a CPU inductor compiles with weight
  freezing (weights become constants it prepacks for oneDNN) and a C++ wrapper that issues the
  step's kernels without Python (cpu_inductor_config: 1.9× the eager step here); each compiled
  shape then holds its own prepacked copy of the weights, and compiling takes minutes on a few
  cores, so it pays for long runs, not for a quick look.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, StaticCache

from specbench.config import check_backend
from specbench.errors import SpecbenchError

COMPILED_MAX_TOKENS = 16  # longer forwards (prefills) run eagerly, unless prime() set a tighter bound
CAPACITY_STEP = 256  # static caches are sized in these steps, so most examples reuse one (and its graphs)
RECOMPILE_LIMIT = 64  # one graph per step shape (1..γ+1 tokens, last-only or all logits); set only inside our calls


def static_capacity(needed: int) -> int:
    """Tokens a static cache holding `needed` tokens is allocated for."""
    return -(-needed // CAPACITY_STEP) * CAPACITY_STEP


def dynamo_limits() -> dict[str, int]:
    """The dynamo recompile limit raised to RECOMPILE_LIMIT, under the name this torch version uses."""
    dynamo = torch._dynamo.config
    knob = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"  # renamed in torch 2.6
    return {knob: max(getattr(dynamo, knob), RECOMPILE_LIMIT)}


def cpu_inductor_config() -> dict[str, bool]:
    """Inductor settings for a compiled CPU decode step, applied while our graphs compile (never process-wide).

    - freezing: the weights become graph constants, which inductor prepacks for oneDNN (mkldnn._linear_pointwise
      in place of aten::mm on unpacked weights). torch 2.13 ignores `torch.compile(options={"freezing": True})`:
      the flag takes effect only from inductor's config.
    - cpp_wrapper: the compiled graph's ~450 kernel calls a step are issued from C++, not from a generated Python
      function. Measured on a 2-vCPU Intel Xeon (AMX), SmolLM2-135M bf16, one thread, one-token step under the
      profiler (bench/profile_plain.py): eager 63.4 ms, compiled with freezing 41.0 ms, and with the C++ wrapper
      32.6 ms; the old options-only compile ran at 58.1 ms. The price is a C++ compile per step shape.
    """
    return {"freezing": True, "cpp_wrapper": True}


class ForwardBackend:
    """Runs one model's forwards under one backend; owns the static cache and the compiled graph."""

    def __init__(self, model: torch.nn.Module, kind: str = "eager"):
        check_backend(kind)
        if kind != "eager" and getattr(model.config, "is_encoder_decoder", False):
            raise SpecbenchError(
                f"--backend {kind} supports decoder-only models; use --backend eager for encoder-decoder models"
            )
        places = {str(v) for v in (getattr(model, "hf_device_map", None) or {}).values()}  # set by --device-map
        if kind == "compiled" and (len(places) > 1 or "disk" in places):
            raise SpecbenchError(
                f"--backend compiled needs the whole model on one device; --device-map put it on "
                f"{', '.join(sorted(places))}: use --backend static or eager"
            )
        self.model, self.kind = model, kind
        self.device = next(model.parameters()).device
        self._static: StaticCache | None = None
        self._capacity = 0
        self._compiled = None
        self.compile_up_to = COMPILED_MAX_TOKENS
        self._dynamo_limits = dynamo_limits()  # applied around our compiled calls only, never process-wide
        # likewise only around our calls: only our graphs are frozen and C++-wrapped
        self._inductor_config = cpu_inductor_config() if self.device.type == "cpu" else {}
        if kind == "compiled":
            if self.device.type == "cuda":
                self._compiled = torch.compile(model.forward, dynamic=False, mode="reduce-overhead")
            else:
                # frozen, prepacked weights and a C++ wrapper: cpu_inductor_config, patched in around each call
                self._compiled = torch.compile(model.forward, dynamic=False)
        self.reuses_outputs = self._compiled is not None and self.device.type == "cuda"

    def reserve(self, needed: int) -> bool:
        """Size the static cache for at least `needed` tokens; → True when a new one was allocated.

        A run reserves for its longest example before warming up, so every example shares one
        cache and one set of compiled graphs (a new cache shape would recompile them).
        """
        if self.kind == "eager" or (self._static is not None and self._capacity >= needed):
            return False
        self._capacity = static_capacity(needed)
        self._static = StaticCache(config=self.model.config, max_cache_len=self._capacity)  # type: ignore[arg-type]  # torch: Module attrs are Tensor | Module
        return True

    def new_cache(self, needed: int):
        """An empty decoder cache able to hold `needed` tokens."""
        if self.kind == "eager":
            return DynamicCache()
        if not self.reserve(needed):
            with torch.inference_mode():  # its tensors were made by forwards in inference mode
                self._static.reset()  # type: ignore[union-attr]  # built by the first forward
        return self._static

    def check_room(self, cached: int, new: int) -> None:
        """Fail clearly (not with an index error deep in a kernel) when a write would overflow a static cache."""
        if self._static is not None and cached + new > self._capacity:
            raise SpecbenchError(
                f"static cache of {self._capacity} tokens overflowed ({cached} + {new}); "
                f"this is a bug in the caller's capacity; use --backend eager meanwhile"
            )

    def __call__(self, n_new: int, **kwargs):
        if self._compiled is not None and n_new <= self.compile_up_to:
            if self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are consumed
            # a new step shape compiles inside this call: our graph count needs more than dynamo's default
            # limit (8), but other compiled code in the process keeps its own
            with (
                torch._dynamo.config.patch(**self._dynamo_limits),  # type: ignore[arg-type]  # torch's patch(**changes) stub lists one positional
                torch._inductor.config.patch(**self._inductor_config),  # type: ignore[arg-type]  # the same stub
            ):
                return self._compiled(**kwargs)
        return self.model(**kwargs)

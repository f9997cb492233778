"""llama.cpp as a backend for specbench's own decode loop, and llama.cpp's own decoders as peers.

People who run models on CPUs deploy llama.cpp on the same GGUF files specbench ships; its kernels
run the quantized weights natively, so a pass over k tokens costs something else than in PyTorch.
`LlamaCppModel` gives a GGUF loaded by llama-cpp-python (the `llama-cpp` extra, built by
`make setup-llama-cpp`) the interface of `CachedModel` (start / forward / truncate / length), so
`decode_autoregressive`, `decode_speculative`, every draft, γ policy, the exact sampling rule at
T > 0 and the pass-cost calibration run unchanged on llama.cpp's kernels (DESIGN.md style 3: we own
the loop and call only a forward). A forward over k tokens is one `llama_decode` batch with logits
for every position when asked (a verify pass), else for the last one; rollback after a rejection
removes the rejected positions from the KV cache (`llama_memory_seq_rm`), so no prefix is re-fed.

The peers are llama-cpp-python's own `Llama.generate`: plain greedy decoding (what specbench's
baseline on this engine must match token for token and in speed) and its prompt-lookup speculative
decoding (`LlamaPromptLookupDecoding`), which run inside the binding's loop, not ours.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import os
from contextlib import contextmanager

import numpy as np
import torch

from specbench.engines.llama_cpp import ENGINE_NAME, SETUP_HINT
from specbench.errors import SpecbenchError

N_BATCH = 512  # tokens per llama_decode call in a prefill (llama.cpp's default); verify passes are far shorter
CTX_STEP = 256  # contexts are sized in these steps, so most examples of a run share one
FIRST_CTX = 512  # a fresh context holds this many tokens (or the limit, if less); reserve() grows it


def import_llama_cpp():
    """The llama_cpp module, or a one-line error naming the command that builds it."""
    try:
        return importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise SpecbenchError(
            f"--engine {ENGINE_NAME} needs llama-cpp-python, which is not installed here ({exc.msg}); "
            f"build it with `{SETUP_HINT}`"
        ) from exc


def engine_version() -> str:
    """llama-cpp-python's version (it pins the llama.cpp commit it was built from)."""
    return str(getattr(import_llama_cpp(), "__version__", "unknown"))


def default_threads() -> int:
    """llama.cpp's threads when --threads is not given: every core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def context_size(needed: int) -> int:
    """Tokens a context holding `needed` tokens is allocated for."""
    return -(-max(needed, 1) // CTX_STEP) * CTX_STEP


def cpu_has_amx(path: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU advertises AMX int8 tiles (Intel Sapphire Rapids and later)."""
    try:
        with open(path, encoding="utf-8") as f:
            return any(line.startswith("flags") and " amx_int8" in line for line in f)
    except OSError:
        return False


@contextmanager
def without_extra_buffers(llama_cpp, when: bool):
    """While a `Llama` loads: its model parameters with llama.cpp's extra CPU buffer types off (`use_extra_bufts`,
    which the binding does not expose), when `when`. On an AMX CPU llama.cpp repacks quantized weights into its AMX
    buffer, whose matmul crashes (SIGSEGV in the first decode: seen here on a Xeon with amx_int8, llama-cpp-python
    0.3.36 built with GGML_NATIVE, on Qwen2.5-Coder Q4_K_M and a tiny Q8_0; llama.cpp issue 20824); the plain CPU
    buffers compute the same model with the AVX-512 kernels."""
    module = getattr(getattr(llama_cpp, "llama", None), "llama_cpp", None)
    original = getattr(module, "llama_model_default_params", None)
    if not when or module is None or original is None:
        yield
        return

    def params():
        out = original()
        if hasattr(out, "use_extra_bufts"):
            out.use_extra_bufts = False
        return out

    module.llama_model_default_params = params
    try:
        yield
    finally:
        module.llama_model_default_params = original


def load_llama(path: str, n_ctx: int, threads: int, *, logits_all: bool = False, draft_model=None, seed: int = 0):
    """A `llama_cpp.Llama` over the GGUF at `path`, quantized as it is, on `threads` threads; quiet. On an AMX CPU
    without llama.cpp's extra buffer types (without_extra_buffers: its AMX kernels crash)."""
    llama_cpp = import_llama_cpp()
    if not os.path.isfile(path):
        raise SpecbenchError(f"GGUF file not found: {path}; check the path")
    try:
        with without_extra_buffers(llama_cpp, cpu_has_amx()):
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=N_BATCH,
                n_ubatch=N_BATCH,
                n_threads=threads,
                n_threads_batch=threads,
                logits_all=logits_all,
                draft_model=draft_model,
                seed=seed,
                verbose=False,
            )
    except (ValueError, RuntimeError) as exc:
        raise SpecbenchError(f"llama.cpp cannot load {path}: {exc}") from exc
    # freed before the interpreter tears modules down: the binding's __del__ at that point prints a traceback
    atexit.register(llm.close)
    return llm


class LlamaBackend:
    """What the runner and calibration ask of a `ForwardBackend`, for a llama.cpp context that grows on demand.

    The context is allocated for what the run needs (`reserve`: at warm-up, at calibration and at every cache start),
    not for the model's whole trained context: one sized for 8,192 tokens decoded SmolLM2-135M Q4_1 ~2 % slower per
    token than one sized for 512 (2-core EPYC, 2026-12-02, docs/benchmarks.md), in specbench's loop and in the
    binding's generate alike. Growing reloads the GGUF (memory-mapped), so it happens only where the cache is empty."""

    kind = ENGINE_NAME
    reuses_outputs = False

    def __init__(self, model: LlamaCppModel, limit: int):
        self.model = model
        self.limit = limit  # the most tokens a context may hold (the model's trained context, capped)
        self.n_ctx = int(model.llm.n_ctx())  # tokens the current context holds (read by every forward's check_room)

    def reserve(self, needed: int) -> bool:
        """Room for `needed` tokens from an empty cache; → True when the context was grown (the cache is empty
        then). Beyond the limit: a one-line error, before any timing."""
        if needed > self.limit:
            raise overflow(self.limit, 0, needed)
        if needed <= self.n_ctx:
            return False
        self.model.grow(needed)
        self.n_ctx = int(self.model.llm.n_ctx())
        return True

    def check_room(self, cached: int, new: int) -> None:
        if cached + new > self.n_ctx:
            raise overflow(self.n_ctx, cached, new)


def overflow(n_ctx: int, cached: int, new: int) -> SpecbenchError:
    """The one-line error of a forward or reservation past a context (a caller's capacity bug: prompts that cannot
    fit are refused earlier, by prepare_examples against the limit)."""
    return SpecbenchError(
        f"llama.cpp context of {n_ctx} tokens overflowed ({cached} + {new}); "
        f"this is a bug in the caller's capacity (lower --max-new-tokens meanwhile)"
    )


GGUF_FILE_TYPES = {"0": torch.float32, "1": torch.float16, "32": torch.bfloat16}  # general.file_type: F32, F16, BF16


def logit_precision(metadata: dict) -> torch.dtype:
    """The precision llama.cpp's logits carry, for the margin gate's spacings (stats/margin_gate.py): F32, F16 and
    BF16 files compute in their own type; a quantized file's weights are dotted with activations rounded to 8-bit
    blocks (Q8_0/Q8_1), about bfloat16's 8 significant bits. float32 spacings would call its batch-shape flips
    (measured at gaps of 1,700–490,000 float32 spacings, 0.003–0.46 in logits, on SmolLM2-135M Q4_1) bugs."""
    return GGUF_FILE_TYPES.get(str(metadata.get("general.file_type", "")), torch.bfloat16)


class LlamaCppModel:
    """A GGUF in a llama.cpp context with `CachedModel`'s interface; `length` counts the cached tokens."""

    is_seq2seq = False  # llama.cpp's encoder-decoder support is not wired here

    def __init__(self, path: str, *, n_ctx: int, threads: int, seed: int = 0):
        """`n_ctx`: the most tokens a context may hold; the context allocated starts smaller and grows (reserve)."""
        self.path, self.threads, self.seed = str(path), threads, seed
        limit = context_size(n_ctx)
        self.llm = load_llama(self.path, min(FIRST_CTX, limit), threads, seed=seed)
        self.backend = LlamaBackend(self, limit)
        self.n_vocab = self.llm.n_vocab()
        self.logit_precision = logit_precision(getattr(self.llm, "metadata", None) or {})
        self.device = torch.device("cpu")  # logits come back to the host; a CUDA build syncs inside llama_decode
        self.devices = (self.device,)
        self.timer = None
        self.forward_times: list[float] = []
        self.length = 0

    def set_timer(self, clock) -> None:
        """Profile each forward with `clock` (None: stop), into a fresh `forward_times` list."""
        self.timer = clock
        self.forward_times = []

    def start(self, encoder_ids: list[int] | None = None, capacity: int = 0) -> None:
        """Forget the last example: empty the KV cache. `capacity` is checked against the context."""
        if encoder_ids is not None:
            raise SpecbenchError(f"--engine {ENGINE_NAME} supports decoder-only models")
        self.backend.reserve(capacity)
        self.llm._ctx.kv_cache_clear()
        self.llm.reset()  # the binding's own bookkeeping (its generate() must not reuse our cache)
        self.length = 0

    def forward(self, new_ids: torch.Tensor | list[int], all_logits: bool = False) -> torch.Tensor:
        """Feed new ids [k] after the cached ones → logits [k, V] float32, or by default [V] of the last one.

        One llama_decode per N_BATCH tokens: a verify pass (k ≤ γ+1) is one batch, so llama.cpp runs it
        with the batch-k kernels whose cost the calibration measures."""
        t0 = self.timer.now() if self.timer else 0.0
        ids = new_ids.tolist() if isinstance(new_ids, torch.Tensor) else list(new_ids)
        self.backend.check_room(self.length, len(ids))
        rows = []
        for i in range(0, len(ids), N_BATCH):
            chunk = ids[i : i + N_BATCH]
            last_chunk = i + N_BATCH >= len(ids)
            rows.append(self._decode(chunk, all_logits, want_any=all_logits or last_chunk))
        kept = [r for r in rows if r is not None]
        logits = torch.from_numpy(kept[0] if len(kept) == 1 else np.concatenate(kept))  # [k or 1, V]
        if self.timer:
            self.forward_times.append(self.timer.now() - t0)
        return logits if all_logits else logits[-1]

    def _decode(self, chunk: list[int], all_logits: bool, want_any: bool) -> np.ndarray | None:
        """One llama_decode of `chunk` at the cache's end → a copy of its output rows (None when none asked)."""
        batch = self.llm._batch
        batch.set_batch(chunk, n_past=self.length, logits_all=all_logits)  # marks the last row always
        self.llm._ctx.decode(batch)
        self.length += len(chunk)
        if not want_any:
            return None
        n_rows = len(chunk) if all_logits else 1
        ptr = self.llm._ctx.get_logits()  # the rows of the tokens whose logits flag was set, in order
        return np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_rows, self.n_vocab)
        ).copy()

    def grow(self, needed: int) -> None:
        """Reload the GGUF with a context for `needed` tokens (CTX_STEP multiples, ≤ the limit); the cache is empty."""
        llm = load_llama(self.path, min(context_size(needed), self.backend.limit), self.threads, seed=self.seed)
        self.llm.close()
        self.llm, self.length = llm, 0

    def prime(self, max_tokens: int, all_logits: bool) -> None:
        """Nothing to compile: llama.cpp picks its kernels per batch at run time (the warm-up pays for it)."""

    def truncate(self, length: int) -> None:
        """Keep only the first `length` cached tokens (the rejected positions leave the KV cache)."""
        if length < self.length:
            if not self.llm._ctx.kv_cache_seq_rm(-1, length, -1):
                raise SpecbenchError(
                    "llama.cpp could not remove positions from this model's KV cache (a recurrent model?)"
                )
            self.length = length

    def describe(self) -> dict:
        """What a manifest records about this engine: its name and version, the threads, the GGUF as loaded."""
        model = self.llm._model
        return {
            "engine": ENGINE_NAME,
            "engine_version": engine_version(),
            "threads": self.threads,
            "gguf": os.path.basename(self.path),
            "model_desc": model.desc(),  # llama.cpp's own: architecture, size, quantization (e.g. "llama 135M Q4_1")
            "n_params": int(model.n_params()),
            "n_ctx": self.backend.limit,  # the most a context may hold; the one allocated fits the run (reserve)
        }

    def close(self) -> None:
        self.llm.close()

"""Hugging Face assisted generation as a comparison engine (`--engine hf-assisted`).

Users already have `model.generate(assistant_model=...)`; this wraps it with a constant
γ (`num_assistant_tokens`) and a clean GenerationConfig (no model-side defaults such as a
repetition penalty), timed the same way as our engines. transformers does not report
acceptance counts, so those fields stay 0 and the metrics derived from them are NaN.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from transformers import GenerationConfig

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult
from specbench.decoding.timing import Clock


def generation_config(
    sampling: SamplingConfig, max_new_tokens: int, eos_ids: frozenset[int], pad_id: int | None
) -> GenerationConfig:
    """A GenerationConfig equivalent to our sampling settings, nothing else switched on."""
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos_ids) or None,
        pad_token_id=pad_id if pad_id is not None else (min(eos_ids) if eos_ids else 0),
    )
    if sampling.greedy:
        return GenerationConfig(do_sample=False, **kwargs)
    return GenerationConfig(
        do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p, **kwargs
    )


@contextlib.contextmanager
def constant_assistant_tokens(assistant: torch.nn.Module | None, gamma: int, min_confidence: float = 0.0):
    """Make HF draft exactly γ tokens per step while inside (fewer only below `min_confidence`, 0 = never).

    HF's assisted generation reads `num_assistant_tokens`, its schedule and the confidence
    threshold from the *assistant's* generation_config (defaults: a heuristic schedule that
    grows and shrinks the draft length, and an early stop below 0.4 confidence), not from the
    config passed to generate(); so they are set there, on a copy, and restored after. (With
    scikit-learn installed HF also re-tunes a non-zero threshold as it goes; specbench's stays put.)
    """
    if assistant is None:
        yield
        return
    saved = assistant.generation_config
    fixed = copy.deepcopy(saved)
    fixed.num_assistant_tokens = gamma  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module
    fixed.num_assistant_tokens_schedule = "constant"  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module
    fixed.assistant_confidence_threshold = min_confidence  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module
    assistant.generation_config = fixed
    try:
        yield
    finally:
        assistant.generation_config = saved


@torch.inference_mode()
def decode_hf(
    target: torch.nn.Module,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
    seed: int,
    eos_ids: frozenset[int],
    assistant: torch.nn.Module | None = None,
    prompt_lookup: bool = False,
    gamma: int = 4,
    min_confidence: float = 0.0,
) -> DecodeResult:
    """`target.generate()`: plain, assisted by `assistant`, or HF prompt lookup (n-grams up to 3, as ours)
    → DecodeResult with tokens and times."""
    device = next(target.parameters()).device
    clock = Clock(device)
    config = generation_config(sampling, max_new_tokens, eos_ids, getattr(target.config, "pad_token_id", None))
    extra = {}
    if assistant is not None:
        extra["assistant_model"] = assistant
    elif prompt_lookup:
        config.prompt_lookup_num_tokens = gamma
        config.max_matching_ngram_size = 3
    ids = torch.tensor([prompt_ids], device=device)
    torch.manual_seed(seed)
    with constant_assistant_tokens(assistant, gamma, min_confidence):
        t0 = clock.now()
        out = target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config, **extra)  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
        t1 = clock.now()
    start = 1 if target.config.is_encoder_decoder else ids.shape[1]  # type: ignore[union-attr]  # torch: Module attrs are Tensor | Module
    tokens = out[0, start:].tolist()
    stop = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    tokens = tokens if stop is None else tokens[: stop + 1]
    return DecodeResult(
        token_ids=tokens, stop_reason="eos" if stop is not None else "length", prefill_s=0.0, decode_s=t1 - t0
    )

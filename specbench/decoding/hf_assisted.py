"""Hugging Face assisted generation as a comparison engine (`--engine hf-assisted`).

Users already have `model.generate(assistant_model=...)`; this wraps it with a constant
γ (`num_assistant_tokens`) and a clean GenerationConfig (no model-side defaults such as a
repetition penalty), timed the same way as our engines. transformers does not report
acceptance counts, so those fields stay 0 and the metrics derived from them are NaN.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult
from specbench.timing import Clock


def generation_config(sampling: SamplingConfig, max_new_tokens: int, eos_ids: frozenset[int], pad_id: int | None) -> GenerationConfig:
    """A GenerationConfig equivalent to our sampling settings, nothing else switched on."""
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=sorted(eos_ids) or None,
                  pad_token_id=pad_id if pad_id is not None else (min(eos_ids) if eos_ids else 0))
    if sampling.greedy:
        return GenerationConfig(do_sample=False, **kwargs)
    return GenerationConfig(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or None,
                            top_p=sampling.top_p, **kwargs)


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
) -> DecodeResult:
    """`target.generate()`: plain, assisted by `assistant`, or HF prompt lookup (n-grams up to 3, as ours)
    → DecodeResult with tokens and times."""
    device = next(target.parameters()).device
    clock = Clock(device)
    config = generation_config(sampling, max_new_tokens, eos_ids, getattr(target.config, "pad_token_id", None))
    extra = {}
    if assistant is not None:
        config.num_assistant_tokens = gamma
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0  # keep γ constant: no early stop of drafting
        extra["assistant_model"] = assistant
    elif prompt_lookup:
        config.prompt_lookup_num_tokens = gamma
        config.max_matching_ngram_size = 3
    ids = torch.tensor([prompt_ids], device=device)
    torch.manual_seed(seed)
    t0 = clock.now()
    out = target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config, **extra)
    t1 = clock.now()
    start = 1 if target.config.is_encoder_decoder else ids.shape[1]
    tokens = out[0, start:].tolist()
    stop = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    tokens = tokens if stop is None else tokens[: stop + 1]
    return DecodeResult(token_ids=tokens, stop_reason="eos" if stop is not None else "length",
                        prefill_s=0.0, decode_s=t1 - t0)

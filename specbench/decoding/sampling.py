"""Logits → the processed distribution that both target and draft sample from.

Exactness of speculative sampling needs p and q to be the *same* transformation of each
model's logits (temperature, then top-k, then top-p) and the draft to sample from exactly
the q it reports. These pure functions are the only place that transformation lives.
All math is float32 whatever the model dtype (bf16 ratios p/q are a known source of bias).
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig


def processed_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[..., V] logits → [..., V] float32 probabilities after temperature, top-k, top-p.

    At T = 0 the result is one-hot on the argmax (the greedy limit).
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1.0:
        probs = _top_p_filter(probs, cfg.top_p)
    return probs


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest most-likely set whose mass reaches top_p (always >= 1 token); renormalise."""
    sorted_p, order = probs.sort(dim=-1, descending=True)  # [..., V]
    mass_before = sorted_p.cumsum(-1) - sorted_p  # mass strictly above each token
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    kept = probs.masked_fill(drop, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token per row of [..., V] probabilities → [...] int64."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def next_token(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    """[..., V] logits → [...] token ids: argmax at T = 0, else a draw from the processed law."""
    if cfg.greedy:
        return logits.argmax(-1)
    return sample(processed_probs(logits, cfg), generator)


def draft_token(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None, laws: list[torch.Tensor]
) -> torch.Tensor:
    """A network draft's next token at its [V] logits, as next_token draws it; at T > 0 the processed law it was drawn
    from is appended to `laws` (the proposal's q rows, in order)."""
    if cfg.greedy:
        return logits.argmax(-1)
    laws.append(processed_probs(logits, cfg))
    return sample(laws[-1], generator)


def below_confidence(
    logits: torch.Tensor, tok: torch.Tensor, laws: list[torch.Tensor], cfg: SamplingConfig, min_confidence: float
) -> bool:
    """Whether the draft's own probability of the token it just drafted (`draft_token`'s; one host sync) is below
    `min_confidence` (--draft-confidence): the softmax at T = 0, else the law it was drawn from. Off (≤ 0): False,
    without a sync."""
    if min_confidence <= 0.0:
        return False
    p = torch.softmax(logits.float(), -1)[tok] if cfg.greedy else laws[-1][tok]
    return float(p) < min_confidence


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """The generator one decode draws from (a fresh one per example and arm, seeded by example_seed)."""
    return torch.Generator(device=device).manual_seed(seed)

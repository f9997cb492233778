"""Contracts where proposer, verifier and runner meet.

A draft of any kind (a model, an n-gram table, prompt lookup) is a `Proposer`; it returns a
`Proposal`; the verifier turns target logits plus a proposal into a `Verdict`; an engine
turns a prompt into a `DecodeResult` of raw counts and times. Ratios are derived later,
in one place (specbench.measure.metrics), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from specbench.config import SamplingConfig


@dataclass
class Proposal:
    """γ' drafted tokens and the law each was drawn from."""

    tokens: torch.Tensor  # [γ'] int64, on the target's device
    q_probs: torch.Tensor | None  # [γ', V] float32 processed draft law; None at T = 0 (greedy needs no q)
    forward_calls: int  # draft model forward passes spent (0 for model-free drafts)


@dataclass
class Verdict:
    """What one target pass decided about a proposal."""

    n_accepted: int  # drafted tokens kept, 0..γ'
    next_token: int  # correction (if a rejection happened) or bonus token from p_{γ'+1}
    expected_accept: list[float]  # Σ_x min(p_i(x), q_i(x)) at each verified position up to the first rejection


class Proposer(Protocol):
    """Anything that drafts tokens for the target to verify."""

    name: str
    is_model: bool  # True when proposing runs a neural network (its cost enters c)

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """Reset all per-example state and absorb the prompt (prefill, index building).

        `max_new_tokens` bounds how far this example will go (a model draft sizes a static cache by it).
        """

    def propose(
        self, tokens: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        """Draft up to `gamma` tokens continuing `tokens` (the decoder sequence so far, last = newest).

        `min_confidence` > 0: a draft that knows its own law stops early once the probability it
        gave its newest token falls below it (that token is still proposed), as HF's
        `assistant_confidence_threshold`. The stop depends on the draft's own draws only, so the
        verified output keeps the target's law. Model-free drafts ignore it.
        """


@dataclass
class DecodeResult:
    """Raw counts and times of one example decoded by one engine."""

    token_ids: list[int]  # generated tokens (EOS included if emitted), never more than max_new_tokens
    stop_reason: str  # "eos" or "length"
    prefill_s: float  # time to first token: prompt encoding/prefill of every model + first token
    decode_s: float  # time after the first token until the last
    target_calls: int = 0  # target forward passes after prefill
    draft_calls: int = 0  # draft forward passes after prefill (0 for model-free drafts)
    drafted: int = 0  # draft tokens proposed and verified
    accepted: int = 0  # of those, accepted by the rejection rule
    trials: int = 0  # Bernoulli acceptance trials: Σ over steps of min(n_accepted + 1, γ')
    accept_lengths: list[int] = field(default_factory=list)  # n_accepted of every verification step
    draft_lengths: list[int] = field(default_factory=list)  # γ' drafted at every verification step (< γ near the budget's end or for short lookups)
    proposal_lengths: list[int] = field(default_factory=list)  # what the proposer offered at every pass the budget did not shorten (0 = nothing)
    expected_accept: list[float] = field(default_factory=list)  # Σ min(p, q) of every verified position
    pass_lengths: list[int] = field(default_factory=list)  # tokens fed to each target pass after prefill (1 = a plain step; g+1 = a verify pass), in order
    draft_s: float = 0.0  # decode time spent proposing
    verify_s: float = 0.0  # decode time spent in target passes and verification

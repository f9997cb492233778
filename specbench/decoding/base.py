"""Contracts where proposer, verifier and runner meet.

A draft of any kind (a model, an n-gram table, prompt lookup) is a `Proposer`; it returns a
`Proposal`; for a batch of rows it hands over its `BatchProposer` (decoding/batched/drafts.py);
the verifier turns target logits plus a proposal into a `Verdict`; an engine
turns a prompt into a `DecodeResult` of raw counts and times. Ratios are derived later,
in one place (specbench.measure.metrics), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from specbench.config import SamplingConfig

if TYPE_CHECKING:
    from specbench.decoding.batched.rows import Row
    from specbench.decoding.cached_model import CachedModel
    from specbench.decoding.timing import Clock


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
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        """Draft up to `gamma` tokens continuing `tokens` (the decoder sequence so far, last = newest).

        `min_confidence` > 0: a draft that knows its own law stops early once the probability it
        gave its newest token falls below it (that token is still proposed), as HF's
        `assistant_confidence_threshold`. The stop depends on the draft's own draws only, so the
        verified output keeps the target's law. Model-free drafts ignore it.
        """

    def model_caches(self) -> list[CachedModel]:
        """The KV-cache wrappers of the networks this draft runs ([] for a model-free draft).

        The runner sizes, compiles and warms them with the target's, and calibration times their
        one-token pass; a non-empty list is exactly what `is_model` promises.
        """

    def hf_assistant(self) -> torch.nn.Module | None:
        """The model HF's assisted generation can take as `assistant_model` to draft the same way; None when
        HF has no counterpart (model-free drafts, the hybrid). The hf-assisted engine and the bench use it."""

    def set_timer(self, clock: Clock | None) -> None:
        """Profile every forward of the draft's networks with `clock` (None: stop), starting a fresh
        `forward_times` list on each of `model_caches()`; a no-op for a model-free draft. Bench only: it syncs."""

    def lookup_history(self) -> list[int] | None:
        """Tokens prompt lookup supplied at each proposal since begin(), for a draft that fills lookup's
        shortfall with a model (the pilot's lookup law); None for a draft with no such split."""

    def batched(self, size: int, device: torch.device) -> BatchProposer:
        """This one draft drafting for every row of a batch of `size` rows (decoding/batched/): a model draft
        drafts all rows in one pass of its network, a model-free one proposes per row from a copy of itself."""


class BatchProposer(Protocol):
    """A draft's form for a batch (decoding/batched/drafts.py): every live row drafts at each step.

    Rows are `batched.rows.Row`s (each row's tokens, budget, generator and index in the batch); a row draws
    only from its own generator, in the batch-1 draft's order, so each row reproduces its batch-1 run.
    """

    def begin(self, rows: list[Row], pad_id: int) -> None:
        """Absorb every row's prompt (`pad_id` fills the left padding of a batched cache; never attended)."""

    def propose(self, rows: list[Row], gammas: list[int], sampling: SamplingConfig) -> list[Proposal]:
        """Row i drafts up to gammas[i] tokens after its tokens (0: an empty proposal); one Proposal per row."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the live rows at positions `keep` ([b'] int64, in order) of any batched state."""


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
    draft_lengths: list[int] = field(
        default_factory=list
    )  # γ' drafted at every verification step (< γ near the budget's end or for short lookups)
    proposal_lengths: list[int] = field(
        default_factory=list
    )  # what the proposer offered at every pass the budget did not shorten (0 = nothing)
    expected_accept: list[float] = field(default_factory=list)  # Σ min(p, q) of every verified position
    pass_lengths: list[int] = field(
        default_factory=list
    )  # tokens fed to each target pass after prefill (1 = a plain step; g+1 = a verify pass), in order
    draft_s: float = 0.0  # decode time spent proposing
    verify_s: float = 0.0  # decode time spent in target passes and verification
    # batched engines (decoding/batched/): the batch this row was decoded in; batch-1 engines leave the defaults
    batch_size: int = 1  # rows decoded together (1: one sequence at a time)
    batch_s: float = 0.0  # wall seconds of the whole batch, its prefill to its last row's stop (0: not batched)
    batch_pass_rows: list[int] = field(default_factory=list)  # live rows in each batched target pass after prefill
    batch_pass_widths: list[int] = field(
        default_factory=list
    )  # tokens per row fed to each such pass (the rectangle's width)
    kept_lengths: list[int] = field(
        default_factory=list
    )  # tokens each verify step kept for this row: n + 1, or fewer under the min policy

"""Hybrid draft: prompt lookup where the context has a match, a draft model where it has none.

Each step first asks prompt lookup for up to γ tokens (free: no forward pass). If it finds
γ, that is the proposal. If it finds L < γ (none, or a match whose continuation runs into
the end of the context), the draft model continues from the sequence extended by those L
tokens and drafts the remaining γ − L. The model draft keeps its KV cache consistent by
itself: ModelDraft crops to the longest common prefix of what it has cached and the sequence
it is handed, so tokens it skipped (lookup steps) or guessed wrong (rejections) are fed or
dropped on the next call.

Exactness: the choice between the two sources is a deterministic function of the prefix,
so each position's law is well defined and is what we report: one-hot rows for lookup
tokens, the model's processed law (conditioned on the lookup tokens before it) for model
tokens. At T = 0 both parts are greedy and q is None, as for every draft.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.batched.drafts import BatchedHybridDraft
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.drafts.prompt_lookup import PromptLookupDraft


class HybridDraft:
    """Proposer: prompt-lookup tokens first, the model draft fills the rest of the γ budget."""

    is_model = True  # it runs a network whenever lookup falls short: its cost enters c (model_caches() has it)

    def __init__(self, lookup: PromptLookupDraft, model: ModelDraft, name: str):
        self.lookup = lookup
        self.model = model
        self.name = name
        self.lookup_lengths: list[int] = []  # tokens lookup found at each proposal since begin() (the pilot's law)
        self.model_tokens = 0  # tokens proposed by the model since begin()

    @property
    def lookup_tokens(self) -> int:
        """Tokens proposed by lookup since begin() (diagnostics)."""
        return sum(self.lookup_lengths)

    def model_caches(self) -> list[CachedModel]:
        return self.model.model_caches()  # the model part's: lookup runs no network

    def hf_assistant(self) -> None:
        return None  # HF has no lookup-then-model draft; handing it the model alone would bench another draft

    def set_timer(self, clock) -> None:
        self.model.set_timer(clock)

    def lookup_history(self) -> list[int]:
        return list(self.lookup_lengths)

    def batched(self, size: int, device: torch.device) -> BatchedHybridDraft:
        """Each row looks up with its own copy of the lookup; the model drafts what lookup left, all rows in one
        pass (this hybrid's own lookup and model caches are not used)."""
        return BatchedHybridDraft(self.lookup, self.model.lm.model, size)

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        self.lookup.begin(prompt_ids, max_new_tokens)
        self.model.begin(prompt_ids, max_new_tokens)
        self.lookup_lengths = []
        self.model_tokens = 0

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        found = self.lookup.propose(tokens, gamma, sampling, generator)  # deterministic; q one-hot
        n_found = found.tokens.shape[0]
        self.lookup_lengths.append(n_found)
        if n_found == gamma:
            return found
        rest = self.model.propose(tokens + found.tokens.tolist(), gamma - n_found, sampling, generator, min_confidence)
        self.model_tokens += rest.tokens.shape[0]  # fewer than asked when the model stopped early
        if n_found == 0:
            return rest
        ids = torch.cat([found.tokens, rest.tokens])  # [γ'], γ' ≤ γ
        q = None if sampling.greedy else torch.cat([found.q_probs, rest.q_probs])  # type: ignore[list-item]  # sampling: a proposal carries q_probs; [γ', V]
        return Proposal(tokens=ids, q_probs=q, forward_calls=rest.forward_calls)

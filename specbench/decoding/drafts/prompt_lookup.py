"""Prompt lookup: a model-free draft that copies from the context (Saxena 2023; HF `prompt_lookup_num_tokens`).

Find an earlier occurrence of the last n tokens (n from `max_ngram` down to `min_ngram`) and
propose the tokens that followed it. Which occurrence is the `rule`: `recent` (the default)
takes the most recent one, `hf` the leftmost, as HF's PromptLookupCandidateGenerator does
(its max_matching_ngram_size is our max_ngram, its n-grams go down to 1; vLLM's
prompt_lookup_max / prompt_lookup_min are max_ngram / min_ngram). Both skip a match with
nothing after it. The rules differ where a phrase recurs: a recent match follows the
answer being written, the leftmost one the prompt's first use of the phrase. The proposal is deterministic, so
its law q is one-hot on each proposed token: the rejection rule then accepts x with
probability p(x) and the residual is p without x, renormalised — sampling stays exact.
Costs no model forward (c ≈ 0): what it costs is the host-side search, timed as draft time.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.model_free import ModelFreeDraft

RULES = ("recent", "hf")


def lookup_continuation(
    tokens: list[int], gamma: int, max_ngram: int, min_ngram: int, rule: str = "recent"
) -> list[int]:
    """Tokens following the most recent (rule 'recent') or leftmost ('hf') earlier match of the longest
    suffix n-gram that has a continuation; [] if none."""
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = tokens[length - n :]
        # right to left: the most recent match wins; left to right: the leftmost (HF)
        starts = range(length - n - 1, -1, -1) if rule == "recent" else range(length - n)
        for start in starts:
            if tokens[start : start + n] == suffix:
                follow = tokens[start + n : start + n + gamma]
                if follow:
                    return follow
    return []


def one_hot_laws(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[γ] ids → [γ, V] float32 one-hot laws: the q of a deterministic proposal."""
    return torch.nn.functional.one_hot(ids, vocab_size).float()


class PromptLookupDraft(ModelFreeDraft):
    """Proposer that copies the continuation of the longest matching suffix n-gram."""

    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        *,
        search_source: bool = False,
        max_ngram: int = 3,
        min_ngram: int = 1,
        rule: str = "recent",
    ):
        if rule not in RULES:
            raise ValueError(f"prompt lookup rule must be one of {RULES} (got {rule!r})")
        self.name = "prompt-lookup"
        self.rule = rule
        self.vocab_size = vocab_size
        self.device = device
        self.search_source = search_source  # seq2seq: the prompt is the encoder's, not in `tokens`
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._source: list[int] = []

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        self._source = list(prompt_ids) if self.search_source else []

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        context = self._source + tokens if self._source else tokens
        follow = lookup_continuation(context, gamma, self.max_ngram, self.min_ngram, self.rule)
        ids = torch.tensor(follow, dtype=torch.long, device=self.device)
        q = None if sampling.greedy else one_hot_laws(ids, self.vocab_size)
        return Proposal(tokens=ids, q_probs=q, forward_calls=0)

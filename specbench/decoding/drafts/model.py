"""A neural draft model: a smaller transformers model sharing the target's vocabulary.

It keeps its own KV cache across steps. Before each proposal it crops the cache to the part
that still agrees with the sequence (the target may have rejected its last guesses), feeds
what is new (1–2 tokens), then drafts autoregressively, sampling from exactly the processed
law q it reports. Drafted ids stay on the device until the proposal is complete.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import Proposal
from specbench.decoding.batched.drafts import BatchedModelDraft, common_prefix_length
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.sampling import below_confidence, draft_token


class ModelDraft:
    """Proposer backed by a (small) language model with a KV cache."""

    is_model = True  # its forwards enter c; model_caches() is [its CachedModel]

    def __init__(self, model: torch.nn.Module, name: str, decoder_start_id: int | None = None, backend: str = "eager"):
        self.lm = CachedModel(model, backend=ForwardBackend(model, backend))
        self.name = name
        self.decoder_start_id = decoder_start_id
        self._cached: list[int] = []  # tokens whose keys/values are in the cache

    def model_caches(self) -> list[CachedModel]:
        return [self.lm]

    def hf_assistant(self) -> torch.nn.Module:
        return self.lm.model  # HF drafts with the same network; the runner pins its γ (hf_assisted.py)

    def set_timer(self, clock) -> None:
        self.lm.set_timer(clock)

    def lookup_history(self) -> None:
        return None

    def batched(self, size: int, device: torch.device) -> BatchedModelDraft:
        """Every row drafts in one pass of this network, over a batched cache of its own (not this one's)."""
        return BatchedModelDraft(self.lm.model)

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        if self.lm.is_seq2seq:
            self.lm.start(prompt_ids)
            self._cached = []
        else:
            self.lm.start(capacity=len(prompt_ids) + max_new_tokens)
            self.lm.forward(torch.tensor(prompt_ids, device=self.lm.device))
            self._cached = list(prompt_ids)

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        keep = min(common_prefix_length(self._cached, tokens), len(tokens) - 1)
        self.lm.truncate(keep)
        feed = torch.tensor(tokens[keep:], device=self.lm.device)
        drafted: list[torch.Tensor] = []
        laws: list[torch.Tensor] = []  # the q rows at T > 0 (draft_token appends them)
        for i in range(gamma):
            logits = self.lm.forward(feed)  # [V] at the newest position
            tok = draft_token(logits, sampling, generator, laws)
            drafted.append(tok)
            feed = tok.view(1)
            if i + 1 < gamma and below_confidence(logits, tok, laws, sampling, min_confidence):
                break  # (one host sync per token, only when --draft-confidence is on)
        ids = torch.stack(drafted)  # [γ']
        # the last drafted token was never fed: the cache covers tokens + drafted[:-1]
        self._cached = tokens + ids[:-1].tolist()
        return Proposal(tokens=ids, q_probs=torch.stack(laws) if laws else None, forward_calls=len(drafted))

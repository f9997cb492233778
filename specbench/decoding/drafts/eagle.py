"""`--draft eagle:<folder>` in specbench's loop: an EAGLE head (models/eagle_head.py) drafting from the target's own
hidden states, the same folder vLLM's `eagle` method runs (`--engine vllm --draft eagle:<folder>`).

The head keeps its own KV cache over positions 0..fed-1, each computed from the target's real hidden state there. The
loop hands over the target's hidden states of the positions it keeps (base.ReadsHidden: the prompt's after the
prefill, [cur, accepted] after each verify pass); a proposal first crops the cache back to `fed` (its own guesses
from the last proposal go, as vLLM's proposer drops them), runs the head over the new positions t (the embedding of
token t+1 ⊕ the target's h_t) in one pass, then chains: the law of the next token is the target's lm_head on the
head's output, and the head's output is the next position's hidden state. It samples from exactly the processed law
it reports, so T > 0 rejection sampling stays exact. Batch 1 only (config.py refuses batches).

`--draft eagle3:<folder>` (an EAGLE-3 head, models/eagle3_head.py; vLLM's `eagle3`) runs the same way: the loop keeps
the outputs of the head's three target layers instead of the final state, the head's fc fuses them (the target's
only), its own output before its final norm chains, and its own output layer gives the law.

`eagle3:<folder>,top=k` (either kind) proposes a token tree instead: the head's k likeliest first tokens as siblings
(the first drafted token's law comes out of the head's first call, so the k − 1 extra candidates cost no call), and
the head's greedy chain under the likeliest one, as deep as γ. The nodes are chosen deterministically, so every
node's law is a point mass and at T > 0 the tree rule samples from p without replacement among the siblings
(accept.verify_tree_sampling), exact whatever the head. After the pass the loop hands over the hidden states of cur
and the accepted path (a path through a sibling is one token long), and the head's cache is cropped as after a chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import BatchProposer, Proposal
from specbench.decoding.sampling import below_confidence, draft_token
from specbench.errors import SpecbenchError

GREEDY = SamplingConfig()  # how a tree's nodes are chosen: the head's likeliest, whatever the run's sampling


class EagleDraft:
    """Proposer over an EAGLE head, the target's (frozen, shared) embedding and output layer."""

    is_model = True  # it runs a network; its cost is measured in draft_s (no CachedModel to calibrate: c unpriced)

    def __init__(
        self,
        head: torch.nn.Module,
        embed: torch.nn.Module,
        lm_head: Callable[[torch.Tensor], torch.Tensor],
        name: str,
        fuse: Callable[[torch.Tensor], torch.Tensor] | None = None,
        feature_layers: tuple[int, ...] = (),
        top: int = 1,
    ):
        self.head: Any = head  # an EagleHead or an Eagle3Runner: forward, new_cache (torch types attributes Tensor)
        self.embed, self.lm_head, self.name = embed, lm_head, name
        # an EAGLE-3 head: the target layers whose outputs it reads (the loop keeps those, side by side) and the fc
        # that fuses them, applied to the target's features only (its own outputs chain as they are)
        self.fuse, self.feature_layers = fuse, tuple(feature_layers)
        self.top = top  # > 1: a token tree, the head's `top` likeliest first tokens as siblings
        self.device = next(head.parameters()).device
        self._cache: Any = None  # the head's KV cache (its new_cache()), made by begin()
        self._fed = 0  # head positions computed from the target's real hidden states
        self._pending: list[torch.Tensor] = []  # the target's hidden states not yet fed, [k, H] each

    def begin(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        self._cache = self.head.new_cache()
        self._fed = 0
        self._pending = []

    def observe_hidden(self, hidden: torch.Tensor) -> None:
        self._pending.append(hidden)

    def batched(self, size: int, device: torch.device) -> BatchProposer:
        raise SpecbenchError(f"--draft {self.name} drafts one sequence at a time; use --batch-size 1")

    def _step(self, ids: torch.Tensor, hidden: torch.Tensor, start: int) -> torch.Tensor:
        """The head over positions start..start+k-1: ids [k] (token t+1 each), hidden [k, H] (h_t) → [k, H]."""
        pos = torch.arange(start, start + ids.shape[0], device=self.device)[None]
        emb = self.embed(ids)[None].to(hidden.dtype)  # [1, k, H]
        return self.head(emb, hidden[None], pos, cache=self._cache)[0]

    @torch.inference_mode()
    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        new = len(tokens) - 1 - self._fed  # positions fed..len-2: their hidden states came with the last pass
        hidden = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending or [torch.zeros(0)])
        self._pending = []
        # more rows than new positions: a caller kept fewer tokens of a pass than it verified (decode_forced after a
        # forced mismatch); the first rows are the kept positions'
        hidden = hidden[:new]
        if new < 1 or hidden.shape[0] != new:
            raise SpecbenchError(
                f"the EAGLE head got {hidden.shape[0]} hidden states for {new} new positions: this is a bug in the "
                "loop that drives the draft (it must hand over every kept position's hidden state)"
            )
        extra = self._cache.get_seq_length() - self._fed
        if extra > 0:
            self._cache.crop(-extra)
        ids = torch.tensor(tokens[self._fed + 1 :], device=self.device)
        hidden = hidden.to(self.device)
        if self.fuse is not None:  # the target's layer outputs → the head's g (same dtype: both load in the run's)
            hidden = self.fuse(hidden)
        feat = self._step(ids, hidden, self._fed)[-1:]  # [1, H]: predicts h at the newest position
        self._fed = len(tokens) - 1
        if self.top > 1:
            return self._tree(feat, gamma, min_confidence)
        drafted: list[torch.Tensor] = []
        laws: list[torch.Tensor] = []  # the q rows at T > 0 (draft_token appends them)
        for i in range(gamma):
            logits = self.lm_head(feat)[0]  # [V]
            tok = draft_token(logits, sampling, generator, laws)
            drafted.append(tok)
            if i + 1 == gamma or below_confidence(logits, tok, laws, sampling, min_confidence):
                break
            feat = self._step(tok.view(1), feat, self._fed + i + 1)  # its own output as the next hidden state
        return Proposal(
            tokens=torch.stack(drafted), q_probs=torch.stack(laws) if laws else None, forward_calls=len(drafted)
        )

    def _tree(self, feat: torch.Tensor, gamma: int, min_confidence: float) -> Proposal:
        """The head's `top` likeliest first tokens (nodes 0..top-1, children of cur), then its greedy chain under node
        0 up to depth γ; every node deterministic (q_probs None: point masses)."""
        logits = self.lm_head(feat)[0]  # [V]
        first = logits.topk(min(self.top, logits.shape[-1])).indices  # likeliest first: the first tried
        nodes, parents = list(first), [-1] * len(first)
        tok = first[0]
        laws: list[torch.Tensor] = []  # stays empty: below_confidence reads the softmax of a greedy choice
        for i in range(1, gamma):
            if below_confidence(logits, tok, laws, GREEDY, min_confidence):
                break
            feat = self._step(tok.view(1), feat, self._fed + i)  # its own output as the next hidden state
            logits = self.lm_head(feat)[0]
            parents.append(0 if i == 1 else len(nodes) - 1)
            tok = logits.argmax(-1)
            nodes.append(tok)
        calls = 1 + len(nodes) - len(first)
        return Proposal(tokens=torch.stack(nodes), q_probs=None, forward_calls=calls, parents=parents)

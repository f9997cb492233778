"""Suffix decoding (Oliaro et al., *SuffixDecoding*, 2024/2025): a model-free draft over suffix trees of the prompt
and of the run's earlier outputs, run on arctic-inference's `SuffixDecodingCache` (the cache vLLM's `suffix` method
runs), not on a suffix tree of our own.

The cache holds a *local* tree per request (its prompt and the tokens generated so far) and one *global* tree of
earlier responses. At every step it matches the context's suffix (up to `max_depth` tokens) against both, and from
each match of length m proposes at most max_spec_factor · m + max_spec_offset tokens (the paper's adaptive
speculation length: a long match earns a long proposal, a one-token match a short one), continuing along the
most frequent continuations while their estimated probability (counts along the tree) stays ≥ `min_token_prob`;
the better-scoring of the two trees' proposals wins. `tree=1` (the default) asks for a token tree of up to
max(`nodes`, γ) nodes, expanded best-first by that probability, cut here to depth γ (γ bounds a tree's depth,
decoding/tree.py); `tree=0` asks for the single most likely path of up to γ tokens (a chain, for engines without a
tree pass). Defaults are vLLM's (`suffix_decoding_max_tree_depth` 24, `_max_spec_factor` 1, `_min_token_prob` 0.1)
and tree-lookup's node budget (7).

What counts as "earlier outputs" is the runner's business (base.LearnsOutputs): it hands over each example's
finished output once, after that example's timed decodes, and resets the cache at the start and the end of every
run, so a sweep cell starts from nothing and no repeat, warm-up, pilot or replay teaches the draft. The decode in
progress is a transient request: its response is in the global tree while it runs (as arctic-inference does it)
and is evicted when the next decode begins, so only what the runner committed outlives it.

Exactness: the draft only proposes. A proposal is a function of the context and of the committed outputs (and of
the prompt begin() was given), so at T > 0 every node is a point mass (q_probs None for a tree, one-hot for a chain)
and the engine's rejection rule keeps the target's law exactly, as for prompt lookup and tree-lookup. Costs no model
forward; the host-side match is timed as draft time. Decoder-only targets (a tree pass is theirs; the local tree
holds the decoder sequence).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.model_free import ModelFreeDraft
from specbench.decoding.drafts.prompt_lookup import one_hot_laws
from specbench.decoding.drafts.tree_lookup import DEFAULT_NODES, is_chain
from specbench.errors import SpecbenchError
from specbench.run_specs import SUFFIX_INSTALL

DEFAULT_MAX_DEPTH = 24  # vLLM's suffix_decoding_max_tree_depth: the longest suffix matched, and of any proposal
DEFAULT_SPEC_FACTOR = 1.0  # vLLM's suffix_decoding_max_spec_factor: tokens proposed per matched token
DEFAULT_MIN_PROB = 0.1  # vLLM's suffix_decoding_min_token_prob: stop a branch below this estimated probability


def arctic_cache(max_depth: int) -> Any:
    """A fresh arctic-inference SuffixDecodingCache: global tree unbounded (a run's outputs, all kept)."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        raise SpecbenchError(
            f"--draft suffix needs arctic-inference's suffix cache, not installed here: {SUFFIX_INSTALL}"
        ) from None
    return SuffixDecodingCache(max_tree_depth=max_depth, max_cached_requests=-1)


def within_depth(ids: list[int], parents: list[int], depth: int) -> tuple[list[int], list[int]]:
    """A tree in topological order (parent before child, −1 = a child of cur) without its nodes deeper than `depth`;
    the kept nodes keep their order, parents renumbered."""
    depths: list[int] = []
    index: dict[int, int] = {}  # old node → new node
    out_ids: list[int] = []
    out_parents: list[int] = []
    for i, (tok, parent) in enumerate(zip(ids, parents)):
        d = 1 if parent < 0 else depths[parent] + 1
        depths.append(d)
        if d <= depth and (parent < 0 or parent in index):
            index[i] = len(out_ids)
            out_ids.append(tok)
            out_parents.append(-1 if parent < 0 else index[parent])
    return out_ids, out_parents


class SuffixDraft(ModelFreeDraft):
    """Proposer: arctic-inference's suffix-tree speculation over the prompt and the run's earlier outputs (see the
    module docstring)."""

    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        *,
        tree: int = 1,
        nodes: int = DEFAULT_NODES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_spec_factor: float = DEFAULT_SPEC_FACTOR,
        max_spec_offset: float = 0.0,
        min_token_prob: float = DEFAULT_MIN_PROB,
        name: str = "suffix",
        cache_factory: Callable[[int], Any] = arctic_cache,
    ):
        if nodes < 1 or max_depth < 1:
            raise ValueError(f"suffix decoding needs nodes >= 1 and max_depth >= 1 (got {nodes}, {max_depth})")
        self.name = name
        self.vocab_size = vocab_size
        self.device = device
        self.tree = bool(tree)
        self.nodes = nodes
        self.max_depth = max_depth
        self.max_spec_factor = float(max_spec_factor)
        self.max_spec_offset = float(max_spec_offset)
        self.min_token_prob = float(min_token_prob)
        self._cache_factory = cache_factory
        self.tree_steps = 0  # proposals sent as trees since begin(): diagnostics and tests
        self.remembered = 0  # outputs committed since the last forget_outputs()
        self._decodes = 0  # transient requests started (their ids)
        self._prompt: list[int] = []
        self._active: tuple[str, int] | None = None  # the decode in progress, as a request of the cache
        self._known: list[int] = []  # the tokens that request holds (its prompt + response)
        self.forget_outputs()

    # --- the run's outputs (base.LearnsOutputs)

    def forget_outputs(self) -> None:
        """A fresh cache: nothing remembered, no request active."""
        self._cache = self._cache_factory(self.max_depth)
        self._active, self._known, self.remembered = None, [], 0

    def remember_output(self, token_ids: list[int]) -> None:
        """One finished output into the global tree, as its own request (no prompt: the global tree holds responses)."""
        self._end_request()
        key = ("output", self.remembered)
        self._cache.start_request(key, [])
        if token_ids:
            self._cache.add_active_response(key, list(token_ids))
        self._cache.stop_request(key)
        self.remembered += 1

    # --- one decode

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        """End the previous decode's request (its response leaves the global tree); the next proposal starts one."""
        self._end_request()
        self._prompt = list(prompt_ids)
        self.tree_steps = 0

    def _end_request(self) -> None:
        if self._active is not None:
            self._cache.stop_request(self._active)
            if self._active in self._cache.cached_requests:
                self._cache.evict_cached_response(self._active)
        self._active, self._known = None, []

    def _sync(self, tokens: list[int]) -> tuple[str, int]:
        """The cache's request for this decode, holding exactly `tokens`: the new tokens appended when `tokens`
        extends what it holds, else (another branch: verify's enumerations) a request started afresh."""
        known = len(self._known)
        if self._active is not None and len(tokens) >= known and tokens[:known] == self._known:
            if len(tokens) > known:
                self._cache.add_active_response(self._active, tokens[known:])
                self._known.extend(tokens[known:])
            return self._active
        self._end_request()
        cut = len(self._prompt) if tokens[: len(self._prompt)] == self._prompt else len(tokens)
        self._active = ("decode", self._decodes)
        self._decodes += 1
        self._cache.start_request(self._active, tokens[:cut])
        if len(tokens) > cut:
            self._cache.add_active_response(self._active, tokens[cut:])
        self._known = list(tokens)
        return self._active

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        key = self._sync(tokens)
        found = self._cache.speculate(
            key,
            tokens[-self.max_depth :],
            max_spec_tokens=max(self.nodes, gamma) if self.tree else gamma,
            max_spec_factor=self.max_spec_factor,
            max_spec_offset=self.max_spec_offset,
            min_token_prob=self.min_token_prob,
            use_tree_spec=self.tree,
        )
        ids, parents = within_depth([int(t) for t in found.token_ids], [int(p) for p in found.parents], gamma)
        nodes = torch.tensor(ids, dtype=torch.long, device=self.device)  # [n]
        if is_chain(parents):  # one path (or nothing): a chain step, the causal pass every chain takes
            q = None if sampling.greedy else one_hot_laws(nodes, self.vocab_size)  # [n, V]
            return Proposal(tokens=nodes, q_probs=q, forward_calls=0)
        self.tree_steps += 1
        return Proposal(tokens=nodes, q_probs=None, forward_calls=0, parents=parents)  # q: point masses

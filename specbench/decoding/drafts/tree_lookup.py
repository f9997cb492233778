"""Multi-candidate prompt lookup: every n-gram match in the context becomes a branch of one token tree.

Prompt lookup (prompt_lookup.py) copies the continuation of one match and stops at its first miss. Where a
phrase recurs with different continuations (a summary reusing several sentences of its source, a list, code),
the other matches are free candidates: this draft collects the continuations of *every* earlier match of the
context's suffix (the longest n-gram first, n = max_ngram down to min_ngram; within one n the most recent match
first), keeps the first `branches` distinct ones, and merges them into a trie, so branches that share a prefix
share its nodes. The target verifies the whole trie in one masked pass (decoding/tree.py, speculative.tree_step).

Bounds: a branch is at most γ tokens long (γ bounds the tree's depth: a step emits at most depth + 1 tokens)
and the trie holds at most max(`nodes`, γ) nodes, filled in the candidates' order (the budget never cuts the
first branch). Default `nodes` = 7, so a verify pass feeds at most 8 tokens: on the 2-core EPYC of
shared/ASSETS.md a bf16 SmolLM2-135M pass over 8 new tokens costs 26.4 ms, as a chain's γ = 4 pass over 5 does
(26.3 ms; 1.18× one token), while 16 tokens cost 31.0 ms (1.39×): past 8 every node makes *every* step
dearer, and later candidates are the least likely to be accepted. Raise it (`tree-lookup:nodes=15`) where a
calibrated pass over 16 tokens is as cheap as one over 8.

Ordering matters for speed, not exactness: verification tries a node's children in index order (the first
candidate first), and at T > 0 each rejection removes that child from the law the next one is judged by.
The proposal is deterministic, a function of the context alone: every node's law is a point mass (q_probs is
None for a tree), so at T > 0 the tree rule is sampling without replacement from p among the candidates
(accept.verify_tree_sampling), exact. When the trie is a single chain (one candidate, or candidates that are
prefixes of one another), the proposal is sent as a chain (parents None, one-hot q at T > 0): the same step
prompt lookup takes, with the causal kernels and --exact-shapes padding of every chain. Costs no model forward;
the host-side scan (one pass over the context per step, as prompt lookup's) is timed as draft time.
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.model_free import ModelFreeDraft
from specbench.decoding.drafts.prompt_lookup import one_hot_laws

DEFAULT_BRANCHES = 4  # distinct candidate continuations merged into one tree
DEFAULT_NODES = 7  # nodes per tree: cur + 7 = an 8-token verify pass (see the module docstring for why)


def match_continuations(tokens: list[int], gamma: int, max_ngram: int, min_ngram: int, limit: int) -> list[list[int]]:
    """Up to `limit` distinct continuations (≤ γ tokens each, none empty) of earlier matches of the context's
    suffix: longest matching n-gram first (n ≤ max_ngram, ≥ min_ngram), then the most recent match.

    One right-to-left scan: every earlier position j holding the newest token ends a match whose length is how
    far tokens[..j] and the suffix agree backwards (capped at max_ngram); its continuation starts at j + 1.
    """
    length = len(tokens)
    if length < 2 or gamma < 1:
        return []
    newest = tokens[-1]
    found: list[tuple[int, int]] = []  # (match length n, end position j), scanned most recent first
    for j in range(length - 2, -1, -1):
        if tokens[j] != newest:
            continue
        n = 1
        while n < max_ngram and j - n >= 0 and tokens[j - n] == tokens[length - 1 - n]:
            n += 1
        if n >= min_ngram:
            found.append((n, j))
    found.sort(key=lambda m: -m[0])  # stable: within one n, the most recent match stays first
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for _, j in found:
        follow = tuple(tokens[j + 1 : j + 1 + gamma])
        if follow not in seen:
            seen.add(follow)
            out.append(list(follow))
            if len(out) == limit:
                break
    return out


def build_trie(branches: list[list[int]], max_nodes: int) -> tuple[list[int], list[int]]:
    """Merge token sequences into a trie of at most `max_nodes` nodes → (node tokens, parents) in topological
    order (TokenTree's: a parent before its children, −1 = a child of cur). Children keep the order their
    branches came in; a branch whose nodes the budget cannot hold is cut where the budget ends."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent, token) → node
    for branch in branches:
        node = -1
        for tok in branch:
            nxt = child.get((node, tok))
            if nxt is None:
                if len(tokens) >= max_nodes:
                    break
                nxt = child[(node, tok)] = len(tokens)
                tokens.append(tok)
                parents.append(node)
            node = nxt
    return tokens, parents


def walk_trie(ids: list[int], parents: list[int] | None, tokens: list[int]) -> list[int]:
    """The nodes that hold `tokens` one after another from cur, in a trie's (ids, parents) (None: a chain), as far as
    they are there (pure): a token not among the last node's children ends the walk."""
    links = parents if parents is not None else list(range(-1, len(ids) - 1))
    out: list[int] = []
    for tok in tokens:
        above = out[-1] if out else -1
        node = next((c for c, (t, p) in enumerate(zip(ids, links)) if p == above and t == tok), None)
        if node is None:
            break
        out.append(node)
    return out


def is_chain(parents: list[int]) -> bool:
    """Whether a trie is one branch (node i's parent is i − 1)."""
    return all(parent == i - 1 for i, parent in enumerate(parents))


class TreeLookupDraft(ModelFreeDraft):
    """Proposer: the trie of the continuations of every matching suffix n-gram (see the module docstring)."""

    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        *,
        max_ngram: int = 3,
        min_ngram: int = 1,
        branches: int = DEFAULT_BRANCHES,
        nodes: int = DEFAULT_NODES,
        name: str = "tree-lookup",
    ):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"tree lookup needs 1 <= min_ngram <= max_ngram (got {min_ngram}, {max_ngram})")
        if branches < 1 or nodes < 1:
            raise ValueError(f"tree lookup needs branches >= 1 and nodes >= 1 (got {branches}, {nodes})")
        self.name = name
        self.vocab_size = vocab_size
        self.device = device
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.branches = branches
        self.nodes = nodes
        self.tree_steps = 0  # proposals sent as trees (more than one branch) since begin(): diagnostics and tests

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        """Nothing is indexed ahead: each proposal scans the decoder sequence it is handed."""
        self.tree_steps = 0

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        ids, parents = self.trie(tokens, gamma)
        proposal = trie_proposal(ids, parents, sampling, self.device, self.vocab_size)
        self.tree_steps += proposal.parents is not None
        return proposal

    def trie(self, tokens: list[int], gamma: int) -> tuple[list[int], list[int]]:
        """The proposal's trie (node tokens, parents): the matches' continuations within max(nodes, γ) nodes; the
        place a subclass adds nodes of its own (recycle.py)."""
        found = match_continuations(tokens, gamma, self.max_ngram, self.min_ngram, self.branches)
        return build_trie(found, max(self.nodes, gamma))


def trie_proposal(
    ids: list[int], parents: list[int], sampling: SamplingConfig, device: torch.device, vocab_size: int
) -> Proposal:
    """A built trie as a Proposal: a chain step (prompt lookup's own, causal, one-hot laws at T > 0) when it is one
    branch or none, else a tree whose every node's law is a point mass (q_probs None)."""
    nodes = torch.tensor(ids, dtype=torch.long, device=device)  # [n]
    if is_chain(parents):
        q = None if sampling.greedy else one_hot_laws(nodes, vocab_size)  # [n, V]
        return Proposal(tokens=nodes, q_probs=q, forward_calls=0)
    return Proposal(tokens=nodes, q_probs=None, forward_calls=0, parents=parents)

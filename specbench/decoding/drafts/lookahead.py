"""Lookahead decoding (Fu et al., *Break the Sequential Dependency of LLM Inference Using Lookahead Decoding*, ICML
2024) as a draft plug-in: an n-gram pool, training-free, whose candidates for the newest token become the branches of
one token tree that the target verifies in one masked pass (decoding/tree.py, speculative.tree_step).

What of the paper's algorithm is here:

- **The n-gram pool** (in): a map from a token to (N−1)-token continuations (a guess's may be shorter, below), most
  recent first, at most G per key, an n-gram seen again moved to the front (as TensorRT-LLM's lookahead pool keeps
  its guess sets). It is fed from every N-gram of the prompt (TensorRT-LLM seeds its pool from the prompt too) and of
  the output so far, and from the Jacobi-style guesses below.
- **The verification branch** (in): the pool's candidates whose key is the newest token, at most G, each cut to γ
  tokens (γ bounds a tree's depth), merged into a trie (tree_lookup.build_trie, at most max(7, γ) nodes: an 8-token
  pass, for the reason tree_lookup.py gives); one branch is sent as a chain. The paper verifies the candidates as
  separate rows; a trie verifies the same candidates with their shared prefixes computed once.
- **The lookahead branch** (out): the paper runs W Jacobi positions × (N−1) levels *inside the verification pass*,
  under a mask of its own, and collects one n-gram per position per step. Here every row of a target pass is a
  candidate: TokenTree has no kind of row that is computed but neither verified nor kept, and the verifier
  (accept.py), the cache compaction (keep_path), --bit-exact's node-by-node passes and the step counts (drafted,
  pass_lengths) all read every row as a node. Adding such rows would change those contracts for every tree draft,
  not plug one in. It would also price every step: on the 2-core CPU of shared/ASSETS.md a bf16 pass over 16 tokens
  costs 1.39× one over a token where 8 cost 1.18×, and the paper's window (W = 15, N = 5 on a 7B model) adds 60.
- **Jacobi-style guesses from the verify pass** (in, in place of the lookahead branch): after each verified proposal
  the loop hands the draft the target's argmax at every position of that pass (base.ObservesPasses): after cur and
  after every node, rejected ones included. For each of the first W positions (cur, then the nodes in order) the
  pool gets the N-gram ending in the target's choice there (the context, the path to the position, the choice),
  started no earlier than the path's deepest *refuted* node (one whose token is not the target's choice at its
  parent): a refuted guess may be a key, never inside a continuation, where the target has just said otherwise.
  Keyed by a refuted node, the entry is the paper's kind of n-gram: the model's output conditioned on a guessed,
  unverified token. It differs in that it holds one model token where a Jacobi trajectory holds N−1 (one pass per
  step, not N−1 levels iterated across steps), and the guessed tokens are the draft's own candidates rather than a
  window started from random tokens, so a step that proposes nothing guesses only after cur. Only specbench's
  batch-1 loop (speculative.py's steps, which forced.py's teacher-forced replay reuses) hands passes over: pilot
  replays and verify's step law (its own steps) see a pool of the context's n-grams only.
  `window=0` turns the guesses off.
- **A Jacobi trajectory** (`jacobi=L`, off by default): the paper's window as one verified branch. The draft keeps a
  guess for the L tokens after the newest one and sends it (cut to γ) as one more branch of the trie, beside the
  pool's candidates, in at most L more nodes of its own (`add_branch`: the pool's trie keeps its budget). After the
  pass each position takes the target's choice after cur and the guess before it (one Jacobi iteration:
  `jacobi_step`), the positions the step emitted drop out, and the rest is topped up with copies of the newest
  token. Its positions enter the pool like any node's, whatever the window, so its n-grams are the paper's (a
  guessed token, then the model's output after it). It differs from the paper in that it is verified (a row the
  verifier reads, so nothing new in the contracts above, and it may be accepted) and is one trajectory of L levels,
  one iteration per step, not W columns × (N − 1) levels.

Exactness: a proposal is a function of the context and of earlier passes' argmaxes (no draw), so every node is a
point mass (q_probs None for a tree, one-hot for a chain): the tree rule (accept.verify_tree_sampling) is exact at
T = 0 and T > 0, as for tree-lookup. Costs no model forward; the pool's updates (the host copy of the observed
argmaxes included) and the trie are timed as draft time, the argmax itself inside the verify pass. Decoder-only
targets (a tree pass is theirs).
"""

from __future__ import annotations

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.drafts.model_free import ModelFreeDraft
from specbench.decoding.drafts.tree_lookup import DEFAULT_NODES, build_trie, trie_proposal, walk_trie
from specbench.decoding.tree import TokenTree

DEFAULT_WINDOW = DEFAULT_NODES + 1  # positions of a pass whose guesses enter the pool: a default pass's all 8
DEFAULT_NGRAM = 4  # N: a key and 3 continuation tokens
DEFAULT_BRANCHES = 3  # G: candidates kept per key and proposed per step (3 × 3 tokens, cut to the 7-node budget)
DEFAULT_JACOBI = 0  # L: a Jacobi trajectory's length (0: none; no net gain measured here, docs/benchmarks.md)

Ngram = tuple[int, tuple[int, ...]]  # (key, continuation)


def context_ngrams(tokens: list[int], n: int, start: int = 0) -> list[Ngram]:
    """Every N-gram of `tokens` whose last token is at index ≥ `start`, as (key, continuation), oldest first."""
    ends = range(max(start, n - 1), len(tokens))
    return [(tokens[end - n + 1], tuple(tokens[end - n + 2 : end + 1])) for end in ends]


def add_branch(ids: list[int], parents: list[int], branch: list[int], allowance: int) -> tuple[list[int], list[int]]:
    """A trie with `branch` added from cur (pure): its nodes already there followed (walk_trie), at most `allowance`
    new ones appended after the others (topological order kept), the branch cut where the allowance ends."""
    shared = walk_trie(ids, parents, branch)
    ids, parents, node = list(ids), list(parents), shared[-1] if shared else -1
    for tok in branch[len(shared) :][:allowance]:
        ids.append(tok)
        parents.append(node)
        node = len(ids) - 1
    return ids, parents


def jacobi_step(guess: list[int], nodes: list[int], choices: list[int], emitted: int, length: int) -> list[int]:
    """One Jacobi iteration of a trajectory verified as a branch of the pass (pure): position k after cur gets the
    target's choice after cur and the guess's first k tokens (choices[0] for k = 0, choices[1 + nodes[k − 1]] after
    that, `nodes` holding the guess's tokens); the positions the step emitted are dropped, so the new guess starts
    after the new cur; at most `length` tokens. The first position's choice is always right at T = 0, the next ones
    as soon as the guess before them was (Jacobi decoding's fixed point is the greedy continuation)."""
    updated = [choices[0]] + [choices[1 + node] for node in nodes[: len(guess)]]
    return updated[emitted:][:length]


def pass_ngrams(
    tail: list[int],
    ids: list[int],
    parents: list[int] | None,
    choices: list[int],
    n: int,
    window: int,
    also: tuple[int, ...] = (),
) -> list[Ngram]:
    """The Jacobi-style n-grams of one verified pass → [(key, continuation)], cur's position first.

    `tail`: the context up to cur (its last N−1 tokens suffice); `ids`/`parents`: the proposal's nodes (parents None:
    a chain); `choices` [len(ids)+1]: the target's argmax after cur and after each node. A node is *refuted* when its
    token is not the target's choice at its parent. Position k (0 = cur, i + 1 = node i) gives the last N tokens of
    tail + the path's tokens + choices[k], started no earlier than the path's deepest refuted node: a refuted token
    may be a key (the guess whose continuation the target just computed), never inside a continuation (where the
    target has just said otherwise). Only the first `window` positions and those in `also` (a Jacobi trajectory's);
    fewer than 2 tokens give none."""
    tree = TokenTree(tuple(parents)) if parents is not None else TokenTree.chain(len(ids))
    refuted = [ids[i] != choices[parent + 1] for i, parent in enumerate(tree.parents)]
    out: list[Ngram] = []
    last = min(len(ids) + 1, len(choices))
    for k in sorted({*range(min(window, last)), *(k for k in also if k < last)}):
        path = tree.path(k - 1)
        cut = max((j for j, node in enumerate(path) if refuted[node]), default=None)
        seq = (tail[-(n - 1) :] if cut is None else []) + [ids[i] for i in path[cut or 0 :]] + [choices[k]]
        gram = seq[-n:]
        if len(gram) >= 2:
            out.append((gram[0], tuple(gram[1:])))
    return out


class NgramPool:
    """token → at most `size` continuations, most recent first (an n-gram added again moves to the front)."""

    def __init__(self, size: int):
        self.size = size
        self.table: dict[int, list[tuple[int, ...]]] = {}

    def add(self, grams: list[Ngram]) -> None:
        """Add n-grams in order: the last one added is its key's first candidate."""
        for key, follow in grams:
            row = self.table.setdefault(key, [])
            if follow in row:
                row.remove(follow)
            row.insert(0, follow)
            del row[self.size :]

    def candidates(self, key: int, gamma: int) -> list[list[int]]:
        """The key's continuations, most recent first, each cut to γ tokens, distinct after the cut."""
        out: list[list[int]] = []
        for follow in self.table.get(key, ()):
            cut = list(follow[:gamma])
            if cut not in out:
                out.append(cut)
        return out


def most_nodes(
    gamma: int, jacobi: int = DEFAULT_JACOBI, ngram: int = DEFAULT_NGRAM, branches: int = DEFAULT_BRANCHES
) -> int:
    """The most nodes one proposal holds (pure): the pool's trie, within its budget max(DEFAULT_NODES, γ) and within
    the G candidates of at most min(N − 1, γ) tokens it merges, then the Jacobi trajectory's own, at most min(L, γ)
    (it is cut to γ); what a run sizes its caches by (measure/run/calibrating.widest_pass)."""
    return min(max(DEFAULT_NODES, gamma), branches * min(ngram - 1, gamma)) + min(jacobi, gamma)


class LookaheadDraft(ModelFreeDraft):
    """Proposer: the n-gram pool's candidates for the newest token, as one trie (see the module docstring)."""

    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        *,
        window: int = DEFAULT_WINDOW,
        ngram: int = DEFAULT_NGRAM,
        branches: int = DEFAULT_BRANCHES,
        jacobi: int = DEFAULT_JACOBI,
        name: str = "lookahead",
    ):
        if ngram < 2 or branches < 1 or window < 0 or jacobi < 0:
            got = f"ngram {ngram}, branches {branches}, window {window}, jacobi {jacobi}"
            raise ValueError(f"lookahead needs ngram >= 2, branches >= 1, window >= 0, jacobi >= 0 (got {got})")
        self.name = name
        self.vocab_size = vocab_size
        self.device = device
        self.window = window
        self.ngram = ngram
        self.branches = branches
        self.jacobi = jacobi
        self.begin([])

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        """A fresh pool (rebound, so a batch row's shallow copy shares nothing); the first proposal reads the
        decoder sequence it is handed, prompt included."""
        self.pool = NgramPool(self.branches)
        self._known: list[int] = []  # the context whose n-grams the pool holds
        self._last: tuple[list[int], list[int], list[int] | None] | None = None  # (tail, ids, parents) last proposed
        self._choices: torch.Tensor | None = None  # the target's argmaxes over the last proposal's pass
        self.tree_steps = 0  # proposals sent as trees since begin(): diagnostics and tests
        self.guesses = 0  # n-grams the observed passes added since begin()
        self.trajectory: list[int] = []  # the Jacobi guess for the tokens after the newest one (jacobi > 0)
        self._sent: list[int] = []  # the trajectory as the last proposal sent it (cut to γ)

    def observe_pass(self, choices: torch.Tensor) -> None:
        """base.ObservesPasses: the target's argmax at every position of the pass over the last proposal."""
        self._choices = choices

    def _absorb(self, tokens: list[int]) -> None:
        """Bring the pool up to `tokens`: the last pass's guesses, then the new context n-grams (so a verified n-gram
        ranks above a guess). A context that does not extend the one absorbed (another branch: verify's
        enumerations) starts the pool afresh, the pending guesses dropped with it."""
        known = len(self._known)
        if len(tokens) < known or tokens[:known] != self._known:
            self.pool, self._known, self._choices, known = NgramPool(self.branches), [], None, 0
            self.trajectory = []
        if self._choices is not None and self._last is not None:
            tail, ids, parents = self._last
            choices = self._choices.tolist()
            if len(choices) == len(ids) + 1:
                nodes = walk_trie(ids, parents, self._sent) if self._sent else []  # the trajectory's
                also = tuple(1 + node for node in nodes)  # its positions feed the pool whatever the window
                grams = pass_ngrams(tail, ids, parents, choices, self.ngram, self.window, also)
                self.pool.add(grams[::-1])  # cur's position (the nearest to verified text) ends up first
                self.guesses += len(grams)
                if self.jacobi:  # the trajectory's next iteration, past what the step emitted
                    self.trajectory = jacobi_step(self._sent, nodes, choices, len(tokens) - known, self.jacobi)
        self._choices = None
        self.pool.add(context_ngrams(tokens, self.ngram, start=known))
        self._known.extend(tokens[known:])

    def propose(
        self,
        tokens: list[int],
        gamma: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        self._absorb(tokens)
        found = self.pool.candidates(tokens[-1], gamma) if tokens and gamma >= 1 else []
        self._sent = self.jacobi_guess(tokens)[:gamma] if gamma >= 1 else []
        ids, parents = add_branch(*build_trie(found, max(DEFAULT_NODES, gamma)), self._sent, len(self._sent))
        proposal = trie_proposal(ids, parents, sampling, self.device, self.vocab_size)
        self._last = (tokens[-(self.ngram - 1) :], ids, proposal.parents)
        self.tree_steps += proposal.parents is not None
        return proposal

    def jacobi_guess(self, tokens: list[int]) -> list[int]:
        """The trajectory to send (jacobi > 0): the last iteration's, topped up to its length with copies of the
        newest token (Jacobi decoding starts from any guess; these are refined by the passes that follow)."""
        if not self.jacobi or not tokens:
            return []
        return (self.trajectory + [tokens[-1]] * self.jacobi)[: self.jacobi]

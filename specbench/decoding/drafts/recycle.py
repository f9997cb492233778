"""Token recycling as branches of tree-lookup's trie: `--draft tree-lookup:recycle=K`.

Token Recycling (Luo et al., *Turning Trash into Treasure: Accelerating Inference of Large Language Models with Token
Recycling*, 2024; on Spec-Bench's leaderboard) keeps, for every token, the target's top-K candidates for the token
after it, read from the verify passes it has already paid for (every row of a pass is the target's law of the token
after that row's input), and drafts a tree by following that table from the newest token. Here the table fills what
the prompt-lookup trie leaves of the node budget:

- **The table** (`successors`): token → the target's K likeliest next ids (logits' top-K, best first) from the
  most recent row whose input was that token. After each verified proposal the batch-1 loop hands the draft the
  top-K of every row of the pass (base.ObservesPasses with `observe_top` = K), and after the prefill its last row
  (`observes_prefill`: the successors of the prompt's last token, for a chat template the same token every example,
  so the first step of an example can draw on the examples before it): row 0 is cur's, row i + 1 node i's,
  rejected nodes included (their rows are the target's law after a context that holds the refuted token: still its
  guess for what follows that token). As the paper's matrix, the table outlives an example, the way suffix decoding
  keeps earlier outputs (base.LearnsOutputs): each decode starts from the table *committed* by the examples finished
  before it, and the runner commits the table once an example's timed decodes are done (the table of the last decode
  through this draft), so warm-ups, repeats and pilots teach it nothing and A B B A repeats start alike; every run
  starts empty. The committed table is written beside the records after every example (base.KeepsLearnt: the run
  folder's learnt.json), so a resumed run starts from the table its finished examples left (stored outputs carry no
  logits to rebuild it from).
  A context that does not extend the one absorbed (another branch: verify's enumerations) restarts from the
  committed table. The prefill computes the last row only, so the prompt's other tokens teach it nothing.
- **The tree**: first tree-lookup's trie (every matching n-gram's continuation, tree_lookup.py), then recycled
  branches until the budget max(nodes, γ) is spent (`grow`): a path of ranks (r1, r2, …) is the token
  t1 = successors[newest][r1], t2 = successors[t1][r2], …, at most γ deep, cut where the table has no entry; paths
  are taken best first under a fixed prior, the product of 2^−(r + 1) over the path's ranks, standing in for the
  paper's static tree (tuned on a GPU for 80 nodes, where a CPU pass pays for every node past ~8).
- **Exactness**: the proposal is a function of the context and of earlier passes' logits (no draw), so every node is
  a point mass, as for tree-lookup and lookahead: the tree rule (accept.verify_tree_sampling) is exact at T = 0 and
  T > 0. Only specbench's batch-1 loop hands passes over, so the pilot of `--gamma auto`/`adaptive` and `--dtype
  auto`, which rebuilds tries from the context alone, cannot price the recycled branches: config refuses them.
  `verify`'s step laws run their own steps and hand no passes (nor commit), so `verify` first teaches the draft
  (evidence/verification.teach: greedy decodes through the loop of task examples the checks do not use, each
  committed) and its laws test trees grown from that fixed table; tests/test_recycle.py checks the exact law of trees
  grown from a seeded table. Costs no model forward; the host copy of the top-K ids and the table's updates are timed
  as draft time, the top-K inside the verify pass.
"""

from __future__ import annotations

import heapq

import torch

from specbench.decoding.drafts.lookahead import add_branch
from specbench.decoding.drafts.tree_lookup import TreeLookupDraft


def grow(
    ids: list[int], parents: list[int], successors: dict[int, list[int]], newest: int, depth: int, budget: int
) -> tuple[list[int], list[int]]:
    """A trie with recycled branches added (pure): best first under the prior Π 2^−(r + 1) over a path's ranks (ties:
    the shallower path, then the lower ranks), each path the table's rank-r successor of the path above it from
    `newest`, at most `depth` deep, until the trie holds `budget` nodes; a node already in the trie is followed
    (tree_lookup's matches come first), a token without an entry ends its path."""
    heap: list[tuple[float, int, tuple[int, ...], list[int]]] = [
        (-(2.0 ** -(r + 1)), 1, (r,), [tok]) for r, tok in enumerate(successors.get(newest, []))
    ]
    heapq.heapify(heap)
    while heap and len(ids) < budget:
        score, length, ranks, branch = heapq.heappop(heap)
        ids, parents = add_branch(ids, parents, branch, budget - len(ids))
        if length < depth:
            for r, tok in enumerate(successors.get(branch[-1], [])):
                heapq.heappush(heap, (score * 2.0 ** -(r + 1), length + 1, (*ranks, r), [*branch, tok]))
    return ids, parents


def known_id(value: object, vocab_size: int) -> bool:
    """Whether a kept table's key (a JSON string) or entry is a token id of this vocabulary (pure)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return type(value) is int and 0 <= value < vocab_size


def pass_inputs(tokens: list[int], ids: list[int]) -> list[int]:
    """The input token of every row of a verify pass over a proposal from context `tokens` (pure): cur (the newest
    token), then the nodes in order."""
    return [tokens[-1], *ids]


class RecyclingTreeLookupDraft(TreeLookupDraft):
    """tree-lookup's trie with the target's recycled top-K successors in the rest of the budget (module docstring)."""

    def __init__(self, vocab_size: int, device: torch.device, *, recycle: int, **options):
        super().__init__(vocab_size, device, **options)
        if recycle < 1:
            raise ValueError(f"recycle needs K >= 1 (got {recycle})")
        self.observe_top = min(recycle, vocab_size)  # base.ObservesPasses: the loop hands each row's top-K ids
        self.observes_prefill = True  # ... and the prefill's last row, filed under the prompt's last token
        self.committed: dict[int, list[int]] = {}  # what finished examples taught (LearnsOutputs)
        self.successors: dict[int, list[int]] = {}  # the working table: committed, then this decode's passes
        self._known: list[int] = []  # the context the table was absorbed along ([]: nothing since begin or a commit)
        self._last: list[int] | None = None  # the last proposal's row inputs (cur, nodes)
        self._top: torch.Tensor | None = None  # [n+1, K] the target's top-K over that proposal's pass
        self.recycled_nodes = 0  # nodes the table added since begin(): diagnostics and tests

    def begin(self, prompt_ids: list[int], max_new_tokens: int = 0) -> None:
        super().begin(prompt_ids, max_new_tokens)
        self.successors, self._known, self._top = dict(self.committed), [], None
        self._last = prompt_ids[-1:] or None  # the prefill's last row, if the loop hands it, follows the prompt's end
        self.recycled_nodes = 0

    def remember_output(self, token_ids: list[int]) -> None:
        """base.LearnsOutputs: an example is done; its last decode's table is what later examples start from (a
        resumed example, not decoded since, commits nothing)."""
        if self._known:
            self.committed, self._known = dict(self.successors), []

    def forget_outputs(self) -> None:
        """base.LearnsOutputs: a run starts (and ends) with an empty table."""
        self.committed, self.successors, self._known = {}, {}, []

    def learnt(self) -> dict:
        """base.KeepsLearnt: the committed table ({token: its K successors}; JSON keys are strings)."""
        return {"recycle": self.observe_top, "table": {str(t): ids for t, ids in self.committed.items()}}

    def restore_learnt(self, state: object) -> None:
        """base.KeepsLearnt: the committed table a run kept, for a resumed run (K must be this draft's)."""
        table = state.get("table") if isinstance(state, dict) and state.get("recycle") == self.observe_top else None
        if not isinstance(table, dict) or not all(
            known_id(t, self.vocab_size) and isinstance(ids, list) and all(known_id(i, self.vocab_size) for i in ids)
            for t, ids in table.items()
        ):
            raise ValueError(f"not a recycling table for K = {self.observe_top}")
        self.committed = {int(t): list(ids) for t, ids in table.items()}
        self.successors, self._known = dict(self.committed), []

    def observe_pass(self, choices: torch.Tensor) -> None:
        """base.ObservesPasses: [n+1, K] the target's top-K ids after cur and after each node of the last proposal."""
        self._top = choices

    def _absorb(self, tokens: list[int]) -> None:
        """Bring the table up to `tokens`: file the last pass's rows under their input tokens (a pass whose rows do
        not pair with the last proposal's inputs is dropped, never filed one row off), or restart from the committed
        table where `tokens` does not extend the context absorbed (another branch)."""
        known = len(self._known)
        if len(tokens) < known or tokens[:known] != self._known:  # another branch: start afresh
            self.successors, self._top, self._last, self._known, known = dict(self.committed), None, None, [], 0
        if self._top is not None and self._last is not None and self._top.shape[0] == len(self._last):
            rows = self._top.reshape(len(self._last), -1).tolist()  # [n+1] (K = 1: the argmax) or [n+1, K]
            for token, row in zip(self._last, rows):
                self.successors[token] = row
        self._top = None
        self._known.extend(tokens[known:])

    def trie(self, tokens: list[int], gamma: int) -> tuple[list[int], list[int]]:
        """tree-lookup's trie, then recycled branches in the rest of its budget (`grow`); the pass's row inputs kept
        for the rows the loop hands back."""
        self._absorb(tokens)
        ids, parents = super().trie(tokens, gamma)
        if tokens and gamma >= 1:
            matched = len(ids)
            ids, parents = grow(ids, parents, self.successors, tokens[-1], gamma, max(self.nodes, gamma))
            self.recycled_nodes += len(ids) - matched
        self._last = pass_inputs(tokens, ids) if tokens else None
        return ids, parents

"""Token trees: the one contract for drafts that offer several continuations in one step.

Medusa, EAGLE-2, SpecInfer, lookahead decoding and multi-candidate prompt lookup propose a *tree*:
siblings are alternatives for the same position, and one target pass verifies every branch. A chain
gets what that pass needs from causality; a tree must say it explicitly, and this module is the
only place that says it:

- the shape: node i's parent, in topological order (parent before child; −1 = a child of `cur`,
  the newest token, which the target has not cached yet);
- the attention mask of a target pass over [cur, node_0..node_{n−1}] after `cached` tokens: every
  row sees the cached prefix, `cur` and its own ancestors, never a sibling or a cousin;
- the position ids: cached + depth (cur has depth 0), not the slot a node is written to;
- the cache slots to keep once verification has chosen a path (cached_model.py compacts them).

A chain is a one-branch tree (`TokenTree.chain(n)`), but a chain proposal (`Proposal.parents is None`)
never comes here: its causal pass keeps the kernels, and so the tokens, of every earlier run.
Verification of a tree lives beside the chain's rule, in accept.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class TokenTree:
    """The shape of a proposal's nodes; their tokens are `Proposal.tokens`, in the same order."""

    parents: tuple[int, ...]  # [n] node i's parent: an earlier node's index, or −1 for a child of cur

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", tuple(self.parents))  # a list is accepted, a tuple kept (hashable)
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i} has parent {parent}: a parent is an earlier node or -1 (cur)")

    @classmethod
    def chain(cls, n: int) -> TokenTree:
        """n tokens one after another (node i's parent is i − 1): a chain is a one-branch tree."""
        return cls(tuple(range(-1, n - 1)))

    @property
    def size(self) -> int:
        """Number of nodes n (cur not counted)."""
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """[n] distance of each node from cur: 1 for cur's children."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent < 0 else out[parent] + 1)
        return tuple(out)

    @property
    def depth(self) -> int:
        """The longest root-to-leaf path: the most drafted tokens one step can accept."""
        return max(self.depths, default=0)

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        """[n+1] children of cur (entry 0) and of each node (entry i + 1), in index order."""
        out: list[list[int]] = [[] for _ in range(self.size + 1)]
        for i, parent in enumerate(self.parents):
            out[parent + 1].append(i)
        return tuple(tuple(c) for c in out)

    def children(self, node: int) -> tuple[int, ...]:
        """Children of `node` (−1: cur) in index order, the order verification tries them in."""
        return self._children[node + 1]

    def path(self, node: int) -> list[int]:
        """Nodes from cur's child down to `node` (inclusive); [] for node −1 (cur itself)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def is_path(self, nodes: list[int]) -> bool:
        """Whether `nodes` is a root-to-node path of this tree (each node a child of the one before it)."""
        return all(self.parents[node] == (nodes[j - 1] if j else -1) for j, node in enumerate(nodes))

    def ancestry(self) -> torch.Tensor:
        """[n+1, n+1] bool over [cur, node_0..]: entry (a, b) is True when b is a or an ancestor of a."""
        seen = torch.eye(self.size + 1, dtype=torch.bool)
        seen[:, 0] = True  # every row sees cur
        for i, parent in enumerate(self.parents):
            if parent >= 0:
                seen[i + 1] |= seen[parent + 1]  # topological order: the parent's row is complete
        return seen

    def attention_mask(self, cached: int, kv_length: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """[1, 1, n+1, kv_length] bool (True = attend) for a pass over [cur, nodes] written to slots cached..cached+n.

        Columns below `cached` (the prefix) are seen by every row; columns past cached+n (a static cache's
        unused slots) by none. kv_length is what the cache attends over (cached + n + 1 for a growing cache).
        """
        mask = torch.zeros(self.size + 1, kv_length, dtype=torch.bool)
        mask[:, :cached] = True
        mask[:, cached : cached + self.size + 1] = self.ancestry()
        return mask.view(1, 1, self.size + 1, kv_length).to(device)

    def position_ids(self, cached: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """[1, n+1] int64 rotary positions of [cur, nodes]: cached + depth (siblings share a position)."""
        depth = torch.tensor((0, *self.depths), dtype=torch.long)
        return (cached + depth).view(1, -1).to(device)


def path_tree(size: int, path: list[int]) -> TokenTree:
    """A tree of `size` nodes in which `path` (increasing node indices) is a chain from cur and every other node a
    child of cur (pure). A tree pass's rows at `path` depend only on the path's tokens, their slots and the pass's
    size (every other slot is masked out of them), so this shape replays a recorded tree pass whose other nodes were
    not recorded (measure/stats/numerics.replay)."""
    parents = [-1] * size
    for above, node in zip(path, path[1:]):
        parents[node] = above
    return TokenTree(tuple(parents))


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask [..., q, kv] (True = attend) → the additive form [..., q, kv] in `dtype` (0 or dtype's min).

    transformers hands a 4-D mask to the attention kernel as it is: sdpa takes either form, but the eager
    kernel adds the mask to the scores, so the additive form is the one every kernel reads alike.
    """
    blocked = torch.finfo(dtype).min
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, blocked)


def kept_slots(cached: int, path: list[int], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) cache slots [m] that move the accepted path's entries next to cur's.

    After a pass over [cur, nodes] written from slot `cached` (cur's), node i sits at slot cached + 1 + i; the
    path's j-th node moves to cached + 1 + j, so the cache reads [.., cur, path] in order, as a chain's would.
    """
    src = torch.tensor(path, dtype=torch.long) + cached + 1
    dst = torch.arange(len(path), dtype=torch.long) + cached + 1
    return src.to(device), dst.to(device)

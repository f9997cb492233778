"""The bit-exact mode's target passes: a verify pass computed as consecutive one-token passes over the KV cache.

In low precision a target's logit for a position depends on how many tokens share the pass that computes it
(a pass over γ+1 tokens runs other matmul tiles and reduction orders than a one-token decoding step), so greedy
speculative output can differ from greedy plain output at near-ties. Padding every pass to one shape
(--exact-shapes) helps only where a row's result does not depend on its neighbours; CPUs with AMX tiles break
that. Under --bit-exact the speculative engine never runs a multi-token target pass after the prefill: each
verified token goes through the decoding step the baseline runs (one token, the same cache length, the same
kernels), so every logit the verifier reads is the baseline's bit for bit at the same prefix, on any CPU or GPU
whose one-token step is deterministic. The prefill is one pass over the prompt in both engines, so it matches too.

Nothing here is fast: a verify pass over g+1 tokens costs g+1 decoding steps, so the mode checks exactness and is
never a speed measurement. The functions take anything with `forward(ids, all_logits)`, `truncate(length)` and
`length` (a CachedModel, llama.cpp's LlamaCppModel).
"""

from __future__ import annotations

import torch

from specbench.decoding.tree import TokenTree


def stepwise_forward(lm, ids: torch.Tensor) -> torch.Tensor:
    """Feed ids [k] after the cached tokens one at a time → logits [k, V], row i from a one-token pass over the
    prefix and ids[:i] (all k tokens stay cached, as after one pass)."""
    rows = [lm.forward(ids[i : i + 1], all_logits=True)[0] for i in range(ids.shape[0])]  # k × [V]
    return torch.stack(rows)


def stepwise_tree(lm, ids: torch.Tensor, tree: TokenTree) -> torch.Tensor:
    """Feed ids [n+1] = [cur, node_0..] as `tree` after the cached tokens → logits [n+1, V], row 0 at cur and row
    i + 1 at node i, each from a one-token pass whose cache holds exactly the prefix, cur and the node's ancestors
    (what a chain through them would have cached). Nodes go in depth-first order, so each is fed once: the cache
    is cropped back to the node's parent, never rebuilt. Afterwards the cache holds [.., cur, the last branch]
    (`stepwise_keep_path` rebuilds the accepted one)."""
    base = lm.length
    rows: list[torch.Tensor | None] = [None] * (tree.size + 1)
    rows[0] = lm.forward(ids[0:1], all_logits=True)[0]  # cur: [V]
    for node in depth_first(tree):
        lm.truncate(base + tree.depths[node])  # [.., cur, ancestors]: the parent was fed last on this branch
        rows[node + 1] = lm.forward(ids[node + 1 : node + 2], all_logits=True)[0]
    return torch.stack(rows)  # type: ignore[arg-type]  # every slot filled: each node is visited once


def depth_first(tree: TokenTree) -> list[int]:
    """The nodes in depth-first preorder (children in index order): each node comes right after its parent's
    subtree so far, so the cache holding [cur, the previous node's branch] holds its ancestors."""
    order: list[int] = []
    stack = list(reversed(tree.children(-1)))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(tree.children(node)))
    return order


def stepwise_keep_path(lm, cached: int, ids: torch.Tensor, path: list[int]) -> None:
    """After `stepwise_tree` from slot `cached` (cur's), make the cache [.., cur, path's nodes]: crop to cur and
    feed the path's tokens one at a time again (a one-token pass over the same cache recomputes the same keys
    and values, bit for bit)."""
    lm.truncate(cached + 1)
    for node in path:
        lm.forward(ids[node + 1 : node + 2], all_logits=True)

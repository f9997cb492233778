"""Verification of a proposal: Algorithm 1's accept/reject rule, as pure functions.

Greedy (T = 0): accept while the drafted token is the target's argmax; the next token is the
target's argmax at the first mismatch (or the bonus position). Sampling: accept x_i while
u_i < p_i(x_i) / q_i(x_i) (written u·q < p to avoid a division; strict so that p(x) = 0 is
never accepted), then sample the correction from norm(max(0, p − q)) at the first rejection
or the bonus token from p_{γ'+1}. All ratios are float32.

A token tree (decoding/tree.py) is verified by the same rule applied to several drafts per position:
greedy follows the child that is the target's argmax; sampling tries a node's children in turn against
a law that each rejection replaces by its residual (multi-draft rejection sampling, `walk_tree`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specbench.decoding.base import Verdict
from specbench.decoding.sampling import sample
from specbench.decoding.tree import TokenTree

Decide = Callable[[int, torch.Tensor, torch.Tensor], bool]  # (token x, law p [V], its q [V]) → accept x?


def verify_greedy(draft_tokens: list[int], target_best: list[int]) -> Verdict:
    """draft_tokens: γ' ids; target_best: the target's γ'+1 argmax ids at the same positions → Verdict."""
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == target_best[n]:
        n += 1
    verified = min(n + 1, len(draft_tokens))
    expected = [1.0 if draft_tokens[i] == target_best[i] else 0.0 for i in range(verified)]
    return Verdict(n_accepted=n, next_token=target_best[n], expected_accept=expected)


def accepted_count(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> int:
    """Number of leading draft tokens accepted: first i with u_i·q_i(x_i) >= p_i(x_i) stops it.

    draft_tokens [γ'], q [γ', V], p [γ'+1, V] (or [γ', V]), u [γ'] uniforms in [0, 1).
    """
    idx = torch.arange(draft_tokens.shape[0], device=draft_tokens.device)
    p_x = p[idx, draft_tokens]  # [γ']
    q_x = q[idx, draft_tokens]  # [γ']
    ok = (u * q_x < p_x).int()
    return int(ok.cumprod(0).sum())


def residual(p_row: torch.Tensor, q_row: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)) over [V]; falls back to p when p == q leaves no mass (a rejection then has probability 0)."""
    r = (p_row - q_row).clamp_min(0.0)
    total = r.sum()
    if float(total) <= 0.0:
        return p_row
    return r / total


def expected_acceptance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """β_i = Σ_x min(p_i(x), q_i(x)) for each row: [n, V] × [n, V] → [n]."""
    return torch.minimum(p, q).sum(-1)


def verify_sampling(
    draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator | None
) -> Verdict:
    """Rejection sampling: draft_tokens [γ'], q [γ', V], p [γ'+1, V] processed float32 laws → Verdict."""
    gamma = draft_tokens.shape[0]
    u = torch.rand(gamma, generator=generator, device=p.device)
    n = accepted_count(draft_tokens, q, p[:gamma], u)
    law = residual(p[n], q[n]) if n < gamma else p[gamma]
    next_token = int(sample(law, generator))
    verified = min(n + 1, gamma)
    expected = expected_acceptance(p[:verified], q[:verified]).tolist()
    return Verdict(n_accepted=n, next_token=next_token, expected_accept=expected)


# ---------------------------------------------------------------------------------------------
# Token trees


def verify_tree_greedy(tree: TokenTree, tokens: list[int], target_best: list[int]) -> Verdict:
    """tokens: the n node ids; target_best: the target's n+1 argmax ids at [cur, nodes] → Verdict with its path.

    From cur, follow the first child whose token is the target's argmax at the parent's position; the next
    token is the argmax at the last node followed. expected_accept: 1.0 or 0.0 for every child tried.
    """
    path: list[int] = []
    expected: list[float] = []
    node = -1
    while True:
        want = target_best[node + 1]
        hit = None
        for child in tree.children(node):
            expected.append(1.0 if tokens[child] == want else 0.0)
            if tokens[child] == want:
                hit = child
                break
        if hit is None:
            return Verdict(n_accepted=len(path), next_token=want, expected_accept=expected, path=path)
        path.append(hit)
        node = hit


def point_mass(token: int, like: torch.Tensor) -> torch.Tensor:
    """The law [V] of a deterministic draft: all mass on `token` (dtype and device of `like`)."""
    return torch.zeros_like(like).index_fill_(0, torch.tensor([token], device=like.device), 1.0)


def walk_tree(
    tree: TokenTree,
    tokens: list[int],
    q: torch.Tensor | None,
    p: torch.Tensor,
    decide: Decide,
    residual_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = residual,
) -> tuple[list[int], torch.Tensor, list[float]]:
    """Multi-draft rejection sampling down a tree → (accepted path, law [V] of the next token, β of every child tried).

    tokens: the n node ids; q: [n, V] each node's draft law (None: all point masses); p: [n+1, V] the target's
    processed laws at [cur, nodes]. At a node whose current law is `law`, its children are tried in order:
    `decide` accepts child x (drawn from q_x) with probability min(1, law(x)/q_x(x)), and each rejection
    replaces law by residual_fn(law, q_x) = norm(max(0, law − q_x)). An accepted child continues with the
    target's law at its own position; a node whose children are all rejected (or a leaf) ends the walk,
    and the next token is drawn from the law then current: the last residual, or p at an accepted leaf.
    Each child tried costs one host sync (its decision); a chain proposal never comes here.
    """
    path: list[int] = []
    node, law = -1, p[0]
    expected: list[float] = []
    while True:
        for child in tree.children(node):
            q_x = point_mass(tokens[child], law) if q is None else q[child]
            expected.append(float(torch.minimum(law, q_x).sum()))
            if decide(tokens[child], law, q_x):
                path.append(child)
                node, law = child, p[child + 1]
                break
            law = residual_fn(law, q_x)
        else:
            return path, law, expected


def drawn_decision(generator: torch.Generator | None) -> Decide:
    """The runner's `decide`: accept x when u·q(x) < p(x), u ~ U[0, 1) (accepted_count on one token)."""

    def decide(token: int, law: torch.Tensor, q_x: torch.Tensor) -> bool:
        u = torch.rand(1, generator=generator, device=law.device)
        return accepted_count(torch.tensor([token], device=law.device), q_x[None], law[None], u) > 0

    return decide


def verify_tree_sampling(
    tree: TokenTree, tokens: list[int], q: torch.Tensor | None, p: torch.Tensor, generator: torch.Generator | None
) -> Verdict:
    """Exact tree verification at T > 0: the n node ids, q [n, V] or None (point masses), p [n+1, V] → Verdict.

    Why the emitted law is the target's (SpecInfer's multi-step speculative sampling, Miao et al. 2024): one
    child x ~ q accepted with min(1, p(x)/q(x)), and otherwise replaced by a draw from norm(max(0, p − q)),
    yields exactly p (Leviathan et al.'s lemma). `walk_tree` replaces "a draw from the residual" by the same
    trial of the next child against that residual, so by induction on the children left (none left: a draw
    from the residual itself) the token leaving a node has law p, provided each child's token is drawn from
    its stated q independently of its earlier siblings and of the uniforms: i.i.d. draws of one draft, drafts
    with laws of their own, deterministic candidates. For the last, q is a point mass: x is accepted with
    probability p(x) and a rejection zeroes p(x) and renormalises, which is sampling without replacement
    from p (the recursive rejection sampling of Jeon et al. 2024 for distinct candidates). A draft that
    samples distinct candidates from its q without replacement breaks the independence and is not covered;
    one whose candidates are a function of the path (its top-k) declares them point masses. An accepted x
    continues at x's position, where the target's law is p(· | prefix, x) and x's subtree was drafted given
    x's path only: the same argument one level down, so each emitted token has the target's law given those
    before it. At an accepted leaf the bonus token is a draw from p there.
    """
    path, law, expected = walk_tree(tree, tokens, q, p, drawn_decision(generator))
    return Verdict(n_accepted=len(path), next_token=int(sample(law, generator)), expected_accept=expected, path=path)

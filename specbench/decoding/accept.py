"""Verification of a proposal: Algorithm 1's accept/reject rule, as pure functions.

Greedy (T = 0): accept while the drafted token is the target's argmax; the next token is the
target's argmax at the first mismatch (or the bonus position). Sampling: accept x_i while
u_i < p_i(x_i) / q_i(x_i) (written u·q < p to avoid a division; strict so that p(x) = 0 is
never accepted), then sample the correction from norm(max(0, p − q)) at the first rejection
or the bonus token from p_{γ'+1}. All ratios are float32.
"""

from __future__ import annotations

import torch

from specbench.decoding.base import Verdict
from specbench.decoding.sampling import sample


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

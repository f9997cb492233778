"""Negative controls: the bugs peers made in speculative sampling, as swappable pieces of one step.

A check that passes the correct step is evidence only if it fails a wrong one through the same code
path. Each `Control` replaces one piece (the acceptance count, the residual, how the draft draws, or
which target rows the verifier reads) and is fed through the same exact laws and statistical checks
as the real step (evidence/equality.py, evidence/verification.py); the tests assert that each fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count, residual, walk_tree
from specbench.decoding.base import Verdict
from specbench.decoding.sampling import processed_probs, sample
from specbench.evidence.exact_laws import (
    CountFn,
    DraftFn,
    ResidualFn,
    RowsFn,
    TabulatedLM,
    TreeVerifyFn,
    VerifyFn,
    as_verified,
    honest_draft,
    memo,
)


def count_always(draft_tokens, q, p, u) -> int:
    """Control: every drafted token accepted."""
    return int(draft_tokens.shape[0])


def count_past_rejection(draft_tokens, q, p, u) -> int:
    """Control: acceptances counted past the first rejection (a sum where a cumulative product belongs)."""
    idx = torch.arange(draft_tokens.shape[0])
    return int((u * q[idx, draft_tokens] < p[idx, draft_tokens]).int().sum())


def residual_abs(p_row, q_row) -> torch.Tensor:
    """Control: norm(|p − q|), the residual without max(0, ·)."""
    r = (p_row - q_row).abs()
    return r / r.sum() if float(r.sum()) > 0 else p_row


def greedy_draft(lm: TabulatedLM, cfg: SamplingConfig) -> DraftFn:
    """Control: the draft decodes greedily (argmax) but reports its processed law as q."""

    def laws(prefix):
        q = processed_probs(lm.logits(prefix), cfg)
        return torch.nn.functional.one_hot(q.argmax(), q.shape[-1]).float(), q

    return memo(laws)


def raw_q_draft(lm: TabulatedLM, cfg: SamplingConfig) -> DraftFn:
    """Control: the draft samples the processed law but reports q from the unprocessed logits (softmax at T = 1)."""

    def laws(prefix):
        logits = lm.logits(prefix)
        return processed_probs(logits, cfg), torch.softmax(logits.float(), -1)

    return memo(laws)


def verified_one_late(p: torch.Tensor) -> torch.Tensor:
    """Control: the verified logits taken one position late (row i + 1 checks draft i; the last row repeats)."""
    return torch.cat([p[1:], p[-1:]]) if p.shape[0] > 1 else p


CONTROL_TEMPERATURE = 0.5  # the temperature the one-sided control applies to the target's law only


def target_only_temperature(p: torch.Tensor) -> torch.Tensor:
    """Control: a temperature applied to one model only: the verifier's target law p^(1/T), renormalised
    (softmax(z/T) on the kept support), while the draft and the reference keep the configured law."""
    w = p.double().clamp_min(0.0) ** (1.0 / CONTROL_TEMPERATURE)
    return (w / w.sum(-1, keepdim=True)).to(p.dtype)


def rejection_step(
    count: CountFn = accepted_count, residual_fn: ResidualFn = residual, verified: RowsFn = as_verified
) -> VerifyFn:
    """verify_sampling's body with its pieces swappable: the form the verify-side controls take."""

    def verify(draft_tokens, q, p, generator):
        p = verified(p)
        gamma = draft_tokens.shape[0]
        u = torch.rand(gamma, generator=generator, device=p.device)
        n = count(draft_tokens, q, p[:gamma], u)
        law = residual_fn(p[n], q[n]) if n < gamma else p[gamma]
        return Verdict(n_accepted=n, next_token=int(sample(law, generator)), expected_accept=[])

    return verify


def tree_rejection_step(
    count: CountFn = accepted_count, residual_fn: ResidualFn = residual, verified: RowsFn = as_verified
) -> TreeVerifyFn:
    """verify_tree_sampling's body (walk_tree, then a draw from the law it ends with) with the same pieces swappable:
    each child is one trial of `count` against the walk's current law, each rejection `residual_fn`'s law, and
    `verified` maps the n+1 rows at [cur, nodes] (a row off reads, in node order, another node's law)."""

    def verify(tree, tokens, q, p, generator):
        rows = verified(p)

        def decide(token: int, law: torch.Tensor, q_x: torch.Tensor) -> bool:
            u = torch.rand(1, generator=generator, device=law.device)
            return count(torch.tensor([token], device=law.device), q_x[None], law[None], u) > 0

        path, law, expected = walk_tree(tree, tokens, q, rows, decide, residual_fn)
        next_token = int(sample(law, generator))
        return Verdict(n_accepted=len(path), next_token=next_token, expected_accept=expected, path=path)

    return verify


@dataclass(frozen=True)
class Control:
    """One known bug: which piece of the step it replaces."""

    name: str
    count: CountFn = accepted_count
    residual_fn: ResidualFn = residual
    draft: Callable[[TabulatedLM, SamplingConfig], DraftFn] = honest_draft
    verified: RowsFn = as_verified  # which target rows the verifier uses

    def verify(self) -> VerifyFn:
        return rejection_step(self.count, self.residual_fn, self.verified)

    def verify_tree(self) -> TreeVerifyFn:
        """The same bug in the tree rule (a verify-side control fed a tree proposal)."""
        return tree_rejection_step(self.count, self.residual_fn, self.verified)

    @property
    def verify_side(self) -> bool:
        """The bug lives in the verifier (it can be fed any proposer's drafts), not in how the draft draws."""
        return self.draft is honest_draft


CONTROLS = {
    c.name: c
    for c in [
        Control("always-accept", count=count_always),
        Control("greedy-draft", draft=greedy_draft),
        Control("raw-q", draft=raw_q_draft),
        Control("abs-residual", residual_fn=residual_abs),
        Control("count-past-rejection", count=count_past_rejection),
        Control("verified-one-late", verified=verified_one_late),
        Control("temperature-target-only", verified=target_only_temperature),
    ]
}

"""Drafting for a batch: the `BatchProposer`s (decoding/base.py) the drafts batch with.

Each draft says how it batches (`Proposer.batched`, for one draft serving every row); a list of one
proposer per row always drafts row by row. The forms:

- `BatchedModelDraft` (ModelDraft.batched): all rows draft together, one forward of the draft network
  per drafted position, over a batched cache of its own (cache.BatchedCachedModel). Per row it does
  what ModelDraft does alone: crop its cache to the longest prefix that still agrees with the row's
  sequence, feed what is new (right-aligned, shorter feeds padded on the left with masked filler),
  then draft γ_r tokens, each drawn with the row's own generator from the processed law q it reports.
  A row that drafts fewer tokens than the widest (near its budget's end) rides along masked: its
  extra columns are holes, and it draws nothing, so its generator sees exactly the batch-1 draws.
- `BatchedHybridDraft` (HybridDraft.batched): each row looks up on the host with its own copy of
  the lookup, then the rows that still need tokens draft them in one batched pass of the model, each
  continuing from its own sequence extended by its lookup tokens (the batch-1 HybridDraft, row-wise).
- `PerRowDrafts`: a model-free draft (prompt lookup, the frequency laws) proposes row by row on the
  host from its own row copy (drafts/model_free.py); a list of one proposer per row does the same
  with the proposers it was given.
"""

from __future__ import annotations

from typing import Protocol

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import BatchProposer, Proposal, Proposer
from specbench.decoding.batched.cache import BatchedCachedModel
from specbench.decoding.batched.rows import Row
from specbench.decoding.sampling import processed_probs, sample
from specbench.errors import SpecbenchError


class RowCopyable(Protocol):
    """A draft that hands each row of a batch its own copy (drafts/model_free.ModelFreeDraft.row_copy)."""

    def row_copy(self) -> Proposer: ...


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading tokens two sequences share: what a draft's cache may keep of `a` to continue `b`."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def empty_proposal(device: torch.device) -> Proposal:
    return Proposal(tokens=torch.zeros(0, dtype=torch.long, device=device), q_probs=None, forward_calls=0)


class PerRowDrafts:
    """Each row drafts with its own proposer object, on the host, one row after another."""

    def __init__(self, proposers: list[Proposer], device: torch.device):
        self.proposers, self.device = proposers, device

    def begin(self, rows: list[Row], pad_id: int) -> None:
        for row in rows:
            self.proposers[row.index].begin(list(row.tokens), row.budget)

    def propose(self, rows: list[Row], gammas: list[int], sampling: SamplingConfig) -> list[Proposal]:
        return [
            self.proposers[row.index].propose(row.tokens, g, sampling, row.generator)
            if g > 0
            else empty_proposal(self.device)
            for row, g in zip(rows, gammas)
        ]

    def select(self, keep: torch.Tensor) -> None:
        """Rows are found by their index: nothing to drop."""


class BatchedModelDraft:
    """One draft network drafting for every row at once (see the module docstring)."""

    def __init__(self, network: torch.nn.Module):
        self.lm = BatchedCachedModel(network)
        self.cached: list[list[int]] = []  # per live row: the tokens its cache columns hold, in order

    def begin(self, rows: list[Row], pad_id: int) -> None:
        prompts = [list(row.tokens) for row in rows]
        self.lm.start(prompts, pad_id)
        self.cached = prompts

    def select(self, keep: torch.Tensor) -> None:
        self.lm.select(keep)
        self.cached = [self.cached[i] for i in keep.tolist()]

    def _feed(self, seqs: list[list[int]]) -> torch.Tensor:
        """Roll every row back to what still agrees with its sequence and feed what is new → logits [b, V]."""
        keep = [min(common_prefix_length(c, seq), len(seq) - 1) for c, seq in zip(self.cached, seqs)]
        self.lm.truncate(torch.tensor(keep))
        feeds = [seq[k:] for k, seq in zip(keep, seqs)]
        width = max(len(f) for f in feeds)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        valid = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, f in enumerate(feeds):  # right-aligned: every row's newest token in the last column
            ids[i, width - len(f) :] = torch.tensor(f, dtype=torch.long)
            valid[i, width - len(f) :] = True
        self.cached = [list(seq) for seq in seqs]
        return self.lm.forward(ids.to(self.lm.device), valid.to(self.lm.device))

    def propose(
        self, rows: list[Row], gammas: list[int], sampling: SamplingConfig, seqs: list[list[int]] | None = None
    ) -> list[Proposal]:
        """Row i drafts gammas[i] tokens (0: none) after seqs[i] (default: its tokens); one forward per drafted
        position for all rows."""
        logits = self._feed([row.tokens for row in rows] if seqs is None else seqs)  # [b, V]
        most = max(gammas)
        drafted: list[torch.Tensor] = []
        laws: list[list[torch.Tensor]] = [[] for _ in rows]
        for step in range(most):
            if sampling.greedy:
                tok = logits.argmax(-1)  # [b]
            else:
                q = processed_probs(logits, sampling)  # [b, V]
                tok = torch.zeros(len(rows), dtype=torch.long, device=self.lm.device)
                for i, (row, g) in enumerate(zip(rows, gammas)):
                    if step < g:  # a row past its γ draws nothing: its generator stays the batch-1 one's
                        tok[i] = sample(q[i], row.generator)
                        laws[i].append(q[i])
            drafted.append(tok)
            if step + 1 < most:
                live = torch.tensor([step + 1 < g for g in gammas], device=self.lm.device)[:, None]  # [b, 1]
                logits = self.lm.forward(tok[:, None], live)
        return self._proposals(rows, gammas, drafted, laws)

    def _proposals(
        self, rows: list[Row], gammas: list[int], drafted: list[torch.Tensor], laws: list[list[torch.Tensor]]
    ) -> list[Proposal]:
        """Per-row proposals from the drafted columns; each row's cache now holds tokens + its drafts but the last."""
        grid = torch.stack(drafted, dim=1) if drafted else None  # [b, most]
        out = []
        for i, g in enumerate(gammas):
            if g == 0:
                out.append(empty_proposal(self.lm.device))
                continue
            ids = grid[i, :g]  # type: ignore[index]  # g > 0: some column was drafted
            self.cached[i] = self.cached[i] + ids[:-1].tolist()
            out.append(Proposal(tokens=ids, q_probs=torch.stack(laws[i]) if laws[i] else None, forward_calls=g))
        return out


class BatchedHybridDraft:
    """One hybrid for every row: per-row lookup on the host, then one batched model pass for the rest."""

    def __init__(self, lookup: RowCopyable, network: torch.nn.Module, size: int):
        self.lookups = [lookup.row_copy() for _ in range(size)]  # found by row index
        self.model = BatchedModelDraft(network)

    def begin(self, rows: list[Row], pad_id: int) -> None:
        for row in rows:
            self.lookups[row.index].begin(list(row.tokens), row.budget)
        self.model.begin(rows, pad_id)

    def select(self, keep: torch.Tensor) -> None:
        self.model.select(keep)

    def propose(self, rows: list[Row], gammas: list[int], sampling: SamplingConfig) -> list[Proposal]:
        """Lookup first, row by row (deterministic, q one-hot); the model drafts each row's γ_r − found_r after
        its tokens + found tokens, all rows in one batched pass (rows lookup filled ride along, drafting none)."""
        found = [
            self.lookups[row.index].propose(row.tokens, g, sampling, row.generator)
            if g > 0
            else empty_proposal(self.model.lm.device)
            for row, g in zip(rows, gammas)
        ]
        rest_gammas = [g - f.tokens.shape[0] for g, f in zip(gammas, found)]
        if not any(rest_gammas):
            return found
        seqs = [row.tokens + f.tokens.tolist() for row, f in zip(rows, found)]
        rest = self.model.propose(rows, rest_gammas, sampling, seqs)
        return [joined(f, r, sampling) for f, r in zip(found, rest)]


def joined(found: Proposal, rest: Proposal, sampling: SamplingConfig) -> Proposal:
    """Lookup tokens then model tokens as one proposal (HybridDraft.propose's join)."""
    if rest.tokens.shape[0] == 0:
        return found
    if found.tokens.shape[0] == 0:
        return rest
    q = None if sampling.greedy else torch.cat([found.q_probs, rest.q_probs])  # type: ignore[list-item]  # sampling: a proposal carries q_probs; [γ', V]
    return Proposal(tokens=torch.cat([found.tokens, rest.tokens]), q_probs=q, forward_calls=rest.forward_calls)


def row_drafts(proposer: Proposer | list[Proposer], size: int, device: torch.device) -> BatchProposer:
    """One proposer for every row (its own batched form), or one per row (each drafts its row on the host)."""
    if not isinstance(proposer, (list, tuple)):
        return proposer.batched(size, device)
    many = list(proposer)
    if len(many) != size:
        raise SpecbenchError(f"a batch of {size} rows needs {size} proposers (got {len(many)})")
    if len({id(p) for p in many}) == 1:
        return many[0].batched(size, device)
    if len({id(p) for p in many}) == size:
        return PerRowDrafts(many, device)
    raise SpecbenchError(f"draft {many[0].name} keeps per-example state: a batch needs one proposer per row")

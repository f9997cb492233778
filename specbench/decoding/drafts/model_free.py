"""What every draft that runs no network shares (prompt lookup, the frequency laws).

It has none of the hooks of a draft that runs a network (base.ModelBacked: caches to size, a network for HF to
assist with, forwards to time), and it batches the same way: one copy per row proposing on the host (`row_copy` says
what a copy must not share with the others).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, TypeVar

import torch

from specbench.decoding.batched.drafts import PerRowDrafts

if TYPE_CHECKING:
    from specbench.decoding.base import BatchProposer


D = TypeVar("D", bound="ModelFreeDraft")


class ModelFreeDraft:
    """What a draft that runs no network shares (prompt lookup, the frequency laws): is_model False, batching."""

    is_model = False

    def row_copy(self: D) -> D:
        """A copy for one row of a batch: a shallow copy (fitted tables shared read-only; begin() rebinds the
        per-example state). A draft with a mutable memo overrides this to give each copy its own."""
        return copy.copy(self)

    def batched(self, size: int, device: torch.device) -> BatchProposer:
        return PerRowDrafts([self.row_copy() for _ in range(size)], device)  # type: ignore[misc]  # a mixin: its subclasses are Proposers

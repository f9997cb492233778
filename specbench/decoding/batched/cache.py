"""One model's KV cache over B token sequences of different lengths: a shared rectangle plus a mask.

transformers' caches append the same number of columns to every row (DynamicCache concatenates,
StaticCache writes at one shared cache_position), and `crop` cuts every row alike. Speculative
rows keep different numbers of tokens after each verify pass, so a row's tokens cannot stay
contiguous in a rectangle. We keep the rectangle and say which columns hold a row's tokens:

  mask      [B, C] bool, True where column c of row r holds one of r's tokens. Left padding of
            the prompts, filler after a row's short proposal, rejected draft slots and a rolled
            back draft cache are all False columns. It is passed to the model as attention_mask.
  positions a row's next position id is its count of valid columns, so every token gets the
            position it has in its own sequence (RoPE/absolute embeddings see no padding).

Causality is by column (every row writes its new tokens at the same new columns), so a key in a
later column is never seen by an earlier query; a False column is never seen by anyone. The
attention over a row's valid keys is then the batch-1 attention, whatever the holes: the output
does not depend on padding (up to float rounding of reductions over more columns).

Holes cost attention work and memory, never correctness. Two cheap clean-ups keep them bounded:
trailing columns that no row holds are cropped (`crop`: free), and when at least half of the
rectangle is holes (and it is wider than COMPACT_MIN columns) every layer's keys and values are
gathered so that each row's tokens sit contiguous and right-aligned again (one copy of the
cache; amortised, at most one copy per as many appended columns as it holds). Rows that finish
are dropped from the batch (`select`), so they stop costing forwards at all.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from specbench.decoding.cached_model import CachedModel, cache_keyword
from specbench.errors import SpecbenchError

COMPACT_MIN = 64  # narrower rectangles are never compacted: the copy would cost more than the holes


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts → (ids [B, S], valid [B, S] bool), right-aligned and left-padded with pad_id."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    valid = torch.zeros(len(prompts), width, dtype=torch.bool)
    for r, p in enumerate(prompts):
        if p:
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[r, width - len(p) :] = True
    return ids.to(device), valid.to(device)


def new_positions(lengths: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Position ids of new columns: lengths [B] valid tokens so far, valid [B, k] → [B, k] (filler: any)."""
    return (lengths[:, None] + valid.long().cumsum(1) - 1).clamp_min(0)


def keep_first(mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """mask [B, C] with only the first keep[r] valid columns of each row left True."""
    return mask & (mask.long().cumsum(1) <= keep[:, None])


def compaction_index(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mask [B, C] → (gather index [B, C'], new mask [B, C']): each row's valid columns in order,
    right-aligned, C' = the most valid columns of any row (padding gathers column 0, masked)."""
    cols = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    order = torch.where(mask, cols, -1).sort(dim=1).values  # invalid (-1) first, then valid ascending
    width = int(mask.sum(1).max())
    kept = order[:, order.shape[1] - width :]
    return kept.clamp_min(0), kept >= 0


class BatchedCachedModel:
    """A decoder-only model's forwards over a batch of rows, each row its own sequence (see module doc)."""

    def __init__(self, model: torch.nn.Module | CachedModel):
        if isinstance(model, CachedModel):
            if model.backend.kind != "eager":
                raise SpecbenchError(f"batch size > 1 runs with --backend eager only (got {model.backend.kind})")
            model = model.model
        if getattr(model.config, "is_encoder_decoder", False):
            raise SpecbenchError("batch size > 1 supports decoder-only models; use --batch-size 1 for encoder-decoder")
        self.model = model
        self.device = next(model.parameters()).device
        self._cache_kw = cache_keyword(model.forward)
        self._can_trim_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros(0, 0, dtype=torch.bool)  # [B, C] True where a row holds a token
        self.timer = None  # a Clock to profile forwards into forward_times (bench only: it syncs)
        self.forward_times: list[float] = []

    @property
    def lengths(self) -> torch.Tensor:
        """[B] tokens each row holds (= the position id of its next token)."""
        return self.mask.sum(1)

    def start(self, prompts: list[list[int]], pad_id: int) -> torch.Tensor:
        """Prefill every row's prompt (left-padded) → logits [B, V] after each prompt's last token."""
        if any(not p for p in prompts):
            raise SpecbenchError("an empty prompt cannot be decoded in a batch")
        ids, valid = left_pad(prompts, pad_id, self.device)
        self.cache = DynamicCache()
        self.mask = torch.zeros(len(prompts), 0, dtype=torch.bool, device=self.device)
        return self.forward(ids, valid)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, valid: torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        """Append ids [B, k] (valid [B, k]: which are real tokens) → logits [B, k, V], or [B, V] at column k − 1."""
        t0 = self.timer.now() if self.timer else 0.0
        positions = new_positions(self.lengths, valid)
        self.mask = torch.cat([self.mask, valid], dim=1)
        extra = {"logits_to_keep": 1} if self._can_trim_logits and not all_logits and ids.shape[1] > 1 else {}
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask.long(),
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: self.cache},
            **extra,
        )
        if self.timer:
            self.forward_times.append(self.timer.now() - t0)
        return out.logits if all_logits else out.logits[:, -1]

    def truncate(self, keep: torch.Tensor) -> None:
        """Keep the first keep[r] tokens of each row (keep [B]); free what no row holds any more."""
        self.mask = keep_first(self.mask, keep.to(self.mask.device))
        self.tidy()

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the given rows (indices [b] into the current batch), in that order."""
        self.cache.batch_select_indices(rows.to(self.device))  # type: ignore[union-attr]  # set by the first forward
        self.mask = self.mask[rows.to(self.device)]
        self.tidy()

    def tidy(self) -> None:
        """Crop trailing columns no row holds; compact when at least half the rectangle is holes."""
        held = self.mask.any(0).nonzero()
        trailing = self.mask.shape[1] - (int(held.max()) + 1 if held.numel() else 0)
        if trailing:
            self.cache.crop(-trailing)  # type: ignore[union-attr]  # set by the first forward
            self.mask = self.mask[:, : self.mask.shape[1] - trailing]
        width = self.mask.shape[1]
        if width >= COMPACT_MIN and 2 * int(self.mask.sum()) <= self.mask.numel():
            self.compact()

    def compact(self) -> None:
        """Gather every layer's keys and values so each row's tokens are contiguous and right-aligned."""
        index, mask = compaction_index(self.mask)
        for layer in self.cache.layers:  # type: ignore[union-attr]  # set by the first forward
            if getattr(layer, "is_sliding", True) or not getattr(layer, "is_initialized", False):
                return  # a cache layer of another kind (sliding window, quantised, shared): keep the holes
        for layer in self.cache.layers:  # type: ignore[union-attr]  # set by the first forward
            heads, dim = layer.keys.shape[1], layer.keys.shape[3]  # type: ignore[union-attr]  # full-attention layers, keys set
            idx = index[:, None, :, None].expand(-1, heads, -1, dim)  # [B, H, C', D]
            layer.keys = layer.keys.gather(2, idx)  # type: ignore[union-attr]  # full-attention layers, keys set
            layer.values = layer.values.gather(2, idx[..., :1].expand(-1, -1, -1, layer.values.shape[3]))  # type: ignore[union-attr]  # full-attention layers, keys set
        self.mask = mask

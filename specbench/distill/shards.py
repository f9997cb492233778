"""The teacher data's format: documents of tokens with the target's top-k soft labels, written a shard
per teacher job (`Docs`) and read back, all shards together, as one `TeacherData`.

A document is a token sequence and, for positions label_start .. label_end-1, the target's top-k
log-probabilities (fp16) and ids (int32) of the next token: the law of token t+1 given tokens ..t. For an EAGLE
head (--kind eagle) each labelled position also keeps the target's final hidden state there (fp16; the one its
output layer read to give that label); a draft's shards hold no such tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.errors import SpecbenchError
from specbench.files import file_sha256

KIND_PREFIX, KIND_ON_POLICY, KIND_REFERENCE, KIND_SAMPLED = 0, 1, 2, 3  # what a teacher document is:
# the shared prompt prefix; prompt + greedy continuation; prompt + human reference; prompt + T = 1 sample


class Docs:
    """Accumulates teacher documents: tokens, and soft labels for positions [label_start, label_end).

    The label at position t is the teacher's law of token t+1 given tokens ..t. `reply_start`
    is the first position whose label predicts a reply token (the prompt's last position).
    """

    def __init__(self):
        self.tokens, self.lens, self.meta, self.idx, self.lp = [], [], [], [], []
        self.hidden: list[torch.Tensor] = []  # --kind eagle: [n, H] fp16 per document, beside its labels

    def add(
        self,
        tokens: list[int],
        kind: int,
        label_start: int,
        label_end: int,
        reply_start: int,
        idx: torch.Tensor,
        lp: torch.Tensor,
        hidden: torch.Tensor | None = None,
    ) -> None:
        assert idx.shape[0] == label_end - label_start, (idx.shape, label_start, label_end)
        if hidden is not None:
            assert hidden.shape[0] == idx.shape[0], (hidden.shape, idx.shape)
            self.hidden.append(hidden)
        self.tokens.extend(tokens)
        self.lens.append(len(tokens))
        self.meta.append((label_start, label_end, reply_start, kind))
        self.idx.append(idx)
        self.lp.append(lp)

    def tensors(self, task: int, heldout: bool, k: int) -> dict[str, torch.Tensor]:
        """The shard's tensors; every document of a shard comes from one task and one side of the held-out split."""
        meta = torch.tensor(self.meta, dtype=torch.int32).view(-1, 4)
        n = len(self.lens)
        hidden = {"hidden": torch.cat(self.hidden)} if self.hidden else {}  # [M, H] fp16 (--kind eagle only)
        return hidden | {
            "tokens": torch.tensor(self.tokens, dtype=torch.int32),  # [N] all documents back to back
            "doc_len": torch.tensor(self.lens, dtype=torch.int32),  # [D]
            "label_start": meta[:, 0].contiguous(),
            "label_end": meta[:, 1].contiguous(),  # [D]
            "reply_start": meta[:, 2].contiguous(),
            "kind": meta[:, 3].to(torch.int8),  # [D]
            "task": torch.full((n,), task, dtype=torch.int32),  # [D]
            "heldout": torch.full((n,), int(heldout), dtype=torch.int8),  # [D]
            "topk_idx": torch.cat(self.idx) if self.idx else torch.zeros(0, k, dtype=torch.int32),  # [M, k]
            "topk_logp": torch.cat(self.lp) if self.lp else torch.zeros(0, k, dtype=torch.float16),  # [M, k]
        }


@dataclass
class TeacherData:
    """All shards concatenated. Per document d: tokens[doc_start[d]:doc_start[d+1]], labels rows
    label_off[d] .. label_off[d+1] for positions label_start[d] .. label_end[d]-1."""

    tokens: torch.Tensor  # [N] int32
    doc_start: torch.Tensor  # [D+1] int64
    label_start: torch.Tensor  # [D] int32
    label_end: torch.Tensor  # [D] int32
    reply_start: torch.Tensor  # [D] int32
    kind: torch.Tensor  # [D] int8
    task: torch.Tensor  # [D] int32
    heldout: torch.Tensor  # [D] bool
    label_off: torch.Tensor  # [D+1] int64
    topk_idx: torch.Tensor  # [M, k] int32
    topk_logp: torch.Tensor  # [M, k] float16
    hidden: torch.Tensor | None = None  # [M, H] float16: the target's final hidden state at each label (--kind eagle)

    @property
    def doc_len(self) -> torch.Tensor:
        return self.doc_start[1:] - self.doc_start[:-1]


def load_teacher_data(index: dict) -> TeacherData:
    """Read the shards in job order, checking each file against its sha256."""
    from safetensors.torch import load_file

    folder = Path(index["folder"])
    parts = []
    for s in index["shards"]:
        path = folder / s["file"]
        if file_sha256(path) != s["sha256"]:
            raise SpecbenchError(
                f"teacher shard {path} does not match its recorded sha256; delete it and rerun "
                f"the same command to rebuild it"
            )
        parts.append(load_file(str(path)))
    cat = {k: torch.cat([p[k] for p in parts]) for k in parts[0] if all(k in p for p in parts)}
    doc_len = cat["doc_len"].long()
    n_labels = (cat["label_end"] - cat["label_start"]).long()
    zero = torch.zeros(1, dtype=torch.long)
    return TeacherData(
        tokens=cat["tokens"],
        doc_start=torch.cat([zero, doc_len.cumsum(0)]),
        label_start=cat["label_start"],
        label_end=cat["label_end"],
        reply_start=cat["reply_start"],
        kind=cat["kind"],
        task=cat["task"],
        heldout=cat["heldout"].bool(),
        label_off=torch.cat([zero, n_labels.cumsum(0)]),
        topk_idx=cat["topk_idx"],
        topk_logp=cat["topk_logp"],
        hidden=cat.get("hidden"),
    )

"""Stage 3 for `--kind eagle` (and eagle3): the head is written in vLLM's eagle layout (models/eagle_layout.py:
config.json and model.safetensors, nothing else; the target's embedding and output layer are shared; an EAGLE-3 head
in vLLM's eagle3 layout, models/eagle3_head.py, with its own output layer), reloaded through the same
loader `--draft eagle:<folder>` uses, evaluated again on the held-out documents, and run in decode_speculative on
held-out prompts (α at T = 0). `--draft-vocab N` exports an EAGLE-3 head over the N ids the target predicts most often
in the training documents (EAGLE-3's reduced draft vocabulary), and says how often the held-out replies' ids are in it.
manifest.json beside it says how it was made (pipeline.py writes it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from specbench.distill.save_draft import _check_prompts, speculative_check
from specbench.distill.settings import WORK, DistillConfig
from specbench.distill.shards import KIND_ON_POLICY, TeacherData
from specbench.files import replacing


def row_docs(data: TeacherData) -> torch.Tensor:
    """The document of each label row [M] (pure)."""
    return torch.arange(len(data.label_off) - 1).repeat_interleave(data.label_off[1:] - data.label_off[:-1])


def draft_vocab_ids(data: TeacherData, size: int) -> torch.Tensor:
    """EAGLE-3's draft vocabulary: the `size` target ids the target predicts (its top-1) most often at the label rows
    of the training documents (never the held-out ones, which judge the head), increasing (pure). Ties go to the
    lower id; ids it never predicts fill the rest in id order (the counts run to at least `size` ids)."""
    top1 = data.topk_idx[:, 0].long()[~data.heldout[row_docs(data)]]
    counts = torch.bincount(top1, minlength=size)
    order = torch.sort(counts, descending=True, stable=True).indices
    return torch.sort(order[:size]).values


def vocab_coverage(data: TeacherData, docs: list[int], ids: torch.Tensor) -> dict:
    """How often the target's top-1 at the reply rows of `docs`' on-policy documents is a draft id: the reduced head's
    ceiling on first-token agreement there (pure) → {"coverage_reply", "reply_positions"}."""
    off, start = data.label_off, data.label_start
    rows = [
        torch.arange(int(off[d]) + int(data.reply_start[d]) - int(start[d]), int(off[d + 1]))
        for d in docs
        if int(data.kind[d]) == KIND_ON_POLICY
    ]
    reply = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
    hit = torch.isin(data.topk_idx[reply, 0].long(), ids)
    return {"coverage_reply": float(hit.float().mean()) if len(hit) else None, "reply_positions": len(hit)}


def export_head(head: torch.nn.Module, out: Path, dtype: str, draft_ids: torch.Tensor | None = None) -> None:
    """config.json and model.safetensors in `dtype`, built whole under work/ and renamed file by file into `out`; an
    EAGLE-3 head with `draft_ids` is exported over those target ids only (models/eagle3_head.reduced_head)."""
    from specbench.models import TORCH_DTYPES
    from specbench.models.eagle3_head import Eagle3Head, reduced_head, save_eagle3_head
    from specbench.models.eagle_head import save_head

    if draft_ids is not None:
        assert isinstance(head, Eagle3Head), "a reduced draft vocabulary is an EAGLE-3 head's"
        head = reduced_head(head, draft_ids)
    staging = out / WORK / "export"
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted export left
    with replacing(staging) as folder:
        if isinstance(head, Eagle3Head):
            save_eagle3_head(head, folder, TORCH_DTYPES[dtype])
        else:
            save_head(head, folder, TORCH_DTYPES[dtype])  # type: ignore[arg-type]  # an EagleHead
        for f in sorted(folder.iterdir()):
            with replacing(out / f.name) as tmp:
                os.replace(f, tmp)
    staging.rmdir()


def head_checks(cfg: DistillConfig, target, data: TeacherData, heldout_docs: list[int], index: dict) -> dict:
    """Reload the export as `--draft eagle:<out>` would, held-out agreement after export, and α at T = 0."""
    from specbench.decoding.drafts.factory import make_proposer
    from specbench.distill.eagle_training import EagleTrainer, evaluation_by_task
    from specbench.run_specs import parse_draft

    spec = parse_draft(f"{cfg.kind}:{cfg.out}")
    draft = make_proposer(spec, target)  # the loader and checks `specbench run --draft eagle:<out>` uses
    head = draft.head.head if cfg.kind == "eagle3" else draft.head  # an EAGLE-3 head runs inside its Eagle3Runner
    trainer = EagleTrainer(head, target, cfg.preset, data)
    ev, by_task = evaluation_by_task(trainer, heldout_docs, list((index.get("plan") or {}).get("tasks") or []))
    spec_check = speculative_check(
        target, draft, _check_prompts(cfg, data, heldout_docs, index), cfg.preset.check_gamma
    )
    return {
        "heldout_after_export": ev,
        "heldout_by_task": by_task,
        "cost": None,  # not measured here: `specbench run --draft eagle:<out>` times the draft (draft_s)
        "speculative": spec_check,
        "model_bytes": (cfg.out / "model.safetensors").stat().st_size,
        "n_params": sum(v.numel() for v in head.head_tensors().values() if v.is_floating_point()),
    } | ({"draft_vocab": draft_vocab_check(head, data, heldout_docs)} if cfg.draft_vocab is not None else {})


def draft_vocab_check(head, data: TeacherData, heldout_docs: list[int]) -> dict:
    """The reloaded export's draft vocabulary (its d2t): its size and how often the target's held-out reply top-1
    lies in it."""
    return {"size": len(head.draft_ids), **vocab_coverage(data, heldout_docs, head.draft_ids.cpu())}

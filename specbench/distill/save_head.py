"""Stage 3 for `--kind eagle` (and eagle3): the head is written in vLLM's eagle layout (models/eagle_layout.py:
config.json and model.safetensors, nothing else; the target's embedding and output layer are shared; an EAGLE-3 head
in vLLM's eagle3 layout, models/eagle3_head.py, with its own output layer), reloaded through the same
loader `--draft eagle:<folder>` uses, evaluated again on the held-out documents, and run in decode_speculative on
held-out prompts (α at T = 0). manifest.json beside it says how it was made (pipeline.py writes it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from specbench.distill.save_draft import _check_prompts, speculative_check
from specbench.distill.settings import WORK, DistillConfig
from specbench.distill.shards import TeacherData
from specbench.files import replacing


def export_head(head: torch.nn.Module, out: Path, dtype: str) -> None:
    """config.json and model.safetensors in `dtype`, built whole under work/ and renamed file by file into `out`."""
    from specbench.models import TORCH_DTYPES
    from specbench.models.eagle3_head import Eagle3Head, save_eagle3_head
    from specbench.models.eagle_head import save_head

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
        "n_params": sum(v.numel() for v in head.head_tensors().values()),
    }

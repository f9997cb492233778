"""Held-out agreement of trained EAGLE-3 heads, first and second chained token, on their own teacher data (issue 43).

`specbench distill` prints these for the head it trains; this reads heads trained before `agreement_chained`
existed, or compares heads that share one teacher folder (hard-linked work/teacher), by the export checks' own
evaluation (distill/eagle_training.EagleTrainer.evaluate, per task then pooled). Not a timing.

    .venv/bin/python bench/head_agreement.py /work/drafts/eagle3-bf16 /work/drafts/eagle3-u3 --threads 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specbench.decoding.drafts.factory import make_proposer
from specbench.distill import get_preset
from specbench.distill.eagle_training import EagleTrainer, evaluation_by_task
from specbench.distill.shards import load_teacher_data
from specbench.models import load_model
from specbench.run_specs import parse_draft


def head_agreement(folder: Path, target, preset_name: str) -> dict:
    """One head folder → its pooled held-out evaluation and each task's (its work/teacher data)."""
    index = json.loads((folder / "work" / "teacher" / "index.json").read_text())
    shards = [index["shards"][k] for k in sorted(index["shards"], key=int)]
    data = load_teacher_data({"folder": str(folder / "work" / "teacher"), "shards": shards})
    heldout = torch.nonzero(data.heldout).view(-1).tolist()
    head = make_proposer(parse_draft(f"eagle3:{folder}"), target).head.head
    trainer = EagleTrainer(head, target, get_preset(preset_name, "eagle3"), data)
    names = json.loads((folder / "work" / "teacher" / "plan.json").read_text())["tasks"]
    pooled, by_task = evaluation_by_task(trainer, heldout, names)
    return {"pooled": pooled, "by_task": by_task}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--preset", default="full")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_model(args.target, device="cpu")
    out = {}
    print("| head | command | first token (reply) | second chained token | by task (first / second) |")
    print("|---|---|---|---|---|")
    for folder in args.folders:
        ev = out[str(folder)] = head_agreement(folder, target, args.preset)
        command = json.loads((folder / "manifest.json").read_text()).get("command", "")
        tasks = "; ".join(
            f"{t} {e['agreement_reply']:.3f} / {e['agreement_chained']:.3f}" for t, e in ev["by_task"].items()
        )
        first, second = ev["pooled"]["agreement_reply"], ev["pooled"]["agreement_chained"]
        print(f"| {folder} | `{command}` | {first:.3f} | {second:.3f} | {tasks} |")
    return out


if __name__ == "__main__":
    main()

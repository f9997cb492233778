"""Held-out agreement of trained EAGLE-3 heads, first and second chained token, on their own teacher data (issue 43).

`specbench distill` prints these for the head it trains; this reads heads trained before `agreement_chained`
existed, or compares heads that share one teacher folder (hard-linked work/teacher), by the export checks' own
evaluation (distill/eagle_training.EagleTrainer.evaluate, per task then pooled). With `--draft-vocab 4096,8192`
each head is also judged over EAGLE-3's reduced draft vocabularies of those sizes, chosen as `distill --draft-vocab`
chooses them (distill/save_head.draft_vocab_ids): its agreement then, and the share of held-out reply positions whose
target token is in the vocabulary at all (the ceiling). Not a timing.

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
from specbench.distill.save_head import draft_vocab_ids, vocab_coverage
from specbench.distill.shards import load_teacher_data
from specbench.models import load_model
from specbench.models.eagle3_head import reduced_head
from specbench.run_specs import parse_draft


def head_agreement(folder: Path, target, preset_name: str, sizes: list[int]) -> dict:
    """One head folder → its pooled held-out evaluation and each task's (its work/teacher data), and per draft
    vocabulary size the reduced head's pooled evaluation with the vocabulary's coverage of the reply positions."""
    index = json.loads((folder / "work" / "teacher" / "index.json").read_text())
    shards = [index["shards"][k] for k in sorted(index["shards"], key=int)]
    data = load_teacher_data({"folder": str(folder / "work" / "teacher"), "shards": shards})
    heldout = torch.nonzero(data.heldout).view(-1).tolist()
    head = make_proposer(parse_draft(f"eagle3:{folder}"), target).head.head
    trainer = EagleTrainer(head, target, get_preset(preset_name, "eagle3"), data)
    names = json.loads((folder / "work" / "teacher" / "plan.json").read_text())["tasks"]
    pooled, by_task = evaluation_by_task(trainer, heldout, names)
    reduced = {}
    for size in sizes:
        ids = draft_vocab_ids(data, size)
        small = EagleTrainer(reduced_head(head, ids), target, get_preset(preset_name, "eagle3"), data)
        reduced[size] = evaluation_by_task(small, heldout, names)[0] | vocab_coverage(data, heldout, ids)
    return {"pooled": pooled, "by_task": by_task, "draft_vocab": reduced}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--preset", default="full")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--draft-vocab", default="", help="comma-separated draft vocabulary sizes to judge each head over")
    p.add_argument("--out", type=Path, help="write every evaluation here as JSON")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.draft_vocab.split(",") if x.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_model(args.target, device="cpu")
    out = {}
    print("| head | command | first token (reply) | second chained token | by task (first / second) |")
    print("|---|---|---|---|---|")
    for folder in args.folders:
        ev = out[str(folder)] = head_agreement(folder, target, args.preset, sizes)
        command = json.loads((folder / "manifest.json").read_text()).get("command", "")
        tasks = "; ".join(
            f"{t} {e['agreement_reply']:.3f} / {e['agreement_chained']:.3f}" for t, e in ev["by_task"].items()
        )
        first, second = ev["pooled"]["agreement_reply"], ev["pooled"]["agreement_chained"]
        print(f"| {folder} | `{command}` | {first:.3f} | {second:.3f} | {tasks} |")
        for size, e in ev["draft_vocab"].items():
            line = f"draft vocabulary {size}: coverage {e['coverage_reply']:.3f} of {e['reply_positions']} positions, "
            print(f"    {line}first {e['agreement_reply']:.3f}, second {e['agreement_chained']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()

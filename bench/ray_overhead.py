"""Ray's own overhead per sweep cell: the same cells timed under `--executor ray` and locally.

Overhead per cell = (cell seconds under Ray − the same cell's seconds locally) ÷ local seconds; the
goal (issue 17) is ≤ 5 % at --limit 4 on the tiny model. Each mode runs the same grid into a fresh
folder; a cell's seconds run from the sweep starting it to the next start (or the sweep's end), as
the driver sees them. Under Ray a cell's worker holds every CPU (--cpus-per-cell = the CPUs here),
so both modes decode with the same threads and one cell at a time: what differs is Ray. The first
cell of each mode also loads the models (and, under Ray, starts the actor); it is reported apart,
and the goal is judged on the cells after it.
Usage: python bench/ray_overhead.py [--target DIR|preset] [--task NAME|FILE] [--limit 4] [--cells 4]
(default target: a tiny random Llama saved to a temporary folder; about 2-4 minutes on 2 cores.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song in the tree",
          "we read the book and the cat sat", "the sun is up and the dog ran home"]


def tiny_target(folder: Path) -> str:
    """A 4-layer random Llama with a word-level tokenizer (seconds to build, milliseconds per token)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


def timed_sweep(grid, results: Path, executor) -> list[float]:
    """Seconds per cell, in cell order, as the driver saw them."""
    from specbench.measure.sweep import run_sweep

    starts: list[float] = []
    run_sweep(grid, results, executor=executor, on_cell=lambda cid, total, done: starts.append(time.perf_counter()))
    ends = starts[1:] + [time.perf_counter()]
    return [b - a for a, b in zip(starts, ends)]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model spec (default: a tiny random Llama)")
    ap.add_argument("--task", default=None, help="task name or JSONL (default: a 5-prompt file)")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--cells", type=int, default=4, help="γ = 1..cells, one cell each")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def main() -> None:
    import ray

    from specbench.measure.executors import make_executor
    from specbench.measure.sweep import SweepGrid

    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    target = args.target or tiny_target(tmp / "target")
    task = args.task
    if task is None:
        task = str(tmp / "task.jsonl")
        Path(task).write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in CORPUS))
    grid = SweepGrid.from_specs(target=target, draft="prompt-lookup", gamma=f"1-{args.cells}", temperature="0",
                                task=task, limit=args.limit, max_new_tokens=args.max_new_tokens, device="cpu")
    cpus = os.cpu_count() or 1
    local = timed_sweep(grid, tmp / "local", None)
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        remote = timed_sweep(grid, tmp / "ray", make_executor("ray", cpus_per_cell=cpus))
    finally:
        ray.shutdown()
    report(local, remote, args)


def report(local: list[float], remote: list[float], args) -> None:
    steady = [(r - l) / l for l, r in zip(local[1:], remote[1:])]
    result = {"cells": len(local), "limit": args.limit, "local_s": local, "ray_s": remote,
              "first_cell_overhead": (remote[0] - local[0]) / local[0],
              "overhead_per_cell": statistics.median(steady) if steady else None, "goal": 0.05}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"cell seconds, local: {' '.join(f'{x:.2f}' for x in local)}")
    print(f"cell seconds, Ray:   {' '.join(f'{x:.2f}' for x in remote)}")
    print(f"first cell (models load; Ray also starts its actor): {result['first_cell_overhead']:+.1%}")
    if steady:
        verdict = "meets" if result["overhead_per_cell"] <= 0.05 else "misses"
        print(f"Ray's overhead per cell after the first (median of {len(steady)}): "
              f"{result['overhead_per_cell']:+.1%}  ({verdict} the ≤ 5% goal)")


if __name__ == "__main__":
    main()

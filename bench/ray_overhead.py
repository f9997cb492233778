"""Ray's own overhead per sweep cell: the same cells timed under `--executor ray` and locally.

Overhead per cell = (the cell's seconds under Ray − the same cell's seconds locally), in ms and as a
fraction of the local seconds; the goal (issue 17) is ≤ 5 % at --limit 4 on the tiny model. Each mode
runs the same grid into a fresh folder from a fresh process, as `specbench sweep` does (so under Ray
the cells run in a fresh worker and locally in a fresh process alike: a process that has already run
the grid decodes it faster), --repeats times, alternating which mode goes first (a machine that warms
up or slows down during the bench then favours neither). A cell's seconds run from the previous cell's last
record reaching the sweep folder to this cell's last record reaching it, as the driver sees them
(not from on_cell, which a local sweep fires after planning the cell and Ray's driver before): so
each cell's time holds, in both modes, one planning of a cell (task, manifest,
calibration lookup), its warm-up, probes and examples, and under Ray also the call to the worker and
the streaming of its records. The first cell of each sweep also loads the models (under Ray it also
starts the actor) and is reported apart; the goal is judged on the median over the other cells and
all repeats.

Threads: under Ray a cell's worker gets --cpus-per-cell CPUs and Ray sets its OMP_NUM_THREADS (hence
torch's threads) to that; the local sweep runs with torch.set_num_threads(--cpus-per-cell), so both
decode with the same threads. The threads each side actually used are read back from the manifests
(hardware.torch_threads, recorded by the thread that decoded) and printed; the bench refuses a verdict
when they differ. Each Ray sweep starts a one-node cluster of --cpus-per-cell CPUs (before its timing
starts), so both modes measure one cell at a time. Default --cpus-per-cell: every CPU here; on a machine others use too, --cpus-per-cell 1 is far
less disturbed (two threads on two busy cores stall at every parallel region).

Timings on a shared machine are disturbed by whatever else runs there: the "noise" line (how much the
same local cell differs between repeats) says how far apart two runs of the same thing already are.
Usage: python bench/ray_overhead.py [--target DIR|preset] [--task NAME|FILE] [--limit 4] [--cells 4]
       [--repeats 3] [--cpus-per-cell N] [--json]
(default target: a tiny random Llama saved to a temporary folder; about 30 s per repeat on 2 quiet cores.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def timed_sweep(grid, results: Path, executor) -> tuple[list[float], list[int], list[float]]:
    """Per cell, in cell order: seconds (see the module docstring), the torch threads its manifest records, and the
    seconds of its timed speculative decodes (prefill + decode, summed over its examples, from its records)."""
    from specbench.measure.sweep import run_sweep

    last: dict[str, float] = {}  # cell id → when its latest record reached the sweep folder
    t0 = time.perf_counter()
    out = run_sweep(grid, results, executor=executor,
                    on_example=lambda cid, record: last.__setitem__(cid, time.perf_counter()))
    ends = [last[c.cell_id] for c in out.cells]
    threads = [json.loads((out.root / c.cell_id / "manifest.json").read_text())["hardware"]["torch_threads"]
               for c in out.cells]
    timed = [sum(r["speculative"]["prefill_s"] + r["speculative"]["decode_s"] for r in map(json.loads, lines))
             for lines in ((out.root / c.cell_id / "examples.jsonl").read_text().splitlines() for c in out.cells)]
    return [b - a for a, b in zip([t0] + ends, ends)], threads, timed


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model spec (default: a tiny random Llama)")
    ap.add_argument("--task", default=None, help="task name or JSONL (default: a 5-prompt file)")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--cells", type=int, default=4, help="γ = 1..cells, one cell each")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="sweeps per mode, alternating which mode goes first")
    ap.add_argument("--cpus-per-cell", type=int, default=os.cpu_count() or 1,
                    help="Ray's --cpus-per-cell and the local sweep's torch threads (default: every CPU here)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)  # one sweep, in a child
    return ap.parse_args()


def one_sweep(args) -> None:
    """In a fresh process, as `specbench sweep` runs: one sweep of MODE into FOLDER; its times → FOLDER/times.json."""
    import ray
    import torch

    from specbench.measure.executors import make_executor
    from specbench.measure.sweep import SweepGrid

    mode, folder = args.one[0], Path(args.one[1])
    grid = SweepGrid.from_specs(target=args.target, draft="prompt-lookup", gamma=f"1-{args.cells}", temperature="0",
                                task=args.task, limit=args.limit, max_new_tokens=args.max_new_tokens, device="cpu")
    torch.set_num_threads(args.cpus_per_cell)  # the local side's threads = what Ray gives a cell's worker
    executor = None
    if mode == "ray":  # a cluster of one cell's CPUs: one cell at a time under Ray too, as in the local sweep
        ray.init(num_cpus=args.cpus_per_cell, include_dashboard=False, log_to_driver=False)
        executor = make_executor("ray", cpus_per_cell=args.cpus_per_cell)
    try:
        seconds, threads, timed = timed_sweep(grid, folder, executor)
    finally:
        if mode == "ray":
            ray.shutdown()
    (folder / "times.json").write_text(json.dumps({"seconds": seconds, "threads": threads, "timed": timed}))


def main() -> None:
    args = parse_args()
    if args.one:
        one_sweep(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    args.target = args.target or tiny_target(tmp / "target")
    if args.task is None:
        args.task = str(tmp / "task.jsonl")
        Path(args.task).write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in CORPUS))
    runs: dict[str, list] = {"local": [], "ray": []}
    for repeat in range(args.repeats):
        for mode in ("local", "ray") if repeat % 2 == 0 else ("ray", "local"):
            folder = tmp / f"{mode}-{repeat}"
            subprocess.run([sys.executable, __file__, "--one", mode, str(folder), "--target", args.target, "--task",
                            args.task, "--limit", str(args.limit), "--cells", str(args.cells), "--max-new-tokens",
                            str(args.max_new_tokens), "--cpus-per-cell", str(args.cpus_per_cell)], check=True)
            out = json.loads((folder / "times.json").read_text())
            runs[mode].append((out["seconds"], out["threads"], out["timed"]))
    report(runs, args)


def summarize(runs: dict, args) -> dict:
    """Paired per-cell overheads (same repeat, same cell) after each sweep's first cell; medians over cells and repeats."""
    local, remote = [r[0] for r in runs["local"]], [r[0] for r in runs["ray"]]
    pairs = [(l_s, r_s) for lo, ra in zip(local, remote) for l_s, r_s in zip(lo[1:], ra[1:])]
    first = [(lo[0], ra[0]) for lo, ra in zip(local, remote)]
    threads = {mode: sorted({t for _, ts, _ in runs[mode] for t in ts}) for mode in runs}
    timed = [(lo[i], ra[i]) for (_, _, lo), (_, _, ra) in zip(runs["local"], runs["ray"]) for i in range(1, len(lo))]
    noise = [abs(a[i] - b[i]) / a[i] for a, b in zip(local, local[1:]) for i in range(1, len(a))]
    return {
        "cells": args.cells, "limit": args.limit, "repeats": args.repeats, "cpus_per_cell": args.cpus_per_cell,
        "torch_threads": threads, "local_s": local, "ray_s": remote,
        "first_cell_overhead_s": statistics.median(r - l for l, r in first),
        "overhead_per_cell": statistics.median((r - l) / l for l, r in pairs) if pairs else None,
        "overhead_per_cell_ms": statistics.median((r - l) * 1000 for l, r in pairs) if pairs else None,
        "local_cell_s": statistics.median(l for l, _ in pairs) if pairs else None,
        "timed_decodes_difference_ms": statistics.median((r - l) * 1000 for l, r in timed) if timed else None,
        "noise_local_repeats": statistics.median(noise) if noise else None, "goal": 0.05,
    }


def report(runs: dict, args) -> None:
    result = summarize(runs, args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for mode, label in (("local", "local"), ("ray", "Ray  ")):
        for i, cells in enumerate(result[f"{mode}_s"]):
            print(f"cell seconds, {label} repeat {i + 1}: {' '.join(f'{x:.3f}' for x in cells)}")
    t = result["torch_threads"]
    print(f"torch threads per cell: local {t['local']}, Ray {t['ray']} (--cpus-per-cell {args.cpus_per_cell})")
    print(f"first cell (models load; Ray also starts its actor): {result['first_cell_overhead_s']:+.2f} s under Ray")
    if result["overhead_per_cell"] is None:
        return
    n = args.repeats * (args.cells - 1)
    print(f"Ray's overhead per cell after the first (median of {n}): {result['overhead_per_cell']:+.1%}, "
          f"{result['overhead_per_cell_ms']:+.0f} ms on a local cell of {result['local_cell_s'] * 1000:.0f} ms")
    print(f"  of which inside the cells' timed speculative decodes (from the records): "
          f"{result['timed_decodes_difference_ms']:+.0f} ms (median); the rest is outside them")
    if result["noise_local_repeats"] is not None:
        print(f"noise: the same local cell differs between repeats by {result['noise_local_repeats']:.1%} (median)")
    if t["local"] != t["ray"]:
        print("no verdict: the two sides decoded with different torch threads")
        return
    verdict = "meets" if result["overhead_per_cell"] <= result["goal"] else "misses"
    print(f"{verdict} the ≤ 5% goal")


if __name__ == "__main__":
    main()

"""Ray's own overhead per sweep cell: the same cells timed under `--executor ray` and locally.

Overhead per cell = the cells' seconds under Ray ÷ the same cells' seconds locally − 1, paired within a
repeat; the goal (issue 17) is ≤ 5 % at --limit 4 on the tiny model. Each mode runs the same grid into a
fresh folder from a fresh process, as `specbench sweep` does (under Ray the cells run in a fresh worker,
locally in a fresh process alike: a process that has already run the grid decodes it faster), --repeats
times, alternating which mode goes first. The two sweeps of a repeat run back to back, so this VM's slow
drift between repeats (13–20 % here) largely cancels in the repeat's ratio; the verdict comes from the 95 %
interval of the mean ratio over repeats (bootstrap over whole repeats): meets when it lies at or below 5 %,
misses when above, and says it cannot tell when it straddles 5 %.

A cell's seconds run from the previous cell's last record reaching the sweep folder to this cell's last
record reaching it, as the driver sees them: in both modes one planning of a cell (task, manifest,
calibration lookup), its warm-up, probes and examples, and under Ray also the call to the worker and the
streaming of its records. The first cell of each sweep also loads the models (under Ray it also starts the
actor) and is reported apart. Besides wall time the bench reads CPU time at each cell's end: the cells' own
(this process when local; Ray's cell workers under Ray) and, under Ray, that of every other process of the
cluster (this driver writing the streamed records, the GCS, the raylet and its agents): on a node whose CPUs
the cell takes in full, that CPU is taken from the cell's threads.

Threads: under Ray a cell's worker gets --cpus-per-cell CPUs and Ray sets its OMP_NUM_THREADS (hence
torch's threads) to that; the local sweep runs with torch.set_num_threads(--cpus-per-cell), so both
decode with the same threads. The threads each side actually used are read back from the manifests
(hardware.torch_threads, recorded by the thread that decoded) and printed; the bench refuses a verdict
when they differ. Each Ray sweep starts a one-node cluster of --cpus-per-cell CPUs (before its timing
starts), so both modes measure one cell at a time. Default --cpus-per-cell: every CPU here (the cell then
shares the node's CPUs with Ray's own processes); --cpus-per-cell 1 on a 2-CPU machine leaves them one.

Usage: python bench/ray_overhead.py [--target DIR|preset] [--task NAME|FILE] [--limit 4] [--cells 4]
       [--repeats 8] [--cpus-per-cell N] [--json]
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

CORPUS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the bird sang a song in the tree",
    "we read the book and the cat sat",
    "the sun is up and the dog ran home",
]


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
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


def tree_cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process and every live process under it, split in two:
    the processes measuring cells (this one when local; Ray's cell workers under Ray) and everything else (under
    Ray: this driver, the GCS, the raylet and its agents), so Ray's own work is counted wherever it runs."""
    import psutil

    me = psutil.Process()
    cells, rest = 0.0, sum(me.cpu_times()[2:4])  # children reaped already
    for proc in [me, *me.children(recursive=True)]:
        try:
            used = sum(proc.cpu_times()[:2])
            is_cell = proc.name().startswith("ray::CellWorker") or (proc.pid == me.pid and not ray_started())
        except psutil.Error:  # exited between the listing and the read
            continue
        cells, rest = (cells + used, rest) if is_cell else (cells, rest + used)
    return cells, rest


def ray_started() -> bool:
    import ray

    return ray.is_initialized()


def timed_sweep(grid, results: Path, executor) -> dict:
    """Per cell, in cell order: seconds (see the module docstring), CPU seconds over the same span (the cells' own
    and Ray's other processes', tree_cpu_s), the torch threads its manifest records, and the seconds of its timed
    speculative decodes (prefill + decode, summed over its examples, from its records)."""
    from specbench.measure.run.sweep_run import run_sweep

    done: dict[str, int] = {}  # cell id → records seen
    ends: dict[str, tuple] = {}  # cell id → (wall, (cells' CPU, other CPU)) when its last record reached the folder

    def on_example(cell_id: str, record: dict) -> None:
        done[cell_id] = done.get(cell_id, 0) + 1
        if done[cell_id] == grid.limit:  # sampled at a cell's end only (a few ms): both modes pay it alike
            ends[cell_id] = (time.perf_counter(), tree_cpu_s())

    start = (time.perf_counter(), tree_cpu_s())
    out = run_sweep(grid, results, executor=executor, on_example=on_example)
    marks = [start] + [ends[c.cell_id] for c in out.cells]
    threads = [
        json.loads((out.root / c.cell_id / "manifest.json").read_text())["hardware"]["torch_threads"] for c in out.cells
    ]
    timed = [
        sum(r["speculative"]["prefill_s"] + r["speculative"]["decode_s"] for r in map(json.loads, lines))
        for lines in ((out.root / c.cell_id / "examples.jsonl").read_text().splitlines() for c in out.cells)
    ]
    return {
        "seconds": [b[0] - a[0] for a, b in zip(marks, marks[1:])],
        "cpu": [b[1][0] - a[1][0] for a, b in zip(marks, marks[1:])],
        "other_cpu": [b[1][1] - a[1][1] for a, b in zip(marks, marks[1:])],
        "threads": threads,
        "timed": timed,
    }


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model spec (default: a tiny random Llama)")
    ap.add_argument("--task", default=None, help="task name or JSONL (default: a 5-prompt file)")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--cells", type=int, default=4, help="γ = 1..cells, one cell each")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument(
        "--repeats",
        type=int,
        default=8,
        help="sweeps per mode, alternating which mode goes first (--interleave: runs of --cells pairs, pooled)",
    )
    ap.add_argument(
        "--cpus-per-cell",
        type=int,
        default=os.cpu_count() or 1,
        help="Ray's --cpus-per-cell and the local sweep's torch threads (default: every CPU here)",
    )
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="each cell under Ray, then its twin in a plain local process at once (see interleaved)",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)  # one sweep, in a child
    ap.add_argument("--twin-server", metavar="FOLDER", help=argparse.SUPPRESS)  # --interleave's local process
    return ap.parse_args()


def one_sweep(args) -> None:
    """In a fresh process, as `specbench sweep` runs: one sweep of MODE into FOLDER; its times → FOLDER/times.json."""
    import ray
    import torch

    from specbench.measure.run.executors import make_executor

    mode, folder = args.one[0], Path(args.one[1])
    grid = bench_grid(args)
    torch.set_num_threads(args.cpus_per_cell)  # the local side's threads = what Ray gives a cell's worker
    executor = None
    if mode == "ray":  # a cluster of one cell's CPUs: one cell at a time under Ray too, as in the local sweep
        ray.init(num_cpus=args.cpus_per_cell, include_dashboard=False, log_to_driver=False)
        executor = make_executor("ray", cpus_per_cell=args.cpus_per_cell)
    try:
        times = timed_sweep(grid, folder, executor)
    finally:
        if mode == "ray":
            ray.shutdown()
    (folder / "times.json").write_text(json.dumps(times))


def twin_server(args) -> None:
    """A plain local process (no Ray in it), models loaded once: for each cell id read from stdin, run the
    cell as run_sweep's local loop does (execute_run on its session) and answer its seconds on stdout."""
    import torch

    from specbench.config import LoadSpec
    from specbench.engines.torch.session import TorchSession as Session
    from specbench.measure.run.runner import execute_run
    from specbench.measure.run.sweep_run import cell_ids, write_sweep_file

    grid = bench_grid(args)
    torch.set_num_threads(args.cpus_per_cell)
    root = Path(args.twin_server) / "twins"
    root.mkdir(parents=True)
    cells = dict(cell_ids(grid))
    write_sweep_file(root, "twins", grid, list(cells.items()), {})
    session = Session(LoadSpec(grid.load.target, device="cpu", dtype=grid.load.dtype))
    print("ready", flush=True)
    for line in sys.stdin:
        cell_id = line.strip()
        start = time.perf_counter()
        execute_run(cells[cell_id], root, run_id=cell_id, session=session)
        print(time.perf_counter() - start, flush=True)


def bench_grid(args):
    """The grid both modes measure: prompt lookup at γ = 1..--cells, greedy, on CPU."""
    from specbench.measure.run.sweep import SweepGrid

    return SweepGrid.from_specs(
        target=args.target,
        draft="prompt-lookup",
        gamma=f"1-{args.cells}",
        temperature="0",
        task=args.task,
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        device="cpu",
    )


def interleaved(args, folder: Path) -> dict:
    """Each cell measured under Ray, then at once its local twin in a plain local process of its own.

    Once the Ray sweep's cell i is finished (its last record written, its worker idle: the driver is about
    to hand cell i + 1 to the worker), the driver asks the twin process (twin_server: no Ray in it, its
    models loaded once, as a local `specbench sweep`) to run the same cell, waits for it, and only then
    starts cell i + 1. A Ray cell's time runs from the previous cell's last record landing to its own, less
    the twin run in between. The two times of a pair lie within a second of each other, so this VM's drift
    (tens of % over tens of seconds) is shared. What the pair's difference holds: Ray's call, streaming and
    the driver's writes, and the worker's decodes beside them. What it leaves out: the idle cluster's own
    processes (GCS, raylet, agents) run beside both twins, so they are measured apart
    (`idle_background_cpu_ms_per_s`, on the settled cluster before any actor starts); the Ray worker, idle
    while its twin runs, is not in that figure."""
    import ray
    import torch

    from specbench.measure.run.executors import make_executor
    from specbench.measure.run.sweep_run import run_sweep

    grid = bench_grid(args)
    twin = subprocess.Popen(
        child(args, "--twin-server", str(folder / "local")), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    if twin.stdout.readline().strip() != "ready":  # its models are loaded before any timing
        raise SystemExit("the local twin process did not start; its error is above")
    torch.set_num_threads(args.cpus_per_cell)
    ray.init(num_cpus=args.cpus_per_cell, include_dashboard=False, log_to_driver=False)
    try:
        time.sleep(5)  # the cluster settles (its start-up work is not background)
        before, t0 = tree_cpu_s()[1], time.perf_counter()
        time.sleep(10)
        idle_ms_per_s = (tree_cpu_s()[1] - before) / (time.perf_counter() - t0) * 1000
        done: dict[str, int] = {}
        landed: list[float] = []  # when each Ray cell's last record landed, less the twins run before it
        waiting: list[str] = []  # Ray cells finished whose twin has not run yet
        twin_s: list[float] = []

        def on_example(cell_id: str, record: dict) -> None:
            done[cell_id] = done.get(cell_id, 0) + 1
            if done[cell_id] == grid.limit:
                landed.append(time.perf_counter() - sum(twin_s))
                waiting.append(cell_id)

        def run_twins(*_cell) -> None:  # the driver is about to start the next Ray cell: its worker is idle
            while waiting:
                twin.stdin.write(waiting.pop(0) + "\n")
                twin.stdin.flush()
                twin_s.append(float(twin.stdout.readline()))

        start = time.perf_counter()
        run_sweep(
            grid,
            folder / "ray",
            executor=make_executor("ray", cpus_per_cell=args.cpus_per_cell),
            on_cell=run_twins,
            on_example=on_example,
        )
        run_twins()
    finally:
        ray.shutdown()
        twin.stdin.close()
        twin.wait()
    ray_s = [b - a for a, b in zip([start] + landed, landed)]
    return {"ray": ray_s, "local": twin_s, "idle_background_cpu_ms_per_s": idle_ms_per_s}


def report_interleaved(result: dict, args) -> None:
    pairs = list(zip(result["local"], result["ray"]))
    ratios = [r / lo - 1 for lo, r in pairs]
    print(
        f"interleaved, {len(pairs)} cell pairs (Ray, then its twin in a local process once the Ray worker is "
        f"idle; {args.repeats} run(s) of {args.cells} cells, each run's first pair left out), "
        f"--cpus-per-cell {args.cpus_per_cell}:"
    )
    print("  local s: " + " ".join(f"{x:.3f}" for x in result["local"]))
    print("  Ray   s: " + " ".join(f"{x:.3f}" for x in result["ray"]))
    low, high = bootstrap_ci(ratios)
    print(
        f"Ray's overhead per cell beside its twin: mean {statistics.fmean(ratios):+.1%}, median "
        f"{statistics.median(ratios):+.1%} (95 % CI of the mean [{low:+.1%}, {high:+.1%}]); "
        f"{statistics.median(r - lo for lo, r in pairs) * 1000:+.0f} ms on a local cell of "
        f"{statistics.median(lo for lo, _ in pairs) * 1000:.0f} ms (medians) → "
        f"{verdict(low, high, 0.05)} the ≤ 5 % goal"
    )
    print(
        f"not in that figure: the idle cluster's own processes use {result['idle_background_cpu_ms_per_s']:.0f} ms "
        f"of CPU per second ({result['idle_background_cpu_ms_per_s'] / 10 / (os.cpu_count() or 1):.1f} % of this "
        f"machine's {os.cpu_count()} CPUs), beside both twins"
    )


def main() -> None:
    args = parse_args()
    if args.one:
        one_sweep(args)
        return
    if args.twin_server:
        twin_server(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    args.target = args.target or tiny_target(tmp / "target")
    if args.task is None:
        args.task = str(tmp / "task.jsonl")
        Path(args.task).write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in CORPUS))
    if args.interleave:  # --repeats runs of --cells pairs each, pooled (each run's first pair loads the models)
        runs = [interleaved(args, tmp / f"interleaved-{r}") for r in range(args.repeats)]
        result = {key: [x for run in runs for x in run[key][1:]] for key in ("local", "ray")}
        result["idle_background_cpu_ms_per_s"] = statistics.median(run["idle_background_cpu_ms_per_s"] for run in runs)
        print(json.dumps(result, indent=2)) if args.json else report_interleaved(result, args)
        return
    runs: dict[str, list] = {"local": [], "ray": []}
    for repeat in range(args.repeats):
        for mode in ("local", "ray") if repeat % 2 == 0 else ("ray", "local"):
            folder = tmp / f"{mode}-{repeat}"
            subprocess.run(child(args, "--one", mode, str(folder)), check=True)
            runs[mode].append(json.loads((folder / "times.json").read_text()))
    report(runs, args)


def child(args, *role: str) -> list[str]:
    """The command line of a child of this bench (one sweep, or the twin process) measuring the same grid."""
    return [
        sys.executable,
        __file__,
        *role,
        "--target",
        args.target,
        "--task",
        args.task,
        "--limit",
        str(args.limit),
        "--cells",
        str(args.cells),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--cpus-per-cell",
        str(args.cpus_per_cell),
    ]


def paired_overheads(runs: dict, key: str) -> list[float]:
    """Per repeat: Ray's cells after the first ÷ the same cells locally in the same repeat, − 1 (the two sweeps of
    a repeat run back to back, so the machine's slow drift between repeats cancels in the ratio)."""
    return [sum(ra[key][1:]) / sum(lo[key][1:]) - 1 for lo, ra in zip(runs["local"], runs["ray"])]


def bootstrap_ci(values: list[float], draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the mean (resampling the values: whole repeats, or cell pairs)."""
    import random

    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def verdict(low: float, high: float, goal: float) -> str:
    if high <= goal:
        return "meets"
    if low > goal:
        return "misses"
    return "cannot tell (the interval straddles the goal)"


def summarize(runs: dict, args) -> dict:
    """Paired per-repeat overheads (wall time; the cells' own CPU time), their mean, median and 95 % interval over
    repeats; the CPU Ray's other processes used per cell; per-cell medians; the first cell (models load, the actor
    starts) apart."""
    local, remote = runs["local"], runs["ray"]
    wall, cpu = paired_overheads(runs, "seconds"), paired_overheads(runs, "cpu")
    cells = [(lo["seconds"][i], ra["seconds"][i]) for lo, ra in zip(local, remote) for i in range(1, args.cells)]
    timed = [(lo["timed"][i], ra["timed"][i]) for lo, ra in zip(local, remote) for i in range(1, args.cells)]
    noise = [abs(sum(a["seconds"][1:]) / sum(b["seconds"][1:]) - 1) for a, b in zip(local, local[1:])]
    other = [x for ra in remote for x in ra["other_cpu"][1:]]
    result = {
        "cells": args.cells,
        "limit": args.limit,
        "repeats": args.repeats,
        "cpus_per_cell": args.cpus_per_cell,
        "torch_threads": {mode: sorted({t for r in runs[mode] for t in r["threads"]}) for mode in runs},
        "local_s": [r["seconds"] for r in local],
        "ray_s": [r["seconds"] for r in remote],
        "local_cpu_s": [r["cpu"] for r in local],
        "ray_cpu_s": [r["cpu"] for r in remote],
        "ray_other_cpu_s": [r["other_cpu"] for r in remote],
        "first_cell_overhead_s": statistics.median(
            ra["seconds"][0] - lo["seconds"][0] for lo, ra in zip(local, remote)
        ),
        "wall_overhead_per_repeat": wall,
        "cpu_overhead_per_repeat": cpu,
        "wall_overhead": statistics.fmean(wall),
        "wall_overhead_median": statistics.median(wall),
        "cpu_overhead": statistics.fmean(cpu),
        "ray_other_cpu_per_cell_ms": statistics.median(other) * 1000 if other else None,
        "overhead_per_cell_ms": statistics.median((r - lo) * 1000 for lo, r in cells) if cells else None,
        "local_cell_s": statistics.median(lo for lo, _ in cells) if cells else None,
        "timed_decodes_difference_ms": statistics.median((r - lo) * 1000 for lo, r in timed) if timed else None,
        "noise_local_repeats": statistics.median(noise) if noise else None,
        "goal": 0.05,
    }
    if len(wall) >= 2:
        result["wall_overhead_ci95"], result["cpu_overhead_ci95"] = bootstrap_ci(wall), bootstrap_ci(cpu)
    return result


def report(runs: dict, args) -> None:
    result = summarize(runs, args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for mode, label in (("local", "local"), ("ray", "Ray  ")):
        for i, (cells, cpu) in enumerate(zip(result[f"{mode}_s"], result[f"{mode}_cpu_s"])):
            print(
                f"{label} repeat {i + 1}: cell seconds {' '.join(f'{x:.3f}' for x in cells)} | "
                f"the cells' CPU seconds {' '.join(f'{x:.2f}' for x in cpu)}"
            )
    t = result["torch_threads"]
    print(f"torch threads per cell: local {t['local']}, Ray {t['ray']} (--cpus-per-cell {args.cpus_per_cell})")
    print(f"first cell (models load; Ray also starts its actor): {result['first_cell_overhead_s']:+.2f} s under Ray")
    if args.cells < 2:
        return
    print(
        f"per cell after the first (median of {args.repeats * (args.cells - 1)}): "
        f"{result['overhead_per_cell_ms']:+.0f} ms on a local cell of {result['local_cell_s'] * 1000:.0f} ms, "
        f"{result['timed_decodes_difference_ms']:+.0f} ms of it inside the timed decodes; Ray's other processes "
        f"(driver, GCS, raylet, agents) used {result['ray_other_cpu_per_cell_ms']:.0f} ms of CPU per cell"
    )
    if result["noise_local_repeats"] is not None:
        print(
            f"noise: the local cells' time differs between consecutive repeats by "
            f"{result['noise_local_repeats']:.1%} (median)"
        )
    if t["local"] != t["ray"]:
        print("no verdict: the two sides decoded with different torch threads")
        return
    for key, what in (("wall", "wall time"), ("cpu", "the cell's own CPU time")):
        line = (
            f"Ray's overhead per cell, {what}: {result[f'{key}_overhead']:+.1%} (mean of {args.repeats} paired repeats"
        )
        if key == "wall":
            line += f"; median {result['wall_overhead_median']:+.1%}"
        if f"{key}_overhead_ci95" in result:
            low, high = result[f"{key}_overhead_ci95"]
            line += f"; 95 % CI [{low:+.1%}, {high:+.1%}])"
            line += f" → {verdict(low, high, result['goal'])} the ≤ 5 % goal" if key == "wall" else ""
        else:
            line += ")"
        print(line)


if __name__ == "__main__":
    main()

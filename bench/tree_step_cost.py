"""What a token tree's step costs against a causal pass of the same size: the figure behind Calibration.tree_ms.

The tree cost-model check priced tree steps with causal passes and came out high on aclsum. This times, on one loaded
target after a typical context, the calibration's own two steps (measure/auto/calibration.pass_step: k → a causal pass
over k tokens, −k → a tree step over k tokens with the tree mask, the host sync and the path's cache compaction), in
rounds that alternate which goes first, and reports per k the paired ratio tree ÷ causal: the geometric mean over
rounds with a 95 % Student t interval on the logs (scipy.stats), n = --rounds.

  python bench/tree_step_cost.py [--target smollm2-135m] [--dtype bfloat16] [--context 250] [--rounds 15]
         [--ks 4,8,12,16] [--threads 2] [--out bench/data/tree_step_cost_<cpu>_<date>.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from specbench.decoding.cached_model import CachedModel
from specbench.measure.auto.calibration import pass_step
from specbench.measure.machine.hardware import describe, hardware_identity
from specbench.measure.stats.statistics import geometric_mean
from specbench.models.loading import load_model


def paired(ratios: list[float]) -> dict:
    """Geometric mean of per-round ratios with its 95 % t interval on the logs (pure; statistics.geometric_mean)."""
    est = geometric_mean([math.log(r) for r in ratios], min_n=2)
    return {"ratio": est.value, "low": est.low, "high": est.high, "n": est.n}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--context", type=int, default=250, help="tokens cached before every timed pass")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ks", default="4,8,12,16", help="pass sizes k (cur + k − 1 nodes), each ≥ 2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    if args.rounds < 2 or min(ks) < 2:
        parser.error(f"--rounds must be at least 2 and every k at least 2 (got {args.rounds}, {args.ks})")
    torch.set_num_threads(args.threads)
    loaded = load_model(args.target, "cpu", args.dtype)
    context = list(range(100, 100 + args.context))  # timing ignores content
    step = pass_step(CachedModel(loaded.model), context, max(ks), True, 1)
    for k in ks:  # allocations and kernel selection
        step(k), step(-k)
    ratios: dict[int, list[float]] = {k: [] for k in ks}
    for r in range(args.rounds):
        for k in ks:
            ms = {}
            for key in (k, -k) if r % 2 == 0 else (-k, k):
                t0 = time.perf_counter()
                step(key)
                ms[key] = time.perf_counter() - t0
            ratios[k].append(ms[-k] / ms[k])
    hw = hardware_identity()
    out = {
        "hardware": describe(hw),
        "target": args.target,
        "dtype": args.dtype,
        "context": args.context,
        "threads": args.threads,
        "per_k": {str(k): paired(v) for k, v in ratios.items()},
    }
    print(f"{out['hardware']}; {args.target} {args.dtype}, {args.threads} threads, context {args.context}")
    for k, p in out["per_k"].items():
        print(f"k {k}: tree step ÷ causal pass {p['ratio']:.3f} [{p['low']:.3f}, {p['high']:.3f}] (n = {p['n']})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()

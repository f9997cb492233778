"""Two drafts of one sweep, paired per example: is draft A faster than draft B? (issue 43: tree vs chain lookup)

A sweep times each cell against its own baseline, interleaved, so a per-example speedup (baseline seconds ÷
speculative seconds, each the record's prefill + decode) is robust to the machine's drift between cells; the ratio
of A's speedup to B's on the same example is then a paired measure. Printed: the geometric mean over the examples
both cells ran of speedup(A) ÷ speedup(B), its 95 % t interval on the logs (scipy.stats.t; n = examples), the same
for the speculative seconds alone, each cell's #MAT (tokens per target pass, Spec-Bench's definition: Σ tokens ÷
Σ (target passes + 1 prefill)) and their ratio, and how many examples gave identical tokens. The results are read by
the one results reader (measure/results/reader.py).
Usage: python bench/compare_drafts.py RESULTS_FOLDER --a tree-lookup --b prompt-lookup [--goal 1.15] [--mat-goal 1.3]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from specbench.measure.results.reader import RunRead, read_folders
from specbench.measure.stats.statistics import geometric_mean


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a sweep folder (or results/) holding one run per draft")
    p.add_argument("--a", required=True, help="the draft under test, as the run's config spells it")
    p.add_argument("--b", required=True, help="the draft it is compared with")
    p.add_argument("--goal", type=float, default=1.15, help="speedup(A) ÷ speedup(B) the issue asks for")
    p.add_argument("--mat-goal", type=float, default=1.3, help="#MAT(A) ÷ #MAT(B) the issue asks for")
    return p.parse_args(argv)


def seconds(engine: dict) -> float:
    return float(engine["prefill_s"]) + float(engine["decode_s"])


def per_example(run: RunRead) -> dict[str, dict]:
    return {str(r["example_id"]): r for r in run.records}


def log_interval(logs: np.ndarray) -> dict:
    """Geometric mean of exp(logs) and its 95 % Student t interval (statistics.geometric_mean; n = len(logs))."""
    est = geometric_mean(logs, min_n=2)
    return {"ratio": est.value, "ci95": (est.low, est.high), "n": est.n}


def mat(records: list[dict]) -> float:
    """Spec-Bench's #MAT over the records: speculative tokens ÷ (target passes after prefill + one prefill each)."""
    tokens = sum(len(r["speculative"]["token_ids"]) for r in records)
    passes = sum(int(r["speculative"]["target_calls"]) + 1 for r in records)
    return tokens / passes


def compare(a: RunRead, b: RunRead) -> dict:
    ra, rb = per_example(a), per_example(b)
    shared = sorted(set(ra) & set(rb))
    if len(shared) < 2:
        raise SystemExit(f"error: the two runs share {len(shared)} examples; a paired comparison needs ≥ 2")
    speedup = np.array(
        [
            math.log(seconds(ra[i]["baseline"]) / seconds(ra[i]["speculative"]))
            - math.log(seconds(rb[i]["baseline"]) / seconds(rb[i]["speculative"]))
            for i in shared
        ]
    )
    spec_time = np.array([math.log(seconds(rb[i]["speculative"]) / seconds(ra[i]["speculative"])) for i in shared])
    mat_a, mat_b = mat([ra[i] for i in shared]), mat([rb[i] for i in shared])
    return {
        "speedup_ratio": log_interval(speedup),
        "speculative_time_ratio": log_interval(spec_time),
        "mat": (mat_a, mat_b, mat_a / mat_b),
        "identical": sum(ra[i]["speculative"]["token_ids"] == rb[i]["speculative"]["token_ids"] for i in shared),
        "n": len(shared),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    found = read_folders([Path(args.folder)])
    by_draft: dict[str, RunRead] = {}
    for run in found.runs:
        by_draft.setdefault(str(run.manifest.get("config", {}).get("draft")), run)
    missing = [d for d in (args.a, args.b) if d not in by_draft]
    if missing:
        raise SystemExit(f"error: no run of draft {', '.join(missing)} under {args.folder}; found {sorted(by_draft)}")
    out = compare(by_draft[args.a], by_draft[args.b])
    hw = by_draft[args.a].manifest.get("hardware", {})
    cfg = by_draft[args.a].manifest.get("config", {})
    print(
        f"{args.a} vs {args.b}: {cfg.get('task')} × {out['n']} examples, {cfg.get('dtype')}, γ={cfg.get('gamma')}, "
        f"T={cfg.get('sampling', {}).get('temperature')}; {hw.get('cpu_model')}, {hw.get('torch_threads')} threads"
    )
    for label, key, goal in (
        ("speedup(A) ÷ speedup(B), paired per example", "speedup_ratio", args.goal),
        ("speculative seconds B ÷ A, paired per example", "speculative_time_ratio", None),
    ):
        r = out[key]
        lo, hi = r["ci95"]
        tail = f"  goal ≥ {goal}" if goal else ""
        print(f"  {label:<48} {r['ratio']:.3f}  95 % CI [{lo:.3f}, {hi:.3f}]  n = {r['n']}{tail}")
    ma, mb, ratio = out["mat"]
    print(f"  #MAT  A {ma:.3f}  B {mb:.3f}  ratio {ratio:.3f}  goal ≥ {args.mat_goal}")
    print(f"  identical speculative tokens: {out['identical']}/{out['n']}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

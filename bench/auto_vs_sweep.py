"""`make bench-auto`: is the default job's auto choice as fast as the best configuration a grid finds?

Runs, back to back on this machine: the default job (`make run`'s flags: auto draft, dtype and
γ) on each task, then a sweep per dtype over γ × the drafts available for the target, on the
same tasks, examples, budget and repeats. Per task it prints the default job's speedup with its
interval and choices, the best sweep cell, and their ratio. Goals (issue 12): the default job
reaches ≥ 0.95× the best cell's speedup, and is never below 1.0× where the best cell is ≥ 1.05×.
Every speedup is against plain decoding in the run's own dtype (bf16 runs against a bf16
baseline), so the comparison never credits the draft with what the dtype did. Speedups are the
primary measure (speedup_geomean: geometric mean over examples, BCa interval); the default job's
prediction made before timing (auto_predicted_speedup, issue 31) is printed beside its measurement.
The best cell of a grid is the luckiest of many (an upward-biased bar): the ratio is conservative.
Usage: python bench/auto_vs_sweep.py --job "--draft auto --dtype auto --gamma auto --limit 16"
       [--tasks ding-de-en,aclsum] [--gammas 1-8] [--drafts prompt-lookup,distilled,lookup+distilled]
       [--dtypes float32,bfloat16] [--sweep-repeats 1] [--out results/bench-auto]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

KEY = "speedup_geomean"  # the primary measure (docs/metrics.md)


def cli(*args: str) -> dict | list:
    cmd = [sys.executable, "-m", "specbench.cli", *args, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{proc.stderr.strip()[-2000:]}")
    for line in proc.stderr.splitlines():
        if line.startswith(("auto:", "hardware:", "warning:")):
            print("   ", line)
    return json.loads(proc.stdout)


def option(job: list[str], name: str, default: str) -> str:
    return job[job.index(name) + 1] if name in job else default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="the default job's flags, as in the Makefile")
    parser.add_argument("--tasks", default="ding-de-en,aclsum")
    parser.add_argument("--gammas", default="1-8")
    parser.add_argument("--drafts", default="prompt-lookup,distilled,lookup+distilled")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out", default="results/bench-auto")
    parser.add_argument(
        "--sweep-repeats",
        default=None,
        help="repeats per sweep cell (default: the job's; 1 halves the sweep's time, same expectation)",
    )
    args = parser.parse_args()
    job = shlex.split(args.job)
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    shared = [
        "--limit",
        option(job, "--limit", "8"),
        "--repeats",
        args.sweep_repeats or option(job, "--repeats", "1"),
        "--results-dir",
        str(out),
    ]
    t0 = time.perf_counter()
    default = {}
    for task in args.tasks.split(","):
        print(f"default job on {task}")
        default[task] = cli("run", "--task", task, *job, "--results-dir", str(out))
    t_default = time.perf_counter() - t0
    cells = []
    for dtype in args.dtypes.split(","):
        print(f"sweep in {dtype}")
        cells += cli(
            "sweep", "--task", args.tasks, "--gamma", args.gammas, "--draft", args.drafts, "--dtype", dtype, *shared
        )
    rows = []
    for task, s in default.items():
        mine = [c["summary"] for c in cells if c["summary"]["task"] == task and c["summary"].get(KEY)]
        best = max(mine, key=lambda x: x[KEY])
        ratio = s[KEY] / best[KEY]
        ok = ratio >= 0.95 and not (best[KEY] >= 1.05 and s[KEY] < 1.0)
        rows.append({"task": task, "default": s, "best": best, "ratio": ratio, "goal_met": ok})
        ci, bci = s.get(KEY + "_ci95") or [None, None], best.get(KEY + "_ci95") or [None, None]
        print(
            f"{task}: default job {s[KEY]:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] ({s['draft']}, γ {s['gamma']}, "
            f"{s['dtype']}; suspect={s['suspect_timing']}) | best cell {best[KEY]:.3f} "
            f"[{bci[0]:.3f}, {bci[1]:.3f}] ({best['draft']}, γ {best['gamma']}, {best['dtype']}) | "
            f"ratio {ratio:.3f} (goal ≥ 0.95): {'met' if ok else 'NOT met'}"
        )
        if s.get("auto_predicted_speedup"):
            lo, hi = s.get("auto_predicted_interval") or [None, None]
            print(
                f"{'':{len(task)}}  predicted before timing {s['auto_predicted_speedup']:.3f} [{lo:.3f}, {hi:.3f}]; "
                f"measured ÷ predicted {s['auto_prediction_ratio']:.3f} (goal 0.90–1.10)"
            )
    print(f"default job took {t_default:.0f} s for {len(default)} tasks; everything {time.perf_counter() - t0:.0f} s")
    print(f"hardware: {next(iter(default.values())).get('hardware')}")
    (out / "bench-auto.json").write_text(json.dumps(rows, indent=2))
    print(f"written: {out / 'bench-auto.json'}")


if __name__ == "__main__":
    main()

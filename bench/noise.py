"""`make bench-noise`: does `specbench run` flag a run whose machine got busy half-way?

Two runs of the same small configuration, back to back, each in its own `specbench run`
process: a control on the idle machine, and one during which this script starts a CPU hog
(one busy-loop process per core) a few seconds into the measurement and stops it when the
run ends. The goal: the hog run's summary says `suspect_timing: true` (and its output prints
the warning line); the control says false. The detector itself is tested deterministically
with a fake clock in tests/test_measure.py; this is the same check on real hardware.
Usage: python bench/noise.py [--limit 6] [--task ding-de-en] [--hog-after SECONDS]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def busy_loop() -> None:
    while True:
        pass


def specbench_run(results: Path, args, hog_after: float | None) -> tuple[dict, str, float]:
    """One `specbench run` in a subprocess; a hog of one busy process per core from `hog_after` s to its end."""
    cmd = [
        sys.executable,
        "-m",
        "specbench.cli",
        "run",
        "--task",
        args.task,
        "--limit",
        str(args.limit),
        "--draft",
        "prompt-lookup",
        "--gamma",
        "3",
        "--results-dir",
        str(results),
        "--json",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hogs: list[mp.Process] = []
    if hog_after is not None:
        deadline = time.time() + hog_after
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            hogs = [mp.Process(target=busy_loop, daemon=True) for _ in range(os.cpu_count() or 1)]
            for h in hogs:
                h.start()
    out, err = proc.communicate()
    for h in hogs:
        h.terminate()
        h.join()
    if proc.returncode != 0:
        raise SystemExit(
            f"specbench run failed ({proc.returncode}): {err.strip().splitlines()[-1] if err.strip() else ''}"
        )
    return json.loads(out), err, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="ding-de-en")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument(
        "--hog-after",
        type=float,
        default=None,
        help="seconds into the hog run to start the hog (default: 60 %% of the control run's duration, "
        "i.e. after loading and calibration, half-way through the examples)",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specbench-noise-"))
    try:
        rows = []
        for label in ("idle (control)", "hog started mid-run"):
            hog = None if not rows else (args.hog_after if args.hog_after is not None else 0.6 * rows[0][3])
            summary, err, secs = specbench_run(root / label.split()[0], args, hog)
            warned = "timings look disturbed" in err
            rows.append((label, summary, warned, secs))
            print(
                f"{label:22s} speedup {summary['speedup']:.3f}  suspect_timing={summary['suspect_timing']}  "
                f"warning printed={warned}  ({secs:.0f} s)"
            )
            for note in summary.get("timing_notes") or []:
                print(f"{'':22s} - {note}")
        control, hogged = rows[0][1]["suspect_timing"], rows[1][1]["suspect_timing"]
        print(
            f"goal: control not flagged ({'met' if not control else 'NOT met'}), hog flagged "
            f"({'met' if hogged and rows[1][2] else 'NOT met'})"
        )
        print(f"hardware: {rows[0][1].get('hardware')}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

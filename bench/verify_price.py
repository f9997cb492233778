"""How well auto's prediction prices a verify pass: the timed runs' verify time ÷ prediction.verify_prices' price.

Each `--gamma auto` run stores its bare pass-cost curve (manifest.json → auto.calibrations) and, per example, the
speculative engine's verify seconds and pass lengths and the baseline's decode seconds. Priced at the run's own
timed plain step (so the machine's speed cancels), the timed verify time over the priced one says how far the price
was from what the loop paid; its log mean and sd over runs are what docs/benchmarks.md quotes.

  python bench/verify_price.py                        # the runs recorded in bench/data (20 idle make-run tasks)
  python bench/verify_price.py results/*-auto-*       # runs of your own (auto runs only)
  python bench/verify_price.py --extract DIR... --out bench/data/verify_price_runs_<date>.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from specbench.measure.auto.prediction import verify_prices

DATA = Path(__file__).parent / "data" / "verify_price_runs_2026-12-02.json"


def extract(folder: Path) -> dict:
    """What the comparison needs from one auto run folder: the bare curve, the timed step, the verify passes."""
    auto = json.loads((folder / "manifest.json").read_text())["auto"]
    records = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines() if line.strip()]
    base, spec = [r["baseline"] for r in records], [r["speculative"] for r in records]
    counts: dict[str, int] = {}
    for r in spec:
        for k in r["pass_lengths"]:
            counts[str(k)] = counts.get(str(k), 0) + 1
    return {
        "run": f"{folder.parent.name}/{folder.name}",  # make runs reuse run ids: the parent tells them apart
        "bare_ms": auto["calibrations"][auto["dtype"]]["target_ms"],
        "step_ms": 1e3 * sum(b["decode_s"] for b in base) / sum(b["n_tokens"] - 1 for b in base),
        "verify_s": sum(r["verify_s"] for r in spec),
        "pass_counts": counts,
    }


def timed_over_priced(run: dict) -> float:
    prices = verify_prices(run["step_ms"], {int(k): v for k, v in run["bare_ms"].items()})
    priced_s = sum(prices[int(k)] * n for k, n in run["pass_counts"].items()) / 1e3
    return run["verify_s"] / priced_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path, help="auto run folders (default: the recorded runs)")
    ap.add_argument("--extract", action="store_true", help="write the folders' extracts to --out instead")
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args(argv)
    if args.extract:
        args.out.write_text(json.dumps([extract(f) for f in args.folders], indent=1) + "\n")
        print(f"wrote {len(args.folders)} runs to {args.out}")
        return 0
    runs = [extract(f) for f in args.folders] if args.folders else json.loads(DATA.read_text())
    if len(runs) < 2:
        print("need at least 2 auto runs", file=sys.stderr)
        return 2
    logs = []
    for run in runs:
        ratio = timed_over_priced(run)
        logs.append(math.log(ratio))
        print(f"{run['run']:45s} timed verify ÷ priced {ratio:.3f}")
    print(
        f"n = {len(logs)} runs: log error mean {statistics.mean(logs):+.3f}, sd {statistics.stdev(logs):.3f}, "
        f"largest miss {max(abs(math.exp(x) - 1) for x in logs):.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

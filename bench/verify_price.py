"""How well auto's prediction prices a verify pass: the timed runs' verify time ÷ prediction.verify_prices' price.

Each `--gamma auto` run stores its bare pass-cost curve (manifest.json → auto.calibrations) and, per example, the
speculative engine's verify seconds and pass lengths and the baseline's decode seconds. Priced at the run's own
timed plain step (so the machine's speed cancels), the timed verify time over the priced one says how far the price
was from what the loop paid; its log mean and sd over runs are what docs/benchmarks.md quotes.

  python bench/verify_price.py                        # the runs recorded in bench/data (20 idle make-run tasks)
  python bench/verify_price.py results/*-auto-*       # runs of your own (auto runs only)
  python bench/verify_price.py --extract DIR... --out bench/data/verify_price_runs_<date>.json
  python bench/verify_price.py --rule line-t1 results/bench-coverage-epyc*/*/*   # another pricing rule, by task
  python bench/verify_price.py --check --rule line-t1 results/bench-coverage-epyc-5/*/*   # measured ÷ check under it

--rule: `line` is specbench's (prediction.verify_prices: a Theil–Sen line through k ≥ 2, over the lower of t(1) and
the line at 1, no pass priced below a plain step); `line-t1` the same line over t(1) always, max(line, t(1)) ÷ t(1);
`raw` the bare curve's own points over t(1), no line. A run that kept its verify rounds' medians
(loop_costs.<dtype>.verify_bare_ms) is priced from them, as its check was; older runs from the calibration burst.

--check: the run's whole cost-model check re-priced under --rule, and measured ÷ that check (the issue-40 goal reads
it within ±5 %). Only the verify passes' prices change, so each timed example's priced speculative time moves by
Σ (new − old price) over its own passes (scaled to its plain step); its per-example factor S ÷ (S + Δ) uses the
timed speculative time S for the priced one (they differ by a few %, so the factor errs by ~0.1 %). Under the rule
the run used the factor is exactly 1: the run's own check comes back (needs the rounds, verify_bare_ms).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

from specbench.measure.auto.prediction import verify_prices
from specbench.measure.results.reader import read_run

DATA = Path(__file__).parent / "data" / "verify_price_runs_2026-12-02.json"


def extract(folder: Path) -> dict:
    """What the comparison needs from one auto run folder: the bare curve, the timed step, the verify passes."""
    auto = json.loads((folder / "manifest.json").read_text())["auto"]
    rounds = ((auto.get("loop_costs") or {}).get(auto["dtype"]) or {}).get("verify_bare_ms")
    records = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines() if line.strip()]
    base, spec = [r["baseline"] for r in records], [r["speculative"] for r in records]
    counts: dict[str, int] = {}
    for r in spec:
        for k in r["pass_lengths"]:
            counts[str(k)] = counts.get(str(k), 0) + 1
    return {
        "run": f"{folder.parent.name}/{folder.name}",  # make runs reuse run ids: the parent tells them apart
        "bare_ms": rounds or auto["calibrations"][auto["dtype"]]["target_ms"],  # the rounds', else the burst's
        "bare_from": "rounds" if rounds else "burst",
        "step_ms": 1e3 * sum(b["decode_s"] for b in base) / sum(b["n_tokens"] - 1 for b in base),
        "verify_s": sum(r["verify_s"] for r in spec),
        "pass_counts": counts,
    }


def raw_curve(step_ms: float, bare_ms: dict[int, float]) -> dict[int, float]:
    """The bare curve's own points over t(1), no line (pure); the shipped rule where t(1) is missing or not positive."""
    if bare_ms.get(1, 0.0) <= 0:
        return verify_prices(step_ms, bare_ms)
    return {k: step_ms * t / bare_ms[1] for k, t in bare_ms.items()}


RULES = {"line": verify_prices, "line-t1": functools.partial(verify_prices, over_first=True), "raw": raw_curve}


def timed_over_priced(run: dict, rule: str = "line") -> float:
    prices = RULES[rule](run["step_ms"], {int(k): v for k, v in run["bare_ms"].items()})
    priced_s = sum(prices[int(k)] * n for k, n in run["pass_counts"].items()) / 1e3
    return run["verify_s"] / priced_s


def repriced_check(manifest: dict, summary: dict, examples: list[dict], rule: str) -> float | None:
    """The run's cost-model check (summary auto_check_speedup) with its verify passes priced under `rule` from the
    rounds the run kept (pure; the module docstring says how); None for a run without a check or rounds."""
    auto = manifest.get("auto") or {}
    costs = (auto.get("loop_costs") or {}).get(auto.get("dtype")) or {}
    bare = {int(k): v for k, v in (costs.get("verify_bare_ms") or {}).items()}
    check = summary.get("auto_check_speedup")
    if not bare or not check:
        return None
    old = {int(k): v for k, v in costs["verify_ms"].items()}
    new = RULES[rule](costs["step_ms"], bare)
    logs = []
    for e in examples:
        base, spec = e["baseline"], e["speculative"]
        ks = spec["pass_lengths"]
        if not ks or base["n_tokens"] < 2:  # in the check's geometric mean too, and no verify price of its own moves
            logs.append(0.0)
            continue
        # a pass longer than the curve is priced at its widest k under both rules, as the run's check priced it
        delta_ms = sum(new.get(k, new[max(new)]) - old.get(k, old[max(old)]) for k in ks)
        delta_s = delta_ms / costs["step_ms"] * base["decode_s"] / (base["n_tokens"] - 1)
        timed_s = spec["prefill_s"] + spec["decode_s"]
        logs.append(math.log(timed_s / (timed_s + delta_s)))
    return check * math.exp(statistics.mean(logs))


def print_checks(folders: list[Path], rule: str) -> int:
    """Per run measured ÷ check re-priced under `rule`, and per task how many lie within ±5 % (with the log mean)."""
    by_task: dict[str, list[float]] = {}
    for folder in folders:
        run, why = read_run(folder)  # specbench's one reader: records checked against the summary
        check = repriced_check(run.manifest, run.summary, run.records, rule) if run and run.summary else None
        if check is None:
            reasons = "; ".join(reason for _, reason in why) or "no cost-model check with kept verify rounds"
            print(f"skipped {folder}: {reasons}", file=sys.stderr)
            continue
        ratio = run.summary["speedup_geomean"] / check
        by_task.setdefault(task_of(str(folder)), []).append(ratio)
        print(f"{folder.parent.name}/{folder.name:45s} measured ÷ check ({rule}) {ratio:.3f}")
    for task, ratios in sorted(by_task.items()):
        within = sum(abs(r - 1) <= 0.05 for r in ratios)
        mean = statistics.mean(math.log(r) for r in ratios)
        print(
            f"{task}: {within}/{len(ratios)} within ±5 %, log mean {mean:+.3f}, "
            f"range {min(ratios):.3f}–{max(ratios):.3f}"
        )
    if not by_task:
        print(
            "no run to re-price: give auto run folders that kept their verify rounds (verify_bare_ms)", file=sys.stderr
        )
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path, help="auto run folders (default: the recorded runs)")
    ap.add_argument("--extract", action="store_true", help="write the folders' extracts to --out instead")
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--rule", choices=sorted(RULES), default="line", help="how the bare curve prices a verify pass")
    ap.add_argument("--check", action="store_true", help="measured ÷ the run's whole check, re-priced under --rule")
    args = ap.parse_args(argv)
    if args.check:
        return print_checks([f for f in args.folders if is_auto_run(f)], args.rule)
    if args.extract:
        args.out.write_text(json.dumps([extract(f) for f in args.folders], indent=1) + "\n")
        print(f"wrote {len(args.folders)} runs to {args.out}")
        return 0
    folders = [f for f in args.folders if is_auto_run(f)]
    for skipped in sorted(set(args.folders) - set(folders)):
        print(f"skipped {skipped}: not an auto run folder (no manifest.json with auto calibrations)", file=sys.stderr)
    runs = [extract(f) for f in folders] if args.folders else json.loads(DATA.read_text())
    if len(runs) < 2:
        print("need at least 2 auto runs", file=sys.stderr)
        return 2
    by_task: dict[str, list[float]] = {}
    for run in runs:
        ratio = timed_over_priced(run, args.rule)
        by_task.setdefault(task_of(run["run"]), []).append(math.log(ratio))
        print(f"{run['run']:45s} timed verify ÷ priced {ratio:.3f}")
    groups = by_task | ({"all": [x for v in by_task.values() for x in v]} if len(by_task) > 1 else {})
    for task, logs in groups.items():
        if len(logs) > 1:
            print(
                f"{task}: n = {len(logs)} runs, rule {args.rule}: log error mean {statistics.mean(logs):+.3f}, "
                f"sd {statistics.stdev(logs):.3f}, largest miss {max(abs(math.exp(x) - 1) for x in logs):.0%}"
            )
    return 0


def is_auto_run(folder: Path) -> bool:
    """Whether `folder` is a finished auto run with its calibrations and records (what extract reads)."""
    manifest = folder / "manifest.json"
    if not manifest.is_file() or not (folder / "examples.jsonl").is_file():
        return False
    return bool((json.loads(manifest.read_text()).get("auto") or {}).get("calibrations"))


def task_of(run: str) -> str:
    """The task of an auto run's folder name ("<parent>/<task>-auto-g…"; pure): what its runs are grouped by."""
    name = run.rsplit("/", 1)[-1]
    return name.split("-auto-", 1)[0] if "-auto-" in name else "runs"


if __name__ == "__main__":
    sys.exit(main())

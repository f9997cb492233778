"""How far apart do identical runs land? The floor under any per-run check of a speed prediction (issue 40).

Issue 40 asks the auto run's "cost-model check (known acceptance)" to fall within ±5 % of the speedup each run then
measures. A measured speedup carries its run's own timing noise: rerun the same command on the same examples and it
moves. This bench reruns one auto job R times per task with the same seed (the same examples, the same pilot), each
into its own folder, and reports per task the spread of log(measured speedup) across the reruns (s_m), the spread of
log(measured ÷ check) (s_e), and, pooled over the tasks, what s_m alone implies: a check with no error at all would
still leave a share Φ(ln 0.95 ⁄ s_m) + Φ(−ln 1.05 ⁄ s_m) of runs outside ±5 % (normal logs), given with the 95 %
chi-square interval of s_m. Reruns whose auto choice differs (the pilot timed the candidates differently) are
reported and kept apart.

Usage: python bench/rerun_spread.py [--tasks aclsum,ding-de-en] [--runs 4] [--seed 95] [--out results/bench-rerun]
       python bench/rerun_spread.py --read results/bench-rerun/<stamp>   (the folders of an earlier call)
The runs time things: use an idle machine.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import time
from collections import Counter
from pathlib import Path

from prediction_coverage import CHECK_TOLERANCE, KEY, choice_of, run_one, runs_parser  # a sibling in bench/

from specbench.measure.results.reader import read_run


def rerun_row(task: str, rerun: int, summary: dict) -> dict:
    """One rerun's line (pure): its choice, the measured speedup and the cost-model check."""
    return {
        "task": task,
        "rerun": rerun,
        "choice": choice_of(summary),
        "measured": summary.get(KEY),
        "check": summary.get("auto_check_speedup"),
        "halves": summary.get("repeat_halves_ratio"),
    }


def spread(rows: list[dict]) -> dict:
    """Over one task's reruns that measured a speedup and printed a check, those of its most common choice (pure): n,
    s_m = sd of log measured, s_e = sd of log (measured ÷ check), and how many made another choice."""
    usable = [r for r in rows if r["measured"] and r["check"]]
    if not usable:
        return {"choice": None, "n": 0, "s_m": float("nan"), "s_e": float("nan"), "other_choice": 0}
    common = Counter(r["choice"] for r in usable).most_common(1)[0][0]  # a tie: the first rerun's choice
    same = [r for r in usable if r["choice"] == common]
    logs = [math.log(r["measured"]) for r in same]
    errs = [math.log(r["measured"] / r["check"]) for r in same]
    sd = statistics.stdev if len(same) > 1 else (lambda _x: float("nan"))
    return {"choice": common, "n": len(same), "s_m": sd(logs), "s_e": sd(errs), "other_choice": len(usable) - len(same)}


def floor(spreads: list[dict]) -> dict:
    """Pooled over tasks (pure): s_m from the pooled within-task variance (Σ (n − 1) s²  ⁄ Σ (n − 1)), its 95 %
    chi-square interval, and the share of runs a perfect check would still leave outside ±CHECK_TOLERANCE at s_m and
    at the interval's ends."""
    from scipy import stats

    usable = [s for s in spreads if s["n"] > 1]
    df = sum(s["n"] - 1 for s in usable)
    if df == 0:
        return {"df": 0}
    pooled = math.sqrt(sum((s["n"] - 1) * s["s_m"] ** 2 for s in usable) / df)
    low = pooled * math.sqrt(df / stats.chi2.ppf(0.975, df))
    high = pooled * math.sqrt(df / stats.chi2.ppf(0.025, df))
    low_edge, high_edge = math.log(1 - CHECK_TOLERANCE), math.log(1 + CHECK_TOLERANCE)  # ±5 % of measured ÷ check

    def outside(s: float) -> float:
        return float(stats.norm.cdf(low_edge / s) + stats.norm.sf(high_edge / s)) if s > 0 else 0.0

    return {
        "df": df,
        "s_m": pooled,
        "s_m_ci95": [low, high],
        "outside": outside(pooled),
        "outside_ci95": [outside(low), outside(high)],
    }


def summaries(folder: Path) -> list[tuple[str, int, dict]]:
    """(task, rerun, summary) of every run under `folder`/<task>-r<i>/, through specbench's checked reader."""
    out = []
    for rerun_dir in sorted(p for p in folder.iterdir() if p.is_dir() and "-r" in p.name):
        task, _, number = rerun_dir.name.rpartition("-r")
        for run_dir in sorted(p for p in rerun_dir.iterdir() if p.is_dir()):
            run, _ = read_run(run_dir)
            if run and run.summary and number.isdigit():
                out.append((task, int(number), run.summary))
    return out


def report(rows: list[dict]) -> dict:
    nan = float("nan")
    print("| task | rerun | choice | measured | cost-model check | measured ÷ check | A B B A halves |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["measured"] / r["check"] if r["measured"] and r["check"] else None
        print(
            f"| {r['task']} | {r['rerun']} | {r['choice']} | {r['measured'] or nan:.3f} | {r['check'] or nan:.3f} | "
            f"{ratio or nan:.3f} | {r['halves'] or nan:.3f} |"
        )
    by_task = {t: spread([r for r in rows if r["task"] == t]) for t in dict.fromkeys(r["task"] for r in rows)}
    for task, s in by_task.items():
        print(
            f"{task}: {s['n']} reruns of {s['choice']} ({s['other_choice']} chose otherwise): sd of log measured "
            f"{s['s_m']:.3f}, of log(measured ÷ check) {s['s_e']:.3f}"
        )
    pooled = floor(list(by_task.values()))
    if pooled["df"]:
        lo, hi = pooled["s_m_ci95"]
        olo, ohi = pooled["outside_ci95"]
        print(
            f"pooled ({pooled['df']} df): identical runs' measured speedups spread sd {pooled['s_m']:.3f} "
            f"[95 % chi-square {lo:.3f}, {hi:.3f}]; a check with no error would leave {pooled['outside']:.0%} "
            f"[{olo:.0%}, {ohi:.0%}] of runs outside ±{CHECK_TOLERANCE:.0%}"
        )
    return {"rows": rows, "tasks": by_task, "pooled": pooled}


def main(argv: list[str] | None = None) -> dict:
    parser = runs_parser(__doc__, "aclsum,ding-de-en", 4, "identical reruns per task", "results/bench-rerun")
    parser.add_argument("--seed", type=int, default=95, help="every rerun's --seed (the same examples each time)")
    parser.add_argument("--read", help="a folder of an earlier call: report its runs, run nothing")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error(f"--runs must be at least 2 to have a spread (got {args.runs})")
    out = Path(args.read) if args.read else Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    if not args.read:
        for i in range(1, args.runs + 1):  # tasks interleaved, so a drift of the machine falls on both alike
            for task in args.tasks.split(","):
                print(f"rerun {i}/{args.runs}: {task}, --seed {args.seed}")
                run_one(task, args.seed, shlex.split(args.job), out / f"{task}-r{i}")
    rows = [rerun_row(task, i, s) for task, i, s in summaries(out)]
    if not rows:
        parser.error(f"no finished run under {out}/<task>-r<i>/")
    result = report(rows)
    (out / "rerun-spread.json").write_text(json.dumps({"job": args.job, "seed": args.seed, **result}, indent=2))
    print(f"written: {out / 'rerun-spread.json'}")
    return result


if __name__ == "__main__":
    main()

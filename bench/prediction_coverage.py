"""Does the auto choice's held-out 95 % interval cover the speedup each run then measures? (issue 40)

Runs N fresh auto runs per task (`make run`'s flags by default), each on a different example set: run i uses
`--seed <first-seed + i>`, which reorders the task's seeded sample, so both the timed examples and the pilot
examples after them change from run to run (the CLI has no --offset; at T = 0 the seed chooses nothing else). Each
run goes into its own folder. Per run it prints "predicted (held out)" with its interval, the "cost-model check
(known acceptance)", the measured speedup (speedup_geomean), whether the held-out interval covers the measurement
and whether the check is within ±5 %; per task, the coverage k/N with its 95 % Clopper–Pearson interval and the
checks within ±5 %. Goals (issue 40): coverage ≥ 90 % of ≥ 10 runs on both tasks; every check within ±5 %.
The runs time things: use an idle machine (a run flagged `suspect_timing` is counted and marked).

Usage: python bench/prediction_coverage.py [--tasks ding-de-en,aclsum] [--runs 10] [--first-seed 1]
       [--job "--draft auto --dtype auto --gamma auto --limit 20 --repeats 2"] [--out results/bench-coverage]
       [--resume results/bench-coverage/<stamp>]  (an interrupted run: its rows.jsonl keeps every finished run)
A quick check that it works: --runs 1 --job "--draft prompt-lookup --gamma auto --limit 2".
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

KEY = "speedup_geomean"  # the primary measure, which both numbers predict (docs/metrics.md)
CHECK_TOLERANCE = 0.05  # the cost-model check's goal: measured ÷ check within 1 ± this
OUT = "results/bench-coverage"
ROWS_FILE = "rows.jsonl"  # one line per finished run, appended as each ends
DEFAULT_JOB = "--draft auto --dtype auto --gamma auto --limit 20 --repeats 2"  # make run's (Makefile DEFAULT_JOB)


def run_one(task: str, seed: int, job: list[str], out: Path) -> dict:
    """One fresh auto run (subprocess, --json); its auto lines are echoed."""
    cmd = [sys.executable, "-m", "specbench.cli", "run", "--task", task, *job, "--seed", str(seed)]
    cmd += ["--results-dir", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{proc.stderr.strip()[-2000:]}")
    for line in proc.stderr.splitlines():
        if line.startswith(("auto: predicted", "auto: cost-model check", "warning:")):
            print("   ", line)
    return json.loads(proc.stdout)


def choice_of(summary: dict) -> str:
    """What the auto run chose, as one label (pure): draft, γ, dtype."""
    return f"{summary.get('draft')} γ {summary.get('gamma')} {summary.get('dtype')}"


def coverage_row(task: str, seed: int, summary: dict) -> dict:
    """One run's line of the table (pure): the two numbers, the measurement, covered (None when the run has no
    held-out interval or no measurement) and whether the check is within CHECK_TOLERANCE."""
    measured = summary.get(KEY)
    low, high = summary.get("auto_predicted_interval") or [None, None]
    check = summary.get("auto_check_speedup")
    covered = None if None in (measured, low, high) else bool(low <= measured <= high)
    check_ratio = measured / check if measured is not None and check else None
    return {
        "task": task,
        "seed": seed,
        "run_id": summary.get("run_id"),
        "choice": choice_of(summary),
        "predicted": summary.get("auto_predicted_speedup"),
        "interval": [low, high],
        "n_pilot": summary.get("auto_predicted_n_pilot"),
        "check": check,
        "check_interval": summary.get("auto_check_interval"),
        "replay_s": summary.get("auto_replay_s"),
        "measured": measured,
        "measured_ci95": summary.get(f"{KEY}_ci95"),
        "covered": covered,
        "check_ratio": check_ratio,
        "check_within": None if check_ratio is None else abs(check_ratio - 1) <= CHECK_TOLERANCE,
        "suspect_timing": summary.get("suspect_timing"),
    }


def check_bias(ratios: list[float]) -> dict:
    """The cost model's bias over runs (pure): the geometric mean of measured ÷ check with its 95 % t interval on the
    logs, and the runs' spread (sd of the log ratio). A single run's ratio carries that run's timing noise; the mean
    says whether the pricing itself is off, and `bias_within` whether its interval lies inside ±CHECK_TOLERANCE."""
    import math

    from scipy import stats

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    if n < 2:
        return {"runs": n, "mean_ratio": math.exp(logs[0]) if logs else None, "ci95": None, "log_sd": None}
    mean, sd = sum(logs) / n, float(stats.tstd(logs))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    return {
        "runs": n,
        "mean_ratio": math.exp(mean),
        "ci95": [low, high],
        "log_sd": sd,
        "bias_within": 1 - CHECK_TOLERANCE <= low and high <= 1 + CHECK_TOLERANCE,
    }


def tally(rows: list[dict]) -> dict[str, dict]:
    """Per task (pure): covered k of n runs with a held-out interval, its 95 % Clopper–Pearson interval, the checks
    within ±5 %, whether each goal is met (coverage ≥ 0.90 over ≥ 10 runs; every check within), and the cost
    model's bias over the runs (check_bias)."""
    from scipy import stats

    out: dict[str, dict] = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        judged = [r["covered"] for r in mine if r["covered"] is not None]
        k, n = sum(judged), len(judged)
        ci = stats.binomtest(k, n).proportion_ci(method="exact") if n else None
        checks = [r["check_within"] for r in mine if r["check_within"] is not None]
        out[task] = {
            "covered": k,
            "runs": n,
            "coverage": k / n if n else None,
            "coverage_ci95": [ci.low, ci.high] if ci else None,
            "checks_within": sum(checks),
            "checks": len(checks),
            "suspect_runs": sum(bool(r["suspect_timing"]) for r in mine),
            "coverage_goal_met": n >= 10 and k / n >= 0.90,
            "check_goal_met": bool(checks) and all(checks),
            "check_bias": check_bias([r["check_ratio"] for r in mine if r["check_ratio"]]),
        }
    return out


def fmt(x, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def print_table(rows: list[dict], tallies: dict[str, dict]) -> None:
    print(
        "| task | seed | choice | predicted (held out) [95 %] | n pilot | cost-model check | measured | covered | "
        "measured ÷ check |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["interval"]
        mark = " (suspect timing)" if r["suspect_timing"] else ""
        print(
            f"| {r['task']} | {r['seed']} | {r['choice']} | {fmt(r['predicted'])} [{fmt(lo)}, {fmt(hi)}] | "
            f"{r['n_pilot'] or '—'} | {fmt(r['check'])} | {fmt(r['measured'])}{mark} | "
            f"{'—' if r['covered'] is None else 'yes' if r['covered'] else 'no'} | {fmt(r['check_ratio'])} |"
        )
    for task, t in tallies.items():
        ci = t["coverage_ci95"] or [None, None]
        print(
            f"{task}: held-out interval covered {t['covered']}/{t['runs']} runs ({fmt(t['coverage'], 2)}, 95 % CP "
            f"{fmt(ci[0], 2)}–{fmt(ci[1], 2)}; goal ≥ 0.90 of ≥ 10: {'met' if t['coverage_goal_met'] else 'NOT met'}); "
            f"cost-model check within ±{CHECK_TOLERANCE:.0%}: {t['checks_within']}/{t['checks']} "
            f"({'met' if t['check_goal_met'] else 'NOT met'}); {t['suspect_runs']} runs flagged suspect_timing"
        )
        b = t["check_bias"]
        if b["ci95"]:
            print(
                f"{task}: measured ÷ check over {b['runs']} runs: mean {b['mean_ratio']:.3f} [95 % t "
                f"{b['ci95'][0]:.3f}, {b['ci95'][1]:.3f}] (the pricing's bias: "
                f"{'inside' if b['bias_within'] else 'NOT inside'} ±{CHECK_TOLERANCE:.0%}); one run's spread "
                f"sd {b['log_sd']:.1%} (timing noise and that run's pricing error together)"
            )


def finished_rows(path: Path, job: str) -> list[dict]:
    """The rows an interrupted run of the same job appended (a torn last line is cut off the file, so the next append
    starts on a line of its own; another job's rows are refused)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        other = row.pop("job", None)
        if other != job:
            raise ValueError(f"{path} holds runs of --job {other!r}; resume it with that --job, not {job!r}")
        rows.append(row)
    return rows


def runs_parser(doc: str, tasks: str, runs: int, runs_help: str, out: str) -> argparse.ArgumentParser:
    """The options every bench that repeats auto runs takes: --tasks, --runs, --job, --out."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--tasks", default=tasks)
    parser.add_argument("--runs", type=int, default=runs, help=runs_help)
    parser.add_argument("--job", default=DEFAULT_JOB, help="the run's flags (not --task, --seed, --results-dir)")
    parser.add_argument("--out", default=out)
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = runs_parser(__doc__, "ding-de-en,aclsum", 10, "fresh auto runs per task, each on its own example set", OUT)
    parser.add_argument("--first-seed", type=int, default=1, help="run i uses --seed first-seed + i")
    parser.add_argument("--resume", help="a folder of an interrupted run: its finished runs are kept, not rerun")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1 (got {args.runs})")
    job = shlex.split(args.job)
    out = Path(args.resume) if args.resume else Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    try:
        rows = finished_rows(out / ROWS_FILE, args.job)
    except ValueError as exc:
        parser.error(str(exc))  # a usage error: exit 2, one line
    done = {(r["task"], r["seed"]) for r in rows}
    for i in range(args.runs):  # tasks interleaved, so a drift of the machine falls on both alike
        for task in args.tasks.split(","):
            seed = args.first_seed + i
            if (task, seed) in done:
                continue
            print(f"run {i + 1}/{args.runs}: {task}, --seed {seed}")
            row = coverage_row(task, seed, run_one(task, seed, job, out))
            with (out / ROWS_FILE).open("a", encoding="utf-8") as f:  # append-only: an interruption keeps it
                f.write(json.dumps({"job": args.job, **row}) + "\n")
            rows.append(row)
    tallies = tally(rows)
    print_table(rows, tallies)
    result = {"job": args.job, "rows": rows, "tasks": tallies}
    out.mkdir(parents=True, exist_ok=True)
    (out / "prediction-coverage.json").write_text(json.dumps(result, indent=2))
    print(f"written: {out / 'prediction-coverage.json'}")
    return result


if __name__ == "__main__":
    main()

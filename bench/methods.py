"""`make bench-methods`: every draft specbench has, Spec-Bench style, per category (issue 43 item 4).

Runs `specbench sweep` (the CLI, as bench/auto_vs_sweep.py does) once per method on the torch engine, greedy, on the
spec-bench task (its 13 categories, --limit questions of each), ding-de-en and aclsum, in one dtype (bfloat16 by
default) at one γ. Methods by default: prompt-lookup, tree-lookup, tree-lookup with token recycling
(`tree-lookup:recycle=4,nodes=15`), lookahead, bigram (the n-gram draft), the shipped
distilled draft, lookup+distilled, and suffix where arctic-inference is installed (one line says it was skipped
otherwise); an EAGLE head is `--method eagle:<folder>`.
Each sweep is its own resumable folder under --results-dir (its id derived from its grid, as every sweep's), so a
rerun of the same command skips the finished cells and examples, and adding a method later runs only it.
The table (specbench/report/leaderboard/method_table.py, the one `specbench report --by category` draws) gives
per method × category the speedup over the same cell's own plain baseline (geometric mean of per-example paired
ratios, 95 % Student t interval on the logs), #MAT (Spec-Bench's mean accepted tokens per target pass, the bonus
token included) with its interval, and n; below --min-n examples (the project's MIN_INTERVAL_N, 10, by default) a
figure has no interval, so at the default 2 questions a category gets point figures and `spec-bench overall` (all
its questions) the intervals. Printed as a rich table and written beside the results as methods-<dtype>.csv and .json,
with the comparison against Spec-Bench's published leaderboard (report/leaderboard/published.py: each draft's
counterpart there, and Kendall's τ of the methods' order and of each method's categories, with n and exact p).
The default run (2 questions × 13 categories, 8 of them two turns, + 2 + 2 examples, 64 new tokens per turn, 6 or 7
methods) is sized for 35–45 min on 2 cores: estimated, not timed, from the first timed run (5 methods at --limit 1
on spec-bench alone in bf16: 14 min 9 s, docs/benchmarks.md), about 5.7 min per method at 2 questions a category.
Usage: python bench/methods.py [--limit 2] [--dtype bfloat16] [--gamma 4] [--max-new-tokens 64]
       [--target smollm2-135m] [--draft distilled] [--method M ...] [--tasks spec-bench,ding-de-en,aclsum]
       [--questions question.jsonl] [--results-dir results] [--min-n 10] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

MODEL = "MODEL"  # stands for --draft in a --method (the default methods' distilled and lookup+distilled)
METHODS = (
    "prompt-lookup",
    "tree-lookup",
    "tree-lookup:recycle=4,nodes=15",
    "lookahead",
    "bigram",
    MODEL,
    f"lookup+{MODEL}",
    "suffix",
)
TASKS = "spec-bench,ding-de-en,aclsum"
DTYPES = ("float32", "bfloat16", "float16")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=positive, default=2, help="questions per Spec-Bench category (examples per task)")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    p.add_argument("--gamma", default="4", help="γ of every method (one value; tree depth for tree-lookup)")
    p.add_argument("--max-new-tokens", default="64", help="tokens per turn (an integer, or 'task': each task's own)")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default="distilled", help=f"the draft model that {MODEL} stands for in a method")
    p.add_argument(
        "--method",
        action="append",
        help=f"a --draft spec, repeatable (default: {', '.join(METHODS)}; {MODEL} is --draft)",
    )
    p.add_argument("--tasks", default=TASKS, help="comma-separated tasks (names or files)")
    p.add_argument("--questions", help="Spec-Bench's question.jsonl (sets SPECBENCH_SPEC_BENCH_FILE; hash-checked)")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--min-n", type=positive, default=None, help="fewest examples for an interval (default 10)")
    p.add_argument("--dry-run", action="store_true", help="print the sweeps and exit")
    args = p.parse_args(argv)
    if args.max_new_tokens != "task" and not args.max_new_tokens.isdigit():
        p.error(f"--max-new-tokens must be a positive integer or 'task' (got {args.max_new_tokens!r})")
    if not args.gamma.isdigit() or int(args.gamma) < 1:
        p.error(f"--gamma must be one integer >= 1 (got {args.gamma!r}); a sweep over γ is `specbench sweep`")
    if args.questions and not Path(args.questions).is_file():
        p.error(f"--questions {args.questions}: no such file; give Spec-Bench's question.jsonl")
    return args


def methods(args: argparse.Namespace, suffix_missing: bool) -> tuple[list[str], list[str]]:
    """(the --draft specs to run, a line for each method skipped): MODEL replaced by --draft, suffix dropped where
    arctic-inference is not installed."""
    run, skipped = [], []
    for m in args.method or METHODS:
        spec = m.replace(MODEL, args.draft)
        if spec.partition(":")[0] == "suffix" and suffix_missing:
            skipped.append(f"{spec}: skipped (arctic-inference is not installed: `make setup-suffix`)")
        elif spec not in run:
            run.append(spec)
    return run, skipped


def sweep_args(args: argparse.Namespace, draft: str) -> list[str]:
    """One method's `specbench sweep` arguments: every task, greedy, the torch engine, one γ and dtype."""
    budget = [] if args.max_new_tokens == "task" else ["--max-new-tokens", args.max_new_tokens]
    return [
        "sweep",
        "--target",
        args.target,
        "--draft",
        draft,
        "--task",
        args.tasks,
        "--gamma",
        args.gamma,
        "--temperature",
        "0",
        "--dtype",
        args.dtype,
        "--engine",
        "specbench",
        "--limit",
        str(args.limit),
        *budget,
        "--results-dir",
        args.results_dir,
        "--json",
    ]


def cli(arguments: list[str], env: dict[str, str]) -> list[dict]:
    """`python -m specbench.cli ...` in this interpreter; its JSON, or one line and exit 1 when it failed."""
    cmd = [sys.executable, "-m", "specbench.cli", *arguments]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{proc.stderr.strip()[-2000:]}")
    for line in proc.stderr.splitlines():
        if line.startswith(("hardware:", "warning:")):
            print("   ", line)
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> dict:
    from rich.console import Console

    from specbench.measure.results.reader import read_run
    from specbench.measure.stats import MIN_INTERVAL_N
    from specbench.report.leaderboard.method_table import method_table, rich_table, write_table
    from specbench.report.leaderboard.published import compare, comparison_lines
    from specbench.run_specs import suffix_cache_missing

    args = parse_args(argv)
    drafts, skipped = methods(args, suffix_cache_missing())
    for line in skipped:
        print(line)
    env = dict(os.environ)
    if args.questions:
        env["SPECBENCH_SPEC_BENCH_FILE"] = str(Path(args.questions).resolve())
    if args.dry_run:
        for d in drafts:
            print("specbench " + shlex.join(sweep_args(args, d)))
        return {"methods": drafts, "skipped": skipped}
    run_dirs = []
    for d in drafts:
        print(f"{d}: sweep over {args.tasks} (a rerun resumes it)")
        run_dirs += [Path(c["run_dir"]) for c in cli(sweep_args(args, d), env)]
    runs, notes = [], []
    for run_dir in run_dirs:  # exactly the cells just run (not whatever else results/ holds)
        run, why = read_run(run_dir)
        notes += [f"{where}: {reason}" for where, reason in why]
        if run is not None:
            runs.append(run)
    table = method_table(runs, min_n=args.min_n or MIN_INTERVAL_N)
    table.notes = notes + table.notes
    title = f"methods × categories: {args.target}, {args.dtype}, γ {args.gamma}, greedy, ≤ {args.limit} per category"
    Console(width=None if sys.stdout.isatty() else 200).print(rich_table(table, title))  # a log keeps every column
    for note in table.notes:
        print("note:", note)
    board = compare(table)
    print("\n".join(comparison_lines(board)))
    written = write_table(table, Path(args.results_dir), f"methods-{args.dtype}", extra={"leaderboard": board})
    print("written:", *map(str, written))
    return {"methods": drafts, "skipped": skipped, "table": table, "leaderboard": board, "files": written}


if __name__ == "__main__":
    main(sys.argv[1:])

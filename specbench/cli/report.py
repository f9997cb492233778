"""`specbench report`: report.md and a self-contained report.html from result folders.

specbench.report (collect, figures, render) does the work and is imported only when this
command runs, so the rest of the CLI starts without matplotlib and the templates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from specbench.cli.options import AsJson
from specbench.cli.output import out, say, warn
from specbench.errors import UsageError

Results = Annotated[
    list[Path], typer.Argument(help="Run folders, sweep folders or a results/ folder.", show_default=False)
]
ReportDir = Annotated[Optional[Path], typer.Option("--out", help="Report folder (default: reports/<name>/).")]
Margin = Annotated[
    float,
    typer.Option(
        "--margin",
        help="δ of the claims' verdicts: speedup ratios within [1/(1+δ), 1+δ] count as the same (0.10 = 10 %).",
        min=0.0,
        max=1.0,
    ),
]


Look = Annotated[
    int,
    typer.Option(
        "--look",
        help="1: runs as first measured; 2: the one re-run of an inconclusive claim on fresh examples that the "
        "stopping rule allows (claims judged at its 1 % level; docs/statistics.md).",
        min=1,
        max=2,
    ),
]

By = Annotated[
    Literal["run", "category"],
    typer.Option(
        "--by",
        help="run: the report (report.md, report.html); category: instead, the methods × categories table on the "
        "terminal (speedup and #MAT per draft and Spec-Bench category or task, with intervals; `make bench-methods`), "
        "and with --out as methods.csv and methods.json in that folder.",
    ),
]


def report(
    ctx: typer.Context,
    results: Results,
    out_dir: ReportDir = None,
    margin: Margin = 0.10,
    look: Look = 1,
    by: By = "run",
    as_json: AsJson = False,
):
    """Write report.md and a self-contained report.html (tables, figures, paper comparison) from results.

    Example: specbench report results/sweep-ding-de-en-10cells-1a2b3c4d --out reports/today
    Example: specbench report results --margin 0.05   (claims' verdicts against a 5 % margin)
    Example: specbench report results/rerun --look 2   (an inconclusive claim's one re-run, on fresh examples)
    Example: specbench report results/sweep-spec-bench-3cells-1a2b3c4d --by category   (methods × categories)
    """
    if by == "category":
        refuse_verdict_options(ctx)
        return category_view(results, out_dir, as_json)
    from specbench.report import write_report

    outcome = write_report(results, out_dir, margin=margin, look=look)
    for s in outcome.skipped:
        warn(f"skipped {s.path}: {s.reason}")
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "out": str(outcome.out),
                    "runs": outcome.n_runs,
                    "files": [str(f) for f in outcome.files],
                    "skipped": [{"path": s.path, "reason": s.reason} for s in outcome.skipped],
                    "notes": outcome.notes,
                }
            )
        )
    else:
        out.print(f"report of {outcome.n_runs} run(s), {len(outcome.skipped)} skipped: {outcome.out / 'report.html'}")


def refuse_verdict_options(ctx: typer.Context) -> None:
    """--margin and --look set the claims' verdicts, which only `--by run` reaches: given with --by category (whose
    table has intervals and no verdicts) they would be silently ignored, so they are a usage error."""
    for name, flag in (("margin", "--margin"), ("look", "--look")):
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise UsageError(
                f"{flag} does not apply to --by category (it sets the claims' verdicts of --by run; the table has "
                f"intervals and no verdicts); drop {flag}"
            )


def category_view(results: list[Path], out_dir: Path | None, as_json: bool) -> None:
    """`--by category`: the methods × categories table (report/leaderboard/method_table.py) of the runs given, and with
    --out its methods.csv and methods.json in that folder."""
    from specbench.report.leaderboard.method_table import read_method_table, rich_table, write_table
    from specbench.report.leaderboard.published import compare, comparison_lines

    table = read_method_table(results)
    board = compare(table)
    files = write_table(table, out_dir, extra={"leaderboard": board}) if out_dir is not None else []
    if as_json:
        doc = {"rows": table.rows, "notes": table.notes, "leaderboard": board, "files": [str(f) for f in files]}
        out.print_json(json.dumps(doc))
        return
    out.print(rich_table(table))
    for line in comparison_lines(board):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    for note in table.notes:
        warn(note)
    if files:
        say(f"written {', '.join(map(str, files))}")

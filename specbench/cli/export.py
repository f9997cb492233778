"""`specbench export`: result folders as one tidy table (CSV or Parquet) for pandas, R or a spreadsheet.

specbench.measure.results.tidy_table builds the rows (one per run, or one per example with --examples)
and names the folders it skipped; this command checks the format and the destination
first, then writes the table atomically (or CSV to stdout).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from specbench.cli.output import say, warn
from specbench.errors import SpecbenchError, UsageError
from specbench.files import atomic_write_bytes

FORMATS = ("csv", "parquet", "spec-bench")

Results = Annotated[
    list[Path], typer.Argument(help="Run folders, sweep folders or a results/ folder.", show_default=False)
]
Format = Annotated[
    Literal["csv", "parquet", "spec-bench"],
    typer.Option(
        "--format",
        case_sensitive=False,
        help="csv, parquet (needs pyarrow) or spec-bench (Spec-Bench's "
        "answer files, for its evaluation/speed.py and equal.py).",
    ),
]
Examples = Annotated[bool, typer.Option("--examples", help="One row per example instead of one per run.")]
OutFile = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        help="File to write (default for csv: stdout; parquet needs a file; spec-bench: a folder, default the run's).",
    ),
]


def export(results: Results, table_format: Format = "csv", examples: Examples = False, out_file: OutFile = None):
    """Export results as one tidy table: a row per run (axis values, dtype, device, backend, hardware, CI, suspect
    flag), or a row per example with --examples.

    Example: specbench export results/sweep-ding-de-en-10cells-1a2b3c4d --format parquet --out runs.parquet
    Example: specbench export results --examples > examples.csv
    Example: specbench export results/spec-bench-prompt-lookup-g3-t0-1a2b3c4d --format spec-bench
    """
    if table_format == "spec-bench":
        if examples:  # its answer files are per example already: --examples would be silently meaningless
            raise UsageError(
                "--examples does not apply to --format spec-bench (its answer files hold every example); drop it"
            )
        return export_spec_bench(results, out_file)
    check_destination(table_format, out_file)
    from specbench.measure.results import csv_safe, export_frames

    frame, skipped = export_frames(list(results), examples)
    if frame.empty:  # one line: the reasons (the first three) beside the error, not warnings before it
        why = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        raise SpecbenchError(
            f"no results to export under {', '.join(map(str, results))}"
            + (f" ({len(skipped)} skipped: {why})" if skipped else "")
            + "; pass run folders, sweep folders or a results/ folder"
        )
    for note in skipped:
        warn(f"skipped {note}")
    if table_format == "csv":
        frame = csv_safe(frame)
    if out_file is None:
        typer.echo(frame.to_csv(index=False), nl=False)
        return
    write_table(frame, table_format, out_file)
    say(f"exported {len(frame)} {'example' if examples else 'run'} row(s) to {out_file}")


def export_spec_bench(results: list[Path], out_dir: Path | None) -> None:
    """Spec-Bench's two answer files (speculative, baseline) of one run, and its per-category table."""
    from specbench.measure.results import spec_bench_files

    if len(results) != 1 or not (results[0] / "examples.jsonl").is_file():
        raise SpecbenchError("--format spec-bench exports one run folder (with examples.jsonl) at a time; pass one")
    if out_dir is not None and out_dir.is_file():
        raise SpecbenchError(f"--out {out_dir} is a file; --format spec-bench writes two files into a folder")
    written, table, skipped = spec_bench_files(results[0], out_dir)
    for note in skipped:
        warn(f"skipped {note}")
    for engine, path in written.items():
        say(f"{engine}: {path}")
    say(f"{'category':<15}{'n':>4}{'α':>7}{'#MAT':>7}{'accept':>8}{'speedup':>9}  quality (baseline → speculative)")
    for row in table:
        quality = f"{row['metric']} {row['baseline']:.1f} → {row['speculative']:.1f}" if row["metric"] else "none"
        say(
            f"{row['category']:<15}{row['n']:>4}{_num(row['alpha'], 3):>7}{_num(row['mean_accepted_tokens'], 2):>7}"
            f"{_num(row['acceptance_rate'], 3):>8}{_num(row['spec_bench_speedup'], 2):>9}  {quality}"
        )


def _num(x, digits: int) -> str:
    return "—" if x is None or x != x else f"{x:.{digits}f}"


def check_destination(table_format: str, out_file: Path | None) -> None:
    """Every reason the table could not be written, before any result is read."""
    if table_format not in FORMATS:  # click refuses these already; a direct call is checked here
        raise UsageError(f"--format must be csv, parquet or spec-bench (got {table_format!r})")
    if table_format == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise SpecbenchError("--format parquet needs pyarrow: pip install pyarrow (or use --format csv)")
    if table_format == "parquet" and out_file is None:
        raise SpecbenchError("--format parquet writes a binary file: pass --out FILE.parquet")
    if out_file is not None and out_file.is_dir():
        raise SpecbenchError(f"--out {out_file} is a folder; pass a file name")
    if out_file is not None and not out_file.absolute().parent.is_dir():
        raise UsageError(
            f"--out {out_file}: the folder {out_file.parent} does not exist; create it or pass another --out"
        )


def write_table(frame, table_format: str, out_file: Path) -> None:
    from specbench.files import ELSEWHERE

    try:
        if table_format == "parquet":
            atomic_write_bytes(out_file, lambda tmp: frame.to_parquet(tmp, index=False))
        else:
            atomic_write_bytes(out_file, lambda tmp: frame.to_csv(tmp, index=False))
    except SpecbenchError as exc:  # a full or read-only disk: the fix is another --out (export has no --results-dir)
        raise SpecbenchError(str(exc).replace(ELSEWHERE, "pass another --out")) from None

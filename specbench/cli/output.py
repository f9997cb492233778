"""How commands print: the two consoles, number formatting, tables and progress bars.

Results go to stdout (`out`), so `--json` output can be piped; progress, context lines,
warnings and errors go to stderr (`console`). Shared by every command module so that a
value looks the same in every table.
"""

from __future__ import annotations

import contextlib
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)
out = Console()


def tolerate_any_encoding() -> None:
    """A terminal or pipe that cannot encode α, γ or → (PYTHONIOENCODING=ascii, a C locale) shows '?' for them
    instead of ending the command with a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(Exception):  # a stream that cannot be reconfigured keeps its own policy
                stream.reconfigure(errors="replace")


@contextlib.contextmanager
def options_checked():
    """Around a command's option checks: what they refuse is a bad command line (exit code 2, as click's own)."""
    from specbench.errors import SpecbenchError, UsageError

    try:
        yield
    except UsageError:
        raise
    except SpecbenchError as exc:
        raise UsageError(str(exc)) from None


def say(message: str) -> None:
    """One plain line on stderr (no markup, no wrapping: a long path stays one line)."""
    console.print(escape(message), highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """The one-line error format every failure uses."""
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def fmt(value, digits: int = 3) -> str:
    """A table cell: "—" for a missing value or NaN, fixed digits for floats, "a – b" for an interval."""
    if value is None or (isinstance(value, float) and value != value):  # None or NaN
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (float, type(None))) for v in value):
        return f"{fmt(value[0], digits)} – {fmt(value[1], digits)}"  # an interval
    return str(value)


def rows_table(rows: list[dict], title: str) -> Table:
    """A table with one column per key of the first row."""
    table = Table(title=title)
    for i, col in enumerate(rows[0].keys() if rows else []):
        table.add_column(str(col), no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*(fmt(v) for v in row.values()))
    return table


def warn_if_noisy(summary: dict, label: str = "") -> None:
    """One warning line per run whose noise checks fired (the summary's suspect_timing)."""
    if summary.get("suspect_timing"):
        notes = "; ".join(summary.get("timing_notes") or [])
        warn(f"{label}timings look disturbed ({notes}); the speedup is not trustworthy: rerun on an idle machine")


def quiet_transformers() -> None:
    """transformers' own warnings and download bars would break the one-line-per-event output."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

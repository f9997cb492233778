"""How commands print: the two consoles, number formatting, tables and progress.

Results go to stdout (`out`), so `--json` output can be piped; progress, context lines,
warnings and errors go to stderr (`console`). Shared by every command module so that a
value looks the same in every table.

Every wait shows progress (issue 29): `phase_status` for loading, calibration and pilots (the phase, its
count when the library reports one, the elapsed time), `progress_bar` for counted work (examples, cells)
with an ETA from the examples measured in this call that counts down between them. When stderr is not a
terminal (a pipe, a CI log) both print plain lines instead: one per phase, one per tenth of the examples.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from types import SimpleNamespace

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from specbench.measure.results import Summary

console = Console(stderr=True)
out = Console()


def print_table(table: Table, to: Console | None = None) -> None:
    """Print a table whole: on a terminal at its width, but to a pipe or a file (whose 80 default columns rich would
    fit it into, squeezing a long cell name to nothing beside the numbers) at the table's own natural width."""
    to = to or out
    if to.is_terminal:
        to.print(table)
        return
    from rich.measure import Measurement

    width, saved = Measurement.get(to, to.options.update(width=10_000), table).maximum, to.width
    to.width = max(saved, width)
    try:
        to.print(table)
    finally:
        to.width = saved


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
    """One warning line: a line break inside it (a folder named with one, a quoted file) is shown as \\n."""
    shown = message.replace("\r", "\\r").replace("\n", "\\n")
    console.print(f"[yellow]warning:[/yellow] {escape(shown)}", highlight=False, soft_wrap=True)


def clock(seconds: float) -> str:
    """Seconds as 0:42, 12:05 or 1:02:03."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Rate:
    """The ETA of counted work from what this call measured: seconds per item since the count was first seen
    (a resume's items done earlier are not timed here), counting down from the last completed item."""

    def __init__(self) -> None:
        self.start: tuple[float, float] | None = None  # (time, completed) when a total was first known
        self.last: tuple[float, float] | None = None  # (time, completed) at the last change

    def eta(self, completed: float, total: float | None, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if total is None:
            return None
        if self.start is None or self.last is None:
            self.start = self.last = (now, completed)
        if completed != self.last[1]:
            self.last = (now, completed)
        done = completed - self.start[1]
        if done <= 0:
            return None
        per_item = (self.last[0] - self.start[0]) / done
        return max(0.0, per_item * (total - completed) - (now - self.last[0]))


class EtaColumn(ProgressColumn):
    """rich's TimeRemainingColumn estimates speed over its last 30 s and shows -:--:-- when an example takes
    longer; this one times the items completed in this call (Rate)."""

    def __init__(self) -> None:
        super().__init__()
        self.rates: dict[int, Rate] = {}

    def render(self, task) -> Text:
        if task.total is None:  # an uncounted step (setup): its elapsed time is the whole story
            return Text("")
        eta = self.rates.setdefault(task.id, Rate()).eta(task.completed, task.total)
        return Text("ETA " + ("…" if eta is None or task.finished else clock(eta)), style="progress.remaining")


QUIET_S = 1.0  # a step that ends sooner prints no line in a pipe (an error right away stays one line)


class Pending:
    """One line that appears only if what it announces is still under way QUIET_S seconds later."""

    def __init__(self) -> None:
        self.timer: threading.Timer | None = None

    def announce(self, line: str) -> None:
        self.cancel()
        self.timer = threading.Timer(QUIET_S, say, args=(line,))
        self.timer.daemon = True
        self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class LineProgress:
    """progress_bar's stand-in when stderr is not a terminal: the same calls (add_task, update, start, stop),
    printed as lines: an uncounted step's when it is still under way after QUIET_S, a count's at every tenth of
    its total, with elapsed time and ETA."""

    def __init__(self) -> None:
        self.tasks: dict[int, dict] = {}
        self.live = SimpleNamespace(is_started=False)
        self.pending = Pending()

    def __enter__(self) -> LineProgress:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.live.is_started = True

    def stop(self) -> None:
        self.pending.cancel()
        for task in self.tasks.values():
            if task["total"] is not None and task["printed"] != task["completed"] and task["completed"]:
                self._line(task)
        self.live.is_started = False

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        task_id = len(self.tasks)
        self.tasks[task_id] = {
            "description": description,
            "total": total,
            "completed": completed,
            "fields": fields,
            "t0": time.monotonic(),
            "rate": Rate(),
            "printed": None,
        }
        if total is None and fields.get("info"):  # an uncounted step says what it starts with
            self.pending.announce(f"{description}: {fields['info']}")
        return task_id

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def update(self, task_id: int, *, total=None, completed=None, advance=None, description=None, **fields) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task["description"] = description
        if total is not None:
            task["total"] = total
        if completed is not None:
            task["completed"] = completed
        if advance:
            task["completed"] += advance
        changed = fields.get("info", task["fields"].get("info")) != task["fields"].get("info")
        task["fields"].update(fields)
        task["rate"].eta(task["completed"], task["total"])
        total, done = task["total"], task["completed"]
        if total is None:  # an uncounted step: a line whenever what it is doing changes
            if changed or description is not None:
                elapsed = clock(time.monotonic() - task["t0"])
                self.pending.announce(f"{task['description']}: {task['fields'].get('info') or ''} (after {elapsed})")
            return
        self.pending.cancel()
        step = max(1, int(total) // 10)
        if done > (task["printed"] or 0) and (done >= total or done - (task["printed"] or 0) >= step):
            self._line(task)

    def _line(self, task: dict) -> None:
        total, done = task["total"], task["completed"]
        eta = task["rate"].eta(done, total)
        info = str(task["fields"].get("info") or "")
        say(
            f"{task['description']}: {done:g}/{total:g}"
            + (f" ({info})" if info else "")
            + f", elapsed {clock(time.monotonic() - task['t0'])}"
            + (f", ETA {clock(eta)}" if eta is not None and done < total else "")
        )
        task["printed"] = done


def progress_bar() -> Progress | LineProgress:
    """A bar over counted work: count, info, elapsed, ETA on a terminal; plain lines elsewhere."""
    if not console.is_terminal:
        return LineProgress()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        EtaColumn(),
        console=console,
        transient=False,
    )


class PhaseStatus:
    """A wait that is not counted in examples (loading models, calibrating, a pilot): called with each phase's
    message, and `progress(phase, done, total)` for a count inside it. On a terminal, a spinner with the phase,
    its count and the phase's elapsed time, and one kept line per finished phase with its duration; elsewhere
    one stderr line per phase (and per tenth of a count)."""

    def __init__(self, first: str) -> None:
        self.message, self.t0, self.started = first, time.monotonic(), time.monotonic()
        self.count = ""
        self.printed_count: int | None = None
        self.bar: Progress | None = None
        self.pending = Pending()

    def __enter__(self) -> PhaseStatus:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if console.is_terminal:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.job = self.bar.add_task(self.message, total=None, count="")
            self.bar.start()
        else:
            self.pending.announce(f"{self.message} …")

    def stop(self) -> None:
        self.pending.cancel()
        if self.bar is not None and self.bar.live.is_started:
            self._finish_phase()
            self.bar.stop()

    def _finish_phase(self) -> None:
        if self.bar is not None:
            self.bar.console.print(
                f"[dim]✓ {escape(self.message)} ({clock(time.monotonic() - self.t0)})[/dim]", highlight=False
            )

    def update(self, message: str) -> None:
        self(message)

    def __call__(self, message: str) -> None:
        if message == self.message:
            return
        if self.bar is not None:
            self._finish_phase()
            self.bar.reset(self.job, description=message, count="")
        else:
            self.pending.announce(f"{message} … (after {clock(time.monotonic() - self.started)})")
        self.message, self.t0, self.count, self.printed_count = message, time.monotonic(), "", None

    def progress(self, phase: str, done: int, total: int) -> None:
        """A count inside the current phase (calibration 1/2, pilot 5/32)."""
        self.count = f"{phase} {done}/{total}"
        if self.bar is not None:
            self.bar.update(self.job, count=self.count)
        elif done > (self.printed_count or 0) and (
            done >= total or done - (self.printed_count or 0) >= max(1, total // 10)
        ):
            say(f"{self.message}: {self.count}, elapsed {clock(time.monotonic() - self.t0)}")
            self.printed_count = done


def phase_status(first: str) -> PhaseStatus:
    return PhaseStatus(first)


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


def warn_if_noisy(summary: Summary, label: str = "") -> None:
    """One warning line per run whose noise checks fired (the summary's suspect_timing)."""
    if summary.suspect_timing:
        notes = "; ".join(summary.timing_notes or [])
        warn(f"{label}timings look disturbed ({notes}); the speedup is not trustworthy: rerun on an idle machine")


def quiet_transformers() -> None:
    """transformers' own warnings and download bars would break the one-line-per-event output."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

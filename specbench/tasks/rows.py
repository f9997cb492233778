"""Rows as every task module reads them: a row's example id, the check that no two rows of a source share one
(naming their lines), and a bounded repr for messages that quote a value from a task file or its data.

Both specs.py (a JSONL of prompts is checked as it is read) and examples.py (a task's sampled rows) need these, so
they live below both: specs.py never imports examples.py, and examples.py names `TaskSpec` from specs.py.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from specbench.errors import SpecbenchError

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist = 60, 60, 2, 4, 4


def short(value: object) -> str:
    """repr(value) bounded to about a line, whatever the value's size (a message must not hold a whole file)."""
    return _SHORT.repr(value)


def example_id(row: dict, index: int) -> str:
    """An example's id: the row's 'id' field (text or integer), else its index in the source."""
    value = row.get("id")
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else str(index)


def check_unique_ids(rows, source: dict, where: str) -> None:
    """Refuse two rows with one example id (a resume skips ids already measured: the second would never run, and
    the run would stay incomplete forever), naming both rows: their lines in a JSONL file, else their numbers."""
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        ex_id = example_id(row, i)
        if ex_id in seen:
            first, second = _row_places(source, [seen[ex_id], i])
            raise SpecbenchError(
                f"{where}: example id {short(ex_id)} is used twice ({first} and {second}); give every row its own id"
            )
        seen[ex_id] = i


def _row_places(source: dict, indices: list[int]) -> list[str]:
    """'line N' of each row index in a JSONL source (blank lines are not rows), else 'row N' (from 1)."""
    path = Path(source.get("path", "")) if source.get("type") == "jsonl" else None
    if path is not None and path.is_file():
        try:
            with path.open(encoding="utf-8") as fh:
                lines = [n for n, line in enumerate(fh, start=1) if line.strip()]
            return [f"line {lines[i]}" for i in indices]
        except (OSError, UnicodeDecodeError, IndexError):
            pass
    return [f"row {i + 1}" for i in indices]

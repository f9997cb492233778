"""Reading results back: a run's, a sweep's or a results folder's records and summaries, as the report, the export,
a resume and pandas users need them.

Results are read back by hand-edited, half-copied or foreign files too, so no reader here raises
anything but a one-line SpecbenchError: the `scan_*` readers return what they could use plus a
reason for each thing they skipped (measure/results/record_checks.py says why a line or file is unusable),
`read_records` turns those reasons into warnings (what the report lists as skipped), and
`load_json_object` fails a run or resume with one line.

The schema itself is declared in measure/results/schema.py; `Summary` and `Manifest` are importable from here too,
as docs/results.md shows (`from specbench.measure.results.records import load_runs, load_examples`, then
`Summary.from_dict(...)`, `Manifest.from_dict(...)` "from the same module").
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.measure.results.record_checks import (
    example_problem,
    manifest_problem,
    object_problem,
    placement_problem,
    summary_problem,
)
from specbench.measure.results.schema import PLACEMENT_FILE, Manifest
from specbench.measure.results.schema import (
    Summary as Summary,  # re-exported: the documented `records.Summary.from_dict`
)


def scan_jsonl(path: Path, check=object_problem) -> tuple[list[dict], list[str]]:
    """Every line of a JSONL file that `check` accepts, and "<path>:<line>: skipped ..." for each other line.

    Lines are split and decoded one by one, so a torn last line (a kill mid-write), stray
    non-UTF-8 bytes or a hand-edited line costs that line only. A missing file has no lines."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{path}: skipped, unreadable ({exc.strerror or exc})"]
    rows, skipped = [], []
    for i, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            skipped.append(f"{path}:{i}: skipped a line that is not UTF-8 text")
            continue
        except (json.JSONDecodeError, RecursionError):
            skipped.append(f"{path}:{i}: skipped a malformed line (an interrupted write?)")
            continue
        problem = check(row)
        if problem:
            skipped.append(f"{path}:{i}: skipped a line of the wrong shape ({problem})")
        else:
            rows.append(row)
    return rows, skipped


def _warn_all(messages: list[str]) -> None:
    for message in messages:
        warnings.warn(message, stacklevel=3)


def read_records(path: Path, check=object_problem) -> list[dict]:
    """scan_jsonl with each skipped line as a warning (the report lists those as skipped)."""
    rows, skipped = scan_jsonl(path, check)
    _warn_all(skipped)
    return rows


def read_examples(path: Path) -> list[dict]:
    """The ExampleRecords of an examples.jsonl that the metrics can use; every other line is warned about."""
    return read_records(path, example_problem)


def read_json_object(path: Path, what: str) -> tuple[dict | None, str | None]:
    """A JSON object file → (its dict, None), or (None, why it cannot be used). Never raises."""
    try:
        doc = json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None, f"{path}: no {what}"
    except OSError as exc:
        return None, f"{path}: {what} unreadable ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return None, f"{path}: {what} is not UTF-8 text"
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"{path}: {what} is not valid JSON ({str(exc)[:80]})"
    if not isinstance(doc, dict):
        return None, f"{path}: {what} is a JSON {type(doc).__name__}, not an object"
    return doc, None


def load_json_object(path: Path, what: str, fix: str) -> dict:
    """read_json_object for a command that cannot go on without the file: one-line SpecbenchError naming `fix`."""
    doc, problem = read_json_object(path, what)
    if problem or doc is None:
        raise SpecbenchError(f"{problem}; {fix}")
    return doc


def load_manifest(path: Path, fix: str) -> Manifest:
    """A run's manifest.json read by attribute: a one-line SpecbenchError naming `fix` if it is not one."""
    doc = load_json_object(path, "manifest.json", fix)
    problem = manifest_problem(doc)
    if problem:
        raise SpecbenchError(f"{path}: not a specbench manifest ({problem}); {fix}")
    return Manifest.from_dict(doc)


def read_summary(path: Path) -> tuple[dict | None, str | None]:
    """A summary.json → (its dict, None) or (None, why it was skipped)."""
    doc, problem = read_json_object(path, "summary.json")
    if doc is not None and (shape := summary_problem(doc)):
        return None, f"{path}: skipped, {shape}"
    return doc, problem


def _found(paths: list[Path], name: str) -> list[Path]:
    """Every file called `name` at or under `paths` (a path may be that file itself), sorted, once each."""
    out = set()
    for p in map(Path, paths):
        if p.name == name and p.is_file():
            out.add(p)
        elif p.is_dir():
            out.update(f for f in p.rglob(name) if f.is_file() and not f.is_symlink())  # a link may lead outside
    return sorted(out)


def scan_runs(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """The summary of every run under `paths` (run folders, sweep folders, results/ or summary.json files),
    each with `run_dir` added, and a reason for every summary skipped."""
    rows, notes = [], []
    for path in _found(paths, "summary.json"):
        doc, problem = read_summary(path)
        if problem:
            notes.append(problem)
        elif doc is not None:
            rows.append({**doc, "run_dir": str(path.parent)})
    return rows, notes


def unsummarized_runs(paths: list[Path]) -> list[str]:
    """A note for every run folder under `paths` with a manifest but no summary.json."""
    have = {s.parent for s in _found(paths, "summary.json")}
    return [_unsummarized_note(m.parent) for m in _found(paths, "manifest.json") if m.parent not in have]


def _unsummarized_note(run_dir: Path) -> str:
    return f"{run_dir}: skipped, {unsummarized_reason(run_dir)}"


def unsummarized_reason(run_dir: Path) -> str:
    """Why a run folder with a manifest or records but no summary.json is skipped, and how to repair it (report and
    export say the same)."""
    if (run_dir / "summary.json").is_symlink():
        return "its summary.json is a symbolic link (not followed out of a results folder)"
    records, _ = scan_jsonl(run_dir / "examples.jsonl", example_problem)
    if records:  # killed between a record's append and its summary's write: the resume rebuilds the summary first
        return (
            f"a run folder without summary.json but with {len(records)} example record(s) (killed before the "
            f"summary was written); rerun its command to rebuild the summary and resume"
        )
    return (
        "a run folder without summary.json (killed before its first example finished?); rerun its command to resume it"
    )


def load_runs(paths: list[Path]):
    """Summaries of every run under `paths` (run dirs, sweep dirs or results/) → pandas DataFrame, one row per
    run; each summary skipped is a warning."""
    import pandas as pd

    rows, notes = scan_runs(paths)
    _warn_all(notes)
    return pd.json_normalize(rows) if rows else pd.DataFrame()


def run_identity(run_dir: Path) -> dict:
    """run_id (the folder's name) and sweep_id (the parent's name when it holds sweep.json, else None)."""
    run_dir = Path(run_dir)
    in_sweep = (run_dir.parent / "sweep.json").is_file()
    return {"run_id": run_dir.name, "sweep_id": run_dir.parent.name if in_sweep else None}


def scan_examples(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """Every usable ExampleRecord under `paths` (run folders, sweep folders, results/), each with its
    run_id, sweep_id and run_dir, and a reason for every line skipped."""
    rows, notes = [], []
    for path in _found(paths, "examples.jsonl"):
        records, skipped = scan_jsonl(path, example_problem)
        ids = {**run_identity(path.parent), "run_dir": str(path.parent)}
        rows += [{**ids, **r} for r in records]
        notes += skipped
    return rows, notes


def load_examples(path: Path):
    """examples.jsonl of a run folder, or of every run in a sweep folder or results/ → pandas DataFrame,
    one row per example with run_id, sweep_id and run_dir and nested fields flattened (baseline.*, speculative.*).
    Each line skipped is a warning."""
    import pandas as pd

    rows, notes = scan_examples([Path(path)])
    _warn_all(notes)
    return pd.json_normalize(rows)


def read_placements(sweep_dir: Path) -> dict[str, list[dict]]:
    """cell id → its placements, in the order the cells were started ({} for a sweep run locally)."""
    out: dict[str, list[dict]] = {}
    for row in read_records(Path(sweep_dir) / PLACEMENT_FILE, placement_problem):
        out.setdefault(row["cell_id"], []).append(row)
    return out

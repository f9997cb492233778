"""Reading results back: a run's, a sweep's or a results folder's records and summaries, as the report, the export,
a resume and pandas users need them.

Results are read back by hand-edited, half-copied or foreign files too, so no reader here raises
anything but a one-line SpecbenchError: the `scan_*` readers return what they could use plus a
reason for each thing they skipped (measure/results/record_checks.py says why a line or file is unusable; folders
are read by reader.py, the one reader the report and the export use too; single files by bounded_reads.py),
`read_records` turns those reasons into warnings (what the report lists as skipped), and
`load_json_object` fails a run or resume with one line.

The schema itself is declared in measure/results/schema.py; `Summary` and `Manifest` are importable from here too,
as docs/results.md shows (`from specbench.measure.results.records import load_runs, load_examples`, then
`Summary.from_dict(...)`, `Manifest.from_dict(...)` "from the same module").
"""

from __future__ import annotations

from pathlib import Path

from specbench.measure.results.bounded_reads import (  # noqa: F401 (read from here too: the documented face)
    MAX_DEPTH,
    MAX_JSON_BYTES,
    MAX_JSONL_BYTES,
    _warn_all,
    load_json_object,
    load_manifest,
    parse_json,
    read_bounded,
    read_examples,
    read_json_object,
    read_records,
    read_summary,
    scan_jsonl,
    too_deep,
)
from specbench.measure.results.record_checks import example_problem, placement_problem
from specbench.measure.results.schema import PLACEMENT_FILE
from specbench.measure.results.schema import Manifest as Manifest  # re-exported beside Summary
from specbench.measure.results.schema import (
    Summary as Summary,  # re-exported: the documented `records.Summary.from_dict`
)


def scan_runs(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """The summary of every run under `paths` (run folders, sweep folders, results/ or summary.json files), each with
    `run_dir` added, and a note for everything skipped or recomputed (reader.read_folders: the one reader)."""
    from specbench.measure.results.reader import read_folders

    found = read_folders(paths)
    rows, notes = [], found.messages()
    for run in found.runs:
        notes += run.notes
        if run.summary is None:
            notes.append(_unsummarized_note(run.run_dir))
        else:
            rows.append({**run.summary, "run_dir": str(run.run_dir)})
    return rows, notes


def unsummarized_runs(paths: list[Path]) -> list[str]:
    """A note for every run folder under `paths` with a manifest or records but no summary.json."""
    from specbench.measure.results.reader import read_folders

    return [_unsummarized_note(run.run_dir) for run in read_folders(paths).runs if run.summary is None]


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
    run; everything skipped or recomputed is a warning (a path that does not exist, or holds no run, included)."""
    import pandas as pd

    rows, notes = scan_runs([Path(p) for p in paths])
    if not rows and not notes:
        where = ", ".join(map(str, paths))
        notes = [f"{where}: holds no run folder (no summary.json, manifest.json or examples.jsonl)"]
    _warn_all(notes)
    return pd.json_normalize(rows) if rows else pd.DataFrame()


def run_identity(run_dir: Path) -> dict:
    """run_id (the folder's name) and sweep_id (the parent's name when it holds sweep.json, else None)."""
    run_dir = Path(run_dir)
    in_sweep = (run_dir.parent / "sweep.json").is_file()
    return {"run_id": run_dir.name, "sweep_id": run_dir.parent.name if in_sweep else None}


def scan_examples(paths: list[Path]) -> tuple[list[dict], list[str]]:
    """Every usable ExampleRecord under `paths` (run folders, sweep folders, results/), each with its run_id, sweep_id
    and run_dir, and a reason for every line or run skipped (reader.read_folders: checked against the manifest,
    duplicates dropped)."""
    from specbench.measure.results.reader import read_folders

    found = read_folders(paths)
    rows, notes = [], found.messages()
    for run in found.runs:
        ids = {**run_identity(run.run_dir), "run_dir": str(run.run_dir)}
        rows += [{**ids, **r} for r in run.records]
        notes += run.notes
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

"""The one reader of result folders: what the report, the export and load_runs see of a run, a sweep or results/.

Each of those once walked and checked the folders its own way, and they disagreed on hand-edited or damaged ones
(issue 41): the report followed a linked summary out of the results folder, the export believed a summary whose
records were gone, one counted a duplicated record twice. Here the walk and every check happen once:
  - no symbolic link is followed (a linked file or folder is listed, never read), folders are walked to a bounded
    depth, and every file is bounded in size and in JSON nesting (bounded_reads.read_bounded, bounded_reads.parse_json);
  - records are checked line by line (record_checks.example_problem: shapes, impossible times and counts), then
    against the run's manifest: an example id it does not list, a second record of one example, more records
    than it plans are each dropped and named;
  - the summary is checked (record_checks.summary_problem) and compared with its records: one that counts more
    examples than remain, fewer than there are, or whose headline figures differ from theirs (a hand edit) is
    recomputed from the records and the manifest (run_folder.rebuild_summary), with a note, or, when it cannot
    be, the run is left out.
Whatever is left out or dropped comes back as a (where, reason) pair that every output lists.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.measure.results.bounded_reads import (
    MAX_JSON_BYTES,
    parse_json,
    read_bounded,
    read_json_object,
    scan_jsonl,
)
from specbench.measure.results.record_checks import example_problem, manifest_problem, summary_problem

RUN_FILES = ("summary.json", "manifest.json", "examples.jsonl")  # a folder holding any of them is a run folder
OTHER_FILES = ("sweep.json", "checks.json")
MAX_FOLDER_DEPTH = 8  # results/ → sweep → cell is 3 levels; deeper trees are not walked further
LINK = "a symbolic link (not followed out of a results folder)"
# headline figures a summary must share with its records (to this relative tolerance), else it is recomputed
CHECKED_FIGURES = ("speedup_geomean", "speedup", "alpha", "acceptance_rate")
TOLERANCE = 1e-6


@dataclass
class RunRead:
    """One run folder as every output uses it."""

    run_dir: Path  # the folder (under a real, unlinked path)
    summary: dict | None  # summary.json, checked against the records (recomputed when it disagreed); None: none
    manifest: dict  # manifest.json ({} when the folder has none)
    records: list[dict]  # usable example records: well formed, listed by the manifest, one per example
    notes: list[str] = field(default_factory=list)  # used, but worth knowing (a recomputed summary)


@dataclass
class FolderRead:
    """Everything under the folders given."""

    runs: list[RunRead] = field(default_factory=list)
    sweeps: list[tuple[Path, dict]] = field(default_factory=list)  # (sweep.json, its object)
    checks: list[tuple[Path, object]] = field(default_factory=list)  # (checks.json, its JSON value)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, why): left out or dropped

    def messages(self) -> list[str]:
        """Each skipped item as one line: "<where>: <why>"."""
        return [f"{where}: {why}" for where, why in self.skipped]


def split_note(message: str) -> tuple[str, str]:
    """A records.py note "<path>[:<line>]: skipped ..." or "<path>: <why>" → (where, why)."""
    where, sep, rest = message.partition(": skipped")
    if sep:
        return where, "skipped" + rest
    where, _, rest = message.partition(": ")
    return where, rest


# --------------------------------------------------------------------------- the walk


def _scan(folder: Path, depth: int, found: dict[Path, set[str]], skipped: list[tuple[str, str]]) -> None:
    """Record the result files of `folder` and its sub-folders (links listed, never entered or read)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        skipped.append((str(folder), f"an unreadable folder ({exc.strerror or exc})"))
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            if entry.name in RUN_FILES:
                found.setdefault(folder, set()).add(entry.name)  # the run is judged (and left out) for it
            elif entry.name in OTHER_FILES or entry.is_dir():
                skipped.append((str(path), LINK))
        elif entry.is_dir(follow_symlinks=False):
            if depth < MAX_FOLDER_DEPTH:
                _scan(path, depth + 1, found, skipped)
        elif entry.name in RUN_FILES + OTHER_FILES:
            found.setdefault(folder, set()).add(entry.name)


def walk(paths: list[Path]) -> tuple[dict[Path, set[str]], list[tuple[str, str]]]:
    """folder → the result files it holds, for every folder at or under `paths`, and what could not be walked.

    A path given is resolved (the user named it); nothing under it that is a link is followed. A results file
    given stands for its folder. The same folder reached twice (a run and the results/ holding it) counts once."""
    found: dict[Path, set[str]] = {}
    skipped: list[tuple[str, str]] = []
    for given in map(Path, paths):
        if not given.exists():
            skipped.append((str(given), "does not exist; pass run folders, sweep folders or a results/ folder"))
            continue
        path = given.resolve()
        if path.is_dir():
            _scan(path, 0, found, skipped)
        elif path.name in RUN_FILES + OTHER_FILES:
            found.setdefault(path.parent, set()).add(path.name)
        else:
            skipped.append((str(given), "not a run folder, a sweep folder or a results/ folder"))
    return found, list(dict.fromkeys(skipped))  # a folder under two paths given is listed once


# --------------------------------------------------------------------------- one run


def _records(run_dir: Path, manifest: dict, skipped: list) -> list[dict] | None:
    """The run's usable records, each line dropped named in `skipped`; None when the run must be left out."""
    path = run_dir / "examples.jsonl"
    records, notes = scan_jsonl(path, example_problem)
    skipped += [split_note(n) for n in notes]
    raw = manifest.get("task")
    task: dict = raw if isinstance(raw, dict) else {}
    listed = task.get("example_ids")
    known = set(map(str, listed)) if isinstance(listed, list) else None
    kept, seen = [], set()
    for r in records:
        if known is not None and r["example_id"] not in known:
            why = (
                f"skipped the record of example {r['example_id']!r}, which its manifest does not list (another run's?)"
            )
            skipped.append((str(path), why))
        elif r["example_id"] in seen:
            skipped.append((str(path), f"skipped a second record of example {r['example_id']!r} (the first is kept)"))
        else:
            seen.add(r["example_id"])
            kept.append(r)
    planned = task.get("n_examples")
    if isinstance(planned, int) and not isinstance(planned, bool) and len(kept) > planned:
        skipped.append(
            (
                str(run_dir),
                f"examples.jsonl holds {len(kept)} records but its manifest plans {planned} "
                f"examples (records from another run?); the run is left out",
            )
        )
        return None
    return kept


def _figures(records: list[dict]) -> dict:
    """The headline figures of CHECKED_FIGURES as the metrics derive them from `records`."""
    from specbench.measure.stats.metric_units import engine_totals, is_batched, ratio
    from specbench.measure.stats.metrics import batch_metrics, primary_metrics

    base, spec = engine_totals(records, "baseline"), engine_totals(records, "speculative")
    speedup = ratio(
        ratio(spec["n_tokens"], spec["prefill_s"] + spec["decode_s"]),
        ratio(base["n_tokens"], base["prefill_s"] + base["decode_s"]),
    )
    return {
        "speedup_geomean": primary_metrics(records)["speedup_geomean"],
        "speedup": batch_metrics(records)["speedup"] if is_batched(records) else speedup,
        "alpha": ratio(spec["accepted"], spec["trials"]),
        "acceptance_rate": ratio(spec["accepted"], spec["drafted"]),
    }


def _same(stored, derived) -> bool:
    """Whether a stored figure (null for NaN) matches the one derived from the records."""
    nan = derived is None or (isinstance(derived, float) and math.isnan(derived))
    if stored is None or nan:
        return stored is None and nan
    return math.isclose(float(stored), float(derived), rel_tol=TOLERANCE, abs_tol=1e-12)


def disagreement(summary: dict, records: list[dict]) -> str | None:
    """How a summary disagrees with its records (the count, a headline figure), or None."""
    n = summary.get("n_examples")
    if n != len(records):
        return f"summary.json counts {n} examples but examples.jsonl holds {len(records)} usable record(s)"
    figures = _figures(records)
    for key in CHECKED_FIGURES:
        if key in summary and not _same(summary[key], figures[key]):
            return f"summary.json says {key} {summary[key]} but its records give {figures[key]:.4g} (a hand edit?)"
    return None


def _recomputed(run_dir: Path, records: list[dict], why: str, skipped: list) -> tuple[dict | None, list[str]]:
    """The summary of `records`, rebuilt from the manifest (run_folder.rebuild_summary, never written), and the
    note that says so; None (and the run named in `skipped`) when it cannot be rebuilt."""
    from specbench.measure.results.run_folder import rebuild_summary
    from specbench.measure.results.schema import RunFiles

    try:
        doc = rebuild_summary(RunFiles(run_dir), records)
        problem = summary_problem(doc)
    except (SpecbenchError, TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError) as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:120]}"
    if problem:
        skipped.append((str(run_dir), f"{why}, and it cannot be recomputed from them ({problem}); the run is left out"))
        return None, []
    return doc, [f"{run_dir.name}: {why}; its figures are recomputed from the records for this output (not written)"]


def kept_verdict(stored: dict, derived: dict) -> dict:
    """The run's own timing verdict (suspect_timing and timing_notes as it wrote them) beside a re-derived one: the
    run saw what its records cannot (CPU stolen by the hypervisor, contention on its cores), so a re-derivation may
    add a flag and its reasons, never clear one. Used for a recomputed summary here and by the report."""

    def notes(doc: dict) -> list[str]:
        value = doc.get("timing_notes")
        return [str(n) for n in value] if isinstance(value, (list, tuple)) else []

    old = notes(stored)
    return {
        "suspect_timing": stored.get("suspect_timing") is True or derived.get("suspect_timing") is True,
        "timing_notes": old + [n for n in notes(derived) if n not in old],
    }


def read_run(run_dir: Path) -> tuple[RunRead | None, list[tuple[str, str]]]:
    """One run folder, checked (see the module docstring) → (the run, or None when it is left out; what was
    skipped, each with its reason)."""
    run_dir = Path(run_dir)
    skipped: list[tuple[str, str]] = []
    for name in RUN_FILES:
        if (run_dir / name).is_symlink():
            return None, [(str(run_dir / name), f"{LINK}; the run is left out")]
    manifest: dict = {}
    if (run_dir / "manifest.json").exists():
        doc, problem = read_json_object(run_dir / "manifest.json", "manifest.json")
        if doc is not None and (shape := manifest_problem(doc)):
            problem = f"{run_dir / 'manifest.json'}: not a run manifest ({shape})"
        if problem:
            where, why = split_note(problem)
            return None, [(where, f"{why}; the run's records cannot be checked against it, so it is left out")]
        manifest = doc or {}
    records = _records(run_dir, manifest, skipped)
    if records is None:
        return None, skipped
    if not (run_dir / "summary.json").exists():
        return RunRead(run_dir, None, manifest, records), skipped
    summary: dict | None
    summary, problem = read_json_object(run_dir / "summary.json", "summary.json")
    if summary is not None and (shape := summary_problem(summary)):
        problem = f"{run_dir / 'summary.json'}: {shape}"
    if problem or summary is None:
        skipped.append(split_note(problem or "summary.json: unusable"))
        return None, skipped
    notes: list[str] = []
    if records and (differs := disagreement(summary, records)):
        stored = summary
        summary, notes = _recomputed(run_dir, records, differs, skipped)
        if summary is None:
            return None, skipped
        summary.update(kept_verdict(stored, summary))
    elif not records and summary.get("n_examples"):
        skipped.append(
            (
                str(run_dir),
                f"summary.json counts {summary['n_examples']} examples but examples.jsonl "
                "holds no usable record (deleted, emptied or damaged?); the run is left out",
            )
        )
        return None, skipped
    return RunRead(run_dir, summary, manifest, records, notes), skipped


# --------------------------------------------------------------------------- everything under the paths given


def read_json_value(path: Path) -> tuple[object, str | None]:
    """Any bounded JSON file (checks.json may hold a list) → (its value, None) or (None, why)."""
    raw, problem = read_bounded(path, MAX_JSON_BYTES)
    if raw is None:
        return None, problem or "missing"
    return parse_json(raw)


def read_folders(paths: list[Path]) -> FolderRead:
    """Every run, sweep and checks file at or under `paths`, checked once for every output."""
    found, skipped = walk(paths)
    out = FolderRead(skipped=skipped)
    for folder in sorted(found):
        names = found[folder]
        if "sweep.json" in names:
            doc, problem = read_json_object(folder / "sweep.json", "sweep.json")
            out.sweeps.append((folder / "sweep.json", doc)) if doc is not None else out.skipped.append(
                split_note(problem or "")
            )
        if "checks.json" in names:
            value, problem = read_json_value(folder / "checks.json")
            if problem:
                out.skipped.append((str(folder / "checks.json"), f"checks.json is {problem}"))
            else:
                out.checks.append((folder / "checks.json", value))
        if names & set(RUN_FILES):
            run, run_skipped = read_run(folder)
            out.skipped += run_skipped
            if run is not None:
                out.runs.append(run)
    return out

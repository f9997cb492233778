"""Read run, sweep and checks folders into one table of runs, and list everything that could not be used.

The report never trusts a folder: each summary is checked for the fields the tables need, and each
examples.jsonl or probe line is read through measure/results/records.py's line-by-line readers (UTF-8, JSON,
and the shape its dataclass declares). Whatever fails (a torn or non-UTF-8 line, valid JSON of the
wrong shape, a run whose values the metrics cannot use, a sweep cell never run) becomes a `Skipped`
entry with its reason, and the rest of the report still builds. Metrics are derived anew
from the raw records (specbench.measure.stats.metrics), so an old or one-example-behind summary reads
with today's definitions.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.config import GAMMA_POLICIES
from specbench.errors import SpecbenchError
from specbench.measure.results.reader import FolderRead, RunRead, kept_verdict, read_folders
from specbench.measure.results.records import unsummarized_reason
from specbench.measure.results.schema import Manifest
from specbench.measure.stats.metric_units import json_safe
from specbench.measure.stats.metrics import summarize
from specbench.report.calibrations import calibration_curves
from specbench.report.run_frame import runs_frame
from specbench.report.timing_checks import timing_note, timing_warnings
from specbench.report.values import isnull, num, truthy

if TYPE_CHECKING:
    import pandas as pd  # imported where used: it is slow to import

# Identity fields a usable summary must hold (non-null), and metric fields it must have (null = not measurable).
REQUIRED = ("run_id", "target", "draft", "task", "gamma", "temperature", "top_k", "top_p", "n_examples")
METRICS = (
    "alpha",
    "alpha_expected",
    "c",
    "verify_cost",
    "tokens_per_target_call",
    "speedup",
    "predicted_speedup",
    "predicted_speedup_extended",
    "baseline_s",
    "speculative_s",
    "draft_s",
    "verify_s",
    "overhead_s",
    "baseline_tokens",
    "speculative_tokens",
    "accepted_length_histogram",
)
# Errors that values of the right shape but unusable (a string where numbers belong) raise inside the metrics;
# caught per run, so one such run is listed as skipped instead of ending the report.
DATA_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError)


@dataclass
class Skipped:
    """Something under the given folders that the report could not use, and why."""

    path: str
    reason: str


@dataclass
class ReportData:
    runs: pd.DataFrame  # one row per usable run (flattened summary + run_dir)
    examples: dict[str, pd.DataFrame] = field(default_factory=dict)  # run_dir → DataFrame of its examples.jsonl
    manifests: dict[str, Manifest] = field(default_factory=dict)  # run_dir → manifest.json (empty: none usable)
    checks: list[tuple[str, list[dict]]] = field(default_factory=list)  # (checks.json path, its checks)
    sweeps: list[dict] = field(default_factory=list)  # sweep.json documents
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # used, but worth knowing (partial runs, stale summaries)
    curves: list[dict] = field(default_factory=list)  # distinct pass-cost calibrations (calibration_curves)
    margin: float = 0.10  # δ of the claims' verdicts (specbench report --margin; statistics.DEFAULT_MARGIN)

    def skip(self, path, reason: str) -> None:
        if not any(s.path == str(path) and s.reason == reason for s in self.skipped):
            self.skipped.append(Skipped(str(path), reason))


# --------------------------------------------------------------------------- files


def _captured(fn, *args):
    """Call fn and return (result, [warning messages]): records.py reports torn lines as warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in caught]


def _skip_warnings(data: ReportData, messages: list[str], default_path: Path) -> None:
    """Each "<file>[:<line>]: skipped ..." message of the records readers becomes a Skipped entry."""
    for m in messages:
        where, sep, rest = m.partition(": skipped")
        data.skip(where, "skipped" + rest) if sep else data.skip(default_path, m)


# --------------------------------------------------------------------------- checks on one run


def _check_summary(row: dict) -> str | None:
    """Why a flattened summary row cannot be used, or None."""
    if "n_examples" in row and not isnull(row["n_examples"]) and row["n_examples"] == 0:
        return "no examples measured yet (summary has n_examples = 0)"
    missing = [k for k in REQUIRED if k not in row or isnull(row[k])] + [k for k in METRICS if k not in row]
    if missing:
        return f"summary.json lacks field(s) {', '.join(missing)}"
    policy = isinstance(row["gamma"], str) and row["gamma"] in GAMMA_POLICIES  # adaptive / heuristic: γ varies per step
    try:
        gamma = 1 if policy else int(row["gamma"])
        temp, n = float(row["temperature"]), int(row["n_examples"])
    except (TypeError, ValueError):
        return "summary.json has a non-numeric gamma, temperature or n_examples"
    if gamma < 1 or (not policy and gamma != row["gamma"]) or n < 1 or not temp >= 0:
        return f"summary.json has impossible values (gamma={row['gamma']!r}, temperature={row['temperature']!r}, n={n})"
    return None


def resolve_gamma(gamma, manifest: Manifest) -> tuple[int, str | None]:
    """A summary's γ → (the most drafts a step may make, the policy name or None).

    An integer γ is itself. A policy (adaptive, heuristic) drafts up to the run's gamma_max
    (config.draft_gamma; 8 where the manifest does not say), which also sizes its histogram.
    `auto` resolves to an integer before a run starts; should a summary still say auto, the
    manifest's recorded choice is used.
    """
    if not isinstance(gamma, str):
        return int(gamma), None
    auto = manifest.auto if isinstance(manifest.auto, dict) else {}
    if gamma == "auto" and isinstance(auto.get("gamma"), int) and not isinstance(auto.get("gamma"), bool):
        return int(auto["gamma"]), None
    config = manifest.config if isinstance(manifest.config, dict) else {}
    top = config.get("gamma_max", 8)
    top = top if isinstance(top, int) and not isinstance(top, bool) and top >= 1 else 8
    policy = auto.get("gamma") if gamma == "auto" and isinstance(auto.get("gamma"), str) else gamma
    return top, str(policy)


# --------------------------------------------------------------------------- reading one run


def _summary_row(run: RunRead, data: ReportData) -> dict | None:
    """The flattened summary of one run (reader.read_run has checked it against its records), or None (and a
    Skipped entry) when it lacks what the report's tables need."""
    import pandas as pd

    row = pd.json_normalize([{**(run.summary or {}), "run_dir": str(run.run_dir)}]).iloc[0].to_dict()
    why = _check_summary(row)
    if why:
        data.skip(run.run_dir / "summary.json", why)
        return None
    return row


def _read_probes(run_dir: Path, data: ReportData) -> list[float]:
    """The run's noise probes (ms); each unusable line (records.noise_probe_problem) is listed as skipped."""
    from specbench.measure.results.run_folder import read_probes

    probes, msgs = _captured(read_probes, run_dir)
    _skip_warnings(data, msgs, run_dir / "noise_probes.jsonl")
    return probes


def _read_drift(run_dir: Path, row: dict, data: ReportData) -> float | None:
    """The shared baseline's drift from baseline_probes.jsonl, else the summary's own value."""
    from specbench.measure.results.run_folder import baseline_drift
    from specbench.measure.results.schema import RunFiles

    try:
        drift, msgs = _captured(baseline_drift, RunFiles(run_dir))
        _skip_warnings(data, msgs, run_dir / "baseline_probes.jsonl")
    except DATA_ERRORS:
        data.notes.append(f"{row['run_id']}: baseline_probes.jsonl has unusable ratios; its drift is not checked")
        drift = None
    if drift is None and not math.isnan(num(row.get("baseline_drift"))):
        drift = num(row["baseline_drift"])  # the summary's, where the probe file is gone
    return drift


def _coverage_notes(row: dict, n_records: int, manifest: Manifest, data: ReportData) -> None:
    """Notes for a summary one example behind its records, and for a partial run."""
    if n_records > row["n_examples"]:
        data.notes.append(
            f"{row['run_id']}: summary.json covers {row['n_examples']} examples but examples.jsonl "
            f"holds {n_records} (killed between the two writes); rerun the same command to refresh it"
        )
    if not row.get("complete", True):
        task = manifest.task if isinstance(manifest.task, dict) else {}
        expected = task.get("n_examples")
        data.notes.append(f"{row['run_id']}: partial run, {row['n_examples']} of {expected or '?'} examples measured")


def _rederive(row: dict, records: list[dict], run_dir: Path, manifest: Manifest, data: ReportData) -> None:
    """Recompute the metrics from the raw counts, with the run's noise probes and its shared baseline's drift,
    as the runner and the sweep computed them, so the report follows the current definitions."""
    gamma, policy = resolve_gamma(row["gamma"], manifest)
    row["gamma"], row["gamma_policy"] = gamma, policy
    row["gamma_label"] = f"{policy} (≤{gamma})" if policy else str(gamma)
    probes = _read_probes(run_dir, data)
    row["baseline_drift"] = drift = _read_drift(run_dir, row, data)
    recorded = {"suspect_timing": truthy(row.get("suspect_timing")), "timing_notes": row.get("timing_notes")}
    if records:
        row.update(json_safe(summarize(records, gamma, float(row["temperature"]) == 0.0, probes=probes, drift=drift)))
    row.update(kept_verdict(recorded, {**row, "suspect_timing": truthy(row.get("suspect_timing"))}))
    if row.get("measures_disagree"):  # the primary measure and its companions disagree beyond their intervals
        data.notes.append(f"{row['run_id']}: its speedup measures disagree: " + "; ".join(row["measures_disagree"]))
    note = timing_note(row)
    if note:
        data.notes.append(note)
    row["timing_suspect"] = truthy(row.get("suspect_timing")) or note is not None
    row["timing_warnings"] = timing_warnings(row) if row["timing_suspect"] else []


def _read_run(run: RunRead, data: ReportData) -> dict | None:
    """One run folder → its checked, re-derived row (its examples and manifest go into `data`), or None."""
    row = _summary_row(run, data)
    return None if row is None else _use_run(run, row, data)


def _rebuilt_run(run: RunRead, data: ReportData) -> dict | None:
    """A run folder killed between a record's append and its summary's write (records, no summary.json): its row,
    from the summary run_folder.rebuild_summary makes of its manifest and records (as a resume rebuilds it), which
    the report does not write (it never writes into a run folder). None and a Skipped entry when the folder has no
    records or its summary cannot be rebuilt."""
    import pandas as pd

    from specbench.measure.results.record_checks import summary_problem
    from specbench.measure.results.run_folder import rebuild_summary
    from specbench.measure.results.schema import RunFiles

    run_dir, records = run.run_dir, run.records
    if not records:
        data.skip(run_dir, unsummarized_reason(run_dir))  # records.py's, as export says it
        return None
    try:
        doc = rebuild_summary(RunFiles(run_dir), records)
        why = summary_problem(doc)
    except (SpecbenchError, *DATA_ERRORS) as exc:
        doc, why = {}, f"{type(exc).__name__}: {str(exc)[:160]}"
    row = pd.json_normalize([{**doc, "run_dir": str(run_dir)}]).iloc[0].to_dict()
    why = why or _check_summary(row)
    if why:
        data.skip(run_dir, f"{unsummarized_reason(run_dir)} (the report could not rebuild its summary: {why})")
        return None
    out = _use_run(run, row, data)
    if out is not None:
        data.notes.append(
            f"{row['run_id']}: no summary.json (killed between a record's append and its summary's write); its summary "
            f"was rebuilt from its {len(records)} record(s) for this report, not written: rerun its command to write it"
        )
    return out


def _use_run(run: RunRead, row: dict, data: ReportData) -> dict | None:
    """A run's summary row re-derived from its records (its examples and manifest go into `data`), or None (and a
    Skipped entry) when its records cannot be summarised."""
    import pandas as pd

    run_dir, records, manifest = run.run_dir, run.records, Manifest.from_dict(run.manifest)
    notes_before = len(data.notes)
    data.notes += run.notes  # a summary recomputed by the reader
    _coverage_notes(row, len(records), manifest, data)
    try:
        _rederive(row, records, run_dir, manifest, data)
    except DATA_ERRORS as exc:  # a record whose values (not shape) the metrics cannot use
        del data.notes[notes_before:]  # a run left out leaves no notes
        data.skip(
            run_dir / "examples.jsonl",
            f"its records cannot be summarised ({type(exc).__name__}: {str(exc)[:120]}); its run is left out",
        )
        return None
    data.examples[str(run_dir)] = pd.json_normalize(records)
    data.manifests[str(run_dir)] = manifest
    return row


# --------------------------------------------------------------------------- sweeps and checks


def _read_sweeps(found: FolderRead, with_summary: set[Path], data: ReportData) -> None:
    """sweep.json documents, and a Skipped entry for each of their cells that has no results yet."""
    from specbench.measure.results.records import read_placements

    for path, doc in found.sweeps:
        if not isinstance(doc.get("cells"), list):
            data.skip(path, "sweep.json has no list of cells")
            continue
        data.sweeps.append({**doc, "placement": read_placements(path.parent)})  # where each cell ran (--executor ray)
        for cell in doc["cells"]:
            cell_id = cell.get("cell_id", "?") if isinstance(cell, dict) else "?"
            cell_dir = path.parent / str(cell_id)
            if cell_dir not in with_summary and not any(s.path.startswith(str(cell_dir)) for s in data.skipped):
                data.skip(
                    cell_dir,
                    f"cell of sweep {doc.get('sweep_id', '?')} has no results yet "
                    f"(rerun the sweep command to finish it)",
                )


def _read_checks(found: FolderRead, data: ReportData) -> None:
    """checks.json files: a list of checks, or verification.write_checks' object holding one."""
    for path, doc in found.checks:
        if isinstance(doc, dict) and isinstance(doc.get("checks"), list):
            doc = doc["checks"]  # verification.write_checks: {schema_version, passed, ..., checks: [...]}
        if not isinstance(doc, list):
            data.skip(path, "checks.json is neither a list of checks nor an object with one")
            continue
        good = [c for c in doc if isinstance(c, dict) and "name" in c and "passed" in c]
        if len(good) < len(doc):
            data.skip(
                path,
                f"{len(doc) - len(good)} of {len(doc)} entries are not checks (a dict with at least name and passed)",
            )
        if good:
            data.checks.append((str(path), good))


def collect(paths: list[Path]) -> ReportData:
    """Every run, sweep and checks.json under `paths`, read by the one reader (measure/results/reader.py: no link
    followed, sizes and nesting bounded, records checked against their manifest, summaries against their records);
    whatever is unusable goes to `skipped`."""
    import pandas as pd

    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise SpecbenchError(f"{p} does not exist; pass run folders, sweep folders or a results/ folder")
    found = read_folders(paths)
    data = ReportData(runs=pd.DataFrame())
    for where, why in found.skipped:
        data.skip(where, why)
    rows = [
        row
        for run in found.runs
        if (row := (_read_run(run, data) if run.summary is not None else _rebuilt_run(run, data))) is not None
    ]
    if rows:
        data.runs = runs_frame(rows)
    data.curves = calibration_curves(data.manifests, data.notes)
    _read_sweeps(found, {Path(r["run_dir"]) for r in rows}, data)
    _read_checks(found, data)
    return data

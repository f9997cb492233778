"""Turn run and sweep folders into a report: tables, figures, the paper comparison and what was skipped.

`specbench report RESULTS...` loads every summary under the given folders into pandas
(results.load_runs / load_examples), checks each one, and writes `report.md` plus one
self-contained `report.html` (figures inlined as base64 PNG; PNG and SVG files beside them).

Three rules shape this module:
  - Nothing is dropped silently. A missing summary.json, a summary lacking fields, a torn
    JSONL line, an unreadable checks.json or sweep.json, a sweep cell never run: each becomes
    a line of the "Skipped" section (and a CLI warning), and the rest of the report still builds.
  - Every string that came from a model, a task or the user (outputs, references, draft and
    task names, run ids, check names) is escaped: html.escape in HTML, and in Markdown too,
    because Markdown passes raw HTML through. Matplotlib's mathtext is off, so a `$` in a
    draft name is a dollar sign, not a parse error.
  - Theory sits beside measurement, never instead of it: each measured speedup is drawn with
    Theorem 3.8's prediction from the measured α and c, and with our extended model that also
    uses the measured cost of a verification pass.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import numbers
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specbench.config import GAMMA_POLICIES
from specbench.errors import SpecbenchError
from specbench.measure.hardware import describe
from specbench.measure.metrics import json_safe, summarize, timing_noise

# Identity fields a usable summary must hold (non-null), and metric fields it must have (null = not measurable).
REQUIRED = ("run_id", "target", "draft", "task", "gamma", "temperature", "top_k", "top_p", "n_examples")
METRICS = ("alpha", "alpha_expected", "c", "verify_cost", "tokens_per_target_call", "speedup", "predicted_speedup",
           "predicted_speedup_extended", "baseline_s", "speculative_s", "draft_s", "verify_s", "overhead_s",
           "baseline_tokens", "speculative_tokens", "accepted_length_histogram")
CHECK_FIELDS = ("name", "statistic", "p_value", "n", "threshold", "power", "passed")  # a checks.json row (verification.py)
SAMPLE_CHARS = 240  # characters of each output shown in the samples table
SAMPLE_RUNS = 24  # runs whose first example is shown

# Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023
# (arXiv:2211.17192), Table 2: T5-XXL (11B) target, batch 1, one TPU-v4; speed = walltime improvement
# over the T5X baseline. The paper's PDF could not be opened from this machine; every value below was
# confirmed against two independent third-party study notes in a public code index that transcribe the
# full table identically (EnDe and CNNDM, T5-small/base/large, T = 0 and 1), and a third partial
# transcription that matches the CNNDM T = 1 rows. Rows: (task, draft, T, γ, α, speedup).
PAPER_TABLE2 = (
    ("EnDe", "T5-small", 0, 7, 0.75, 3.4), ("EnDe", "T5-base", 0, 7, 0.80, 2.8), ("EnDe", "T5-large", 0, 7, 0.82, 1.7),
    ("EnDe", "T5-small", 1, 7, 0.62, 2.6), ("EnDe", "T5-base", 1, 5, 0.68, 2.4), ("EnDe", "T5-large", 1, 3, 0.71, 1.4),
    ("CNNDM", "T5-small", 0, 5, 0.65, 3.1), ("CNNDM", "T5-base", 0, 5, 0.73, 3.0), ("CNNDM", "T5-large", 0, 3, 0.74, 2.2),
    ("CNNDM", "T5-small", 1, 5, 0.53, 2.3), ("CNNDM", "T5-base", 1, 3, 0.55, 2.2), ("CNNDM", "T5-large", 1, 3, 0.56, 1.7),
)
PAPER_SOURCE = "Leviathan et al. 2023, Table 2 (T5-XXL target, TPU-v4)"


# --------------------------------------------------------------------------- loading


@dataclass
class Skipped:
    """Something under the given folders that the report could not use, and why."""

    path: str
    reason: str


@dataclass
class ReportData:
    runs: object  # pandas DataFrame, one row per usable run (flattened summary + run_dir)
    examples: dict[str, object] = field(default_factory=dict)  # run_dir → DataFrame of its examples.jsonl
    manifests: dict[str, dict] = field(default_factory=dict)  # run_dir → manifest.json
    checks: list[tuple[str, list[dict]]] = field(default_factory=list)  # (checks.json path, its checks)
    sweeps: list[dict] = field(default_factory=list)  # sweep.json documents
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # used, but worth knowing (partial runs, stale summaries)
    curves: list[dict] = field(default_factory=list)  # distinct pass-cost calibrations (calibration_curves)


def _isnull(value) -> bool:
    if value is None:
        return True
    try:
        return isinstance(value, float) and math.isnan(value)
    except TypeError:
        return False


def _captured(fn, *args):
    """Call fn and return (result, [warning messages]) — results.py reports torn lines as warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in caught]


def _read_json(path: Path, skipped: list[Skipped]):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        skipped.append(Skipped(str(path), f"unreadable JSON ({type(exc).__name__}: {str(exc)[:120]})"))
        return None


def _check_summary(row: dict) -> str | None:
    """Why a flattened summary row cannot be used, or None."""
    if "n_examples" in row and not _isnull(row["n_examples"]) and row["n_examples"] == 0:
        return "no examples measured yet (summary has n_examples = 0)"
    missing = [k for k in REQUIRED if k not in row or _isnull(row[k])] + [k for k in METRICS if k not in row]
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


def resolve_gamma(gamma, manifest: dict) -> tuple[int, str | None]:
    """A summary's γ → (the most drafts a step may make, the policy name or None).

    An integer γ is itself. A policy (adaptive, heuristic) drafts up to the run's gamma_max
    (config.draft_gamma; 8 where the manifest does not say), which also sizes its histogram.
    `auto` resolves to an integer before a run starts; should a summary still say auto, the
    manifest's recorded choice is used.
    """
    if not isinstance(gamma, str):
        return int(gamma), None
    auto = manifest.get("auto") if isinstance(manifest.get("auto"), dict) else {}
    if gamma == "auto" and isinstance(auto.get("gamma"), int) and not isinstance(auto.get("gamma"), bool):
        return int(auto["gamma"]), None
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    top = config.get("gamma_max", 8)
    top = top if isinstance(top, int) and not isinstance(top, bool) and top >= 1 else 8
    policy = auto.get("gamma") if gamma == "auto" and isinstance(auto.get("gamma"), str) else gamma
    return top, str(policy)


def _verify_cost_note(row: dict) -> str | None:
    """The report's own check: a verify cost outside [0.5, γ+1] single-token passes (None when plausible)."""
    cost, gamma = _num(row.get("verify_cost")), int(row["gamma"])
    if not math.isnan(cost) and not 0.5 <= cost <= gamma + 1:
        return (f"verify cost {cost:.2f} single-token passes for γ+1 = {gamma + 1} tokens is "
                f"implausible; the baseline and speculative timings were probably taken under different machine "
                f"load, so its speedup is unreliable (rerun on a quiet machine)")
    return None


def _drift_flagged(row: dict) -> float | None:
    """The run's baseline drift when metrics.timing_noise (the one drift rule) flags it, else None."""
    drift = _num(row.get("baseline_drift"))
    if math.isnan(drift) or not timing_noise([], None, drift)["suspect_timing"]:
        return None
    return drift


DRIFT_CONSEQUENCE = ("the machine's speed changed between the baseline and this run, so its speedup is off by about "
                     "that factor (rerun the sweep on a quiet machine)")


def timing_note(row: dict) -> str | None:
    """Flag a verify cost no honest measurement gives: the baseline and speculative timings disagree.

    One target pass over γ+1 tokens costs at least about one single-token step and at most
    about γ+1 of them. Outside [0.5, γ+1] the baseline was most likely timed under another
    load than the speculative run (a sweep measures each baseline once, in the first cell of
    its task and temperature), so that run's speedup is not trustworthy.
    Sweeps also re-time one shared baseline before each cell (runner.probe_shared_baseline):
    a `baseline_drift` (fresh ÷ stored seconds) that metrics.timing_noise flags is reported too
    (the tolerance lives there, so run, sweep and report agree).
    """
    note = _verify_cost_note(row)
    if note:
        return f"{row['run_id']}: {note}"
    drift = _drift_flagged(row)
    if drift is not None:
        return f"{row['run_id']}: its shared baseline, re-timed before the run, took {drift:.2f}× the stored time; " \
               f"{DRIFT_CONSEQUENCE}"
    return None


def _truthy(value) -> bool:
    return not _isnull(value) and bool(value)


def timing_warnings(row: dict) -> list[str]:
    """Why a run's timings are suspect, one reason a line: the summary's timing_notes (metrics.timing_noise:
    noise probes, per-example spread, repeats, baseline drift) and the report's verify-cost check."""
    notes = row.get("timing_notes")
    from_metrics = isinstance(notes, (list, tuple))
    out = [str(n) for n in notes] if from_metrics else []
    drift = _drift_flagged(row)
    if drift is not None:  # metrics already wrote "the shared baseline ... took X×"; say what it means
        out.append(DRIFT_CONSEQUENCE if from_metrics else
                   f"its shared baseline, re-timed before the run, took {drift:.2f}× the stored time; {DRIFT_CONSEQUENCE}")
    note = _verify_cost_note(row)
    if note:
        out.append(note)
    if not out and _truthy(row.get("suspect_timing")):
        out.append("the summary flags its timings as suspect (no reason recorded)")
    return out


def collect(paths: list[Path]) -> ReportData:
    """Every run, sweep and checks.json under `paths`, checked; whatever is unusable goes to `skipped`."""
    import pandas as pd

    from specbench.measure.records import RunFiles, load_examples, load_runs, read_records
    from specbench.measure.runner import baseline_drift, read_probes

    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise SpecbenchError(f"{p} does not exist; pass run folders, sweep folders or a results/ folder")
    files = lambda name: sorted({f.resolve() for p in paths for f in ([p] if p.name == name else p.rglob(name))
                                 if f.is_file()})
    data = ReportData(runs=pd.DataFrame())
    summaries = files("summary.json")
    with_summary = {s.parent for s in summaries}
    for marker in ("manifest.json", "examples.jsonl"):
        for f in files(marker):
            if f.parent not in with_summary and not any(s.path == str(f.parent) for s in data.skipped):
                data.skipped.append(Skipped(str(f.parent), "run folder without summary.json (killed before its "
                                                           "first example finished?); rerun its command to resume"))
    rows = []
    for s in summaries:
        doc = _read_json(s, data.skipped)
        if doc is None:
            continue
        if not isinstance(doc, dict):  # load_runs assumes an object
            data.skipped.append(Skipped(str(s), "summary.json is not a JSON object"))
            continue
        df, msgs = _captured(load_runs, [s])
        if msgs or df.empty:
            data.skipped.append(Skipped(str(s), msgs[0] if msgs else "empty summary"))
            continue
        row = df.iloc[0].to_dict()
        why = _check_summary(row)
        if why:
            data.skipped.append(Skipped(str(s), why))
            continue
        run_dir = str(s.parent)
        examples, msgs = _captured(load_examples, s.parent)
        for m in msgs:  # "<file>:<line>: skipped a malformed line ..."
            where, _, reason = m.rpartition(": ")
            data.skipped.append(Skipped(where or str(s.parent / "examples.jsonl"), reason or m))
        data.examples[run_dir] = examples
        manifest = s.parent / "manifest.json"
        data.manifests[run_dir] = (_read_json(manifest, data.skipped) or {}) if manifest.exists() else {}
        expected = data.manifests[run_dir].get("task", {}).get("n_examples")
        if len(examples) > row["n_examples"]:
            data.notes.append(f"{row['run_id']}: summary.json covers {row['n_examples']} examples but examples.jsonl "
                              f"holds {len(examples)} (killed between the two writes); rerun the same command to refresh it")
        if not row.get("complete", True):
            data.notes.append(f"{row['run_id']}: partial run, {row['n_examples']} of {expected or '?'} examples measured")
        # derive the metrics anew from the raw counts, so the report follows the current definitions
        # (specbench.measure.metrics) even for summaries written by an older version or one example behind
        # with the run's noise probes and its shared baseline's drift, as the runner and the sweep computed them
        gamma, policy = resolve_gamma(row["gamma"], data.manifests[run_dir])
        row["gamma"], row["gamma_policy"] = gamma, policy
        row["gamma_label"] = f"{policy} (≤{gamma})" if policy else str(gamma)
        probes, msgs = _captured(read_probes, s.parent)
        for m in msgs:
            where, _, reason = m.rpartition(": ")
            data.skipped.append(Skipped(where or str(s.parent / "noise_probes.jsonl"), reason or m))
        try:
            drift, msgs = _captured(baseline_drift, RunFiles(s.parent))
            for m in msgs:
                where, _, reason = m.rpartition(": ")
                data.skipped.append(Skipped(where or str(s.parent / "baseline_probes.jsonl"), reason or m))
        except (TypeError, ValueError, KeyError, AttributeError):
            data.notes.append(f"{row['run_id']}: baseline_probes.jsonl has unusable ratios; its drift is not checked")
            drift = None
        if drift is None and not math.isnan(_num(row.get("baseline_drift"))):
            drift = _num(row["baseline_drift"])  # the summary's, where the probe file is gone
        row["baseline_drift"] = drift
        records, _ = _captured(read_records, s.parent / "examples.jsonl")
        if records:
            row.update(json_safe(summarize(records, gamma, float(row["temperature"]) == 0.0, probes=probes, drift=drift)))
        note = timing_note(row)
        if note:
            data.notes.append(note)
        row["timing_suspect"] = _truthy(row.get("suspect_timing")) or note is not None
        row["timing_warnings"] = timing_warnings(row) if row["timing_suspect"] else []
        rows.append(row)
    if rows:
        runs = pd.DataFrame(rows)
        runs["gamma"] = runs["gamma"].astype(int)
        runs["temperature"] = runs["temperature"].astype(float)
        runs["timing_suspect"] = runs["timing_suspect"].astype(bool)
        keys = series_keys(runs)
        runs["series"] = [series_label(r, keys) for _, r in runs.iterrows()]
        data.runs = runs.sort_values(["task", "draft", "temperature", "gamma", "run_id"]).reset_index(drop=True)
    data.curves = calibration_curves(data)
    for path in files("sweep.json"):
        doc = _read_json(path, data.skipped)
        if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
            if doc is not None:
                data.skipped.append(Skipped(str(path), "sweep.json has no list of cells"))
            continue
        data.sweeps.append(doc)
        for cell in doc["cells"]:
            cell_dir = path.parent / str(cell.get("cell_id", "?"))
            if cell_dir.resolve() not in with_summary and not any(s.path == str(cell_dir.resolve()) for s in data.skipped):
                data.skipped.append(Skipped(str(cell_dir), f"cell of sweep {doc.get('sweep_id', '?')} has no results yet "
                                                           f"(rerun the sweep command to finish it)"))
    for path in files("checks.json"):
        doc = _read_json(path, data.skipped)
        if doc is None:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("checks"), list):
            doc = doc["checks"]  # verification.write_checks: {schema_version, passed, ..., checks: [...]}
        if not isinstance(doc, list):
            data.skipped.append(Skipped(str(path), "checks.json is neither a list of checks nor an object with one"))
            continue
        good = [c for c in doc if isinstance(c, dict) and "name" in c and "passed" in c]
        if len(good) < len(doc):
            data.skipped.append(Skipped(str(path), f"{len(doc) - len(good)} of {len(doc)} entries are not checks "
                                                   f"(a dict with at least name and passed)"))
        if good:
            data.checks.append((str(path), good))
    return data


# --------------------------------------------------------------------------- analysis


def _num(value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return x


def series_keys(runs) -> list[str]:
    """Columns that tell lines apart: draft and temperature, plus target/top-k/top-p when they vary."""
    return ["draft", "temperature"] + [k for k in ("target", "top_k", "top_p") if runs[k].nunique() > 1]


def series_label(row, keys: list[str]) -> str:
    parts = [str(row["draft"]), f"T={float(row['temperature']):g}"]
    parts += [f"{k}={row[k]}" for k in keys if k not in ("draft", "temperature")]
    return ", ".join(parts)


def fixed_gamma(runs):
    """The runs with an integer γ (a policy run's γ varies per step: it has no place on a γ axis)."""
    if "gamma_policy" not in runs:
        return runs
    return runs[runs["gamma_policy"].isna()]


def policy_runs(runs):
    """The runs whose γ is a policy (adaptive, heuristic): shown beside the fixed-γ ones, never mixed in."""
    if "gamma_policy" not in runs:
        return runs.iloc[0:0]
    return runs[runs["gamma_policy"].notna()]


def with_ci(value, ci, digits: int = 2, unit: str = "") -> str:
    """'1.23 [1.06, 1.41]': a value and its 95 % interval ('—' for what was not measurable)."""
    x = _num(value)
    if math.isnan(x):
        return "—"
    text = f"{x:.{digits}f}{unit}"
    if isinstance(ci, (list, tuple, np.ndarray)) and len(ci) == 2:
        lo, hi = _num(ci[0]), _num(ci[1])
        if not (math.isnan(lo) or math.isnan(hi)):
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return text


def best_gamma_rows(runs) -> list[dict]:
    """Per task and series: the best measured γ, and the γ Theorem 3.8 / the extended model would pick.

    Only integer-γ runs take part (policy runs: policy_runs). Theorem 3.8 searches γ in 1..64; where its
    optimum lies outside the γ that were run, `thm_in_range` is False and `thm_gamma_in_range` /
    `thm_factor_in_range` give the best γ within the measured range, which is what the report recommends.
    """
    from specbench.measure import theory

    out = []
    for (task, series), group in fixed_gamma(runs).groupby(["task", "series"], sort=True):
        group = group.sort_values("gamma")
        row = {"task": task, "series": series, "gammas": sorted(set(int(g) for g in group["gamma"]))}
        suspect = (group["timing_suspect"] if "timing_suspect" in group else group["gamma"] < 0).astype(bool)
        row["suspect_gammas"] = sorted(int(g) for g in group.loc[suspect, "gamma"])
        if suspect.any() and not suspect.all():
            group = group[~suspect]  # recommend from trustworthy timings when there are any
        speed = group["speedup"].map(_num)
        best = speed.idxmax() if speed.notna().any() else None
        row["measured_gamma"] = int(group.loc[best, "gamma"]) if best is not None else None
        row["measured_speedup"] = float(speed[best]) if best is not None else float("nan")
        alpha = group["alpha"].map(_num).mean()  # α should not depend on γ: pool the cells (mean over γ)
        c = group["c"].map(_num).mean()
        row["alpha"], row["c"] = alpha, c
        row["thm_gamma"] = row["thm_factor"] = row["ext_gamma"] = row["ext_factor"] = None
        row["thm_in_range"], row["thm_gamma_in_range"], row["thm_factor_in_range"] = True, None, None
        lo, hi = row["gammas"][0], row["gammas"][-1]
        if 0.0 <= alpha <= 1.0 and c >= 0.0:
            opt = theory.optimal_gamma(alpha, c)
            row["thm_gamma"], row["thm_factor"] = opt.gamma, opt.factor
            inside = theory.optimal_gamma_extended(alpha, c, {g: 1.0 for g in range(lo, hi + 1)}, max_gamma=hi)
            row["thm_in_range"] = lo <= opt.gamma <= hi
            row["thm_gamma_in_range"], row["thm_factor_in_range"] = inside.gamma, inside.factor
            costs = {int(g): _num(v) for g, v in zip(group["gamma"], group["verify_cost"]) if _num(v) > 0}
            if costs:
                ext = theory.optimal_gamma_extended(alpha, c, costs)
                row["ext_gamma"], row["ext_factor"] = ext.gamma, ext.factor
        out.append(row)
    return out


def hardware_short(hw, device: str | None = None) -> str:
    """The CPU or GPU model a calibration ran on (the GPU's when the device is CUDA)."""
    if not isinstance(hw, dict) or not hw:
        return describe(None)
    gpus = [g.get("name") for g in hw.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if gpus and str(device or "").startswith("cuda"):
        return ", ".join(sorted(set(gpus)))
    return str(hw.get("cpu_model") or describe(hw).split(",")[0])


def _curve(cal: dict) -> dict[int, float] | None:
    """k → t(k)/t(1) of a Calibration.to_dict(): its pass_cost, or derived from target_ms; None if unusable."""
    cost = cal.get("pass_cost")
    try:
        if not isinstance(cost, dict) or not cost:
            ms = {int(k): float(v) for k, v in (cal.get("target_ms") or {}).items()}
            cost = {k: v / ms[1] for k, v in ms.items()} if ms.get(1, 0) > 0 else {}
        curve = {int(k): float(v) for k, v in cost.items()}
    except (TypeError, ValueError, AttributeError):
        return None
    curve = {k: v for k, v in sorted(curve.items()) if k >= 1 and math.isfinite(v) and v > 0}
    return curve or None


def calibration_curves(data: ReportData) -> list[dict]:
    """Each distinct pass-cost calibration across the runs' manifests (the run's own, and each dtype an
    `auto` choice calibrated): {label, dtype, context_tokens, hardware, device, curve {k: t(k)/t(1)}, runs}."""
    found: dict[tuple, dict] = {}
    for run_dir, m in sorted(data.manifests.items()):
        run_id = str(m.get("run_id") or Path(run_dir).name)
        cals = [("", m.get("calibration"))]
        auto = m.get("auto")
        if isinstance(auto, dict) and isinstance(auto.get("calibrations"), dict):
            cals += sorted(auto["calibrations"].items())
        for dtype_key, cal in cals:
            if cal is None:
                continue
            curve = _curve(cal) if isinstance(cal, dict) else None
            if curve is None:
                data.notes.append(f"{run_id}: a calibration in manifest.json has no usable pass-cost curve; not plotted")
                continue
            dtype, device = str(cal.get("dtype") or dtype_key or "?"), str(cal.get("device") or "?")
            hw = hardware_short(m.get("hardware"), device)
            key = (dtype, device, cal.get("context_tokens"), hw, tuple((k, round(v, 6)) for k, v in curve.items()))
            entry = found.setdefault(key, {"dtype": dtype, "device": device, "context_tokens": cal.get("context_tokens"),
                                           "hardware": hw, "curve": curve, "runs": []})
            if run_id not in entry["runs"]:
                entry["runs"].append(run_id)
    curves = list(found.values())
    for c in curves:
        c["label"] = f"{c['dtype']}, {fmt(c['context_tokens'])}-token context, {c['hardware']}"
    counts: dict[str, int] = {}
    for c in curves:
        counts[c["label"]] = counts.get(c["label"], 0) + 1
    for c in curves:  # the same setup calibrated twice (another session): tell the curves apart by a run
        if counts[c["label"]] > 1:
            c["label"] += f" ({c['runs'][0]})"
    return curves


# --------------------------------------------------------------------------- figures


@dataclass
class RenderedFigure:
    name: str  # file stem under figures/
    title: str
    caption: str
    png: bytes = b""


def _rc():
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False, "svg.hashsalt": "specbench", "font.size": 9,
                                  "axes.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3})


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width, height), layout="constrained")


def _panels(fig, n: int, ncols: int):
    nrows = math.ceil(n / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n]


def _colors(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if len(labels) <= 10 else colormaps["tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def fig_speedup(runs) -> object:
    """Measured speedup vs γ per task: one line per series, Theorem 3.8 and the extended model dashed."""
    from matplotlib.lines import Line2D

    runs = fixed_gamma(runs)
    tasks = sorted(runs["task"].unique())
    colors = _colors(sorted(runs["series"].unique()))
    rows = math.ceil(len(tasks) / 3)
    fig = _new_figure(min(5.6 * len(tasks), 16.8) if len(tasks) > 1 else 7.0,
                      4.2 * rows + 0.25 * math.ceil((len(colors) + 3) / 4) + 0.3)
    for ax, task in zip(_panels(fig, len(tasks), min(len(tasks), 3)), tasks):
        sub = runs[runs["task"] == task]
        for label, g in sub.groupby("series", sort=True):
            g = g.groupby("gamma")[["speedup", "predicted_speedup", "predicted_speedup_extended"]].agg(
                lambda s: s.map(_num).mean()).reset_index()  # duplicate runs of one cell: their mean
            color = colors[label]
            ax.plot(g["gamma"], g["speedup"], "o-", color=color, label=label, lw=1.8)
            ax.plot(g["gamma"], g["predicted_speedup"], "--", color=color, lw=1.2)
            ax.plot(g["gamma"], g["predicted_speedup_extended"], "-.", color=color, lw=1.2, marker="x", ms=4)
        ax.axhline(1.0, color="0.4", lw=0.8)
        ax.set_title(f"Speedup vs γ: {task}")
        ax.set_xlabel("draft length γ (tokens drafted per target pass)")
        ax.set_ylabel("walltime speedup (× target alone)")
        ax.set_xticks(sorted(int(g) for g in sub["gamma"].unique()))
    handles = [Line2D([], [], color=colors[label], ls="-", marker="o", label=label) for label in colors]
    handles += [Line2D([], [], color="0.2", ls="-", marker="o", label="measured"),
                Line2D([], [], color="0.2", ls="--", label="Theorem 3.8 from measured α, c"),
                Line2D([], [], color="0.2", ls="-.", marker="x", label="extended: + measured verify cost")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=7)
    return fig


def fig_pass_cost(curves: list[dict]) -> object:
    """t(k)/t(1) against k, one line per distinct calibration; dashed: the paper's free verification, t(k) = t(1)."""
    colors = _colors([c["label"] for c in curves])
    fig = _new_figure(7.5, 4.4 + 0.2 * len(curves))
    ax = fig.subplots()
    ks = sorted({k for c in curves for k in c["curve"]})
    for c in curves:
        x = list(c["curve"])
        ax.plot(x, [c["curve"][k] for k in x], "o-", color=colors[c["label"]], lw=1.6, ms=4, label=c["label"])
    ax.axhline(1.0, color="0.3", ls="--", lw=1.0, label="t(k) = t(1): free verification (the paper's assumption)")
    ax.set_xticks(ks)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("k: new tokens in one target pass (verifying γ drafts takes k = γ+1)")
    ax.set_ylabel("t(k) / t(1): cost in single-token passes")
    ax.set_title("Target pass cost vs tokens per pass (calibrated before timing)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=1, fontsize=7)
    return fig


def fig_alpha(runs) -> object:
    """α per draft, task and temperature: mean over γ cells, whiskers from the smallest to the largest cell."""
    import numpy as np

    groups = sorted({(t, float(temp)) for t, temp in zip(runs["task"], runs["temperature"])})
    drafts = sorted(runs["draft"].unique())
    colors = _colors(drafts)
    width = 0.8 / len(drafts)
    fig = _new_figure(max(6.5, 1.2 * len(groups) * max(1, len(drafts) / 2) + 2), 4.4)
    ax = fig.subplots()
    for i, draft in enumerate(drafts):
        means, lo, hi, expected = [], [], [], []
        for task, temp in groups:
            sel = runs[(runs["task"] == task) & (runs["temperature"] == temp) & (runs["draft"] == draft)]
            a = sel["alpha"].map(_num).dropna()
            means.append(a.mean() if len(a) else np.nan)
            lo.append(a.mean() - a.min() if len(a) else 0.0)
            hi.append(a.max() - a.mean() if len(a) else 0.0)
            e = sel["alpha_expected"].map(_num).dropna()
            expected.append(e.mean() if len(e) else np.nan)
        x = np.arange(len(groups)) + (i - (len(drafts) - 1) / 2) * width
        ax.bar(x, means, width * 0.9, yerr=[lo, hi], capsize=3, color=colors[draft], label=draft)
        ax.plot(x, expected, "D", color="black", ms=4, label="E[Σ min(p, q)] (α expected)" if i == 0 else None)
    ax.set_xticks(np.arange(len(groups)), [f"{t}\nT={temp:g}" for t, temp in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("acceptance rate α (accepted / acceptance trials)")
    ax.set_xlabel("task and temperature")
    ax.set_title("Acceptance rate α per draft\n(bars: mean over the γ cells; whiskers: their min and max)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _histogram(value, gamma: int) -> list[float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != gamma + 1:
        return None
    counts = [_num(v) for v in value]
    return counts if all(x >= 0 for x in counts) else None


def fig_histograms(runs, task: str) -> object:
    """Accepted drafts per step, measured (bars) against the capped geometric law for the measured α (dots)."""
    from specbench.measure import theory

    sub = fixed_gamma(runs)
    sub = sub[sub["task"] == task]
    series, gammas = sorted(sub["series"].unique()), sorted(sub["gamma"].unique())
    fig = _new_figure(2.3 * len(gammas) + 0.6, 2.0 * len(series) + 0.8)
    axes = fig.subplots(len(series), len(gammas), squeeze=False)
    for r, label in enumerate(series):
        for col, gamma in enumerate(gammas):
            ax = axes[r][col]
            cell = sub[(sub["series"] == label) & (sub["gamma"] == gamma)]
            ax.set_title(f"{label}, γ={gamma}", fontsize=7)
            if r == len(series) - 1:
                ax.set_xlabel("drafts accepted per step")
            if col == 0:
                ax.set_ylabel("share of steps")
            if cell.empty:
                ax.set_visible(False)
                continue
            row = cell.iloc[0]
            counts = _histogram(row["accepted_length_histogram"], int(gamma))
            if not counts or sum(counts) == 0:
                ax.text(0.5, 0.5, "no verification steps", ha="center", va="center", transform=ax.transAxes)
                continue
            n = range(int(gamma) + 1)
            ax.bar(n, [x / sum(counts) for x in counts], color="tab:blue", alpha=0.7, label=f"measured ({int(sum(counts))} steps)")
            alpha = _num(row["alpha"])
            if 0.0 <= alpha <= 1.0:
                ax.plot(n, theory.accepted_length_law(alpha, int(gamma)), "o", color="tab:red", ms=4,
                        label=f"law, α={alpha:.2f}")
            ax.set_ylim(0, 1.0)
            ax.set_xticks(list(n))
            ax.legend(fontsize=6)
    fig.suptitle(f"Accepted-length histograms: {task} (law: (1−α)αⁿ for n < γ, α^γ for n = γ)", fontsize=10)
    return fig


def fig_time_split(runs) -> object:
    """Speculative milliseconds per generated token split into prefill, draft, verify and overhead; baseline beside."""
    import numpy as np

    tasks = sorted(runs["task"].unique())
    fig = _new_figure(max(6.0, 0.45 * len(runs) + 2.5), 3.8 * len(tasks))
    for ax, task in zip(_panels(fig, len(tasks), 1), tasks):
        sub = runs[runs["task"] == task]
        tokens = sub["speculative_tokens"].map(_num).replace(0, np.nan)
        ms = lambda col: (sub[col].map(_num) / tokens * 1e3).fillna(0.0).to_numpy()
        draft, verify, overhead = ms("draft_s"), ms("verify_s"), ms("overhead_s")
        prefill = np.clip(ms("speculative_s") - draft - verify - overhead, 0.0, None)
        base = (sub["baseline_s"].map(_num) / sub["baseline_tokens"].map(_num).replace(0, np.nan) * 1e3).to_numpy()
        x = np.arange(len(sub))
        bottom = np.zeros(len(sub))
        for part, color, label in ((prefill, "0.7", "prefill (time to first token)"), (draft, "tab:orange", "draft"),
                                   (verify, "tab:blue", "verify (target passes)"), (overhead, "tab:green", "overhead")):
            ax.bar(x, part, 0.7, bottom=bottom, color=color, label=label)
            bottom += part
        ax.plot(x, base, "_", color="black", ms=18, mew=2, label="baseline (target alone)")
        labels = sub["gamma_label"] if "gamma_label" in sub else sub["gamma"]
        ax.set_xticks(x, [f"{d}\nT={float(t):g} γ={g}" for d, t, g in zip(sub["draft"], sub["temperature"], labels)],
                      fontsize=7, rotation=45 if len(sub) > 8 else 0, ha="right" if len(sub) > 8 else "center")
        ax.set_ylabel("milliseconds per generated token")
        ax.set_title(f"Where the time goes: {task}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def quality_rows(runs) -> list[dict]:
    """One row per run and score: baseline vs speculative, with bootstrap CIs where the runner computed them."""
    rows = []
    if "quality.metric" not in runs:
        return rows
    for _, r in runs.iterrows():
        if _isnull(r.get("quality.metric")):
            continue
        for col in sorted(c for c in runs.columns if c.startswith("quality.baseline.")):
            key = col.removeprefix("quality.baseline.")
            if key.endswith("_ci95") or key == "signature":
                continue
            base, spec = _num(r.get(col)), _num(r.get(f"quality.speculative.{key}"))
            if math.isnan(base) and math.isnan(spec):
                continue
            rows.append({"run_id": r["run_id"], "metric": key, "baseline": base, "speculative": spec,
                         "baseline_ci": r.get(f"quality.baseline.{key}_ci95"),
                         "speculative_ci": r.get(f"quality.speculative.{key}_ci95")})
    return rows


def fig_quality(rows: list[dict]) -> object:
    import numpy as np

    metrics = sorted({r["metric"] for r in rows})
    fig = _new_figure(max(6.5, 0.6 * len(rows) / max(1, len(metrics)) + 3), 3.2 * len(metrics))
    for ax, metric in zip(_panels(fig, len(metrics), 1), metrics):
        sub = [r for r in rows if r["metric"] == metric]
        x = np.arange(len(sub))
        for offset, engine, color in ((-0.2, "baseline", "0.5"), (0.2, "speculative", "tab:blue")):
            vals = np.array([r[engine] for r in sub])
            ci = [r[f"{engine}_ci"] for r in sub]
            err = np.array([[v - c[0], c[1] - v] if isinstance(c, (list, tuple)) and len(c) == 2 else [0, 0]
                            for v, c in zip(vals, ci)]).T
            ax.bar(x + offset, vals, 0.38, yerr=np.clip(err, 0, None), capsize=3, color=color, label=engine)
        ax.set_xticks(x, [r["run_id"] for r in sub], fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(f"{metric} (×100)")
        ax.set_title(f"{metric}: baseline vs speculative")
        ax.legend(fontsize=7)
    return fig


def render_figure(fig, name: str, title: str, caption: str, folder: Path) -> RenderedFigure:
    """Save PNG and SVG files; keep the PNG bytes to inline into the HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    (folder / f"{name}.png").write_bytes(buf.getvalue())
    fig.savefig(folder / f"{name}.svg", format="svg", metadata={"Date": None})
    return RenderedFigure(name, title, caption, buf.getvalue())


# --------------------------------------------------------------------------- document blocks


@dataclass
class Table:
    columns: list[str]
    rows: list[list]  # cells: str, numbers, None


def fmt(value, digits: int = 3) -> str:
    if _isnull(value):
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2e}" if 0 < abs(value) < 10 ** -digits else f"{value:.{digits}f}"  # p-values stay visible
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v, digits) for v in value) + "]"
    return str(value)


def _clip(text, n: int = SAMPLE_CHARS) -> str:
    text = "" if _isnull(text) else str(text)
    return text if len(text) <= n else text[:n] + "…"


def build_blocks(data: ReportData, figures: list[RenderedFigure], title: str) -> list[tuple]:
    """The report as a list of (kind, payload) blocks, rendered identically to Markdown and HTML."""
    runs = data.runs
    blocks: list[tuple] = [("h1", title),
                           ("p", f"Generated {time.strftime('%Y-%m-%d %H:%M')} by specbench report from "
                                 f"{len(runs)} run(s); {len(data.skipped)} item(s) skipped (listed at the end).")]
    suspect = runs[runs["timing_suspect"]] if "timing_suspect" in runs else runs.iloc[0:0]
    if len(suspect):
        blocks += [("h2", f"Timing warnings ({len(suspect)} of {len(runs)} runs)"),
                   ("p", "These runs failed a timing check (noise probes re-timed between examples, the spread of the "
                         "baseline's time per token, disagreeing repeats, a re-timed shared baseline that drifted, or a "
                         "verify cost no quiet machine gives). Do not trust their speedups without a rerun on a quiet "
                         "machine; the tables mark them, and the γ recommendation leaves them out when other cells "
                         "remain."),
                   ("list", [f"{r['run_id']}: " + "; ".join(r["timing_warnings"] or ["flagged"])
                             for _, r in suspect.iterrows()])]
    env = _environment(data)
    if env:
        blocks += [("h2", "Setup"), ("list", env)]
    choices = _auto_reasons(data)
    if choices:
        blocks += [("h2", "Automatic choices"),
                   ("p", "Runs that asked for --gamma, --draft or --dtype auto (or the adaptive γ policy): what was "
                         "chosen on the machine, and why, as recorded in each manifest."),
                   ("list", choices)]
    blocks += [("h2", "Runs"),
               ("p", "α = accepted / acceptance trials; c = draft cost per token over target cost per token; "
                     "verify = cost of one target pass over γ+1 tokens in single-token passes; speedup = speculative "
                     "tokens/s over baseline tokens/s, prefill included (at T = 0, baseline walltime over speculative "
                     "walltime). Predictions use each run's measured α, c "
                     "(Theorem 3.8) and also its measured verify cost (extended). Decode: the speedup of the decode "
                     "phase alone, beside the cost model's prediction for outputs of the lengths measured "
                     "(predicted_decode_speedup: drafts accepted past an EOS are lost, the budget shortens the last "
                     "drafts). c and the verify cost come from the same run, so this pair checks the loop's own time "
                     "and the predicted number of target passes, not the cost measurements themselves. Speedup and "
                     "decode carry their 95 % bootstrap interval over examples in brackets; timing SUSPECT: see "
                     "Timing warnings at the top."),
               ("table", Table(["run", "task", "draft", "T", "γ", "n", "α", "α exp.", "c", "verify", "tok/call",
                                "speedup [95% CI]", "timing", "Thm 3.8", "extended", "decode [95% CI]",
                                "predicted decode", "identical share", "complete"],
                               [[r["run_id"], r["task"], r["draft"], f"{r['temperature']:g}", _gamma_text(r),
                                 r["n_examples"], _num(r["alpha"]), _num(r["alpha_expected"]), _num(r["c"]),
                                 _num(r["verify_cost"]), _num(r["tokens_per_target_call"]),
                                 with_ci(r["speedup"], r.get("speedup_ci95")), _timing_text(r),
                                 _num(r["predicted_speedup"]), _num(r["predicted_speedup_extended"]),
                                 with_ci(r.get("decode_speedup"), r.get("decode_speedup_ci95")),
                                 _num(r.get("predicted_decode_speedup")), _num(r.get("identical_rate")), r.get("complete")]
                                for _, r in runs.iterrows()]))]
    greedy = runs[runs["identity_line"].notna()] if "identity_line" in runs else runs.iloc[0:0]
    if len(greedy):
        blocks += [("h2", "Greedy identity, explained"),
                   ("p", "In bf16 or fp16 the target's logits depend on how many tokens share a pass, so where its two "
                         "best tokens nearly tie, a verify pass can choose differently from a one-token step: such a "
                         "divergence is classified numerics when replaying both runs' own passes shows the target itself "
                         "flipping, and unexplained (a candidate bug) otherwise. The numerics floor is the share of the "
                         "baseline's positions a teacher-forced (γ+1)-token pass flips: what this hardware forces on "
                         "any multi-token verifier."),
                   ("table", Table(["run", "dtype", "identity", "numerics floor", "unexplained"],
                                   [[r["run_id"], r.get("dtype"), r["identity_line"], _num(r.get("numerics_floor")),
                                     r.get("divergences_unexplained")] for _, r in greedy.iterrows()]))]
    best = best_gamma_rows(runs)
    blocks += [("h2", "Recommended γ"),
               ("p", "Measured: the γ with the largest measured speedup among those run (95 % bootstrap interval in "
                     "brackets). Theorem 3.8: the γ maximising (1−α^(γ+1))/((1−α)(γc+1)) with α and c pooled over the "
                     "γ cells (mean); only γ within the measured range are recommended, and where the theorem's "
                     "optimum over 1..64 lies outside it, the table says so beside the best γ inside the range. "
                     "Extended: the same with each γ's measured verify cost, so only measured γ values are "
                     "candidates. Cells whose timings look inconsistent (see Timing warnings) are left out when "
                     "others remain."),
               ("table", Table(["task", "draft, T", "γ run", "best γ measured", "its speedup [95% CI]", "pooled α",
                                "pooled c", "γ* Thm 3.8", "predicted", "γ* extended", "predicted (ext.)",
                                "suspect timings at γ"],
                               [[b["task"], b["series"], ",".join(map(str, b["gammas"])), b["measured_gamma"],
                                 _best_speedup_text(runs, b), b["alpha"], b["c"], _thm_gamma_text(b),
                                 b["thm_factor"] if b["thm_in_range"] else b["thm_factor_in_range"],
                                 b["ext_gamma"], b["ext_factor"], ",".join(map(str, b["suspect_gammas"])) or "none"]
                                for b in best]))]
    policies = policy_runs(runs)
    if len(policies):
        blocks += [("p", "Runs with a γ policy choose γ per step (up to γ max), so they have no place in the γ "
                         "comparison above; they are listed here on their own."),
                   ("table", Table(["run", "task", "draft, T", "γ policy", "γ max", "n", "α", "tok/call",
                                    "speedup [95% CI]", "timing", "decode [95% CI]"],
                                   [[r["run_id"], r["task"], r["series"], r["gamma_policy"], int(r["gamma"]),
                                     r["n_examples"], _num(r["alpha"]), _num(r["tokens_per_target_call"]),
                                     with_ci(r["speedup"], r.get("speedup_ci95")), _timing_text(r),
                                     with_ci(r.get("decode_speedup"), r.get("decode_speedup_ci95"))]
                                    for _, r in policies.iterrows()]))]
    blocks += [("h2", "Compared with the paper (Table 2 shape)"),
               ("p", f"Paper rows: {PAPER_SOURCE}; each is the paper's best γ for that draft. Our rows: the best "
                     "measured γ per task, draft and temperature. The paper's target is an 11B T5 on a TPU; ours is "
                     "whatever these runs used (see Setup), so compare trends (α by draft and temperature, the "
                     "α–cost trade-off), not absolute speedups. Our speedups carry their 95 % bootstrap interval "
                     "over examples in brackets."),
               ("table", paper_table(runs, best))]
    for fig in figures:
        blocks += [("h2", fig.title), ("figure", fig)]
    qrows = quality_rows(runs)
    if qrows:
        blocks += [("h2", "Quality: baseline vs speculative"),
                   ("p", "At T = 0 the scores must be equal (identical outputs); at T > 0 the intervals should overlap "
                         "(same output distribution)."),
                   ("table", Table(["run", "score", "baseline", "95% CI", "speculative", "95% CI", "spec − base"],
                                   [[q["run_id"], q["metric"], q["baseline"], fmt(q["baseline_ci"], 2), q["speculative"],
                                     fmt(q["speculative_ci"], 2), q["speculative"] - q["baseline"]] for q in qrows]))]
    for path, checks in data.checks:
        passed = sum(1 for c in checks if c.get("passed") is True)
        blocks += [("h2", f"Verification checks ({passed}/{len(checks)} passed)"), ("p", f"From {path}."),
                   ("table", Table(list(CHECK_FIELDS), [[c.get(k) for k in CHECK_FIELDS] for c in checks]))]
    samples = []
    for _, r in runs.head(SAMPLE_RUNS).iterrows():
        ex = data.examples.get(r["run_dir"])
        if ex is None or ex.empty:
            continue
        first = ex.iloc[0]
        samples.append([r["run_id"], first.get("example_id"), _clip(first.get("reference")),
                        _clip(first.get("baseline.text")), _clip(first.get("speculative.text")), first.get("identical")])
    if samples:
        more = f" (first {SAMPLE_RUNS} of {len(runs)} runs)" if len(runs) > SAMPLE_RUNS else ""
        blocks += [("h2", f"Sample outputs: first example of each run{more}"),
                   ("table", Table(["run", "example", "reference", "baseline output", "speculative output", "identical"],
                                   samples))]
    shown = {timing_note(r) for _, r in suspect.iterrows()}  # already listed under Timing warnings
    notes = [n for n in data.notes if n not in shown]
    if notes:
        blocks += [("h2", "Notes"), ("list", notes)]
    blocks += [("h2", f"Skipped ({len(data.skipped)})"),
               ("list", [f"{s.path}: {s.reason}" for s in data.skipped] or ["nothing: every result found was usable"])]
    return blocks


def _best_cell(runs, b: dict):
    """The run behind a best-γ row's measured γ (the first of duplicates; a trustworthy one where there is one)."""
    if b["measured_gamma"] is None:
        return None
    runs = fixed_gamma(runs)
    cell = runs[(runs["task"] == b["task"]) & (runs["series"] == b["series"]) & (runs["gamma"] == b["measured_gamma"])]
    if "timing_suspect" in cell and (~cell["timing_suspect"]).any():
        cell = cell[~cell["timing_suspect"]]
    return cell.iloc[0] if len(cell) else None


def _timing_text(r) -> str:
    return "SUSPECT" if _truthy(r.get("timing_suspect")) else "ok"


def _gamma_text(r) -> str:
    label = r.get("gamma_label")
    return str(label) if isinstance(label, str) else str(r["gamma"])


def _best_speedup_text(runs, b: dict) -> str:
    r = _best_cell(runs, b)
    if r is None:
        return with_ci(b["measured_speedup"], None)
    text = with_ci(b["measured_speedup"], r.get("speedup_ci95"))
    return text + (" (suspect timing)" if _truthy(r.get("timing_suspect")) else "")


def _thm_gamma_text(b: dict):
    """Theorem 3.8's γ, never one outside the measured range without saying so."""
    if b["thm_gamma"] is None or b["thm_in_range"]:
        return b["thm_gamma"]
    lo, hi = b["gammas"][0], b["gammas"][-1]
    return (f"{b['thm_gamma_in_range']} (the optimum over 1..64, γ = {b['thm_gamma']}, is beyond the measured "
            f"range {lo}–{hi})")


def paper_table(runs, best: list[dict]) -> Table:
    rows = [[PAPER_SOURCE, task, draft, f"{t:g}", gamma, alpha, f"{speed:.1f}×"]
            for task, draft, t, gamma, alpha, speed in PAPER_TABLE2]
    for b in best:
        r = _best_cell(runs, b)
        if r is None:
            continue
        speed = with_ci(b["measured_speedup"], r.get("speedup_ci95"), unit="×")
        rows.append([f"specbench ({r['target']})", b["task"], r["draft"], f"{r['temperature']:g}", b["measured_gamma"],
                     _num(r["alpha"]), speed + (" (suspect timing)" if _truthy(r.get("timing_suspect")) else "")])
    return Table(["source", "task", "draft", "T", "γ", "α", "speedup"], rows)


def _auto_reasons(data: ReportData) -> list[str]:
    """Each auto choice's reason lines, run by run (manifest `auto`)."""
    lines = []
    for _, r in data.runs.iterrows():
        auto = data.manifests.get(r["run_dir"], {}).get("auto")
        if not isinstance(auto, dict):
            continue
        asked = auto.get("requested")
        asked = ", ".join(f"{k} {v}" for k, v in asked.items()) if isinstance(asked, dict) and asked else "auto"
        reasons = auto.get("reasons") if isinstance(auto.get("reasons"), list) else []
        for reason in reasons or ["(no reasons recorded)"]:
            lines.append(f"{r['run_id']} (asked for {asked}): {reason}")
    return lines


def _environment(data: ReportData) -> list[str]:
    """Distinct hardware, versions and models across the runs' manifests."""
    seen: dict[str, set] = {}
    for m in data.manifests.values():
        models = m.get("models", {}).get("target", {})
        for key, value in (("target", f"{models.get('spec')} ({models.get('params')} params, {models.get('dtype')}, "
                                      f"{models.get('device')})" if models else None),
                           ("hardware", describe(m.get("hardware")) if m.get("hardware") else None),
                           ("versions", json.dumps(m.get("versions"), sort_keys=True) if m.get("versions") else None),
                           ("git commit", m.get("git_commit"))):
            if value:
                seen.setdefault(key, set()).add(str(value))
    lines = [f"{k}: {'; '.join(sorted(v))}" for k, v in seen.items()]
    for doc in data.sweeps:
        grid = doc.get("grid", {})
        lines.append(f"sweep {doc.get('sweep_id')}: {len(doc.get('cells', []))} cells, "
                     f"{len(doc.get('complete_cells', []))} complete; drafts {grid.get('drafts')}, γ {grid.get('gammas')}, "
                     f"T {grid.get('temperatures')}, tasks {grid.get('tasks')}; one baseline per task and temperature, "
                     f"shared by its cells")
    return lines


# --------------------------------------------------------------------------- rendering


def md_escape(value) -> str:
    """Markdown renders raw HTML, so escape it like HTML; pipes and newlines would break table rows."""
    return html.escape(fmt(value), quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, payload in blocks:
        if kind == "h1":
            out.append(f"# {md_escape(payload)}\n")
        elif kind == "h2":
            out.append(f"## {md_escape(payload)}\n")
        elif kind == "p":
            out.append(f"{md_escape(payload)}\n")
        elif kind == "list":
            out.append("\n".join(f"- {md_escape(item)}" for item in payload) + "\n")
        elif kind == "table":
            out.append("| " + " | ".join(md_escape(c) for c in payload.columns) + " |")
            out.append("|" + "---|" * len(payload.columns))
            out += ["| " + " | ".join(md_escape(v) for v in row) + " |" for row in payload.rows]
            out.append("")
        elif kind == "figure":
            out.append(f"![{md_escape(payload.title)}](figures/{payload.name}.png)\n")
            out.append(f"*{md_escape(payload.caption)}* (also [SVG](figures/{payload.name}.svg))\n")
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}
figcaption{font-size:13px;color:#555}h2{border-bottom:1px solid #ddd;padding-bottom:3px}"""


def to_html(blocks: list[tuple]) -> str:
    e = lambda v: html.escape(fmt(v))
    title = next((p for k, p in blocks if k == "h1"), "specbench report")
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
           f"<style>{CSS}</style></head><body>"]
    for kind, payload in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{e(payload)}</{kind}>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{e(item)}</li>" for item in payload) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{e(c)}</th>" for c in payload.columns)
            body = "".join("<tr>" + "".join(
                f'<td class="num">{e(v)}</td>' if isinstance(v, numbers.Number) and not isinstance(v, bool)
                else f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in payload.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "figure":
            data = base64.b64encode(payload.png).decode("ascii")
            out.append(f'<figure><img alt="{html.escape(payload.title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{e(payload.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


# --------------------------------------------------------------------------- entry point


@dataclass
class ReportOutcome:
    out: Path
    files: list[Path]
    n_runs: int
    skipped: list[Skipped]
    notes: list[str]


def default_name(paths: list[Path]) -> str:
    names = [Path(p).resolve().name or "results" for p in paths]
    name = names[0] if len(names) == 1 else f"{names[0]}+{len(names) - 1}-more"
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name)


PASS_COST_CAPTION = (
    "Each line: one calibration (the target's median time for a pass over k new tokens after a context of the "
    "task's typical length, divided by the time for one), per dtype, context and machine; runs and auto choices "
    "that share a calibration share a line. Dashed: t(k) = t(1), the free verification the paper's Theorem 3.8 "
    "assumes. Where a line rises above it, verifying γ drafts costs more than one step and the best γ is smaller "
    "than the theorem says; a drop is a kernel that handles that k better.")


def make_figures(runs, folder: Path, curves: list[dict] | None = None) -> list[RenderedFigure]:
    fixed = fixed_gamma(runs)
    specs = [("speedup_vs_gamma", "Speedup vs γ", fig_speedup, fixed,
              "Solid: measured walltime speedup. Dashed: Theorem 3.8 from the measured α and c. Dash-dot: the "
              "extended model, which also charges the measured cost of verifying γ+1 tokens. Grey line: no speedup. "
              "Runs with a γ policy (adaptive, heuristic) are not drawn here; see Recommended γ."),
             ("pass_cost_curve", "Pass-cost curve", fig_pass_cost, curves, PASS_COST_CAPTION),
             ("alpha", "Acceptance rate α", fig_alpha, runs,
              "α per draft, task and temperature; black diamonds: the expected acceptance E[Σ min(p, q)] at the "
              "verified positions, which α estimates.")]
    figures = []
    with _rc():
        for name, title, fn, arg, caption in specs:
            if arg is not None and len(arg):
                figures.append(render_figure(fn(arg), name, title, caption, folder))
        for i, task in enumerate(sorted(fixed["task"].unique())):
            figures.append(render_figure(
                fig_histograms(runs, task), f"accepted_lengths_{i}", f"Accepted lengths: {task}",
                "Bars: share of verification steps that accepted n drafts. Dots: the law theory predicts if each "
                "draft were accepted independently with the measured α. A model-free draft that sometimes "
                "proposes fewer than γ tokens piles up mass at small n.", folder))
        figures.append(render_figure(fig_time_split(runs), "time_per_token", "Time per token", (
            "Speculative decoding's milliseconds per generated token, split into prefill, drafting, target "
            "verification passes and the rest (sampling, bookkeeping); the black tick is the baseline's."), folder))
        qrows = quality_rows(runs)
        if qrows:
            figures.append(render_figure(fig_quality(qrows), "quality", "Output quality", (
                "BLEU/ROUGE (×100) of the baseline and speculative outputs against the task references; whiskers: "
                "95% bootstrap intervals, where the runner computed them (sampling runs)."), folder))
    return figures


def write_report(paths: list[Path], out: Path | None = None, reports_dir: Path = Path("reports")) -> ReportOutcome:
    """Load, check, analyse and render; the report folder holds report.md, report.html and figures/."""
    data = collect(paths)
    if data.runs.empty:
        listed = "; ".join(f"{s.path}: {s.reason}" for s in data.skipped[:3]) or "no summary.json found"
        raise SpecbenchError(f"no usable runs under {', '.join(map(str, paths))} ({len(data.skipped)} skipped: {listed})")
    out = Path(out) if out else Path(reports_dir) / default_name(paths)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecbenchError(f"cannot write the report to {out}: {exc.strerror}; pass a writable --out") from exc
    figures = make_figures(data.runs, out / "figures", data.curves)
    blocks = build_blocks(data, figures, f"specbench report: {default_name(paths)}")
    from specbench.files import atomic_write_text

    atomic_write_text(out / "report.md", to_markdown(blocks))
    atomic_write_text(out / "report.html", to_html(blocks))
    files = [out / "report.md", out / "report.html"] + sorted((out / "figures").iterdir())
    return ReportOutcome(out, files, len(data.runs), data.skipped, data.notes)

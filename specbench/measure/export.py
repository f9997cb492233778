"""Results as tidy tables for pandas, spreadsheets and plotting tools: one row per run, or per example.

A run's numbers live in three files (the axes in manifest.json, the metrics in summary.json,
the raw counts in examples.jsonl) and a sweep nests runs one level deeper; this module flattens
them into the table a user expects from `specbench export`, with the axis values as columns
and list-valued fields split (speedup_ci95 → speedup_ci95_low / _high) so CSV holds them.
Nothing here raises on a bad folder: every run or line it cannot use comes back as a note.
"""

from __future__ import annotations

from pathlib import Path

from specbench.measure.records import read_json_object, run_identity, scan_examples, scan_runs, unsummarized_runs

# run columns in order: identity, the grid's axes, the machine, then the measurements
AXES = ("task", "target", "draft", "gamma", "temperature", "top_k", "top_p", "dtype", "device", "backend", "engine",
        "confidence", "batch")
MEASURES = ("n_examples", "complete", "alpha", "tokens_per_target_call", "speedup", "speedup_ci95_low",
            "speedup_ci95_high", "decode_speedup", "decode_speedup_ci95_low", "decode_speedup_ci95_high",
            "predicted_speedup_extended", "suspect_timing", "timing_notes", "baseline_drift")
# per-example columns taken from each engine record (lists such as token_ids stay in examples.jsonl)
ENGINE_FIELDS = ("n_tokens", "stop_reason", "prefill_s", "decode_s", "target_calls", "draft_calls", "drafted",
                 "accepted", "trials", "draft_s", "verify_s")


def _config_axes(manifest: dict) -> dict:
    """Axis values the summary does not carry (device, backend, later options), from the manifest's config."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    sampling = config.get("sampling") if isinstance(config.get("sampling"), dict) else {}
    out = {k: config[k] for k in AXES if k in config and not isinstance(config[k], (dict, list))}
    out.update({k: sampling[k] for k in ("temperature", "top_k", "top_p") if k in sampling})
    return out


def _cpu(manifest: dict) -> str | None:
    hardware = manifest.get("hardware")
    return hardware.get("cpu_model") if isinstance(hardware, dict) else None


def _pair(value, name: str) -> dict:
    """[low, high] → {name_low, name_high} (None for anything that is not a two-item list)."""
    low, high = value if isinstance(value, list) and len(value) == 2 else (None, None)
    return {f"{name}_low": low, f"{name}_high": high}


def _gamma(summary: dict, manifest: dict) -> dict:
    """gamma as a number in every row (parquet wants one type per column): a γ policy's run gets its
    gamma_max there and the policy's name in gamma_policy."""
    gamma = summary.get("gamma")
    if not isinstance(gamma, str):
        return {"gamma": gamma, "gamma_policy": None}
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    return {"gamma": config.get("gamma_max"), "gamma_policy": gamma}


def run_row(summary: dict) -> tuple[dict, str | None]:
    """One export row from a summary (with run_dir) and its run folder's manifest; a note if the manifest is unusable."""
    run_dir = Path(summary["run_dir"])
    manifest, problem = read_json_object(run_dir / "manifest.json", "manifest.json")
    manifest = manifest or {}
    row = {**run_identity(run_dir), "run_dir": str(run_dir)}
    row.update({k: summary.get(k) for k in AXES})
    row.update({k: v for k, v in _config_axes(manifest).items() if row.get(k) is None or k in ("device", "backend")})
    row.update(_gamma(summary, manifest))
    row["hardware"] = summary.get("hardware")
    row["cpu"] = _cpu(manifest)
    measured = {**summary, **_pair(summary.get("speedup_ci95"), "speedup_ci95"),
                **_pair(summary.get("decode_speedup_ci95"), "decode_speedup_ci95")}
    row.update({k: measured.get(k) for k in MEASURES})
    notes = row["timing_notes"]
    row["timing_notes"] = "; ".join(map(str, notes)) if isinstance(notes, list) else notes
    row["suspect"] = bool(row.pop("suspect_timing"))
    return row, (f"{problem}; its device, backend and cpu columns are empty" if problem else None)


def example_row(record: dict, run: dict) -> dict:
    """One export row per example: its run's identity and axes, then its own counts and per-example speedup."""
    row = {k: record[k] for k in ("run_id", "sweep_id")}
    row.update({k: run.get(k) for k in (*AXES, "gamma_policy") if k in run})
    row.update({k: record.get(k) for k in ("example_id", "prompt_tokens", "identical", "first_divergence")})
    for engine in ("baseline", "speculative"):
        row.update({f"{engine}_{k}": record[engine][k] for k in ENGINE_FIELDS})
    row["speedup"] = _example_speedup(record)
    return row


def _example_speedup(record: dict) -> float | None:
    """This example's speculative tokens/s ÷ baseline tokens/s (prefill + decode), None if undefined."""
    rates = []
    for engine in ("speculative", "baseline"):
        e = record[engine]
        seconds = e["prefill_s"] + e["decode_s"]
        rates.append(e["n_tokens"] / seconds if seconds > 0 else None)
    return rates[0] / rates[1] if None not in rates and rates[1] else None


def export_frames(paths: list[Path], examples: bool):
    """(DataFrame, notes) for every run under `paths` (run folders, sweep folders holding cells, or results
    folders holding both): one row per run, or with `examples` one row per example carrying its run's id
    and axes. Every folder, file or line that could not be used is a note, never an exception."""
    import pandas as pd

    paths = [Path(p) for p in paths]
    summaries, notes = scan_runs(paths)
    notes += unsummarized_runs(paths)
    runs = {}
    for summary in summaries:
        row, note = run_row(summary)
        runs[row["run_dir"]] = row
        notes += [note] if note else []
    optional = [k for k in ("confidence", "batch") if all(r.get(k) is None for r in runs.values())]
    runs = {key: {k: v for k, v in r.items() if k not in optional} for key, r in runs.items()}  # only if present
    if not examples:
        return pd.DataFrame(list(runs.values())), notes
    records, skipped = scan_examples(paths)
    rows = [example_row(rec, runs.get(rec["run_dir"], {})) for rec in records]
    return pd.DataFrame(rows), notes + skipped

"""Results as tidy tables for pandas, spreadsheets and plotting tools: one row per run, or per example.

A run's numbers live in three files (the axes in manifest.json, the metrics in summary.json,
the raw counts in examples.jsonl) and a sweep nests runs one level deeper; this module flattens
them into the table a user expects from `specbench export`, with the axis values as columns
and list-valued fields split (speedup_ci95 → speedup_ci95_low / _high) so CSV holds them.
Nothing here raises on a bad folder: every run or line it cannot use comes back as a note.
"""

from __future__ import annotations

from pathlib import Path

from specbench.measure.results.records import run_identity, unsummarized_reason
from specbench.measure.results.schema import Manifest, Summary
from specbench.measure.stats.metric_units import ENGINE_COUNTS, passes_after_prefill

# run columns in order: identity, the grid's axes, the machine, then the measurements
AXES = (
    "task",
    "target",
    "draft",
    "gamma",
    "temperature",
    "top_k",
    "top_p",
    "dtype",
    "device",
    "backend",
    "engine",
    "confidence",
    "batch",
)
MEASURES = (
    "n_examples",
    "complete",
    "speedup_geomean",
    "speedup_geomean_ci95_low",
    "speedup_geomean_ci95_high",
    "alpha",
    "acceptance_rate",
    "mean_acceptance_length",
    "mean_accepted_tokens",
    "tokens_per_target_call",
    "baseline_tokens_per_s",
    "speculative_tokens_per_s",
    "baseline_ttft_s",
    "speculative_ttft_s",
    "baseline_tpot_s",
    "speculative_tpot_s",
    "speculative_tpot_p50_s",
    "speculative_tpot_p99_s",
    "speedup",
    "speedup_ci95_low",
    "speedup_ci95_high",
    "decode_speedup",
    "decode_speedup_ci95_low",
    "decode_speedup_ci95_high",
    "predicted_speedup_extended",
    "suspect_timing",
    "timing_notes",
    "baseline_drift",
)
# per-example columns taken from each engine record: the raw counts the metrics sum (metric_units.ENGINE_COUNTS, the
# one list), with why decoding stopped after the token count (lists such as token_ids stay in examples.jsonl)
ENGINE_FIELDS = (ENGINE_COUNTS[0], "stop_reason", *ENGINE_COUNTS[1:])


def _config(manifest: Manifest) -> dict:
    """The manifest's config, {} when a hand-edited file holds something else there."""
    return manifest.config if isinstance(manifest.config, dict) else {}


def _config_axes(manifest: Manifest) -> dict:
    """Axis values the summary does not carry (device, backend, later options), from the manifest's config."""
    config = _config(manifest)
    raw = config.get("sampling")
    sampling = raw if isinstance(raw, dict) else {}
    out = {k: config[k] for k in AXES if k in config and not isinstance(config[k], (dict, list))}
    out.update({k: sampling[k] for k in ("temperature", "top_k", "top_p") if k in sampling})
    return out


def _device_ran(manifest: Manifest) -> str | None:
    """The device the target actually ran on (cpu, cuda:0, mps), as loaded: not the requested "auto"."""
    models = manifest.models if isinstance(manifest.models, dict) else {}
    raw = models.get("target")
    target = raw if isinstance(raw, dict) else {}
    device = target.get("device")
    return device if isinstance(device, str) and device else None


def _cpu(manifest: Manifest) -> str | None:
    hardware = manifest.hardware
    return hardware.get("cpu_model") if isinstance(hardware, dict) else None


def _interval_columns(value, name: str) -> dict:
    """[low, high] → {name_low, name_high} (None for anything that is not a two-item list)."""
    low, high = value if isinstance(value, list) and len(value) == 2 else (None, None)
    return {f"{name}_low": low, f"{name}_high": high}


def _gamma(summary: Summary, manifest: Manifest) -> dict:
    """gamma as a number in every row (parquet wants one type per column): a γ policy's run gets its
    gamma_max there and the policy's name in gamma_policy."""
    gamma = summary.gamma
    if not isinstance(gamma, str):
        return {"gamma": gamma, "gamma_policy": None}
    return {"gamma": _config(manifest).get("gamma_max"), "gamma_policy": gamma}


def run_row(summary: Summary, run_dir: Path, manifest_doc: dict) -> dict:
    """One export row from a run folder's summary and manifest (reader.read_run checked both)."""
    manifest = Manifest.from_dict(manifest_doc)
    row = {**run_identity(run_dir), "run_dir": str(run_dir)}
    row.update({k: getattr(summary, k, None) for k in AXES})  # device, backend, ... are the manifest's
    row.update({k: v for k, v in _config_axes(manifest).items() if row.get(k) is None or k in ("device", "backend")})
    row.update(_gamma(summary, manifest))
    row["device"] = _device_ran(manifest) or row.get("device")  # what ran; the requested one if not recorded
    row["hardware"] = summary.hardware
    row["cpu"] = _cpu(manifest)
    intervals = {
        **_interval_columns(summary.speedup_geomean_ci95, "speedup_geomean_ci95"),
        **_interval_columns(summary.speedup_ci95, "speedup_ci95"),
        **_interval_columns(summary.decode_speedup_ci95, "decode_speedup_ci95"),
    }
    row.update({k: intervals[k] if k in intervals else getattr(summary, k) for k in MEASURES})
    if row["mean_acceptance_length"] is None and isinstance(summary.mean_accepted_length, (int, float)):
        row["mean_acceptance_length"] = 1.0 + summary.mean_accepted_length  # a summary from before the field
    notes = row["timing_notes"]
    row["timing_notes"] = "; ".join(map(str, notes)) if isinstance(notes, list) else notes
    row["suspect"] = bool(row.pop("suspect_timing"))
    return row


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
    and axes. Every folder, file or line that could not be used, and every summary recomputed from its records, is
    a note (reader.read_folders, the reader the report and load_runs use too), never an exception."""
    import pandas as pd

    from specbench.measure.results.reader import read_folders

    found = read_folders([Path(p) for p in paths])
    notes = found.messages()
    runs, records = {}, []
    for run in found.runs:
        notes += run.notes
        if run.summary is None:
            notes.append(f"{run.run_dir}: skipped, {unsummarized_reason(run.run_dir)}")
            continue
        row = run_row(Summary.from_dict(run.summary), run.run_dir, run.manifest)
        runs[row["run_dir"]] = row
        ids = {**run_identity(run.run_dir), "run_dir": str(run.run_dir)}
        records += [{**ids, **r} for r in run.records]
    optional = [k for k in ("confidence", "batch") if all(r.get(k) is None for r in runs.values())]
    runs = {key: {k: v for k, v in r.items() if k not in optional} for key, r in runs.items()}  # only if present
    if not examples:
        return pd.DataFrame(list(runs.values())), notes
    rows = [example_row(rec, runs[rec["run_dir"]]) for rec in records]
    return pd.DataFrame(rows), notes


# --------------------------------------------------------------------------- Spec-Bench's answer format
# Spec-Bench's answer writers (evaluation/eval.py and inference_*.py) write one line per question:
# {"question_id", "category", "answer_id", "model_id", "choices": [{"index": 0, "turns": [answer text per turn],
# "decoding_steps": [...], "new_tokens": [tokens generated per turn], "wall_time": [seconds per turn],
# "accept_lengths": [tokens each target pass emitted, over all turns]}], "tstamp"}. Its evaluation/speed.py
# reads new_tokens, wall_time and accept_lengths (and, for the baseline, re-tokenizes turns); equal.py
# compares str(turns) line by line, so both files are sorted by question id, as its reorg_answer_file does.


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell that starts so as a formula


def csv_safe(frame):
    """`frame` with every text cell that a spreadsheet would read as a formula (a task name or example id written
    '=HYPERLINK(...)') prefixed with a quote, the OWASP neutralisation; numbers are left as they are."""
    from pandas.api.types import is_string_dtype

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or is_string_dtype(out[column].dtype):
            out[column] = out[column].map(
                lambda v: "'" + v if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v
            )
    return out


def split_example_id(example_id: str) -> tuple[str, int | str]:
    """'translation:161' → ('translation', 161): the category and question id a spec-bench task's id carries."""
    from specbench.errors import SpecbenchError

    category, colon, qid = str(example_id).rpartition(":")
    if not colon or not category or not qid:
        raise SpecbenchError(
            f"example id {example_id!r} is not <category>:<question_id>; --format spec-bench "
            f"exports runs of the spec-bench tasks only"
        )
    return category, int(qid) if qid.isascii() and qid.isdigit() else qid  # '²'.isdigit() but int('²') fails


def pass_tokens(engine: dict) -> list[int]:
    """Spec-Bench's accept_lengths for one turn: the tokens each target pass emitted, the prefill pass's first
    token included (as HF's assisted loop and Spec-Bench's PLD log it: accepted + the bonus or correction).
    Verified passes are read from pass_lengths (1 = a pass with nothing drafted, emitting 1); records without
    them put the verified steps first. An EOS or the budget can cut the last pass short: trimmed to n_tokens."""
    accepted = iter(engine["accept_lengths"])
    passes = engine.get("pass_lengths") or []
    calls = passes_after_prefill(engine) or 0  # vLLM's records: one per step it reports
    if len(passes) == calls and sum(1 for n in passes if n > 1) == len(engine["accept_lengths"]):
        emitted = [next(accepted) + 1 if n > 1 else 1 for n in passes]
    else:
        emitted = [n + 1 for n in accepted] + [1] * max(0, calls - len(engine["accept_lengths"]))
    out = [1, *emitted]
    excess = sum(out) - engine["n_tokens"]
    for i in range(len(out) - 1, -1, -1):  # the stop cut the last pass(es) short
        cut = min(excess, out[i])
        out[i] -= cut
        excess -= cut
    return out


def turn_records(record: dict, engine: str) -> list[dict]:
    """One engine record per turn: the record's `turns`, or the record itself for a one-turn question."""
    from specbench.errors import SpecbenchError

    turns = record.get("turns")
    if not turns:
        return [record[engine]]
    if any(t.get(engine) is None for t in turns):
        raise SpecbenchError(
            f"example {record['example_id']!r} has no per-turn {engine} (a sweep's shared baseline); "
            f"export a `specbench run` of the task instead"
        )
    return [t[engine] for t in turns]


def answer_line(record: dict, engine: str, model_id: str, run_id: str, tstamp: float) -> dict:
    """One question in Spec-Bench's answer format. The baseline logs one token per pass (as its
    inference_baseline.py does); decoding_steps is the target passes of each turn (speed.py does not read it)."""
    import hashlib

    category, qid = split_example_id(record["example_id"])
    turns = turn_records(record, engine)
    steps = [[1] * t["n_tokens"] if engine == "baseline" else pass_tokens(t) for t in turns]
    digest = hashlib.sha256(f"{run_id}:{engine}:{record['example_id']}".encode()).hexdigest()[:22]
    choice = {
        "index": 0,
        "turns": [t["text"].strip() for t in turns],
        "decoding_steps": [len(s) for s in steps],
        "new_tokens": [t["n_tokens"] for t in turns],
        "wall_time": [t["prefill_s"] + t["decode_s"] for t in turns],
        "accept_lengths": [n for s in steps for n in s],
    }
    return {
        "question_id": qid,
        "category": category,
        "answer_id": digest,
        "model_id": model_id,
        "choices": [choice],
        "tstamp": tstamp,
    }


def model_ids(summary: Summary) -> dict[str, str]:
    """Spec-Bench-style model ids ('<target>-vanilla-<dtype>-temp-<T>' for the baseline), safe as file names."""
    import re

    target = Path(str(summary.target)).name
    tail = f"{summary.dtype}-temp-{summary.temperature}"
    ids = {
        "speculative": f"{target}-specbench-{summary.draft}-g{summary.gamma}-{tail}",
        "baseline": f"{target}-vanilla-{tail}",
    }
    return {k: re.sub(r"[^A-Za-z0-9._-]+", "_", v) for k, v in ids.items()}


def created_time(manifest: Manifest, fallback: Path) -> float:
    """The run's creation time as a Unix time (Spec-Bench's tstamp), else the summary's modification time."""
    from datetime import datetime

    try:
        return datetime.strptime(str(manifest.created or ""), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return fallback.stat().st_mtime


def question_order(record: dict) -> tuple[bool, int | str]:
    """Sort key: by question id, as Spec-Bench's reorg_answer_file sorts (numbers before any text ids)."""
    qid = split_example_id(record["example_id"])[1]
    return isinstance(qid, str), qid


def spec_bench_files(run_dir: Path, out_dir: Path | None = None) -> tuple[dict[str, Path], list[dict], list[str]]:
    """Write a spec-bench run's answers as Spec-Bench's two answer files (speculative, baseline) into out_dir
    (default: the run folder) → ({engine: path}, the per-category table, notes on lines skipped)."""
    from specbench.errors import SpecbenchError
    from specbench.files import atomic_write_jsonl
    from specbench.measure.results.reader import read_run

    run_dir = Path(run_dir)
    run, skipped_runs = read_run(run_dir)
    skipped = [f"{where}: {why}" for where, why in skipped_runs]
    if run is None or run.summary is None:
        why = skipped[-1] if skipped else f"{run_dir}: no summary.json"
        raise SpecbenchError(f"{why}; pass one run folder of a spec-bench task")
    summary, records = run.summary, run.records
    skipped += run.notes
    if not records:
        raise SpecbenchError(f"{run_dir} has no measured examples to export")
    tstamp = created_time(Manifest.from_dict(run.manifest), run_dir / "summary.json")
    ids = model_ids(Summary.from_dict(summary))
    order = sorted(records, key=question_order)
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for engine in ("speculative", "baseline"):
        lines = [answer_line(r, engine, ids[engine], run_dir.name, tstamp) for r in order]
        written[engine] = out_dir / f"{ids[engine]}.jsonl"
        atomic_write_jsonl(written[engine], lines)
    return written, category_table(records), skipped


def category_table(records: list[dict]) -> list[dict]:
    """Per category (then mt_bench and overall, as speed.py reports them): n, α, acceptance rate (vLLM's draft
    acceptance rate), #MAT, Spec-Bench speedup, and the category's reference metric on both engines where it has one."""
    from specbench.measure.stats.metric_units import ratio
    from specbench.measure.stats.metrics import spec_bench_metrics
    from specbench.tasks.spec_bench import CATEGORIES, MT_BENCH

    by_cat: dict[str, list[dict]] = {}
    for r in records:
        by_cat.setdefault(split_example_id(r["example_id"])[0], []).append(r)
    ordered = [c for c in CATEGORIES if c in by_cat] + sorted(c for c in by_cat if c not in CATEGORIES)
    groups = [(c, by_cat[c]) for c in ordered]
    mt = [r for c in MT_BENCH for r in by_cat.get(c, [])]
    groups += ([("mt_bench", mt)] if mt else []) + [("overall", records)]
    rows = []
    for name, rs in groups:
        spec = [r["speculative"] for r in rs]
        row = {
            "category": name,
            "n": len(rs),
            "alpha": ratio(sum(e["accepted"] for e in spec), sum(e["trials"] for e in spec)),
            "acceptance_rate": ratio(sum(e["accepted"] for e in spec), sum(e["drafted"] for e in spec)),
            **spec_bench_metrics(rs),
            **category_quality(name, rs),
        }
        rows.append(row)
    return rows


def category_quality(category: str, records: list[dict]) -> dict:
    """{'metric', 'baseline', 'speculative'} (BLEU, or ROUGE-L) for a category with a reference metric; {} else."""
    from specbench.tasks.quality import score
    from specbench.tasks.spec_bench import CATEGORY_METRIC

    metric = CATEGORY_METRIC.get(category)
    refs = [r.get("reference") or "" for r in records]
    if metric is None or any(not ref for ref in refs):
        return {"metric": None}
    key = "bleu" if metric == "bleu" else "rougeL"
    return {
        "metric": key,
        **{e: score(metric, [r[e]["text"] for r in records], refs)[key] for e in ("baseline", "speculative")},
    }

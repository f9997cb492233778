"""The run folder: what a run writes and reads back between examples and across resumes.

manifest.json identifies a run (config, budget, examples) and says whether a folder may be resumed by a command;
summary.json is rewritten after every example from the records on disk (metrics, baseline drift, auto choices,
quality, peak memory); noise and baseline probes are read back for it. Kept apart from the loop so that readers of
a finished run (report/collect.py, sweeps resuming a cell) need no engines or models.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path

from specbench.config import (
    RunConfig,
    SamplingConfig,
)
from specbench.errors import SpecbenchError
from specbench.files import atomic_write_json
from specbench.measure.auto.predicted_metrics import batch_prediction
from specbench.measure.results.bounded_reads import read_json_object, read_records
from specbench.measure.results.record_checks import baseline_probe_problem, load_batch_problem, noise_probe_problem
from specbench.measure.results.record_writing import prepare_run_dir
from specbench.measure.results.schema import LOAD_FILE, SCHEMA_VERSION, Manifest, RunFiles, summary_dict
from specbench.measure.run.buckets import BucketChoice
from specbench.measure.stats.metric_units import json_safe
from specbench.measure.stats.metrics import summarize
from specbench.tasks.examples import Example, examples_hash
from specbench.tasks.specs import TaskSpec


def first_manifest(
    files: RunFiles,
    config: RunConfig,
    spec: TaskSpec,
    examples: list[Example],
    max_new: int,
    bucket: BucketChoice | None = None,
) -> dict:
    """What identifies a run folder (config, budget, examples), known before any model loads: resuming compares it.
    A prompt-length bucket adds its thresholds and token range (absent otherwise, as before buckets)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": files.root.name,
        "config": config.to_dict(),
        "max_new_tokens": max_new,
        "task": {
            "name": spec.name,
            "metric": spec.metric,
            "n_examples": len(examples),
            "examples_hash": examples_hash(examples),
            "example_ids": [e.id for e in examples],
        },
        **({"prompt_length": bucket.to_dict()} if bucket is not None else {}),
    }


def read_manifest(files: RunFiles) -> dict:
    """The run folder's manifest, {} when there is none; one line when it cannot be read."""
    if not files.manifest.exists():
        return {}
    try:
        old = json.loads(files.manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecbenchError(
            f"{files.manifest} cannot be read ({type(exc).__name__}); use another --run-id or delete the folder"
        ) from None
    if not isinstance(old, dict):
        raise SpecbenchError(f"{files.manifest} is not a run manifest; use another --run-id or delete the folder")
    return old


def write_manifest(files: RunFiles, manifest: dict, old: dict) -> dict:
    """Create the run folder and its manifest (a resumed run keeps the first one's creation time and
    environment). If the manifest cannot be written (a full disk), a folder this call created is
    removed again: files.py has already removed the temporary file, so nothing is left."""
    if old:
        return {**manifest, **{k: old[k] for k in ("created", "hardware", "versions", "git_commit") if k in old}}
    created = not files.root.exists()
    prepare_run_dir(files.root)
    try:
        atomic_write_json(files.manifest, Manifest(**manifest).to_dict())  # an undeclared key is a TypeError
    except SpecbenchError:
        if created:
            with contextlib.suppress(OSError):
                files.root.rmdir()  # only if empty: never removes anything but the folder made here
        raise
    return manifest


def check_resumable(files: RunFiles, manifest: dict, old: dict) -> None:
    """A run directory may be resumed only by the same configuration on the same examples."""
    if not old:
        return
    for key in ("config", "max_new_tokens"):
        if old.get(key) != manifest[key]:
            raise SpecbenchError(f"{files.root} holds a run with a different {key}; use another --run-id or delete it")
    raw = old.get("task")
    task = raw if isinstance(raw, dict) else {}
    if task.get("examples_hash") != manifest["task"]["examples_hash"]:
        raise SpecbenchError(f"{files.root} holds a run on different examples; use another --run-id or delete it")


def read_probes(root: Path) -> list[float]:
    """The noise probes of a run folder (ms, in time order)."""
    return [float(r["ms"]) for r in read_records(root / "noise_probes.jsonl", noise_probe_problem)]


def baseline_drift(files: RunFiles) -> float | None:
    """The probe ratio (fresh ÷ stored baseline seconds) farthest from 1 in log terms; None without probes (only
    cells of sweep folders from before per-cell baselines have them: read, never written now)."""
    ratios = [
        r["ratio"] for r in read_records(files.root / "baseline_probes.jsonl", baseline_probe_problem) if r.get("ratio")
    ]
    return max(ratios, key=lambda x: abs(math.log(x))) if ratios else None


def auto_summary(manifest: dict) -> dict | None:
    """What the summary says about auto choices: reasons, pilot α, and each γ's prediction for the choice."""
    auto = manifest.get("auto")
    if not auto:
        return None
    chosen = [c for c in auto["candidates"] if c["draft"] == auto["draft"] and c["dtype"] == auto["dtype"]]
    best = min(chosen, key=lambda c: c["ms_per_token"]) if chosen else None
    return {
        "requested": auto["requested"],
        "reasons": auto["reasons"],
        "pilot_alpha": {d: p["alpha"] for d, p in auto["pilots"].items()},
        "predicted_speedup": best["speedup"] if best else None,
        "predicted_speedup_by_gamma": {str(c["gamma"]): c["speedup"] for c in sorted(chosen, key=lambda c: c["gamma"])},
    }


def cpu_notes(root: Path, metrics: dict) -> dict:
    """suspect_timing and its notes when the hypervisor stole more than noise.STEAL_LIMIT of the CPU between the
    run's first and last probe, or other processes contended for the run's cores (noise.contention_reasons), read
    from the /proc/stat counters the probe rows carry; {} otherwise. Either flags the run whatever its A B B A halves
    say: a steady competitor slows both halves alike."""
    from specbench.measure.machine.noise import contention_reasons, noise_verdict, steal_share

    rows = read_records(root / "noise_probes.jsonl", noise_probe_problem)
    notes = noise_verdict([], [], [], steal=steal_share(rows)) + contention_reasons(rows)
    if not notes or "timing_notes" not in metrics:
        return {}
    return {"suspect_timing": True, "timing_notes": metrics["timing_notes"] + notes}


def auto_prediction_fields(manifest: dict, measured: float | None) -> dict:
    """The auto choice's two numbers made before timing (measure/auto/prediction.py), each beside the measurement:
    the held-out prediction and the cost-model check at known acceptance. A manifest from before issue 40 holds
    only the check, under `prediction` (no `check` key): it fills the check's fields and leaves the prediction's
    null."""
    from specbench.measure.auto.prediction import ratio_to_prediction

    auto = manifest.get("auto") or {}
    pred, check = auto.get("prediction") or {}, auto.get("check") or {}
    if pred and "check" not in auto:
        pred, check = {}, pred
    return {
        "auto_predicted_speedup": pred.get("speedup"),
        "auto_predicted_interval": [pred.get("low"), pred.get("high")] if pred else None,
        "auto_prediction_ratio": ratio_to_prediction(measured, pred.get("speedup")),
        "auto_predicted_n_pilot": pred.get("n_pilot"),
        "auto_check_speedup": check.get("speedup"),
        "auto_check_interval": [check.get("low"), check.get("high")] if check else None,
        "auto_check_ratio": ratio_to_prediction(measured, check.get("speedup")),
        "auto_replay_s": check.get("replay_s"),
        "auto_predicts_slower": auto.get("predicts_slower"),
    }


def summary_memory(files: RunFiles, memory: Callable[[], dict] | None) -> dict:
    """The peak memory of this call's measuring, or (a call that measured nothing) the one the summary holds."""
    if memory is not None:
        return memory()
    old, _ = read_json_object(files.summary, "summary.json")
    return {k: (old or {}).get(k) for k in ("peak_memory_mb", "peak_memory_kind")}


def write_summary(
    files: RunFiles,
    config: RunConfig,
    spec: TaskSpec,
    records: list[dict],
    manifest: dict,
    memory: Callable[[], dict] | None = None,
) -> dict:
    """summary.json rewritten from the records on disk (after every example, and first thing on a resume)."""
    summary = summary_of(files, config, spec, records, manifest, memory)
    atomic_write_json(files.summary, summary)
    return summary


def rebuild_summary(files: RunFiles, records: list[dict]) -> dict:
    """The summary a run folder without summary.json would hold, from its manifest and `records`, not written: for
    a reader (the report) of a run killed between a record's append and its summary's write, which must not write
    into a folder that a resumed run may hold. The summary reads only the task's name and metric, which the
    manifest records, so the task itself is not loaded. SpecbenchError when the manifest cannot say the run's
    configuration."""
    from specbench.measure.auto.choose import AutoChoice, resolved_config

    manifest = read_manifest(files)
    try:
        config = RunConfig.from_dict(manifest["config"])
        if manifest.get("auto"):  # the choices the records were measured with, as a resume applies them
            config = resolved_config(config, AutoChoice.from_dict(manifest["auto"]))
        task = manifest["task"]
        spec = TaskSpec(
            name=str(task["name"]),
            description="",
            source={},
            fields={},
            template="",
            chat_template=False,
            reference=None,
            metric=task.get("metric"),
            max_new_tokens=int(manifest["max_new_tokens"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecbenchError(
            f"{files.manifest} does not say the run's configuration ({type(exc).__name__}: {str(exc)[:80]})"
        ) from None
    return summary_of(files, config, spec, records, manifest)


def summary_of(
    files: RunFiles,
    config: RunConfig,
    spec: TaskSpec,
    records: list[dict],
    manifest: dict,
    memory: Callable[[], dict] | None = None,
) -> dict:
    """The summary of `records` (every key schema.Summary declares), JSON-safe, as write_summary writes it."""
    from specbench.measure.machine.hardware import describe

    drift = baseline_drift(files)
    metrics = summarize(records, config.draft_gamma, config.sampling.greedy, read_probes(files.root), drift)
    metrics.update(cpu_notes(files.root, metrics))
    if config.batch_size > 1:
        metrics.update(
            batch_prediction(records, config.draft_gamma, manifest.get("batch_calibration"), config.batch_policy)
        )
    summary = summary_dict(
        {  # every key declared in schema.Summary
            "schema_version": SCHEMA_VERSION,
            "run_id": files.root.name,
            "target": config.load.target,
            "draft": config.draft.text,
            "engine": config.engine,
            "engine_version": manifest.get("engine", {}).get("engine_version"),
            "threads": manifest.get("engine", {}).get("threads"),
            "task": spec.name,
            "gamma": config.gamma.value,
            "dtype": config.load.dtype,
            "temperature": config.sampling.temperature,
            "top_k": config.sampling.top_k,
            "top_p": config.sampling.top_p,
            "seed": config.seed,
            "repeats": config.repeats,
            "exact_shapes": config.exact_shapes,
            "batch_size": config.batch_size,
            "batch_policy": config.batch_policy,
            "max_new_tokens": manifest["max_new_tokens"],
            **prompt_length_fields(config, manifest),
            **load_fields(files.root, config),
            "complete": len(records) == manifest["task"]["n_examples"],
            **metrics,
            "baseline_drift": drift,
            "auto": auto_summary(manifest),
            **auto_prediction_fields(manifest, metrics.get("speedup_geomean")),
            "hardware": describe(manifest.get("hardware")),
            "quality": quality(spec, records, config.sampling),
            **summary_memory(files, memory),
        }
    )
    return json_safe(summary)


def load_fields(root: Path, config: RunConfig) -> dict:
    """A load run's fields (measure/stats/load.py) from its load_batches.jsonl; {} for any other run (null there)."""
    if not config.concurrency:
        return {}
    from specbench.measure.stats.load import load_summary

    batches = read_records(root / LOAD_FILE, load_batch_problem)
    return {
        "concurrency": config.concurrency,
        "request_rate": config.request_rate,
        "slo_tpot_ms": config.slo_tpot_ms,
        **load_summary(batches, config.slo_tpot_ms),
    }


def prompt_length_fields(config: RunConfig, manifest: dict) -> dict:
    """The summary's prompt-length axis: the bucket, and for a bucket its thresholds and token range (manifest)."""
    raw = manifest.get("prompt_length")
    bucket = raw if isinstance(raw, dict) else {}
    return {
        "prompt_length": config.prompt_length,
        "prompt_length_thresholds": bucket.get("thresholds"),
        "prompt_length_range": bucket.get("token_range"),
    }


def quality(spec: TaskSpec, records: list[dict], sampling: SamplingConfig) -> dict | None:
    """BLEU/ROUGE of baseline and speculative outputs side by side (bootstrap CIs when sampling)."""
    refs = [r["reference"] for r in records]
    if not spec.metric or not records or any(ref is None for ref in refs):
        return None
    from specbench.tasks.quality import bootstrap_ci, score

    out: dict[str, object] = {"metric": spec.metric}
    for engine in ("baseline", "speculative"):
        hyps = [r[engine]["text"] for r in records]
        scores = score(spec.metric, hyps, refs)
        if not sampling.greedy and len(records) > 1:
            for key in [k for k, v in scores.items() if isinstance(v, float)]:
                scores[f"{key}_ci95"] = list(bootstrap_ci(spec.metric, hyps, refs, key))
        out[engine] = scores
    return out

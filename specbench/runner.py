"""Run one configuration over a task: baseline and speculative side by side, streamed to disk.

Data flows one way: RunConfig → task examples → prepared prompts → (baseline, speculative)
per example → ExampleRecord appended to examples.jsonl → summary.json rewritten. Models are
loaded once per `Session` and reused (a sweep shares one session across cells); no decode
state survives from one example or cell to the next (fresh caches, a generator per example
seeded from (seed, example id)).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from specbench.config import RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import DecodeResult
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError
from specbench.metrics import first_divergence, json_safe, summarize
from specbench.models import LoadedModel, load_model, make_proposer
from specbench.results import (SCHEMA_VERSION, EngineRecord, ExampleRecord, RunFiles, append_jsonl, append_record,
                               atomic_write_json, environment_info, prepare_run_dir, read_records, repair_jsonl,
                               run_lock)
from specbench.tasks import Example, TaskSpec, examples_hash, load_task, render_for_model, select_examples

WARMUP_TOKENS = 8


@dataclass
class Prepared:
    """A task example tokenized for the target."""

    example: Example
    prompt_ids: list[int]


class Session:
    """Models loaded once and reused across runs (and sweep cells)."""

    def __init__(self, target_spec: str, device: str, dtype: str, trust_remote_code: bool = False,
                 backend: str = "eager"):
        self.device, self.dtype, self.trust_remote_code, self.backend = device, dtype, trust_remote_code, backend
        self.target: LoadedModel = load_model(target_spec, device, dtype, trust_remote_code)
        # one backend for the target, shared by the baseline and the speculative engine (same forward for both)
        self.target_backend = ForwardBackend(self.target.model, backend)
        self._proposers: dict[tuple, object] = {}

    def proposer(self, draft_spec: str, corpus: list[list[int]] | None = None):
        """The draft for `draft_spec`, built once; frequency drafts are fitted on `corpus` (once per corpus)."""
        fits = draft_spec.partition(":")[0] in ("unigram", "bigram")
        key = (draft_spec, hashlib.sha256(repr(corpus).encode()).hexdigest() if fits and corpus else None)
        if key not in self._proposers:
            self._proposers[key] = make_proposer(draft_spec, self.target, self.device, self.dtype,
                                                 self.trust_remote_code, corpus=corpus if fits else None,
                                                 backend=self.backend)
        return self._proposers[key]


def example_seed(seed: int, example_id: str) -> int:
    """A per-example seed: the same example gets the same randomness in every run and on resume."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{example_id}".encode()).digest()[:7], "big")


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def prepare_examples(spec: TaskSpec, examples: list[Example], target: LoadedModel, max_new_tokens: int) -> list[Prepared]:
    """Render (chat template) and tokenize; reject empty prompts and prompts that overflow the context."""
    tok = target.tokenizer
    prepared = []
    for ex in examples:
        text = render_for_model(spec, ex.prompt, tok)
        templated = text != ex.prompt
        ids = tok(text, add_special_tokens=not templated)["input_ids"]
        if not ex.prompt.strip() or not ids:
            raise SpecbenchError(f"example {ex.id!r} of task {spec.name!r} has an empty prompt; remove it from the task data")
        if target.max_positions and len(ids) + max_new_tokens > target.max_positions:
            raise SpecbenchError(
                f"example {ex.id!r}: prompt of {len(ids)} tokens + {max_new_tokens} new tokens exceeds the "
                f"context of {target.max_positions}; shorten the prompt or lower --max-new-tokens")
        prepared.append(Prepared(ex, ids))
    return prepared


def run_id_for(config: RunConfig) -> str:
    """A readable, deterministic id: rerunning the same command resumes the same run directory."""
    digest = hashlib.sha256(repr(sorted(config.to_dict().items())).encode()).hexdigest()[:8]
    s = config.sampling
    stem = f"{Path(config.task).stem}-{Path(config.draft).name}-g{config.gamma}-t{s.temperature:g}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{stem}-{digest}")


def engine_record(result: DecodeResult, tokenizer) -> EngineRecord:
    """A DecodeResult plus what the record adds: decoded text and token count."""
    return EngineRecord(text=tokenizer.decode(result.token_ids, skip_special_tokens=True),
                        n_tokens=len(result.token_ids), **asdict(result))


@dataclass
class Engines:
    """The two decoders of a run, bound to models and settings; both take (prompt ids, seed, max_new_tokens)."""

    session: Session
    config: RunConfig
    proposer: object  # the Proposer of config.draft

    def baseline(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t = self.session.target
        return decode_autoregressive(
            CachedModel(t.model, backend=self.session.target_backend), prompt_ids, max_new_tokens=max_new_tokens,
            sampling=self.config.sampling,
            generator=make_generator(t.device, seed), eos_ids=t.eos_ids, decoder_start_id=t.decoder_start_id)

    def speculative(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t, cfg = self.session.target, self.config
        proposer = self.proposer
        if cfg.engine == "hf-assisted":
            from specbench.decoding.hf_assisted import decode_hf

            if not hasattr(proposer, "lm"):
                raise SpecbenchError("--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft")
            return decode_hf(t.model, prompt_ids, max_new_tokens=max_new_tokens, sampling=cfg.sampling, seed=seed,
                             eos_ids=t.eos_ids, assistant=proposer.lm.model, gamma=cfg.gamma,
                             min_confidence=cfg.draft_confidence)
        return decode_speculative(
            CachedModel(t.model, backend=self.session.target_backend), proposer, prompt_ids, gamma=cfg.gamma, max_new_tokens=max_new_tokens,
            sampling=cfg.sampling, generator=make_generator(t.device, seed), eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id, min_confidence=cfg.draft_confidence)

    def model_caches(self) -> list[CachedModel]:
        """The target's and (if any) the draft model's cache wrappers, each with its backend."""
        p = self.proposer
        draft = getattr(p, "lm", None) or getattr(getattr(p, "model", None), "lm", None)  # model draft, or hybrid's
        return [CachedModel(self.session.target.model, backend=self.session.target_backend)] + ([draft] if draft else [])

    def warm_up(self, prompt_ids: list[int], capacity: int = 0) -> None:
        """Run both engines once, unrecorded: first calls pay for allocations and kernel selection.

        `capacity` (longest prompt + max_new_tokens of the run) sizes static caches once; under
        the compiled backend every step shape is compiled here, before any timing.
        """
        for i, lm in enumerate(self.model_caches()):  # the target first, then a model draft
            lm.backend.reserve(capacity)
            lm.prime(self.config.gamma + 1, all_logits=i == 0)
        self.baseline(prompt_ids, 0, WARMUP_TOKENS)
        self.speculative(prompt_ids, 0, WARMUP_TOKENS)


@dataclass
class RunPlan:
    """Everything a run needs, validated and loaded, before any timing starts."""

    config: RunConfig
    spec: TaskSpec
    files: RunFiles
    manifest: dict
    session: Session
    prepared: list[Prepared]
    max_new_tokens: int
    proposer: object  # the draft, fitted on the task's prompts where it fits anything


@dataclass
class RunOutcome:
    files: RunFiles
    summary: dict
    new_examples: int  # examples measured by this call (the rest were resumed from disk)


def prepare_run(config: RunConfig, results_dir: Path, *, run_id: str | None = None,
                session: Session | None = None) -> RunPlan:
    """Validate the config, load task and models, check the run folder: every bad input fails here, fast."""
    config.validate()
    spec = load_task(config.task)
    max_new = config.max_new_tokens or spec.max_new_tokens
    examples = select_examples(spec, config.limit, config.seed)
    # check that results can be written now, but create the run folder only once everything has loaded,
    # so a run that fails on bad input leaves nothing behind
    files = RunFiles(prepare_run_dir(Path(results_dir)) / (run_id or run_id_for(config)))
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_id": files.root.name,
        "config": config.to_dict(),
        "max_new_tokens": max_new,
        "task": {"name": spec.name, "metric": spec.metric, "n_examples": len(examples),
                 "examples_hash": examples_hash(examples), "example_ids": [e.id for e in examples]},
    }
    check_resumable(files, manifest)
    session = session or Session(config.target, config.device, config.dtype, config.trust_remote_code, config.backend)
    if session.backend != config.backend:
        raise SpecbenchError(f"this session runs --backend {session.backend}, the run asks for {config.backend}; "
                             f"load a session per backend")
    target = session.target
    prepared = prepare_examples(spec, examples, target, max_new)
    # load (and check) the draft before any timing; frequency drafts fit on the run's prompts
    proposer = session.proposer(config.draft, corpus=[p.prompt_ids for p in prepared])
    manifest["models"] = {"target": {"spec": config.target, "params": target.n_params, "dtype": str(target.dtype),
                                     "vocab_size": target.vocab_size, "device": str(target.device)},
                          "draft": {"spec": config.draft}}
    manifest.update(environment_info())
    manifest["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if not files.manifest.exists():
        prepare_run_dir(files.root)
        atomic_write_json(files.manifest, manifest)
    return RunPlan(config, spec, files, manifest, session, prepared, max_new, proposer)


def measure(
    plan: RunPlan,
    *,
    on_start: Callable[[int, int], None] = lambda total, done: None,
    on_example: Callable[[dict], None] = lambda record: None,
    baseline_store: dict | None = None,
) -> RunOutcome:
    """Measure every not-yet-recorded example of the plan; resume from examples.jsonl if present.

    `baseline_store` (example id → baseline EngineRecord dict) lets a sweep measure each
    baseline once per task and temperature and share it across cells.
    """
    with run_lock(plan.files.root):
        return _measure_locked(plan, on_start, on_example, baseline_store)


def _measure_locked(plan: RunPlan, on_start, on_example, baseline_store: dict | None) -> RunOutcome:
    config, files, target = plan.config, plan.files, plan.session.target
    repair_jsonl(files.examples)
    records = read_records(files.examples)
    done = {r["example_id"] for r in records}
    todo = [p for p in plan.prepared if p.example.id not in done]
    on_start(len(plan.prepared), len(plan.prepared) - len(todo))
    engines = Engines(plan.session, config, plan.proposer)
    if todo:
        engines.warm_up(todo[0].prompt_ids, max(len(p.prompt_ids) for p in plan.prepared) + plan.max_new_tokens)
        if baseline_store is not None:
            probe_shared_baseline(engines, todo[0], config.seed, plan.max_new_tokens, baseline_store, files)
    for item in todo:
        seed = example_seed(config.seed, item.example.id)
        base = None if baseline_store is None else baseline_store.get(item.example.id)
        if base is None:
            base = asdict(engine_record(engines.baseline(item.prompt_ids, seed, plan.max_new_tokens), target.tokenizer))
            if baseline_store is not None:
                baseline_store[item.example.id] = base
        spec_rec = engine_record(engines.speculative(item.prompt_ids, seed, plan.max_new_tokens), target.tokenizer)
        divergence = first_divergence(base["token_ids"], spec_rec.token_ids)
        record = ExampleRecord(SCHEMA_VERSION, item.example.id, len(item.prompt_ids), item.example.reference,
                               EngineRecord(**base), spec_rec, divergence is None, divergence)
        append_record(files.examples, record)
        records.append(asdict(record))
        write_summary(files, config, plan.spec, records, plan.manifest)
        on_example(records[-1])
    summary = write_summary(files, config, plan.spec, records, plan.manifest)
    return RunOutcome(files, summary, len(todo))


def probe_shared_baseline(engines: Engines, item: Prepared, seed: int, max_new_tokens: int, store: dict,
                          files: RunFiles) -> None:
    """Re-time one shared baseline before a sweep cell measures against the stored ones.

    A sweep times each baseline once and compares every later cell with it; if the machine has
    slowed down or sped up since, those speedups are off by the same factor. So each cell first
    decodes one stored example again (untimed by the run, same seed) and appends fresh ÷ stored
    seconds to baseline_probes.jsonl; the summary reports the worst ratio as `baseline_drift`
    and the report flags runs beyond ±metrics.BASELINE_DRIFT_TOLERANCE. One example is a small
    sample (a single decode of a second or so varies by a few per cent), so a flag says "look
    at this cell", not "this cell is wrong".
    """
    stored = store.get(item.example.id)
    if stored is None:  # nothing stored yet: this cell times the baselines itself
        return
    fresh = engines.baseline(item.prompt_ids, example_seed(seed, item.example.id), max_new_tokens)
    stored_s = stored["prefill_s"] + stored["decode_s"]
    fresh_s = fresh.prefill_s + fresh.decode_s
    same = fresh.token_ids == stored["token_ids"]  # else (a non-deterministic kernel) the times are not comparable
    row = {"example_id": item.example.id, "stored_s": stored_s, "fresh_s": fresh_s,
           "ratio": fresh_s / stored_s if stored_s > 0 and same else None, "same_tokens": same}
    append_jsonl(files.root / "baseline_probes.jsonl", row)


def baseline_drift(files: RunFiles) -> float | None:
    """The probe ratio (fresh ÷ stored baseline seconds) farthest from 1 in log terms; None without probes."""
    ratios = [r["ratio"] for r in read_records(files.root / "baseline_probes.jsonl") if r.get("ratio")]
    return max(ratios, key=lambda x: abs(math.log(x))) if ratios else None


def execute_run(
    config: RunConfig,
    results_dir: Path,
    *,
    run_id: str | None = None,
    session: Session | None = None,
    on_start: Callable[[int, int], None] = lambda total, done: None,
    on_example: Callable[[dict], None] = lambda record: None,
    baseline_store: dict | None = None,
) -> RunOutcome:
    """prepare_run then measure: one call for a whole run."""
    plan = prepare_run(config, results_dir, run_id=run_id, session=session)
    return measure(plan, on_start=on_start, on_example=on_example, baseline_store=baseline_store)


def check_resumable(files: RunFiles, manifest: dict) -> None:
    """A run directory may be resumed only by the same configuration on the same examples."""
    if not files.manifest.exists():
        return
    import json

    old = json.loads(files.manifest.read_text())
    for key in ("config", "max_new_tokens"):
        if old.get(key) != manifest[key]:
            raise SpecbenchError(f"{files.root} holds a run with a different {key}; use another --run-id or delete it")
    if old.get("task", {}).get("examples_hash") != manifest["task"]["examples_hash"]:
        raise SpecbenchError(f"{files.root} holds a run on different examples; use another --run-id or delete it")


def write_summary(files: RunFiles, config: RunConfig, spec: TaskSpec, records: list[dict], manifest: dict) -> dict:
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": files.root.name,
        "target": config.target,
        "draft": config.draft,
        "engine": config.engine,
        "task": spec.name,
        "gamma": config.gamma,
        "temperature": config.sampling.temperature,
        "top_k": config.sampling.top_k,
        "top_p": config.sampling.top_p,
        "seed": config.seed,
        "max_new_tokens": manifest["max_new_tokens"],
        "complete": len(records) == manifest["task"]["n_examples"],
        **summarize(records, config.gamma, config.sampling.greedy),
        "baseline_drift": baseline_drift(files),
    }
    summary["quality"] = quality(spec, records, config.sampling)
    summary = json_safe(summary)
    atomic_write_json(files.summary, summary)
    return summary


def quality(spec: TaskSpec, records: list[dict], sampling: SamplingConfig) -> dict | None:
    """BLEU/ROUGE of baseline and speculative outputs side by side (bootstrap CIs when sampling)."""
    refs = [r["reference"] for r in records]
    if not spec.metric or not records or any(ref is None for ref in refs):
        return None
    from specbench.quality import bootstrap_ci, score

    out = {"metric": spec.metric}
    for engine in ("baseline", "speculative"):
        hyps = [r[engine]["text"] for r in records]
        scores = score(spec.metric, hyps, refs)
        if not sampling.greedy and len(records) > 1:
            for key in [k for k, v in scores.items() if isinstance(v, float)]:
                scores[f"{key}_ci95"] = list(bootstrap_ci(spec.metric, hyps, refs, key))
        out[engine] = scores
    return out

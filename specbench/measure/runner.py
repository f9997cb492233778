"""Run one configuration over a task: baseline and speculative side by side, streamed to disk.

Data flows one way: RunConfig → task examples → prepared prompts → (baseline, speculative)
per example → ExampleRecord appended to examples.jsonl → summary.json rewritten. Models are
loaded once per `Session` and reused (a sweep shares one session across cells); no decode
state survives from one example or cell to the next (fresh caches, a generator per example
seeded from (seed, example id)).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specbench.config import (
    AUTO,
    RunConfig,
    SamplingConfig,
    batch_suffix,
    check_batch_size,
    check_gamma_budget,
    check_gamma_context,
    check_id,
    check_results_dir,
    prompt_length_suffix,
)
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.drafts.spec import parse_draft
from specbench.decoding.gamma_policy import AdaptiveGamma, FixedGamma, GammaPolicy, HeuristicGamma
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError
from specbench.evidence.numerics import explain_example
from specbench.evidence.perplexity import example_nll
from specbench.files import append_jsonl, atomic_write_json
from specbench.measure import calibration as cal
from specbench.measure import turns
from specbench.measure.buckets import PROMPT_POOL, BucketChoice, choose_bucket, short_bucket_note
from specbench.measure.choose import AutoChoice, PilotResult, choose, needs_choice, pilot_from_results, resolved_config
from specbench.measure.memory import peak_memory, reset_peak_memory
from specbench.measure.metrics import batch_prediction, first_divergence, json_safe, summarize
from specbench.measure.noise import probe_ms
from specbench.measure.records import (
    SCHEMA_VERSION,
    EngineRecord,
    ExampleRecord,
    RunFiles,
    append_record,
    baseline_probe_problem,
    engine_dict,
    environment_info,
    noise_probe_problem,
    prepare_run_dir,
    read_examples,
    read_json_object,
    read_records,
    repair_jsonl,
    run_lock,
    summary_dict,
)
from specbench.models import LoadedModel, load_model, resolve_source
from specbench.models.shipped import shipped_draft_dir
from specbench.tasks.specs import Example, TaskSpec, examples_hash, load_task, render_for_model, select_examples

PILOT_EXAMPLES = 6  # at most this many untimed examples per draft for the auto choices' α estimate …
PILOT_MIN_STEPS = 48  # … stopping once this many verified steps were seen (2 short examples gave α 0.80–0.94)

WARMUP_TOKENS = 8


@dataclass
class Prepared:
    """A task example tokenized for the target."""

    example: Example
    prompt_ids: list[int]


class Session:
    """Models loaded once and reused across runs (and sweep cells)."""

    def __init__(
        self,
        target_spec: str,
        device: str,
        dtype: str,
        trust_remote_code: bool = False,
        backend: str = "eager",
        device_map: str | None = None,
        max_memory: str | None = None,
    ):
        self.device, self.dtype, self.trust_remote_code, self.backend = device, dtype, trust_remote_code, backend
        self.target_spec = target_spec  # --target as given: a sweep over pairs holds one session per target
        self.device_map = device_map  # the target's placement over devices (--device-map); drafts load on `device`
        self.target: LoadedModel = load_model(target_spec, device, dtype, trust_remote_code, device_map, max_memory)
        # one backend for the target, shared by the baseline and the speculative engine (same forward for both)
        self.target_backend = ForwardBackend(self.target.model, backend)
        self._proposers: dict[tuple, Proposer] = {}
        self.calibrations: dict[tuple, cal.Calibration] = {}  # (k_max, context key) → the target's curve
        self.draft_ms: dict[tuple, float | None] = {}  # (draft spec, context key) → ms per draft-model token
        self.pilots: dict[tuple, PilotResult] = {}  # (draft, pilot ids, sampling, budget, γ) → pilot

    def target_lm(self) -> CachedModel:
        return CachedModel(self.target.model, backend=self.target_backend)

    def calibrate(self, prompts: list[list[int]], k_max: int, max_new_tokens: int) -> cal.Calibration:
        """The target's pass-cost curve for these prompts, measured once per session."""
        key = (k_max, max_new_tokens, hashlib.sha256(repr(prompts).encode()).hexdigest())
        if key not in self.calibrations:
            self.calibrations[key] = cal.calibrate(
                self.target_lm(),
                prompts,
                k_max=k_max,
                max_new_tokens=max_new_tokens,
                max_positions=self.target.max_positions,
                dtype=self.dtype,
            )
        return self.calibrations[key]

    def draft_token_ms(self, draft_spec: str, prompts: list[list[int]], max_new_tokens: int) -> float | None:
        """ms per token of the draft's model (None for model-free drafts), measured once per session."""
        key = (draft_spec, max_new_tokens, hashlib.sha256(repr(prompts).encode()).hexdigest())
        if key not in self.draft_ms:
            caches = self.proposer(draft_spec, prompts).model_caches()
            self.draft_ms[key] = (
                None
                if not caches
                else cal.draft_token_ms(
                    caches[0], prompts, max_new_tokens=max_new_tokens, max_positions=self.target.max_positions
                )
            )
        return self.draft_ms[key]

    def calibrate_batch(
        self, draft_spec: str, prompts: list[list[int]], batch_size: int, k_max: int, max_new_tokens: int
    ) -> dict | None:
        """t(b, k) of the target (and the draft model's batched token, if any) at every row count b of
        calibration.batch_row_grid(B), timed interleaved, once per session and batch size (a sweep's ragged and
        min cells share it); None for an encoder-decoder target (no batched pass to time here)."""
        if getattr(self.target.model.config, "is_encoder_decoder", False):
            return None
        key = (
            "batch",
            draft_spec,
            batch_size,
            k_max,
            max_new_tokens,
            hashlib.sha256(repr(prompts).encode()).hexdigest(),
        )
        if key not in self.calibrations:
            t_start = time.perf_counter()
            caches = self.proposer(draft_spec, prompts).model_caches()
            per_rows = cal.calibrate_batch_grid(
                self.target.model,
                prompts,
                batch_size=batch_size,
                k_max=k_max,
                max_new_tokens=max_new_tokens,
                max_positions=self.target.max_positions,
                draft=caches[0].model if caches else None,
            )
            self.calibrations[key] = cal.batch_calibration_dict(batch_size, per_rows, time.perf_counter() - t_start)
        return self.calibrations[key]

    def proposer(self, draft_spec: str, corpus: list[list[int]] | None = None) -> Proposer:
        """The draft for `draft_spec`, built once; frequency drafts are fitted on `corpus` (once per corpus)."""
        fits = parse_draft(draft_spec).fits_corpus
        key = (draft_spec, hashlib.sha256(repr(corpus).encode()).hexdigest() if fits and corpus else None)
        if key not in self._proposers:
            self._proposers[key] = make_proposer(
                draft_spec,
                self.target,
                self.device,
                self.dtype,
                self.trust_remote_code,
                corpus=corpus if fits else None,
                backend=self.backend,
            )
        return self._proposers[key]


def example_seed(seed: int, example_id: str) -> int:
    """A per-example seed: the same example gets the same randomness in every run and on resume."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{example_id}".encode()).digest()[:7], "big")


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def prompt_token_ids(spec: TaskSpec, prompt: str, tokenizer) -> list[int]:
    """The prompt's token ids as the target sees them (its chat template applied where the task asks for it)."""
    text = render_for_model(spec, prompt, tokenizer)
    return tokenizer(text, add_special_tokens=text == prompt)["input_ids"]


def select_run_examples(spec: TaskSpec, config: RunConfig, tokenizer=None) -> tuple[list[Example], BucketChoice | None]:
    """The run's examples: the task's first --limit in its seeded order, or (--prompt-length short/medium/long) the
    first --limit of that bucket of the candidate pool (measure/buckets.py), with the bucket's record.

    `tokenizer` (the target's) is needed only for a bucket; None loads it, without the model."""
    if config.prompt_length == "all":
        return select_examples(spec, config.limit, config.seed), None
    if tokenizer is None:
        from specbench.models.loading import load_tokenizer

        tokenizer = load_tokenizer(config.target, config.trust_remote_code)
    pool = select_examples(spec, PROMPT_POOL, config.seed)
    choice = choose_bucket(
        [len(prompt_token_ids(spec, e.prompt, tokenizer)) for e in pool], config.prompt_length, config.limit
    )
    note = short_bucket_note(choice, config.limit)
    if note:
        warnings.warn(note, stacklevel=1)  # one line (CLI); issued here for every caller, so a repeat is shown once
    return [pool[i] for i in choice.indices], choice


def prepare_examples(
    spec: TaskSpec, examples: list[Example], target: LoadedModel, max_new_tokens: int
) -> list[Prepared]:
    """Render (chat template) and tokenize; reject empty prompts and prompts that overflow the context."""
    prepared = []
    for ex in examples:
        ids = prompt_token_ids(spec, ex.prompt, target.tokenizer)
        if not ex.prompt.strip() or not ids:
            raise SpecbenchError(
                f"example {ex.id!r} of task {spec.name!r} has an empty prompt; remove it from the task data"
            )
        if target.max_positions and len(ids) + max_new_tokens > target.max_positions:
            raise SpecbenchError(
                f"example {ex.id!r}: prompt of {len(ids)} tokens + {max_new_tokens} new tokens exceeds the "
                f"context of {target.max_positions}; shorten the prompt or lower --max-new-tokens"
            )
        prepared.append(Prepared(ex, ids))
    return prepared


def run_id_for(config: RunConfig) -> str:
    """A readable, deterministic id: rerunning the same command resumes the same run directory."""
    digest = hashlib.sha256(repr(sorted(config.to_dict().items())).encode()).hexdigest()[:8]
    s = config.sampling
    stem = f"{Path(config.task).stem}-{Path(config.draft).name}-g{config.gamma}-t{s.temperature:g}"
    stem += batch_suffix(config) + prompt_length_suffix(config)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{stem}-{digest}")


def engine_record(
    result: DecodeResult, tokenizer, repeat_s: list[float] | None = None, batched: bool = False
) -> EngineRecord:
    """A DecodeResult plus what the record adds: decoded text, token count, each repeat's seconds; the batch
    fields only for a run with --batch-size > 1 (`batched`; its last batch may hold a single row)."""
    fields = asdict(result)
    fields.pop("batch_size", None)  # the batch size goes into the ExampleRecord, once
    if not batched:  # a batch-1 engine's defaults: the record carries no batch fields (as before batches)
        fields.update(batch_s=None, batch_pass_rows=[], batch_pass_widths=[], kept_lengths=[])
    return EngineRecord(
        text=tokenizer.decode(result.token_ids, skip_special_tokens=True),
        n_tokens=len(result.token_ids),
        repeat_s=list(repeat_s or []),
        **fields,
    )


@dataclass
class Engines:
    """The two decoders of a run, bound to models and settings; both take (prompt ids, seed, max_new_tokens)."""

    session: Session
    config: RunConfig  # resolved: no auto values left (γ may still be the adaptive or heuristic policy)
    proposer: Proposer  # the draft of config.draft
    choice: AutoChoice | None = None  # the calibration + pilot behind auto values and the adaptive policy

    def gamma_policy(self) -> GammaPolicy:
        """A fresh policy per decode: nothing learnt on one example steers the next."""
        g, top = self.config.gamma, self.config.gamma_max
        if isinstance(g, int):
            return FixedGamma(g)
        if g == "heuristic":
            return HeuristicGamma(top, start=top)  # HF starts high (20, here capped) and lowers on a rejection
        if g == "adaptive" and self.choice is not None:
            c = self.choice
            return AdaptiveGamma(top, c.calibrations[c.dtype].pass_cost(), c.c(), c.pilots[c.draft].alpha)
        raise SpecbenchError(f"--gamma {g!r} was not resolved before decoding (a bug: please report it)")

    @property
    def pad_to(self) -> int:
        """--exact-shapes: every pass of both engines fed γmax+1 tokens (1 = off)."""
        return self.config.draft_gamma + 1 if self.config.exact_shapes else 1

    def baseline(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t = self.session.target
        return decode_autoregressive(
            CachedModel(t.model, backend=self.session.target_backend),
            prompt_ids,
            max_new_tokens=max_new_tokens,
            sampling=self.config.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            pad_to=self.pad_to,
        )

    def speculative(self, prompt_ids: list[int], seed: int, max_new_tokens: int) -> DecodeResult:
        t, cfg = self.session.target, self.config
        proposer = self.proposer
        if cfg.engine == "hf-assisted":
            from specbench.decoding.hf_assisted import decode_hf

            assistant = proposer.hf_assistant()
            if assistant is None:
                raise SpecbenchError(
                    "--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft"
                )
            return decode_hf(
                t.model,
                prompt_ids,
                max_new_tokens=max_new_tokens,
                sampling=cfg.sampling,
                seed=seed,
                eos_ids=t.eos_ids,
                assistant=assistant,
                gamma=cfg.gamma,
                min_confidence=cfg.draft_confidence,
            )
        return decode_speculative(
            CachedModel(t.model, backend=self.session.target_backend),
            proposer,
            prompt_ids,
            gamma=self.gamma_policy(),
            max_new_tokens=max_new_tokens,
            sampling=cfg.sampling,
            generator=make_generator(t.device, seed),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=cfg.draft_confidence,
            pad_to=self.pad_to,
        )

    def model_caches(self) -> list[CachedModel]:
        """The target's and (if any) the draft model's cache wrappers, each with its backend."""
        return [
            CachedModel(self.session.target.model, backend=self.session.target_backend)
        ] + self.proposer.model_caches()

    def warm_up(self, prompt_ids: list[int], capacity: int = 0) -> None:
        """Run both engines once, unrecorded: first calls pay for allocations and kernel selection.

        `capacity` (longest prompt + max_new_tokens of the run) sizes static caches once; under
        the compiled backend every step shape is compiled here, before any timing.
        """
        for i, lm in enumerate(self.model_caches()):  # the target first, then a model draft
            lm.backend.reserve(capacity)
            lm.prime(self.config.draft_gamma + 1, all_logits=i == 0)
        self.baseline(prompt_ids, 0, WARMUP_TOKENS)
        self.speculative(prompt_ids, 0, WARMUP_TOKENS)


@dataclass
class RunPlan:
    """Everything a run needs, validated and loaded, before any timing starts."""

    config: RunConfig  # resolved (auto values replaced by the choices); the manifest keeps the requested one
    spec: TaskSpec
    files: RunFiles
    manifest: dict
    session: Session
    prepared: list[Prepared]
    max_new_tokens: int
    proposer: Proposer  # the draft, fitted on the task's prompts where it fits anything
    choice: AutoChoice | None = None  # calibration, pilot and reasons behind auto values / the adaptive policy


@dataclass
class RunOutcome:
    files: RunFiles
    summary: dict
    new_examples: int  # examples measured by this call (the rest were resumed from disk)


def pilot_examples(spec: TaskSpec, config: RunConfig, examples: list[Example]) -> list[Example]:
    """The examples the auto choices pilot on: the next ones after the run's in the task's seeded
    order, so no timed example steers the choice; the run's first ones when the task has no more."""
    more = select_examples(spec, config.limit + PILOT_EXAMPLES, config.seed)[len(examples) :]
    return more or examples[:PILOT_EXAMPLES]


def calibration_k_max(config: RunConfig) -> int:
    """Pass sizes to calibrate: up to gamma_max + 1 (the curve the report plots and auto/adaptive need);
    under the compiled backend with a fixed γ only the γ + 1 shapes that are compiled anyway."""
    if config.backend == "compiled" and isinstance(config.gamma, int):
        return config.gamma + 1
    return max(config.draft_gamma, config.gamma_max) + 1


def prime_for_calibration(session: Session, proposer: Proposer, capacity: int, k_max: int) -> None:
    """Non-eager backends: size the static caches for the whole run and compile the pass shapes
    before calibrating, so the curve is the one the run will see (a no-op for eager)."""
    if session.backend == "eager":
        return
    target = session.target_lm()
    target.backend.reserve(capacity)
    target.prime(k_max, all_logits=True)
    for draft in proposer.model_caches():
        draft.backend.reserve(capacity)
        draft.prime(k_max, all_logits=False)


def run_pilot(
    session: Session, config: RunConfig, draft: str, pilot: list[Prepared], corpus: list[list[int]], max_new_tokens: int
) -> PilotResult:
    """Decode pilot examples with `draft` at γ = gamma_max (untimed by the run) until PILOT_MIN_STEPS verified
    steps were seen → α per position, the lookup law."""
    key = (
        draft,
        tuple(p.example.id for p in pilot),
        config.sampling,
        max_new_tokens,
        config.gamma_max,
        config.draft_confidence,
    )
    if key in session.pilots:
        return session.pilots[key]
    proposer = session.proposer(draft, corpus)
    t = session.target
    results, lookups = [], None if proposer.lookup_history() is None else []  # [] for a lookup-then-model draft
    for item in pilot:
        if sum(len(r.accept_lengths) for r in results) >= PILOT_MIN_STEPS:
            break
        res = decode_speculative(
            session.target_lm(),
            proposer,
            item.prompt_ids,
            gamma=config.gamma_max,
            max_new_tokens=max_new_tokens,
            sampling=config.sampling,
            generator=make_generator(t.device, example_seed(config.seed, item.example.id)),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=config.draft_confidence,
        )
        results.append(res)
        if lookups is not None:
            lookups.extend(proposer.lookup_history())
    lookup_only = parse_draft(draft).model_free
    session.pilots[key] = pilot_from_results(
        draft, results, lookups, lookup_only, [p.example.id for p in pilot[: len(results)]]
    )
    return session.pilots[key]


def available_drafts(target_spec: str) -> list[str]:
    """The drafts `--draft auto` compares for a target: prompt lookup always; the distilled draft and
    lookup+distilled where drafts/ ships one; a paired preset draft (and lookup+it) where installed."""
    from specbench.models import PAIRED_DRAFTS, preset_installed

    drafts = ["prompt-lookup"]
    try:
        shipped_draft_dir(target_spec)
        drafts += ["distilled", "lookup+distilled"]
    except SpecbenchError:
        pass
    for name in PAIRED_DRAFTS.get(Path(target_spec).name, ()):
        if preset_installed(name):
            drafts += [name, f"lookup+{name}"]
    return drafts


def choose_on_this_machine(
    config: RunConfig,
    spec: TaskSpec,
    examples: list[Example],
    pilot: list[Example],
    max_new: int,
    session: Session | None,
    on_status: Callable[[str], None],
) -> tuple[AutoChoice, Session]:
    """Load the target in each candidate dtype, calibrate, pilot each candidate draft, choose (measure/choose.py)."""
    from specbench.measure.hardware import bf16_support
    from specbench.models import resolve_device

    bf16_note = None
    if config.dtype == AUTO:
        ok, bf16_note = bf16_support(resolve_device(config.device).type)
        dtypes = ["float32", "bfloat16"] if ok else ["float32"]
    else:
        dtypes = [config.dtype]
    sessions: dict[str, Session] = {}

    def session_for(dtype: str) -> Session:
        if dtype not in sessions:
            on_status(f"loading the target in {dtype}")
            sessions[dtype] = (
                session
                if session is not None and session.dtype == dtype
                else Session(
                    config.target,
                    config.device,
                    dtype,
                    config.trust_remote_code,
                    config.backend,
                    config.device_map,
                    config.max_memory,
                )
            )
        return sessions[dtype]

    first = session_for(dtypes[-1])
    prepared = prepare_examples(spec, examples, first.target, max_new)
    corpus = [p.prompt_ids for p in prepared]
    pilot_prepared = prepare_examples(spec, pilot, first.target, max_new)
    drafts = available_drafts(config.target) if config.draft == AUTO else [config.draft]
    k_max = calibration_k_max(config)
    capacity = max(len(p.prompt_ids) for p in prepared + pilot_prepared) + max_new + k_max

    def calibrate_dtype(dtype: str, drafts: list[str]):
        s = session_for(dtype)
        for d in drafts:
            prime_for_calibration(s, s.proposer(d, corpus), capacity, k_max)
        on_status(f"calibrating {dtype}: target passes over 1..{k_max} tokens, draft tokens")
        curve = s.calibrate(corpus, k_max, max_new)
        return curve, {d: ms for d in drafts if (ms := s.draft_token_ms(d, corpus, max_new)) is not None}

    def pilot_draft(draft: str) -> PilotResult:
        on_status(f"pilot: {draft} on {len(pilot_prepared)} untimed examples")
        return run_pilot(first, config, draft, pilot_prepared, corpus, max_new)

    choice = choose(
        config,
        dtypes=dtypes,
        drafts=drafts,
        calibrate_dtype=calibrate_dtype,
        pilot=pilot_draft,
        bf16_note=bf16_note if config.dtype == AUTO else None,
    )
    return choice, sessions[choice.dtype]


def prepare_run(
    config: RunConfig,
    results_dir: Path,
    *,
    run_id: str | None = None,
    session: Session | None = None,
    on_status: Callable[[str], None] = lambda msg: None,
) -> RunPlan:
    """Validate the config, load task and models, calibrate, resolve auto choices, check the run folder:
    every bad input fails here, fast, and nothing here is timed into the result."""
    spec, examples, max_new, files, bucket = check_run_inputs(
        config,
        results_dir,
        run_id,
        check_sources=session is None,
        tokenizer=session.target.tokenizer if session is not None and config.prompt_length != "all" else None,
    )
    manifest = first_manifest(files, config, spec, examples, max_new, bucket)
    old = read_manifest(files)
    check_resumable(files, manifest, old)
    choice = None
    if needs_choice(config):
        if old.get("auto"):  # a resumed run keeps the choices its first examples were measured with
            choice = AutoChoice.from_dict(old["auto"])
            if session is None or session.dtype != choice.dtype:
                session = Session(
                    config.target,
                    config.device,
                    choice.dtype,
                    config.trust_remote_code,
                    config.backend,
                    config.device_map,
                    config.max_memory,
                )
        else:
            choice, session = choose_on_this_machine(
                config, spec, examples, pilot_examples(spec, config, examples), max_new, session, on_status
            )
        run_config = resolved_config(config, choice)
    else:
        run_config = config
        if session is None:
            on_status("loading task and models")
            session = Session(
                config.target,
                config.device,
                config.dtype,
                config.trust_remote_code,
                config.backend,
                config.device_map,
                config.max_memory,
            )
    if session.backend != config.backend:
        raise SpecbenchError(
            f"this session runs --backend {session.backend}, the run asks for {config.backend}; "
            f"load a session per backend"
        )
    if session.dtype != run_config.dtype:
        raise SpecbenchError(
            f"this session holds the target in {session.dtype}, the run asks for {run_config.dtype}; "
            f"load a session per dtype"
        )
    target = session.target
    check_gamma_context(calibration_k_max(run_config), target.max_positions)
    prepared = prepare_examples(spec, examples, target, max_new)
    corpus = [p.prompt_ids for p in prepared]
    # load (and check) the draft before any timing; frequency drafts fit on the run's prompts
    proposer = session.proposer(run_config.draft, corpus=corpus)
    if run_config.engine == "hf-assisted" and proposer.hf_assistant() is None:  # before the run folder exists
        raise SpecbenchError(
            "--engine hf-assisted needs a model draft (HF's assistant_model); pick a model for --draft"
        )
    if old.get("calibration"):
        calibration = old["calibration"]
    else:
        k_max = calibration_k_max(run_config)
        prime_for_calibration(session, proposer, max(len(p.prompt_ids) for p in prepared) + max_new + k_max, k_max)
        on_status(f"calibrating: target passes over 1..{k_max} tokens")
        # the session's curve is shared by every cell of a sweep: this run's draft goes on a copy
        curve = dataclasses.replace(
            session.calibrate(corpus, k_max, max_new),
            draft=run_config.draft,
            draft_ms=session.draft_token_ms(run_config.draft, corpus, max_new),
        )
        calibration = curve.to_dict()
    manifest["models"] = {
        "target": {
            "spec": config.target,
            "params": target.n_params,
            "dtype": str(target.dtype),
            "vocab_size": target.vocab_size,
            "device": str(target.device),
        },
        "draft": {"spec": run_config.draft},
    }
    manifest["calibration"] = calibration
    if choice is not None:
        manifest["auto"] = choice.to_dict()
    manifest.update(batch_calibration(session, run_config, corpus, max_new, old, on_status))
    manifest.update(environment_info())
    manifest["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest = write_manifest(files, manifest, old)
    return RunPlan(run_config, spec, files, manifest, session, prepared, max_new, proposer, choice)


def batch_calibration(
    session: Session,
    config: RunConfig,
    corpus: list[list[int]],
    max_new: int,
    old: dict,
    on_status: Callable[[str], None],
) -> dict:
    """{"batch_calibration": t(B, k), k = 1..γ+1} for a run at --batch-size B > 1 (calibration.calibrate_batch, once
    per session; a resumed run keeps its first one); {} at batch 1, whose manifest is as before batches."""
    if config.batch_size == 1:
        return {}
    if old.get("batch_calibration"):
        return {"batch_calibration": old["batch_calibration"]}
    on_status(f"calibrating: batched target passes, {config.batch_size} rows × 1..{config.gamma + 1} tokens")
    return {
        "batch_calibration": session.calibrate_batch(config.draft, corpus, config.batch_size, config.gamma + 1, max_new)
    }


def start_memory(device: torch.device) -> Callable[[], dict]:
    """Reset the peak-memory counter now; → what write_summary calls to read the peak since then."""
    reset_peak_memory(device)
    return functools.partial(peak_memory, device)


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


def engine_order(repeats: int, index: int) -> list[str]:
    """A B B A … per example, starting with the other engine on every other example, so neither
    engine always runs first (caches, clocks and thermal state favour no side)."""
    pair = ["baseline", "speculative"] if index % 2 == 0 else ["speculative", "baseline"]
    return [e for r in range(repeats) for e in (pair if r % 2 == 0 else pair[::-1])]


def merge_repeats(results: list[DecodeResult]) -> tuple[DecodeResult, list[float]]:
    """Repeats of one engine on one example → one result with the median of each time, and the
    total seconds of every repeat. Counts come from the first repeat (same seed, same tokens)."""
    import statistics

    first = results[0]
    med = {
        k: statistics.median(getattr(r, k) for r in results) for k in ("prefill_s", "decode_s", "draft_s", "verify_s")
    }
    return dataclasses.replace(first, **med), [r.prefill_s + r.decode_s for r in results]


def probe_target(session: Session, prompt_ids: list[int]) -> float:
    """The noise probe: median ms of a few one-token target passes after a short fixed context."""
    step = cal.pass_step(session.target_lm(), prompt_ids[:32], 1, True, 1)
    return probe_ms(lambda: step(1))


def _measure_locked(plan: RunPlan, on_start, on_example, baseline_store: dict | None) -> RunOutcome:
    config, files, target = plan.config, plan.files, plan.session.target
    repair_jsonl(files.examples)
    records = read_examples(files.examples)  # a line of the wrong shape is skipped (warned), never summarized
    done = {r["example_id"] for r in records}
    todo = [p for p in plan.prepared if p.example.id not in done]
    on_start(len(plan.prepared), len(plan.prepared) - len(todo))
    engines = Engines(plan.session, config, plan.proposer, plan.choice)
    probe_file = files.root / "noise_probes.jsonl"
    memory = start_memory(target.device) if todo else None  # a call that measures nothing keeps the stored peak
    if config.batch_size > 1:
        from specbench.measure.batch_runner import measure_batches

        turns.refuse_batched_turns(plan.prepared)
        measure_batches(plan, engines, records, baseline_store, on_example, memory)
        return RunOutcome(files, write_summary(files, config, plan.spec, records, plan.manifest, memory), len(todo))
    if todo:
        engines.warm_up(todo[0].prompt_ids, max(len(p.prompt_ids) for p in plan.prepared) + plan.max_new_tokens)
        if baseline_store is not None:
            probe_shared_baseline(engines, todo[0], config.seed, plan.max_new_tokens, baseline_store, files)
        append_jsonl(probe_file, {"after": None, "ms": probe_target(plan.session, plan.prepared[0].prompt_ids)})
    for item in todo:
        seed = example_seed(config.seed, item.example.id)
        base = None if baseline_store is None else baseline_store.get(item.example.id)
        runs: dict[str, list[DecodeResult]] = {"baseline": [], "speculative": []}
        log = turns.TurnLog()  # each turn of a multi-turn question (measure/turns.py)
        for engine in engine_order(config.repeats, plan.prepared.index(item)):
            if engine == "baseline" and base is not None:
                continue  # a sweep's shared baseline, measured once for every cell
            decode = engines.baseline if engine == "baseline" else engines.speculative
            runs[engine].append(
                turns.ask_turns(decode, item, seed, plan.max_new_tokens, plan.spec, target, log.runs[engine])
            )
        if base is None:
            merged, repeat_s = merge_repeats(runs["baseline"])
            base = engine_dict(engine_record(merged, target.tokenizer, repeat_s))
            if baseline_store is not None:
                baseline_store[item.example.id] = base
        merged, repeat_s = merge_repeats(runs["speculative"])
        spec_rec = engine_record(merged, target.tokenizer, repeat_s)
        divergence = first_divergence(base["token_ids"], spec_rec.token_ids)
        numerics = None
        if config.sampling.greedy:  # after this example's timed decodes: the floor and the divergence's class
            t_prompt, t_base, t_spec, t_div = log.numerics_inputs(item.prompt_ids, base, asdict(spec_rec), divergence)
            numerics = explain_example(
                target.model,
                t_prompt,
                t_base,
                t_spec,
                config.draft_gamma,
                t_div,
                target.decoder_start_id,
                plan.session.target_backend,
                engines.pad_to,
            )
        record = ExampleRecord(
            SCHEMA_VERSION,
            item.example.id,
            len(item.prompt_ids),
            item.example.reference,
            EngineRecord(**base),
            spec_rec,
            divergence is None,
            divergence,
            numerics,
            nll=None
            if config.sampling.greedy
            else example_nll(  # after the timed decodes
                target.model,
                item.prompt_ids,
                base,
                asdict(spec_rec),
                target.decoder_start_id,
                plan.session.target_backend,
            ),
            turns=log.records(target.tokenizer),
        )
        append_record(files.examples, record)
        append_jsonl(probe_file, {"after": item.example.id, "ms": probe_target(plan.session, item.prompt_ids)})
        records.append(asdict(record))
        write_summary(files, config, plan.spec, records, plan.manifest, memory)
        on_example(records[-1])
    summary = write_summary(files, config, plan.spec, records, plan.manifest, memory)
    return RunOutcome(files, summary, len(todo))


def probe_shared_baseline(
    engines: Engines, item: Prepared, seed: int, max_new_tokens: int, store: dict, files: RunFiles
) -> None:
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
    row = {
        "example_id": item.example.id,
        "stored_s": stored_s,
        "fresh_s": fresh_s,
        "ratio": fresh_s / stored_s if stored_s > 0 and same else None,
        "same_tokens": same,
    }
    append_jsonl(files.root / "baseline_probes.jsonl", row)


def baseline_drift(files: RunFiles) -> float | None:
    """The probe ratio (fresh ÷ stored baseline seconds) farthest from 1 in log terms; None without probes."""
    ratios = [
        r["ratio"] for r in read_records(files.root / "baseline_probes.jsonl", baseline_probe_problem) if r.get("ratio")
    ]
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


def check_run_inputs(
    config: RunConfig, results_dir: str | Path, run_id: str | None, check_sources: bool = True, tokenizer=None
) -> tuple[TaskSpec, list[Example], int, RunFiles, BucketChoice | None]:
    """Every check that needs no model: the config, the ids and results folder, the task, γ against the
    token budget, the prompt-length bucket (the target's tokenizer only). Only then is --results-dir created (to
    fail fast if it cannot be written); the run folder itself waits for write_manifest, so a run refused on bad
    input leaves nothing behind."""
    config.validate()
    results = check_results_dir(results_dir)
    if run_id is not None:
        check_id(run_id, "--run-id")
    spec = load_task(config.task)
    max_new = config.max_new_tokens or spec.max_new_tokens
    check_gamma_budget(config.gamma, max_new)
    if check_sources:  # a caller's session already holds the target and builds its drafts
        check_model_sources(config)
    examples, bucket = select_run_examples(spec, config, tokenizer)
    check_batch_size(config.batch_size, len(examples))
    return spec, examples, max_new, RunFiles(prepare_run_dir(results) / (run_id or run_id_for(config))), bucket


def check_model_sources(config: RunConfig) -> None:
    """Target and draft model exist (preset, folder, .gguf, reachable or cached hub id) before the target loads,
    so a misspelt --draft fails in a second rather than after the target's load."""
    resolve_source(config.target)
    if config.draft == AUTO:
        return
    draft = parse_draft(config.draft)
    if draft.model == "distilled":
        shipped_draft_dir(config.target)
    elif draft.model is not None:
        resolve_source(draft.model)


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
        atomic_write_json(files.manifest, manifest)
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
    task = old.get("task") if isinstance(old.get("task"), dict) else {}
    if task.get("examples_hash") != manifest["task"]["examples_hash"]:
        raise SpecbenchError(f"{files.root} holds a run on different examples; use another --run-id or delete it")


def read_probes(root: Path) -> list[float]:
    """The noise probes of a run folder (ms, in time order)."""
    return [float(r["ms"]) for r in read_records(root / "noise_probes.jsonl", noise_probe_problem)]


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
    from specbench.measure.hardware import describe

    drift = baseline_drift(files)
    metrics = summarize(records, config.draft_gamma, config.sampling.greedy, read_probes(files.root), drift)
    if config.batch_size > 1:
        metrics.update(
            batch_prediction(records, config.draft_gamma, manifest.get("batch_calibration"), config.batch_policy)
        )
    summary = summary_dict(
        {  # every key declared in records.Summary
            "schema_version": SCHEMA_VERSION,
            "run_id": files.root.name,
            "target": config.target,
            "draft": config.draft,
            "engine": config.engine,
            "task": spec.name,
            "gamma": config.gamma,
            "dtype": config.dtype,
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
            "complete": len(records) == manifest["task"]["n_examples"],
            **metrics,
            "baseline_drift": drift,
            "auto": auto_summary(manifest),
            "hardware": describe(manifest.get("hardware")),
            "quality": quality(spec, records, config.sampling),
            **summary_memory(files, memory),
        }
    )
    summary = json_safe(summary)
    atomic_write_json(files.summary, summary)
    return summary


def prompt_length_fields(config: RunConfig, manifest: dict) -> dict:
    """The summary's prompt-length axis: the bucket, and for a bucket its thresholds and token range (manifest)."""
    bucket = manifest.get("prompt_length") if isinstance(manifest.get("prompt_length"), dict) else {}
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

    out = {"metric": spec.metric}
    for engine in ("baseline", "speculative"):
        hyps = [r[engine]["text"] for r in records]
        scores = score(spec.metric, hyps, refs)
        if not sampling.greedy and len(records) > 1:
            for key in [k for k, v in scores.items() if isinstance(v, float)]:
                scores[f"{key}_ci95"] = list(bootstrap_ci(spec.metric, hyps, refs, key))
        out[engine] = scores
    return out

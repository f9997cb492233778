"""Planning a run: everything decided and checked before the first timed decode.

`prepare_run` validates the config, chooses the examples (the task's seeded order or a prompt-length bucket),
loads the models, resolves `auto` values (calibrate each candidate dtype, pilot each candidate draft on untimed
examples, choose: auto/choose.py), calibrates the target's pass cost, and writes the run folder's manifest. Every
bad input fails here, fast, before anything is timed; the result is a `RunPlan` that the measure loop (runner.py)
only executes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specbench.config import (
    AUTO,
    RunConfig,
    batch_suffix,
    check_batch_size,
    check_gamma_budget,
    check_gamma_context,
    check_id,
    check_results_dir,
    load_suffix,
    prompt_length_suffix,
)
from specbench.decoding.base import Proposer, lookup_history
from specbench.decoding.sampling import make_generator
from specbench.decoding.speculative import decode_speculative
from specbench.engines import check_config, engine_spec, runtime
from specbench.engines.session import Session
from specbench.errors import SpecbenchError
from specbench.measure.auto.calibration import session_curve, session_draft_ms
from specbench.measure.auto.choose import (
    AutoChoice,
    PilotResult,
    choose,
    needs_choice,
    pilot_from_results,
    resolved_config,
)
from specbench.measure.results.provenance import environment_info
from specbench.measure.results.record_writing import claimed_run_dir, prepare_run_dir
from specbench.measure.results.run_folder import check_resumable, first_manifest, read_manifest, write_manifest
from specbench.measure.results.schema import RunFiles
from specbench.measure.run.arms import (
    Prepared,
    check_prompt_chars,
    example_seed,
    longest_token_chars,
    prepare_examples,
    prompt_token_ids,
)
from specbench.measure.run.buckets import PROMPT_POOL, BucketChoice, choose_bucket, short_bucket_note
from specbench.measure.run.calibrating import batch_calibration, calibration_k_max, prime_for_calibration, run_capacity
from specbench.models import resolve_source
from specbench.models.shipped import shipped_draft_dir
from specbench.run_specs import DraftSpec, parse_draft
from specbench.tasks.examples import Example, select_examples
from specbench.tasks.specs import TaskSpec, load_task

PILOT_EXAMPLES = 6  # at most this many untimed examples per draft for the auto choices' α estimate …
PILOT_MIN_STEPS = 48  # … stopping once this many verified steps were seen (2 short examples gave α 0.80–0.94)


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
    lock: contextlib.ExitStack | None = None  # the run folder's lock, held since prepare_run; measure releases it


def select_run_examples(spec: TaskSpec, config: RunConfig, tokenizer=None) -> tuple[list[Example], BucketChoice | None]:
    """The run's examples: the task's first --limit in its seeded order, or (--prompt-length short/medium/long) the
    first --limit of that bucket of the candidate pool (measure/run/buckets.py), with the bucket's record.

    `tokenizer` (the target's) is needed only for a bucket; None loads it, without the model."""
    if config.prompt_length == "all":
        return select_examples(spec, config.limit, config.seed), None
    from specbench.models.loading import load_tokenizer, tokenizer_context

    if tokenizer is None:
        tokenizer = load_tokenizer(config.load.target, config.load.trust_remote_code)
    pool = select_examples(spec, PROMPT_POOL, config.seed)
    max_positions = tokenizer_context(tokenizer, config.load.trust_remote_code)
    token_chars = longest_token_chars(tokenizer) if max_positions else 0
    for example in pool:  # every candidate is tokenized to set the tertiles: bound each first (issue 41)
        check_prompt_chars(example, max_positions, config.max_new_tokens or spec.max_new_tokens, token_chars)
    choice = choose_bucket(
        [len(prompt_token_ids(spec, e.prompt, tokenizer)) for e in pool], config.prompt_length, config.limit
    )
    note = short_bucket_note(choice, config.limit)
    if note:
        warnings.warn(note, stacklevel=1)  # one line (CLI); issued here for every caller, so a repeat is shown once
    return [pool[i] for i in choice.indices], choice


def run_id_for(config: RunConfig) -> str:
    """A readable, deterministic id: rerunning the same command resumes the same run directory."""
    digest = hashlib.sha256(repr(sorted(config.to_dict().items())).encode()).hexdigest()[:8]
    s = config.sampling
    stem = f"{Path(config.task).stem}-{Path(config.draft.text).name}-g{config.gamma}-t{s.temperature:g}"
    stem += batch_suffix(config) + load_suffix(config) + prompt_length_suffix(config)
    stem += "-bitexact" if config.bit_exact else ""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{stem}-{digest}")


def check_run_inputs(
    config: RunConfig, results_dir: str | Path, run_id: str | None, check_sources: bool = True, tokenizer=None
) -> tuple[TaskSpec, list[Example], int, RunFiles, BucketChoice | None]:
    """Every check that needs no model: the config, the ids and results folder, the task, γ against the
    token budget, the prompt-length bucket (the target's tokenizer only). Only then is --results-dir created (to
    fail fast if it cannot be written); the run folder itself waits for write_manifest, so a run refused on bad
    input leaves nothing behind."""
    check_config(config)
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
    resolve_source(config.load.target)
    if config.draft.auto:
        return
    draft = config.draft
    if draft.model is not None and draft.model.partition(":")[0] in engine_spec(config.engine).own_draft_names:
        return  # the engine's own method (vLLM's suffix, eagle:<head>): its session checks any folder it names
    if draft.model == "distilled":
        shipped_draft_dir(config.load.target)
    elif draft.model is not None and draft.eagle_head is None:  # an EAGLE head's folder: engines/torch checked it
        resolve_source(draft.model)


def pilot_examples(spec: TaskSpec, config: RunConfig, examples: list[Example]) -> list[Example]:
    """The examples the auto choices pilot on: the next ones after the run's in the task's seeded
    order, so no timed example steers the choice; the run's first ones when the task has no more."""
    more = select_examples(spec, config.limit + PILOT_EXAMPLES, config.seed)[len(examples) :]
    return more or examples[:PILOT_EXAMPLES]


def run_pilot(
    session: Session,
    config: RunConfig,
    draft: DraftSpec,
    pilot: list[Prepared],
    corpus: list[list[int]],
    max_new_tokens: int,
) -> PilotResult:
    """Decode pilot examples with `draft` at γ = gamma_max (untimed by the run) until PILOT_MIN_STEPS verified
    steps were seen → α per position, the lookup law."""
    key = (
        draft.text,
        tuple(p.example.id for p in pilot),
        config.sampling,
        max_new_tokens,
        config.gamma_max,
        config.draft_confidence,
    )
    return session.memo(("pilot", *key), lambda: decode_pilot(session, config, draft, pilot, corpus, max_new_tokens))


def decode_pilot(
    session: Session,
    config: RunConfig,
    draft: DraftSpec,
    pilot: list[Prepared],
    corpus: list[list[int]],
    max_new_tokens: int,
) -> PilotResult:
    proposer = session.proposer(draft, corpus)
    if session.drafts_inside:  # the engine drafts in its own loop (vLLM): its speculative arm is the pilot
        from specbench.measure.auto import engine_pilot

        return engine_pilot.decode_pilot(session, config, draft, proposer, pilot, max_new_tokens, PILOT_MIN_STEPS)
    results: list = []
    lookups: list[int] | None = None if lookup_history(proposer) is None else []  # [] for a lookup-then-model draft
    for _, res in pilot_decodes(session, config, proposer, pilot, max_new_tokens, config.gamma_max):
        results.append(res)
        if lookups is not None:
            lookups.extend(lookup_history(proposer) or [])
    return pilot_from_results(
        draft.text, results, lookups, draft.model_free, [p.example.id for p in pilot[: len(results)]]
    )


def pilot_decodes(
    session: Session, config: RunConfig, proposer, pilot: list[Prepared], max_new: int, gamma, quota=None
):
    """Pilot decodes at γ = `gamma` until `quota` verified steps (default PILOT_MIN_STEPS; inf: all): (item, result)."""
    t, steps = session.target, 0
    for item in pilot:
        if steps >= (quota or PILOT_MIN_STEPS):
            break
        res = decode_speculative(
            session.target_lm(),
            proposer,
            item.prompt_ids,
            gamma=gamma,
            max_new_tokens=max_new,
            sampling=config.sampling,
            generator=make_generator(t.device, example_seed(config.seed, item.example.id)),
            eos_ids=t.eos_ids,
            decoder_start_id=t.decoder_start_id,
            min_confidence=config.draft_confidence,
        )
        steps += len(res.accept_lengths)
        yield item, res


def available_drafts(target_spec: str) -> list[DraftSpec]:
    """The drafts `--draft auto` compares for a target: prompt lookup always; the distilled draft and
    lookup+distilled where drafts/ ships one; a paired preset draft (and lookup+it) where installed. Each name is
    parsed here, where it is made: the pilot, the choice and the session take the specs."""
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
    return [parse_draft(d) for d in drafts]


def choose_on_this_machine(
    config: RunConfig,
    spec: TaskSpec,
    examples: list[Example],
    pilot: list[Example],
    max_new: int,
    session: Session | None,
    on_status: Callable[[str], None],
) -> tuple[AutoChoice, Session]:
    """Load the target in each candidate dtype, calibrate, pilot each candidate draft, choose (auto/choose.py)."""
    from specbench.measure.machine.hardware import bf16_support
    from specbench.models import resolve_device

    bf16_note = None
    if config.load.dtype == AUTO:
        ok, bf16_note = bf16_support(resolve_device(config.load.device).type)
        dtypes = ["float32", "bfloat16"] if ok else ["float32"]
    else:
        dtypes = [config.load.dtype]
    sessions: dict[str, Session] = {}

    def session_for(dtype: str) -> Session:
        if dtype not in sessions:
            on_status(f"loading the target in {dtype}")
            held = session if session is not None and session.load.dtype == dtype else None
            sessions[dtype] = held or load_session(config, dtype)
        return sessions[dtype]

    first = session_for(dtypes[-1])
    prepared = prepare_examples(spec, examples, first.target, max_new)
    corpus = [p.prompt_ids for p in prepared]
    pilot_prepared = prepare_examples(spec, pilot, first.target, max_new)
    drafts = available_drafts(config.load.target) if config.draft.auto else [config.draft]
    k_max = calibration_k_max(config)
    capacity = run_capacity(config, prepared + pilot_prepared, max_new)

    def calibrate_dtype(dtype: str, drafts: list[DraftSpec]):
        s = session_for(dtype)
        for d in drafts:
            prime_for_calibration(s, s.proposer(d, corpus), capacity, k_max)
        on_status(f"calibrating {dtype}: target passes over 1..{k_max} tokens, draft tokens")
        curve = session_curve(s, corpus, k_max, max_new, trees=tree_gamma.applies(config))  # tree steps timed too
        return curve, {d.text: ms for d in drafts if (ms := session_draft_ms(s, d, corpus, max_new)) is not None}

    def pilot_draft(draft: DraftSpec) -> PilotResult:
        on_status(f"pilot: {draft} on {len(pilot_prepared)} untimed examples")
        return run_pilot(first, config, draft, pilot_prepared, corpus, max_new)

    from specbench.measure.auto import auto_pilot, tree_gamma  # auto_pilot: T = 0's loop-step calibration and replay

    bf16 = bf16_note if config.load.dtype == AUTO else None
    if tree_gamma.applies(config):  # a tree's depth and node budget, priced together on one pilot

        def decodes_for(s: Session):  # the untimed decodes of the tree's pilot and of its cost-model check
            return functools.partial(pilot_decodes, s, config)

        tree_pilot = tree_gamma.tree_pilot(first, pilot_prepared, corpus, max_new, decodes_for(first), on_status)
        check = tree_gamma.tree_check(session_for, prepared, corpus, max_new, decodes_for, on_status)
        pick_tree = functools.partial(tree_gamma.choose_tree, config, dtypes=dtypes, calibrate_dtype=calibrate_dtype)
        choice = pick_tree(pilot=tree_pilot, n_timed=len(examples), bf16_note=bf16, check=check)
        return choice, sessions[choice.dtype]
    replay = auto_pilot.can_replay(first, config, drafts, corpus)
    pool = auto_pilot.replay_pool(spec, config, examples) if replay else []
    if pool:
        choice = auto_pilot.choose_by_replay(
            config,
            dtypes=dtypes,
            drafts=drafts,
            session_for=session_for,
            pool=prepare_examples(spec, pool, first.target, max_new),
            timed=prepared,
            corpus=corpus,
            max_new=max_new,
            calibrate_dtype=calibrate_dtype,
            bf16_note=bf16,
            on_status=on_status,
            on_progress=getattr(on_status, "progress", lambda phase, done, total: None),  # the CLI's phase bars
        )
        return choice, sessions[choice.dtype]
    choice = choose(
        config,
        dtypes=dtypes,
        drafts=drafts,
        calibrate_dtype=calibrate_dtype,
        pilot=pilot_draft,
        bf16_note=bf16,
    )
    if sessions[choice.dtype].drafts_inside:  # its pilot ran on the engine's own loop: say so
        from specbench.measure.auto import engine_pilot

        engine_pilot.describe(choice, config, [e.id for e in examples])
    return choice, sessions[choice.dtype]


def load_session(config: RunConfig, dtype: str) -> Session:
    """The run's models in `dtype`, loaded by the run's engine (engines/registry.py)."""
    return runtime(config.engine).open_session(dataclasses.replace(config.load, dtype=dtype))


def prepare_run(
    config: RunConfig,
    results_dir: str | Path,
    *,
    run_id: str | None = None,
    session: Session | None = None,
    on_status: Callable[[str], None] = lambda msg: None,
) -> RunPlan:
    """Validate the config, load task and models, calibrate, resolve auto choices, check the run folder:
    every bad input fails here, fast, and nothing here is timed into the result. The run folder's lock is
    taken before models load and held in the plan until measure() ends (a refused run releases it here)."""
    with contextlib.ExitStack() as lock:
        plan = _prepare_run(config, results_dir, run_id, session, on_status, lock)
        plan.lock = lock.pop_all()
        return plan


def _prepare_run(config, results_dir, run_id, session, on_status, lock: contextlib.ExitStack) -> RunPlan:
    spec, examples, max_new, files, bucket = check_run_inputs(
        config,
        results_dir,
        run_id,
        check_sources=session is None,
        tokenizer=session.target.tokenizer if session is not None and config.prompt_length != "all" else None,
    )
    lock.enter_context(claimed_run_dir(files.root))  # a second run with this id fails now, before loading anything
    manifest = first_manifest(files, config, spec, examples, max_new, bucket)
    old = read_manifest(files)
    check_resumable(files, manifest, old)
    choice = None
    if needs_choice(config):
        if old.get("auto"):  # a resumed run keeps the choices its first examples were measured with
            choice = AutoChoice.from_dict(old["auto"])
            if session is None or session.load.dtype != choice.dtype:
                session = load_session(config, choice.dtype)
        else:
            choice, session = choose_on_this_machine(
                config, spec, examples, pilot_examples(spec, config, examples), max_new, session, on_status
            )
        run_config = resolved_config(config, choice)
    else:
        run_config = config
        if session is None:
            on_status("loading task and models")
            session = load_session(config, config.load.dtype)
    if session.load.backend != config.load.backend:
        raise SpecbenchError(
            f"this session runs --backend {session.load.backend}, the run asks for {config.load.backend}; "
            f"load a session per backend"
        )
    if session.load.dtype != run_config.load.dtype:
        raise SpecbenchError(
            f"this session holds the target in {session.load.dtype}, the run asks for {run_config.load.dtype}; "
            f"load a session per dtype"
        )
    target = session.target
    check_gamma_context(calibration_k_max(run_config), target.max_positions)
    prepared = prepare_examples(spec, examples, target, max_new)
    corpus = [p.prompt_ids for p in prepared]
    # load (and check) the draft before any timing; frequency drafts fit on the run's prompts
    proposer = session.proposer(run_config.draft, corpus=corpus)
    runtime(run_config.engine).check_proposer(proposer)  # a draft the engine cannot run fails before any timing
    if old.get("calibration"):
        calibration = old["calibration"]
    else:
        k_max = calibration_k_max(run_config)
        prime_for_calibration(session, proposer, run_capacity(run_config, prepared, max_new), k_max)
        on_status(f"calibrating: target passes over 1..{k_max} tokens")
        # the session's curve is shared by every cell of a sweep: this run's draft goes on a copy
        curve = dataclasses.replace(
            session_curve(session, corpus, k_max, max_new),
            draft=run_config.draft.text,
            draft_ms=session_draft_ms(session, run_config.draft, corpus, max_new),
        )
        calibration = curve.to_dict()
    manifest["models"] = {
        "target": {
            "spec": config.load.target,
            "params": target.n_params,
            "dtype": str(target.dtype),
            "vocab_size": target.vocab_size,
            "device": str(target.device),
        },
        "draft": {"spec": run_config.draft.text},
    }
    session.load_arms(proposer, run_config.gamma.fixed)  # vLLM: its speculative engine, so engine_info records it
    engine_info = session.engine_info()  # llama-cpp: name, version, threads, the GGUF as loaded
    if engine_info:
        manifest["engine"] = engine_info
    manifest["calibration"] = calibration
    if choice is not None:
        manifest["auto"] = choice.to_dict()
    manifest.update(batch_calibration(session, run_config, corpus, max_new, old, on_status))
    manifest.update(environment_info())
    manifest["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest = write_manifest(files, manifest, old)
    return RunPlan(run_config, spec, files, manifest, session, prepared, max_new, proposer, choice)

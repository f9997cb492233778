"""`specbench verify`: evidence on real models that speculative decoding emits the target's law.

specbench.evidence.equality proves the step on small tabulated laws; the checks here run the whole
runner on a real target and draft, each kind in its own module:

- the step law on the pair (evidence/pair_step.py): many verified steps from one context against the
  target's exact law, with the verify-side negative controls through the same path;
- sequence level (evidence/sequence_law.py): K short continuations per engine, homogeneity against the
  baseline and a G-test against the exact sequence law where it is enumerable;
- greedy identity (evidence/greedy_identity.py): token for token against the baseline and HF generate,
  each divergence with its margin and the numerics classifier's verdict.
- under --bit-exact, greedy identity instead with the speculative engines' passes as the baseline's one-token steps
  (evidence/bit_exact_identity.py): any divergence, first or past it, fails.

This module orchestrates: `run_checks` runs all of it plus the model-free battery in order; `write_checks`
stores checks.json (atomic) and checks.jsonl; `verify_pair` is the whole `specbench verify` (validate the
request, check the output folder is writable, load the pair and the prompts, run the checks, write them).
`--engine llama-cpp` loads the target's GGUF into llama.cpp (engines/llama_cpp/session.py) and runs the same checks on
its kernels: the step law's target passes in the engine's verify shape, its controls, the sequence level and
greedy identity (no HF generate row: there is no transformers model). An engine that runs its own loop (capability
`black_box_verify`: vLLM) gets the checks a black box allows instead (evidence/own_loop.py): its arms' sequence law
against each other and the torch copy's exact law, planted faults in its acceptance rule, greedy identity.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.config import LoadSpec, RunConfig, SamplingConfig, check_results_dir
from specbench.decoding.base import KeepsLearnt, LearnsOutputs, Proposer, remember_output
from specbench.decoding.cached_model import as_cached
from specbench.decoding.speculative import decode_speculative
from specbench.engines import DEFAULT_ENGINE, check_config, engine_spec, runtime, verify_engines
from specbench.errors import SpecbenchError
from specbench.evidence.bit_exact_identity import bit_exact_checks
from specbench.evidence.controls import CONTROLS
from specbench.evidence.equality import step_checks
from specbench.evidence.greedy_identity import greedy_checks
from specbench.evidence.own_loop import DEFAULT_SAMPLES, own_loop_checks
from specbench.evidence.pair_step import control_check, pair_step_law
from specbench.evidence.sequence_law import ProposerFactory, sampling_dict, sequence_checks
from specbench.evidence.stat_checks import ALT_TV, LEVEL, CheckResult
from specbench.files import atomic_write_text
from specbench.measure.results.record_writing import prepare_run_dir
from specbench.measure.run.arms import prepare_examples
from specbench.measure.stats.metric_units import json_safe
from specbench.run_specs import DraftSpec, GammaSpec, parse_draft
from specbench.tasks.examples import select_examples
from specbench.tasks.specs import load_task

CHECKS_SCHEMA_VERSION = 1
TEACH_PROMPTS = 3  # examples past the checked ones whose greedy decodes teach a learning draft (`teach`)
TEACH_GAMMA = 4  # those decodes' γ and length
TEACH_TOKENS = 32


def run_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompts_token_ids: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int] = (1, 2, 4),
    n_samples: int = 2000,
    sample_length: int | None = None,
    greedy_tokens: int = 16,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    seed: int = 0,
    step_samples: int = 100_000,
    control_samples: int = 20_000,
    pair_step_samples: int = 10_000,
    step_length: int = 2,
    hf_generate: bool = True,
    max_cells: int = 4096,
    progress: Callable[[str], None] | None = None,
    bit_exact: bool = False,
) -> list[CheckResult]:
    """Everything `specbench verify` runs, in this order. Every statistical test states its power against
    total variation `alt_tv` on the law it tests; its verdict is pass only at power ≥ 0.8.

    1. the model-free step battery (specbench.evidence.equality) under `sampling` (T = 1 when greedy),
       exact laws plus `step_samples` draws through verify_sampling (0 skips the draws);
    2. negative controls (equality.CONTROLS) through the same battery at `control_samples` draws each
       (0 skips them): each row passes only when the control's joint test fails;
    3. at T > 0, the step law on the real pair (pair_step_law) at every γ: `pair_step_samples` runs of the
       engine's step from the first prompt (a tenth for a model draft), the first `step_length` tokens
       against the target's exact law, and, for a model-free draft, the verify-side controls through the
       same path at min(`control_samples`, `pair_step_samples`) runs (0 `step_samples` skips it too);
    4. sequence level on the first prompt (skipped at T = 0): n_samples continuations of
       sample_length tokens (default max(gammas) + 2, capped at 6) per engine; the exact-law
       test needs top-k/top-p small enough that ≤ max_cells sequences are possible;
    5. greedy identity over all prompts, greedy_tokens each; `bit_exact` (--bit-exact): the speculative engines'
       passes as one-token steps and any divergence a failure (evidence/bit_exact_identity.py; no HF generate row).
    """
    say = progress or (lambda _msg: None)
    prompts = [list(p) for p in prompts_token_ids]
    if not prompts or not all(prompts):
        raise SpecbenchError("verify needs at least one prompt, and no prompt may be empty")
    step_cfg = sampling if not sampling.greedy else SamplingConfig(temperature=1.0)
    say(f"step battery ({step_samples} draws)")
    checks = step_checks(step_cfg, n=step_samples, seed=seed, level=level, alt_tv=alt_tv)
    if control_samples > 0:
        say(f"negative controls ({len(CONTROLS)} × {control_samples} draws)")
        for name, control in CONTROLS.items():
            found = step_checks(step_cfg, n=control_samples, seed=seed + 1, level=level, alt_tv=alt_tv, control=control)
            checks.append(control_check(f"control/{name}/step", found))
    if not sampling.greedy and step_samples > 0 and pair_step_samples > 0:
        checks += pair_step_law(
            target_model,
            proposer_factory,
            prompts[0],
            sampling,
            gammas=gammas,
            step_samples=pair_step_samples,
            control_samples=min(control_samples, pair_step_samples),
            step_length=step_length,
            eos_ids=eos_ids,
            decoder_start_id=decoder_start_id,
            level=level,
            alt_tv=alt_tv,
            seed=seed,
            max_cells=max_cells,
            say=say,
        )
    if not sampling.greedy:
        length = sample_length or min(max(gammas) + 2, 6)
        say(f"sequence level ({n_samples} continuations × {len(gammas) + 1} engines)")
        checks += sequence_checks(
            target_model,
            proposer_factory,
            prompts[0],
            sampling,
            gammas=gammas,
            n_samples=n_samples,
            length=length,
            eos_ids=eos_ids,
            decoder_start_id=decoder_start_id,
            level=level,
            alt_tv=alt_tv,
            seed=seed,
            max_cells=max_cells,
        )
    say(f"greedy identity ({len(prompts)} prompts{', bit-exact mode' if bit_exact else ''})")
    if bit_exact:
        return checks + bit_exact_checks(
            target_model,
            proposer_factory,
            prompts,
            gammas=gammas,
            max_new_tokens=greedy_tokens,
            eos_ids=eos_ids,
            decoder_start_id=decoder_start_id,
        )
    checks += greedy_checks(
        target_model,
        proposer_factory,
        prompts,
        gammas=gammas,
        max_new_tokens=greedy_tokens,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        hf_generate=hf_generate,
    )
    return checks


def write_checks(checks: Sequence[CheckResult], out_dir: str | Path, *, extra: dict | None = None) -> tuple[Path, Path]:
    """checks.json ({schema_version, passed, counts, checks}) and checks.jsonl (one check a line), both atomic."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [c.to_dict() for c in checks]
    summary = {
        "schema_version": CHECKS_SCHEMA_VERSION,
        "passed": all(c.passed for c in checks),
        "n_checks": len(rows),
        "n_failed": sum(not c.passed for c in checks),
        "failed": [c.name for c in checks if not c.passed],
        # "pass" needs power >= 0.8; a check that did not reject with less is inconclusive, never a pass
        "n_inconclusive": sum(c.verdict == "inconclusive" for c in checks),
        "inconclusive": [c.name for c in checks if c.verdict == "inconclusive"],
        **json_safe(extra or {}),
        "checks": rows,
    }
    json_path, jsonl_path = out / "checks.json", out / "checks.jsonl"
    atomic_write_text(jsonl_path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))
    atomic_write_text(json_path, json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return json_path, jsonl_path


@dataclass(frozen=True)
class VerifyRequest:
    """What `specbench verify` checks: one target and draft pair under one sampling configuration."""

    load: LoadSpec  # the target and how it loads (--target, --device, --dtype, --trust-remote-code, --threads)
    draft: str  # draft spec, as for --draft
    sampling: SamplingConfig  # the law the sequence-level tests check (T = 0: identity only)
    gammas: tuple[int, ...]  # γ of the sequence-level and greedy-identity engines
    task: str  # where the prompts come from: a task name or a JSONL file
    limit: int = 4  # prompts for the greedy-identity check
    # continuations per engine for the sequence-level tests; None: 300, or on an engine verified as a black box
    # (own_loop.py) what reaches power 0.8 against alt_tv where the exact law is enumerable
    n_samples: int | None = None
    length: int = 3  # tokens per sampled continuation
    step_samples: int = 100_000  # draws for the model-free step law's tests (0 skips every step law)
    control_samples: int = 20_000  # draws per negative control (0 skips the controls)
    # steps of the step law on the real pair per γ, and per verify-side control there (each costs target forwards:
    # 100,000 took 4 min 18 s per γ on a 2-core EPYC; power 0.8 against TV 0.05 needs ~2,600 at top-k 3)
    pair_step_samples: int = 10_000
    alt_tv: float = ALT_TV  # the alternative every power is stated against: total variation on the tested law
    seed: int = 0
    engine: str = "specbench"  # one of verify_engines(): specbench (torch), llama-cpp (its GGUF), vllm (a black box)
    # --bit-exact: greedy identity with the speculative engines' passes as one-token steps, any divergence a failure
    # (evidence/bit_exact_identity.py); refused by engines whose capabilities lack bit_exact
    bit_exact: bool = False

    @functools.cached_property
    def draft_spec(self) -> DraftSpec:
        """--draft parsed once for the command: the config check and the loaded pair both use it."""
        return parse_draft(self.draft)

    def validate(self) -> VerifyRequest:
        if not self.gammas:
            raise SpecbenchError("--gamma needs at least one value (e.g. 1,3)")
        if self.engine not in verify_engines():  # an engine whose own passes the exact laws can test
            raise SpecbenchError(f"verify runs on {' or '.join(verify_engines())} (got --engine {self.engine})")
        config = RunConfig(
            load=self.load,
            draft=self.draft_spec,
            task=self.task,
            sampling=self.sampling,
            limit=self.limit,
            gamma=GammaSpec(fixed=min(self.gammas)),
            engine=self.engine,
            bit_exact=self.bit_exact,
        )
        check_config(config)  # --bit-exact on an engine without the capability: one line, exit 2
        if (
            self.length < 2
        ):  # the sequence tests compare ℓ ≥ 2 tokens (the first comes from the prefill in both engines)
            raise SpecbenchError(
                f"--length must be >= 2 (got {self.length}): the sequence tests compare the first 2+ tokens"
            )
        if (self.n_samples is not None and self.n_samples < 1) or min(
            self.step_samples, self.control_samples, self.pair_step_samples
        ) < 0:
            raise SpecbenchError(
                "--n-samples must be >= 1, --step-samples, --control-samples and --pair-step-samples >= 0"
            )
        if not 0.0 < self.alt_tv <= 1.0:
            raise SpecbenchError(f"--alt-tv must lie in (0, 1] (got {self.alt_tv:g})")
        return self

    def folder_name(self) -> str:
        s = self.sampling
        pair = f"{Path(self.load.target).name}-{Path(self.draft).name}"
        name = f"verify-{pair}-t{s.temperature:g}-k{s.top_k}-p{s.top_p:g}"
        name += "-bitexact" if self.bit_exact else ""  # its checks.json beside the normal mode's, never over it
        return name if self.engine == DEFAULT_ENGINE else f"{name}-{self.engine}"  # the default's folder keeps its name


@dataclass
class VerifyOutcome:
    checks: list[CheckResult]  # in the order run_checks ran them
    json_path: Path  # checks.json (checks.jsonl beside it)
    taught: int = 0  # prompts a learning draft decoded (and remembered) before the checks (`taught`); 0: none

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def verify_pair(
    request: VerifyRequest, results_dir: str | Path, *, on_status: Callable[[str], None] = lambda msg: None
) -> VerifyOutcome:
    """Validate, check that results can be written (before any model loads or check runs), load the
    pair and the prompts, run every check, and write checks.json + checks.jsonl under results_dir."""
    request.validate()
    out_dir = Path(check_results_dir(str(results_dir))) / request.folder_name()
    check_writable(out_dir)
    on_status("loading task and models")
    session, proposer_factory, prompts, task_name, taught_prompts = load_pair(request)
    target = session.target
    spec = engine_spec(request.engine)

    def progress(msg: str) -> None:
        on_status(f"checking: {msg}")

    if not spec.capabilities.exactness_replay:  # its own loop: what a black box allows (validate admitted it)
        checks = own_loop_checks(
            runtime(request.engine),
            spec,
            session,
            proposer_factory(),
            prompts,
            request.sampling,
            gammas=request.gammas,
            n_samples=request.n_samples,
            length=request.length,
            controls=request.control_samples > 0,
            alt_tv=request.alt_tv,
            seed=request.seed,
            progress=progress,
        )
    else:
        checks = run_checks(
            target.model,
            proposer_factory,
            prompts,
            request.sampling,
            gammas=request.gammas,
            n_samples=request.n_samples or DEFAULT_SAMPLES,
            sample_length=request.length,
            eos_ids=target.eos_ids,
            decoder_start_id=target.decoder_start_id,
            seed=request.seed,
            step_samples=request.step_samples,
            control_samples=request.control_samples,
            pair_step_samples=request.pair_step_samples,
            alt_tv=request.alt_tv,
            hf_generate=callable(getattr(target.model, "generate", None)),  # HF generate needs a transformers model
            progress=progress,
            bit_exact=request.bit_exact,
        )
    json_path, _ = write_checks(
        checks,
        out_dir,
        extra={
            "target": request.load.target,
            "draft": request.draft,
            **sampling_dict(request.sampling),
            "gammas": list(request.gammas),
            "task": task_name,
            "seed": request.seed,
            "alternative_tv": request.alt_tv,
            "engine": request.engine,
            **({"bit_exact": True} if request.bit_exact else {}),
            **({"taught_prompts": taught_prompts} if taught_prompts else {}),
            **({"engine_info": info} if (info := session.engine_info()) else {}),
        },
    )
    return VerifyOutcome(checks, json_path, taught_prompts)


def check_writable(out_dir: Path) -> None:
    """The folder checks.json will go to (or, while it does not exist yet, its parent) takes a file.

    The parent only is created here, so a verify that fails on a bad model leaves no empty folder."""
    prepare_run_dir(out_dir if out_dir.exists() else out_dir.parent)


def load_pair(request: VerifyRequest):
    """(the engine's session, fresh-proposer factory, prompt token ids, task name, how many prompts taught the draft);
    the draft is loaded once here so that a bad draft fails before any check runs. A draft that learns from a run's
    earlier outputs is taught here too, on examples the checks do not use (`teach`), and every proposer the factory
    makes is given the same lessons (`retaught`), so the checks test what it proposes once it has learnt something."""
    session = runtime(request.engine).open_session(request.load)
    spec = load_task(request.task)
    checked = select_examples(spec, request.limit, request.seed)
    corpus = [p.prompt_ids for p in prepare_examples(spec, checked, session.target, 16)]
    draft = request.draft_spec
    first = session.proposer(draft, corpus)
    if not isinstance(first, LearnsOutputs) or not engine_spec(request.engine).capabilities.exactness_replay:
        return session, lambda: session.proposer(draft, corpus), corpus, spec.name, 0
    ids = {e.id for e in checked}
    others = [e for e in select_examples(spec, request.limit + TEACH_PROMPTS, request.seed) if e.id not in ids]
    lessons = [p.prompt_ids for p in prepare_examples(spec, others[:TEACH_PROMPTS], session.target, 16)]
    target = session.target
    outputs = teach(first, as_cached(target.model), lessons, target.eos_ids, target.decoder_start_id)
    state = first.learnt() if isinstance(first, KeepsLearnt) else None
    return session, lambda: retaught(session.proposer(draft, corpus), outputs, state), corpus, spec.name, len(lessons)


def teach(
    proposer: Proposer,
    target,
    prompts: Sequence[Sequence[int]],
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
) -> list[list[int]]:
    """Teach a draft that learns from earlier outputs (base.LearnsOutputs: suffix decoding's cache, token recycling's
    table) as a run would: a greedy decode of each of `prompts` through the batch-1 loop (which hands it every verify
    pass), each output then remembered as the runner remembers a finished example's → the outputs. Untaught, the law
    checks would run with an empty cache or table and test only the rest of the draft."""
    outputs = []
    for prompt in prompts:
        out = decode_speculative(
            target,
            proposer,
            list(prompt),
            gamma=TEACH_GAMMA,
            max_new_tokens=TEACH_TOKENS,
            sampling=SamplingConfig(),
            generator=None,
            eos_ids=eos_ids,
            decoder_start_id=decoder_start_id,
        )
        remember_output(proposer, out.token_ids)
        outputs.append(list(out.token_ids))
    return outputs


def retaught(proposer: Proposer, outputs: list[list[int]], state: dict | None) -> Proposer:
    """A fresh draft given what `teach` taught another: the kept state where the outputs alone cannot rebuild it
    (base.KeepsLearnt: recycling's table, read from passes' logits), else the outputs remembered again (suffix's
    cache). Every proposer the checks use then holds the same state, and the checks (which hand no passes and remember
    nothing) keep it fixed: its proposals are a function of the context, as the exact laws need."""
    if state is not None and isinstance(proposer, KeepsLearnt):
        proposer.restore_learnt(state)
        return proposer
    for token_ids in outputs:
        remember_output(proposer, token_ids)
    return proposer

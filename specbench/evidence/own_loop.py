"""`specbench verify` on an engine that runs its own speculative loop (vLLM): the evidence a black box allows.

The torch and llama.cpp engines run specbench's loop, so verify replays their passes (the step law, exact laws, the
numerics classifier: verification.run_checks). An engine with the `black_box_verify` capability returns tokens only;
what can be tested from outside goes through the Engine contract's two arms:

- the sequence law: K continuations of L tokens from the first prompt (the session's `sampling_prompt` of it) on the
  plain arm and on the speculative arm at each γ, a distinct seed per request. Chi-square homogeneity of each
  speculative arm against the plain one (the engine's own kernels and sampler on both sides) and, where top-k/top-p
  make the support enumerable, a G-test of every arm against the exact law of the session's torch copy of the target
  (sequence_law.model_sequence_law). That G-test also compares the engine's kernels with torch's: in float32 they
  agree far below what K samples resolve, in bfloat16 or float16 they need not (a rejection could be numerics, not
  speculation), so it runs on float32 loads only;
- negative controls: the same draws on the speculative arm at the largest γ with each fault the engine can plant in
  its own acceptance rule (EngineSpec.plants, DecodeJob.plant); a row passes only when its test rejects;
- greedy identity: the speculative arm at each γ token for token against the plain arm at T = 0. A divergence is
  reported with the torch copy's top-2 margin there and passes only at a near-tie (margin within the tolerance
  measured on the torch copy): the engine's own logits are not read, so no replay classifies it.

What cannot be tested: the engine's step law (no per-step probabilities leave it) and its passes' numerics.

K: --n-samples when given; otherwise `auto_samples`, enough for power 0.8 against total variation alt_tv in the
homogeneity test on the enumerated law's cells. Each arm's first request runs alone (an engine with a prefix cache
computes the prompt once), the rest as one load where the engine serves loads (capability `concurrency`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch

from specbench.config import SamplingConfig
from specbench.decoding.base import DecodeResult, Proposer
from specbench.decoding.gamma_policy import FixedGamma
from specbench.engines.contract import DecodeJob, Engine, EngineSpec, LoadSchedule, ServesLoad
from specbench.engines.session import Session
from specbench.evidence.greedy_identity import identity_check, margin_at
from specbench.evidence.pair_step import control_check
from specbench.evidence.sequence_law import homogeneity_on_prefixes, model_dtype, model_sequence_law, sampling_dict
from specbench.evidence.stat_checks import ALT_TV, LEVEL, CheckResult, gof_check, samples_for_power
from specbench.measure.stats.metric_units import first_divergence

DEFAULT_SAMPLES = 300  # K where --n-samples is not given and the exact law is not enumerable
MAX_AUTO_SAMPLES = 20_000  # the most K `auto_samples` asks for (a larger support reports its power instead)
IN_FLIGHT = 128  # requests in flight when an engine serves an arm's samples as one load
BASELINE = "baseline"


def auto_samples(cells: int, level: float = LEVEL, alt_tv: float = ALT_TV) -> int:
    """K per arm at which the homogeneity test of two arms (n_eff = K/2) reaches power 0.8 against total variation
    alt_tv with df = cells − 1 (pooling rare cells only lowers df, which raises the power); the one-sample G-test
    against the exact law then has twice the n it needs. At most MAX_AUTO_SAMPLES."""
    need = samples_for_power(max(1, cells - 1), alt_tv, level)
    return min(MAX_AUTO_SAMPLES, 2 * need) if need else DEFAULT_SAMPLES


@dataclass(frozen=True)
class Arm:
    """One engine configuration whose samples verify draws."""

    name: str  # its part of the check names: "baseline", "γ=3", or a planted fault's name
    gamma: int | None  # None: the plain arm; else the speculative arm at this γ
    plant: str | None = None  # a fault planted in the engine's own acceptance rule (a negative control)


@dataclass
class Draws:
    """An arm's K continuations and the engine's own speculative counts over them."""

    counts: Counter  # continuation (token tuple) → how many of the K
    drafted: int  # draft tokens the engine reports over the K requests (0 on the plain arm)
    accepted: int  # of them accepted


def arm_seeds(seed: int, index: int, k: int) -> list[int]:
    """K distinct request seeds for the index-th arm: no two requests of one verify share a seed (the same seed on two
    arms would correlate their samples, and the homogeneity test assumes independent ones)."""
    start = seed * 1_000_000_000 + index * k + 1
    return list(range(start, start + k))


def draw(
    engine: Engine,
    session: Session,
    job: DecodeJob,
    arm: Arm,
    prompt: list[int],
    seeds: Sequence[int],
    length: int,
    serves_load: bool,
) -> Draws:
    """One request per seed on `arm`, `length` new tokens each: the first alone, the rest as one load where the engine
    serves loads (IN_FLIGHT at a time), else one at a time."""
    job = replace(job, fixed_gamma=arm.gamma if arm.gamma is not None else job.fixed_gamma, plant=arm.plant)
    decode = engine.baseline if arm.gamma is None else engine.speculative
    results: list[DecodeResult] = [decode(session, job, prompt, seeds[0], length)]
    rest = list(seeds[1:])
    if rest and serves_load:
        schedule = LoadSchedule(concurrency=min(IN_FLIGHT, len(rest)), request_rate=None, seed=0)
        side = BASELINE if arm.gamma is None else "speculative"
        served = cast(ServesLoad, engine).serve_load(session, job, side, [prompt] * len(rest), rest, length, schedule)
        results += served.results
    else:
        results += [decode(session, job, prompt, s, length) for s in rest]
    return Draws(
        Counter(tuple(r.token_ids) for r in results),
        sum(r.drafted for r in results),
        sum(r.accepted for r in results),
    )


def law_tests(
    name: str, drawn: Draws, baseline: Draws | None, law, length: int, level: float, alt_tv: float, info: dict
) -> list[CheckResult]:
    """An arm's tests: homogeneity against the plain arm (unless it is the plain arm) and the G-test against the exact
    law (where there is one), each with the arm's draft counts in its detail."""
    out = []
    if baseline is not None:
        out.append(
            homogeneity_on_prefixes(
                f"sequence/{name}/vs-baseline", baseline.counts, drawn.counts, length, level=level, alt_tv=alt_tv
            )
        )
    if law is not None:
        out.append(gof_check(f"sequence/{name}/exact", drawn.counts, law, level=level, alt_tv=alt_tv))
    for r in out:
        r.detail.update(info, drafted=drawn.drafted, accepted=drawn.accepted)
    return out


def own_loop_checks(
    engine: Engine,
    spec: EngineSpec,
    session: Session,
    proposer: Proposer,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int] = (1, 3),
    n_samples: int | None = None,
    length: int = 3,
    greedy_tokens: int = 16,
    controls: bool = True,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    seed: int = 0,
    max_cells: int = 4096,
    progress: Callable[[str], None] | None = None,
) -> list[CheckResult]:
    """Everything verify runs on an engine with its own loop, in this order (see the module docstring): the sequence
    law at T > 0 (skipped at T = 0), the planted-fault controls (when `controls` and the engine has plants), and
    greedy identity over all prompts, greedy_tokens each."""
    say = progress or (lambda _msg: None)
    model = session.target.model  # the torch copy: the exact law and the divergences' margins
    job = DecodeJob(
        sampling=sampling,
        proposer=proposer,
        gamma_policy=lambda: FixedGamma(max(gammas)),  # the engine's loop takes fixed_gamma only
        fixed_gamma=max(gammas),
        min_confidence=0.0,
        pad_to=1,
    )
    checks: list[CheckResult] = []
    if not sampling.greedy:
        checks += sequence_law(
            engine,
            spec,
            session,
            job,
            list(prompts[0]),
            gammas=gammas,
            n_samples=n_samples,
            length=length,
            controls=controls,
            level=level,
            alt_tv=alt_tv,
            seed=seed,
            max_cells=max_cells,
            say=say,
        )
    say(f"greedy identity ({len(prompts)} prompts)")
    checks += greedy_identity(engine, session, job, [list(p) for p in prompts], gammas, greedy_tokens, model)
    return checks


def sequence_law(
    engine: Engine,
    spec: EngineSpec,
    session: Session,
    job: DecodeJob,
    first_prompt: list[int],
    *,
    gammas: Sequence[int],
    n_samples: int | None,
    length: int,
    controls: bool,
    level: float,
    alt_tv: float,
    seed: int,
    max_cells: int,
    say: Callable[[str], None],
) -> list[CheckResult]:
    """The sequence-law rows and the planted-fault controls (see the module docstring)."""
    model = session.target.model
    prompt = session.sampling_prompt(first_prompt)
    float32 = model_dtype(model) == torch.float32
    law = (
        model_sequence_law(model, prompt, length, job.sampling, eos_ids=session.target.eos_ids, max_cells=max_cells)
        if float32
        else None
    )
    k = n_samples or (auto_samples(len(law), level, alt_tv) if law is not None else DEFAULT_SAMPLES)
    arms = [Arm(BASELINE, None)] + [Arm(f"γ={g}", g) for g in gammas]
    if controls:
        arms += [Arm(plant, max(gammas), plant) for plant in spec.plants]
    info = {
        "length": length,
        "sampling": sampling_dict(job.sampling),
        "prompt_tokens": len(prompt),
        "prompt_tokens_given": len(first_prompt),  # the session may cut it (sampling_prompt)
        "samples_per_arm": k,
        "exact_law": (
            "enumerated on the torch copy of the target (float32)"
            if law is not None
            else f"skipped: more than {max_cells} sequences"
            if float32
            else f"skipped: the target loads in {model_dtype(model)}, whose kernels differ from torch's (use float32)"
        ),
    }
    say(f"sequence level ({k} continuations × {len(arms)} arms)")
    serves_load = spec.capabilities.concurrency
    drawn: dict[str, Draws] = {}
    for i, arm in enumerate(arms):
        say(f"sequence level: {arm.name} ({k} continuations of {length} tokens)")
        drawn[arm.name] = draw(engine, session, job, arm, prompt, arm_seeds(seed, i, k), length, serves_load)
    out: list[CheckResult] = []
    for arm in arms:
        tests = law_tests(
            arm.name, drawn[arm.name], None if arm.gamma is None else drawn[BASELINE], law, length, level, alt_tv, info
        )
        if arm.plant is None:
            out += tests
            continue
        test = tests[-1]  # the G-test against the exact law where there is one, else homogeneity against plain
        row = control_check(f"control/{arm.plant}/sequence", [test])
        row.detail.update(plant=arm.plant, gamma=arm.gamma, drafted=test.detail["drafted"])
        row.detail.update(accepted=test.detail["accepted"])
        out.append(row)
    return out


def greedy_identity(
    engine: Engine,
    session: Session,
    job: DecodeJob,
    prompts: list[list[int]],
    gammas: Sequence[int],
    max_new: int,
    model: torch.nn.Module,
) -> list[CheckResult]:
    """The speculative arm at each γ against the plain arm at T = 0 on every prompt, one check per γ."""
    greedy = replace(job, sampling=SamplingConfig(temperature=0.0), plant=None)
    reference = [engine.baseline(session, greedy, p, 0, max_new).token_ids for p in prompts]
    out = []
    for gamma in gammas:
        at = replace(greedy, fixed_gamma=gamma)
        divergences, matched, total = [], 0, 0
        for i, (prompt, ref) in enumerate(zip(prompts, reference, strict=True)):
            got = engine.speculative(session, at, prompt, 0, max_new).token_ids
            pos = first_divergence(ref, got)
            total += len(ref)
            matched += len(ref) if pos is None else pos
            if pos is not None:
                divergences.append(divergence(model, i, prompt, ref, got, pos))
        agreement = matched / max(1, total)
        out.append(
            identity_check(f"γ={gamma}", divergences, len(prompts), agreement, None, model_dtype(model), max_new)
        )
    return out


def divergence(model: torch.nn.Module, index: int, prompt: list[int], ref: list[int], got: list[int], pos: int) -> dict:
    """Where the speculative arm left the plain one, with the torch copy's margin and tolerance there (margin_at): it
    fails identity_check when the margin exceeds the tolerance; no replay through the engine explains it."""
    return {
        "prompt": index,
        "position": pos,
        "baseline_token": ref[pos] if pos < len(ref) else None,
        "engine_token": got[pos] if pos < len(got) else None,
        **margin_at(model, prompt, ref[:pos]),
        "class": "unexplained",
        "class_method": "margin on the torch copy (the engine's passes are not replayed)",
        "gap": None,
        "gap_ulps": None,
    }

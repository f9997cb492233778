"""`specbench verify`: evidence on real models that speculative decoding emits the target's law.

specbench.evidence.equality proves the step on small tabulated laws; this module checks the whole
runner (drafting, KV-cache rollback, the step loop, EOS and length clipping) on a real
target and draft:

(a) sequence level: K short continuations of one prompt from the baseline and from
    `decode_speculative` at several γ; a chi-square homogeneity test of each γ against the
    baseline and, when top-k/top-p make the support enumerable, a G-test of every engine
    against the target's exact sequence law, computed by batched forwards without a KV cache;
(b) greedy identity over prompts: token for token against the baseline and HF
    `generate(do_sample=False)`; each divergence is reported with its position and the
    target's logit margin (top1 − top2) there. A divergence at a margin above the numerical
    tolerance of the dtype is a bug; below it, a near-tie resolved differently by different
    kernel shapes (expected in bf16/fp16, reported as a mismatch rate, never hidden);
(c) `run_checks` runs all of it plus the model-free battery; `write_checks` stores the
    results as checks.json (atomic) and checks.jsonl;
(d) `verify_pair` is the whole `specbench verify`: validate the request, check the output
    folder is writable, load the pair and the prompts, run the checks, write them.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specbench.config import RunConfig, SamplingConfig, check_results_dir
from specbench.decoding.accept import verify_sampling
from specbench.decoding.autoregressive import clip_at_stop, decode_autoregressive, prompt_split
from specbench.decoding.base import Proposer
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.sampling import processed_probs, sample
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS, Control
from specbench.evidence.equality import step_checks
from specbench.evidence.exact_laws import VerifyFn
from specbench.evidence.stat_checks import ALT_TV, LEVEL, CheckResult, gof_check, homogeneity_check, sample_checks
from specbench.files import atomic_write_text
from specbench.measure.engines import Session, prepare_examples
from specbench.measure.metrics import first_divergence, json_safe
from specbench.measure.record_writing import prepare_run_dir
from specbench.run_specs import GammaSpec, parse_draft
from specbench.tasks.specs import load_task, select_examples

Engine = Callable[[list[int], torch.Generator | None], list[int]]  # (prompt ids, generator) → generated ids
ProposerFactory = Callable[[], Proposer]  # a fresh proposer; called once per engine so no state crosses cells

CHECKS_SCHEMA_VERSION = 1


def engines(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    gammas: Sequence[int],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    results: dict | None = None,
) -> dict[str, Engine]:
    """{"baseline": ..., "γ=2": ...}: the runner's engines as prompt → tokens functions.

    `results`, when given, receives each speculative engine's last DecodeResult under its name
    (its pass record lets the numerics classifier replay it exactly)."""
    target = CachedModel(target_model)
    common: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens, sampling=sampling, eos_ids=eos_ids, decoder_start_id=decoder_start_id
    )
    out: dict[str, Engine] = {
        "baseline": lambda prompt, gen: decode_autoregressive(target, prompt, generator=gen, **common).token_ids
    }
    for gamma in gammas:
        proposer = proposer_factory()

        def run(prompt, gen, pr=proposer, g=gamma, name=f"γ={gamma}"):
            res = decode_speculative(target, pr, prompt, gamma=g, generator=gen, **common)
            if results is not None:
                results[name] = res
            return res.token_ids

        out[f"γ={gamma}"] = run
    return out


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def sample_continuations(engine: Engine, prompt_ids: list[int], k: int, generator: torch.Generator) -> Counter:
    """Counts of k continuations (token tuples; shorter when they end at EOS)."""
    return Counter(tuple(engine(list(prompt_ids), generator)) for _ in range(k))


@torch.inference_mode()
def last_logits(
    model: torch.nn.Module, prompt_ids: list[int], continuations: list[list[int]], decoder_start_id: int | None = None
) -> torch.Tensor:
    """[B, V] logits after prompt + each continuation (all of one length), one full forward, no cache."""
    dev = model_device(model)
    if getattr(model.config, "is_encoder_decoder", False):
        enc = torch.tensor([prompt_ids] * len(continuations), device=dev)
        dec = torch.tensor([[decoder_start_id] + c for c in continuations], device=dev)
        return model(input_ids=enc, decoder_input_ids=dec).logits[:, -1]
    ids = torch.tensor([list(prompt_ids) + c for c in continuations], device=dev)
    return model(input_ids=ids).logits[:, -1]


def model_sequence_law(
    model: torch.nn.Module,
    prompt_ids: list[int],
    length: int,
    sampling: SamplingConfig,
    *,
    eos_ids: frozenset[int],
    decoder_start_id: int | None = None,
    max_cells: int = 4096,
    batch: int = 64,
) -> dict[tuple[int, ...], float] | None:
    """Exact law of the first `length` generated tokens (stopping at EOS) under the processed target law;
    None when more than max_cells sequences have positive probability (top-k/top-p keep it small)."""
    done: dict[tuple[int, ...], float] = {}
    live: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        seqs = list(live)
        nxt: dict[tuple[int, ...], float] = {}
        for i in range(0, len(seqs), batch):
            chunk = seqs[i : i + batch]
            logits = last_logits(model, prompt_ids, [list(s) for s in chunk], decoder_start_id)  # [B, V]
            probs = processed_probs(logits, sampling)
            probs = probs.double().cpu()
            for s, row in zip(chunk, probs):
                for x in row.nonzero().flatten().tolist():
                    w = live[s] * float(row[x])
                    (done if x in eos_ids else nxt)[s + (x,)] = w
            if len(done) + len(nxt) > max_cells:
                return None
        live = nxt
    done.update(live)
    return done


def sequence_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int] = (1, 2, 4),
    n_samples: int = 2000,
    length: int = 4,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    level: float = LEVEL,
    alt_tv: float = 0.05,
    seed: int = 0,
    max_cells: int = 4096,
) -> list[CheckResult]:
    """(a) K = n_samples continuations of `length` tokens per engine; homogeneity of each γ against the
    baseline and, when enumerable, a G-test of every engine against the exact target law.

    The first token comes from the prefill in both engines; the first step drafts
    min(γ, length − 2) tokens, so `length` ≥ γ + 2 exercises the full γ.
    """
    if sampling.greedy:
        raise ValueError("sequence_checks needs a sampling configuration (temperature > 0); use greedy_checks at T = 0")
    runs = engines(
        target_model,
        proposer_factory,
        gammas,
        max_new_tokens=length,
        sampling=sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
    )
    dev = model_device(target_model)
    counts = {
        name: sample_continuations(run, prompt_ids, n_samples, torch.Generator(device=dev).manual_seed(seed + i))
        for i, (name, run) in enumerate(runs.items())
    }
    law = model_sequence_law(
        target_model,
        prompt_ids,
        length,
        sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        max_cells=max_cells,
    )
    info = {
        "length": length,
        "sampling": _sampling_dict(sampling),
        "prompt_tokens": len(prompt_ids),
        "exact_law": "enumerated" if law is not None else f"skipped: more than {max_cells} sequences",
    }
    out = []
    for name, c in counts.items():
        if name != "baseline":
            r = homogeneity_on_prefixes(
                f"sequence/{name}/vs-baseline", counts["baseline"], c, length, level=level, alt_tv=alt_tv
            )
            r.detail.update(info)
            out.append(r)
        if law is not None:
            r = gof_check(f"sequence/{name}/exact", c, law, level=level, alt_tv=alt_tv)
            r.detail.update(info)
            out.append(r)
    return out


# ----- (a') the step law on the real pair: many steps from one context, each verified by the real rule


@torch.inference_mode()
def tail_logits(
    model: torch.nn.Module, prompt_ids: list[int], seq: list[int], rows: int, decoder_start_id: int | None = None
) -> torch.Tensor:
    """[rows, V] logits of the last `rows` positions of prompt + seq (one forward, no cache): row i predicts
    seq[len(seq) − rows + 1 + i], so rows = g + 1 over seq = emitted + g drafted gives p_1..p_{g+1}."""
    dev = model_device(model)
    if getattr(model.config, "is_encoder_decoder", False):
        enc = torch.tensor([prompt_ids], device=dev)
        dec = torch.tensor([[decoder_start_id] + seq], device=dev)
        return model(input_ids=enc, decoder_input_ids=dec).logits[0, -rows:]
    return model(input_ids=torch.tensor([list(prompt_ids) + seq], device=dev)).logits[0, -rows:]


def sample_steps(
    target_model: torch.nn.Module,
    proposer: Proposer,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    length: int,
    n: int,
    generator: torch.Generator,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    verify: VerifyFn = verify_sampling,
) -> tuple[Counter, dict]:
    """Counts of the first `length` tokens (ending early at EOS) of n runs of speculative steps from the prompt,
    and how often the steps drafted, accepted and rejected.

    Every step is the engine's: the real proposer drafts from the run's tokens, the target's processed laws
    p_1..p_{g+1} over prompt + emitted + drafted feed `verify` (the engine's `verify_sampling`, or a
    control's variant), which accepts or resamples. Only the target's forwards are shared: they are
    memoised per (emitted, drafted) state, and a model-free proposer (deterministic given the tokens)
    proposes once per state; a model draft proposes afresh for every run, from its own generator draws.
    """
    vocab = None
    memo_p: dict = {}
    memo_prop: dict = {}
    stats: Counter[str] = Counter()
    proposer.begin(list(prompt_ids), length + gamma)
    done: Counter = Counter()
    pending: Counter = Counter({(): n})
    while pending:
        nxt: Counter = Counter()
        for emitted, m in pending.items():
            for _ in range(m):
                tokens = list(prompt_ids) + list(emitted)
                if not proposer.is_model and emitted in memo_prop:
                    prop = memo_prop[emitted]
                else:
                    prop = proposer.propose(tokens, gamma, sampling, generator)
                    memo_prop[emitted] = prop
                drafted = tuple(prop.tokens.tolist())
                key = (emitted, drafted)
                if key not in memo_p:
                    logits = tail_logits(
                        target_model, prompt_ids, list(emitted + drafted), len(drafted) + 1, decoder_start_id
                    )
                    memo_p[key] = processed_probs(logits, sampling).float()  # [g+1, V]
                    vocab = memo_p[key].shape[-1]
                p = memo_p[key]
                stats["steps"] += 1
                if drafted:
                    v = verify(prop.tokens.to(p.device), prop.q_probs.to(p.device), p, generator)
                    new = drafted[: v.n_accepted] + (v.next_token,)
                    stats["drafted_steps"] += 1
                    stats["accepted"] += v.n_accepted
                    stats["rejected"] += v.n_accepted < len(drafted)
                else:
                    new = (int(sample(p[0], generator)),)
                out = emitted + new
                stop = next((i for i, t in enumerate(out) if t in eos_ids), None)
                if stop is not None and stop < length:
                    done[out[: stop + 1]] += 1
                elif len(out) >= length:
                    done[out[:length]] += 1
                else:
                    nxt[out] += 1
        pending = nxt
    stats["vocab"] = vocab or 0
    return done, dict(stats)


def pair_step_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gamma: int,
    n: int,
    length: int = 2,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    level: float = LEVEL,
    alt_tv: float = ALT_TV,
    seed: int = 0,
    max_cells: int = 4096,
    control: Control | None = None,
) -> list[CheckResult]:
    """(a') The step law on the real pair: n runs of speculative steps from the prompt (sample_steps), their
    first `length` tokens tested against the target's exact chain-rule law, per position and jointly (G-test
    and TV bound, power against total variation `alt_tv`). A step costs no decode of its own, so n can be
    large where a whole-sequence sample cannot (sequence_checks). [] when the law is not enumerable
    (top-k/top-p leave more than max_cells sequences). `control` swaps the verifier for a known bug's.
    """
    law = model_sequence_law(
        target_model,
        prompt_ids,
        length,
        sampling,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        max_cells=max_cells,
    )
    if law is None:
        return []
    dev = model_device(target_model)
    counts, stats = sample_steps(
        target_model,
        proposer_factory(),
        prompt_ids,
        sampling,
        gamma=gamma,
        length=length,
        n=n,
        generator=torch.Generator(device=dev).manual_seed(seed),
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        verify=control.verify() if control else verify_sampling,
    )
    label = f"pair-step/γ={gamma}" + (f"/control={control.name}" if control else "")
    out = sample_checks(label, counts, law, level=level, alt_tv=alt_tv)
    for r in out:
        r.detail.update({"gamma": gamma, "length": length, "sampling": _sampling_dict(sampling), **stats})
    return out


MODEL_DRAFT_SHARE = 10  # a model draft runs its network γ times a step: its pair step law gets step_samples ÷ 10 runs


def pair_step_law(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompt_ids: list[int],
    sampling: SamplingConfig,
    *,
    gammas: Sequence[int],
    step_samples: int,
    control_samples: int,
    step_length: int,
    eos_ids: frozenset[int],
    decoder_start_id: int | None,
    level: float,
    alt_tv: float,
    seed: int,
    max_cells: int,
    say: Callable[[str], None],
) -> list[CheckResult]:
    """run_checks' step 3: the pair's step law at every γ, then the verify-side controls through the same path.

    A model-free proposer is deterministic given the tokens, so its steps share memoised forwards and cost a
    verification each: step_samples runs per γ and control_samples per control. A model draft must draw afresh
    for every run (γ forwards of its network): it gets step_samples ÷ MODEL_DRAFT_SHARE runs, and its controls
    run on the model-free battery only (where every control, draft-side or verify-side, is exercised)."""
    is_model = bool(getattr(proposer_factory(), "is_model", False))
    n = max(1, step_samples // MODEL_DRAFT_SHARE) if is_model else step_samples
    common: dict[str, Any] = dict(
        length=step_length,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        level=level,
        alt_tv=alt_tv,
        max_cells=max_cells,
    )
    out = []
    for gamma in gammas:
        say(f"step law on the pair, γ={gamma} ({n} steps)")
        out += pair_step_checks(
            target_model, proposer_factory, prompt_ids, sampling, gamma=gamma, n=n, seed=seed, **common
        )
    if is_model or control_samples <= 0:
        return out
    for name, control in CONTROLS.items():
        if control.verify_side:
            say(f"negative control {name} on the pair ({control_samples} steps)")
            found = pair_step_checks(
                target_model,
                proposer_factory,
                prompt_ids,
                sampling,
                gamma=max(gammas),
                n=control_samples,
                seed=seed + 1,
                control=control,
                **common,
            )
            if found:
                out.append(control_check(f"control/{name}/pair-step", found, required=False))
    return out


def control_check(name: str, checks: list[CheckResult], *, required: bool = True) -> CheckResult:
    """A negative control's row: it passes when the control's joint G-test *fails* (the bug is caught), with that
    test's n and level. A required control (the model-free battery's, where every bug moves the law) that is
    not caught fails; an optional one (the pair's: whether a bug shows depends on what this pair's draft
    proposes and the target accepts) is inconclusive at power 0, with the steps' draft counts in detail."""
    joint = next(c for c in checks if c.kind == "gof" and "/joint" in c.name) if len(checks) > 2 else checks[0]
    caught = not joint.passed
    stats = {k: joint.detail[k] for k in ("steps", "drafted_steps", "accepted", "rejected") if k in joint.detail}
    return CheckResult(
        name=name,
        kind="control",
        statistic=joint.statistic,
        p_value=joint.p_value,
        n=joint.n,
        threshold=joint.threshold,
        power=None if caught or required else 0.0,  # a rejection needs no power; the test's own is in detail
        alternative=f"a known bug must be rejected by {joint.name}",
        passed=caught or not required,
        detail={
            "test": joint.name,
            "test_power": joint.power,
            "caught": caught,
            "failed_checks": [c.name for c in checks if not c.passed],
            **stats,
        },
    )


def truncated(counts: Counter, tokens: int) -> Counter:
    """Counts of the first `tokens` tokens of each sequence."""
    out: Counter = Counter()
    for seq, k in counts.items():
        out[seq[:tokens]] += k
    return out


def homogeneity_on_prefixes(
    name: str, counts_a: Counter, counts_b: Counter, length: int, *, level: float, alt_tv: float
) -> CheckResult:
    """Homogeneity on the joint of the first ℓ tokens, ℓ the longest ≤ length that leaves ≥ 1 degree of
    freedom after pooling: full continuations of a large-vocabulary model are nearly all distinct, their
    beginnings are not. ℓ ≥ 2 (the first token comes from the prefill in both engines)."""
    for tokens in range(length, 1, -1):
        r = homogeneity_check(
            name, truncated(counts_a, tokens), truncated(counts_b, tokens), level=level, alt_tv=alt_tv
        )
        if r.detail["df"] >= 1:
            break
    r.detail["tokens_compared"] = tokens
    return r


@torch.inference_mode()
def hf_greedy(model: torch.nn.Module, prompt_ids: list[int], max_new_tokens: int, eos_ids: frozenset[int]) -> list[int]:
    """HF `generate(do_sample=False)` continuation, clipped at the first EOS as our engines do."""
    from transformers import GenerationConfig

    dev = model_device(model)
    ids = torch.tensor([list(prompt_ids)], device=dev)
    eos = sorted(eos_ids) or None
    cfg = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=eos,
        pad_token_id=eos[0] if eos else 0,
    )
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)  # type: ignore[operator]  # torch: Module attrs are Tensor | Module
    seq2seq = getattr(model.config, "is_encoder_decoder", False)
    new = out[0, 1:] if seq2seq else out[0, ids.shape[1] :]
    return clip_at_stop(new.tolist(), eos_ids, max_new_tokens)[0]


@torch.inference_mode()
def margin_at(
    model: torch.nn.Module, prompt_ids: list[int], prefix: list[int], decoder_start_id: int | None = None
) -> dict:
    """The target's top1 − top2 logit margin after prompt + prefix, and the numerical noise there.

    noise: the largest logit difference between three kernel shapes of the same computation
    (one full pass without cache; prefill then one token at a time, as the baseline; prefill
    then the prefix as one chunk, as a verify pass). tolerance = max(2·eps·|top1|, 4·noise):
    a divergence at a larger margin is not a rounding effect.
    """
    full = last_logits(model, prompt_ids, [prefix], decoder_start_id)[0].float()
    variants = [full]
    if prefix:
        cm = CachedModel(model)
        encoder_ids, tokens = prompt_split(cm, prompt_ids, decoder_start_id)
        dev = cm.device
        cm.start(encoder_ids)
        cm.forward(torch.tensor(tokens, device=dev))
        for t in prefix:
            step = cm.forward(torch.tensor([t], device=dev))
        variants.append(step.float())
        cm.start(encoder_ids)
        cm.forward(torch.tensor(tokens, device=dev))
        variants.append(cm.forward(torch.tensor(prefix, device=dev), all_logits=True)[-1].float())
    noise = max(float((a - b).abs().max()) for a in variants for b in variants)
    top = full.topk(2).values
    eps = torch.finfo(next(model.parameters()).dtype).eps
    return {
        "margin": float(top[0] - top[1]),
        "noise": noise,
        "tolerance": max(2 * eps * float(top[0].abs()), 4 * noise),
    }


def greedy_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompts: Sequence[list[int]],
    *,
    gammas: Sequence[int] = (1, 2, 4),
    max_new_tokens: int = 16,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    hf_generate: bool = True,
    margin_tol: float | None = None,
    extra_engines: dict[str, Engine] | None = None,
) -> list[CheckResult]:
    """(b) Greedy token identity of every engine against the baseline, one check per engine.

    Passes when every divergence happens at a near-tie: the target's top1 − top2 logit margin
    there (in the model's dtype) is ≤ margin_tol, by default the tolerance `margin_at` derives
    from the measured rounding noise at that position, and — for our engines, whose passes are
    recorded and replayed exactly — the numerics classifier (measure/numerics.py) finds the
    target itself flips under the pass shape there. In float32 on CPU expect no divergence.
    `extra_engines` lets tests feed a deliberately broken engine through the same check.
    """
    greedy = SamplingConfig(temperature=0.0)
    last: dict = {}
    runs = engines(
        target_model,
        proposer_factory,
        gammas,
        max_new_tokens=max_new_tokens,
        sampling=greedy,
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        results=last,
    )
    base = runs.pop("baseline")
    if hf_generate:
        runs = {"hf-generate": lambda prompt, gen: hf_greedy(target_model, prompt, max_new_tokens, eos_ids), **runs}
    runs.update(extra_engines or {})
    reference = [base(list(p), None) for p in prompts]
    gamma = max(gammas) if gammas else 1
    margins = floor_margin_range(target_model, prompts, reference, gamma, decoder_start_id)
    out = []
    for name, run in runs.items():
        divergences, matched, total = [], 0, 0
        for i, (prompt, ref) in enumerate(zip(prompts, reference)):
            got = run(list(prompt), None)
            pos = first_divergence(ref, got)
            total += len(ref)
            matched += len(ref) if pos is None else pos
            if pos is not None:
                divergences.append(
                    explain_divergence(
                        target_model,
                        i,
                        list(prompt),
                        ref,
                        got,
                        pos,
                        gamma,
                        last.get(name),
                        margin_tol,
                        decoder_start_id,
                    )
                )
        out.append(
            identity_check(
                name,
                divergences,
                len(prompts),
                matched / max(1, total),
                margin_tol,
                next(target_model.parameters()).dtype,
                max_new_tokens,
                margins,
            )
        )
    return out


def floor_margin_range(
    target_model: torch.nn.Module,
    prompts: Sequence[list[int]],
    reference: Sequence[list[int]],
    gamma: int,
    decoder_start_id: int | None,
) -> tuple[float, float] | None:
    """The margin gate's range over these prompts (measure/numerics.py): the baseline's top-2 margins at every
    position where a teacher-forced (γ+1)-token pass over its output flips the argmax."""
    from specbench.measure.numerics import margin_range, numerics_floor, step_margin

    flips = []
    for prompt, ref in zip(prompts, reference):
        for j in numerics_floor(target_model, list(prompt), ref, gamma, decoder_start_id):
            flips.append(step_margin(target_model, list(prompt), ref, j, decoder_start_id))
    return margin_range(flips)


def explain_divergence(
    target_model: torch.nn.Module,
    index: int,
    prompt: list[int],
    ref: list[int],
    got: list[int],
    pos: int,
    gamma: int,
    record,
    margin_tol: float | None,
    decoder_start_id: int | None,
) -> dict:
    """Where and why one engine's greedy output left the baseline's: the target's logit margin there and
    the numerics classifier's verdict, replayed exactly where the engine's pass record exists (our
    engines), by a search over verify-shaped chunkings otherwise (HF, test engines)."""
    from dataclasses import asdict

    from specbench.measure.numerics import classify, numerics_floor

    m = margin_at(target_model, prompt, ref[:pos], decoder_start_id)
    if margin_tol is not None:
        m["tolerance"] = margin_tol
    kind = asdict(
        classify(
            target_model,
            prompt,
            ref,
            got,
            pos,
            gamma,
            numerics_floor(target_model, prompt, ref, gamma, decoder_start_id),
            pass_lengths=record.pass_lengths if record else None,
            accept_lengths=record.accept_lengths if record else None,
            decoder_start_id=decoder_start_id,
        )
    )
    return {
        "prompt": index,
        "position": pos,
        "baseline_token": ref[pos] if pos < len(ref) else None,
        "engine_token": got[pos] if pos < len(got) else None,
        **m,
        "class": kind["kind"],
        "class_method": kind["method"],
    }


def identity_check(
    name: str,
    divergences: list[dict],
    n_prompts: int,
    token_agreement: float,
    margin_tol: float | None,
    dtype: torch.dtype,
    max_new_tokens: int,
    margins: tuple[float, float] | None = None,
) -> CheckResult:
    """One engine's greedy identity verdict: it fails on a divergence above the margin tolerance, or on
    one the exact replay cannot explain. The margin gate (measure/numerics.gated_kind over `margins`, the
    floor's flip range on these prompts) turns a replay's "numerics" at a larger margin into "unexplained"."""
    from specbench.measure.numerics import gated_kind

    for d in divergences:
        replay_class = d.setdefault("replay_class", d["class"])
        d["class"] = gated_kind({"kind": replay_class, "margin": d["margin"]}, margins)
    suspicious = [
        d
        for d in divergences
        if d["margin"] > d["tolerance"] or (d["class"] == "unexplained" and d["class_method"].startswith("replay"))
    ]
    return CheckResult(
        name=f"greedy/{name}/identity",
        kind="identity",
        statistic=len(divergences) / max(1, n_prompts),
        p_value=None,
        n=n_prompts,
        threshold=(margin_tol if margin_tol is not None else math.nan),
        power=None,
        alternative="any divergence at a logit margin above the dtype's tolerance",
        passed=not suspicious,
        detail={
            "dtype": str(dtype).removeprefix("torch."),
            "mismatch_rate": len(divergences) / max(1, n_prompts),
            "token_agreement": token_agreement,
            "max_new_tokens": max_new_tokens,
            "divergences": divergences,
            "suspicious": len(suspicious),
            "numerics": sum(d["class"] == "numerics" for d in divergences),
            "unexplained": sum(d["class"] == "unexplained" for d in divergences),
            "numerics_margin_range": list(margins) if margins else None,
        },
    )


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
    step_length: int = 2,
    hf_generate: bool = True,
    max_cells: int = 4096,
    progress: Callable[[str], None] | None = None,
) -> list[CheckResult]:
    """Everything `specbench verify` runs, in this order. Every statistical test states its power against
    total variation `alt_tv` on the law it tests; its verdict is pass only at power ≥ 0.8.

    1. the model-free step battery (specbench.evidence.equality) under `sampling` (T = 1 when greedy),
       exact laws plus `step_samples` draws through verify_sampling (0 skips the draws);
    2. negative controls (equality.CONTROLS) through the same battery at `control_samples` draws each
       (0 skips them): each row passes only when the control's joint test fails;
    3. at T > 0, the step law on the real pair (pair_step_law) at every γ: `step_samples` runs of the
       engine's step from the first prompt (a tenth for a model draft), the first `step_length` tokens
       against the target's exact law, and, for a model-free draft, the verify-side controls through the
       same path at `control_samples` runs;
    4. sequence level on the first prompt (skipped at T = 0): n_samples continuations of
       sample_length tokens (default max(gammas) + 2, capped at 6) per engine; the exact-law
       test needs top-k/top-p small enough that ≤ max_cells sequences are possible;
    5. greedy identity over all prompts, greedy_tokens each.
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
    if not sampling.greedy and step_samples > 0:
        checks += pair_step_law(
            target_model,
            proposer_factory,
            prompts[0],
            sampling,
            gammas=gammas,
            step_samples=step_samples,
            control_samples=control_samples,
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
    say(f"greedy identity ({len(prompts)} prompts)")
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


def _sampling_dict(s: SamplingConfig) -> dict:
    return {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}


# ----- `specbench verify` end to end: request → loaded pair → checks → checks.json


@dataclass(frozen=True)
class VerifyRequest:
    """What `specbench verify` checks: one target and draft pair under one sampling configuration."""

    target: str  # model spec, as for --target
    draft: str  # draft spec, as for --draft
    sampling: SamplingConfig  # the law the sequence-level tests check (T = 0: identity only)
    gammas: tuple[int, ...]  # γ of the sequence-level and greedy-identity engines
    task: str  # where the prompts come from: a task name or a JSONL file
    limit: int = 4  # prompts for the greedy-identity check
    n_samples: int = 300  # continuations per engine for the sequence-level tests
    length: int = 3  # tokens per sampled continuation
    step_samples: int = 100_000  # draws for the step's statistical tests, model-free and on the pair (0 skips them)
    control_samples: int = 20_000  # draws per negative control (0 skips the controls)
    alt_tv: float = ALT_TV  # the alternative every power is stated against: total variation on the tested law
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    trust_remote_code: bool = False

    def validate(self) -> VerifyRequest:
        if not self.gammas:
            raise SpecbenchError("--gamma needs at least one value (e.g. 1,3)")
        RunConfig(
            target=self.target,
            draft=parse_draft(self.draft),
            task=self.task,
            sampling=self.sampling,
            limit=self.limit,
            device=self.device,
            dtype=self.dtype,
            gamma=GammaSpec(fixed=min(self.gammas)),
        ).validate()
        if (
            self.length < 2
        ):  # the sequence tests compare ℓ ≥ 2 tokens (the first comes from the prefill in both engines)
            raise SpecbenchError(
                f"--length must be >= 2 (got {self.length}): the sequence tests compare the first 2+ tokens"
            )
        if self.n_samples < 1 or self.step_samples < 0 or self.control_samples < 0:
            raise SpecbenchError("--n-samples must be >= 1, --step-samples and --control-samples >= 0")
        if not 0.0 < self.alt_tv <= 1.0:
            raise SpecbenchError(f"--alt-tv must lie in (0, 1] (got {self.alt_tv:g})")
        return self

    def folder_name(self) -> str:
        s = self.sampling
        return f"verify-{Path(self.target).name}-{Path(self.draft).name}-t{s.temperature:g}-k{s.top_k}-p{s.top_p:g}"


@dataclass
class VerifyOutcome:
    checks: list[CheckResult]  # in the order run_checks ran them
    json_path: Path  # checks.json (checks.jsonl beside it)

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
    target, proposer_factory, prompts, task_name = load_pair(request)
    checks = run_checks(
        target.model,
        proposer_factory,
        prompts,
        request.sampling,
        gammas=request.gammas,
        n_samples=request.n_samples,
        sample_length=request.length,
        eos_ids=target.eos_ids,
        decoder_start_id=target.decoder_start_id,
        seed=request.seed,
        step_samples=request.step_samples,
        control_samples=request.control_samples,
        alt_tv=request.alt_tv,
        progress=lambda msg: on_status(f"checking: {msg}"),
    )
    json_path, _ = write_checks(
        checks,
        out_dir,
        extra={
            "target": request.target,
            "draft": request.draft,
            **_sampling_dict(request.sampling),
            "gammas": list(request.gammas),
            "task": task_name,
            "seed": request.seed,
            "alternative_tv": request.alt_tv,
        },
    )
    return VerifyOutcome(checks, json_path)


def check_writable(out_dir: Path) -> None:
    """The folder checks.json will go to (or, while it does not exist yet, its parent) takes a file.

    The parent only is created here, so a verify that fails on a bad model leaves no empty folder."""
    prepare_run_dir(out_dir if out_dir.exists() else out_dir.parent)


def load_pair(request: VerifyRequest):
    """(target LoadedModel, fresh-proposer factory, prompt token ids, task name); the draft is loaded
    once here so that a bad draft fails before any check runs."""
    session = Session(request.target, request.device, request.dtype, request.trust_remote_code)
    spec = load_task(request.task)
    prepared = prepare_examples(spec, select_examples(spec, request.limit, request.seed), session.target, 16)
    corpus = [p.prompt_ids for p in prepared]
    session.proposer(request.draft, corpus)
    return session.target, lambda: session.proposer(request.draft, corpus), corpus, spec.name

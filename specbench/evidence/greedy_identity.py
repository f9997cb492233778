"""Greedy identity in `specbench verify`: every engine token for token against the baseline at T = 0.

Each divergence is reported with its position and the target's logit margin (top1 − top2) there. A
divergence at a margin above the numerical tolerance of the dtype is a bug; below it, a near-tie resolved
differently by different kernel shapes (expected in bf16/fp16, reported as a mismatch rate, never hidden).
The numerics classifier (measure/stats/numerics.py) replays the engine's recorded passes, and its margin gate
turns a "numerics" verdict at a margin larger than the floor ever flipped into "unexplained".

A first divergence hides everything after it (the two outputs no longer share a prefix), so for our own speculative
engines the check also runs each prompt teacher-forced along the baseline's output (decoding/forced.py: the engine's
own draft and verify passes with the baseline's tokens as the context) and classifies every position where the
verified token differs (measure/stats/past_divergence.py): `past_divergence` in the check's detail, per example
and summed (positions compared, divergences, explained, unexplained). One unexplained divergence anywhere fails the
check. HF `generate()` and engines given as plain functions cannot be teacher-forced:
their rows keep the first-divergence comparison alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import prompt_split
from specbench.decoding.base import clip_at_stop
from specbench.decoding.cached_model import as_cached
from specbench.evidence.sequence_law import (
    Engine,
    ProposerFactory,
    engines,
    last_logits,
    model_device,
    model_dtype,
)
from specbench.evidence.stat_checks import CheckResult
from specbench.measure.stats.metric_units import first_divergence


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
        cm = as_cached(model)  # a torch module's fresh CachedModel, or llama.cpp's model itself
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
    eps = torch.finfo(model_dtype(model)).eps
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
    recorded and replayed exactly — the numerics classifier (measure/stats/numerics.py) finds the
    target itself flips under the pass shape there; and, for our engines, no divergence of the run teacher-forced along
    the baseline (past_divergence) is unexplained. In float32 on CPU expect no divergence.
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
    if hf_generate and isinstance(target_model, torch.nn.Module):  # HF generate needs a transformers model
        runs = {"hf-generate": lambda prompt, gen: hf_greedy(target_model, prompt, max_new_tokens, eos_ids), **runs}
    runs.update(extra_engines or {})
    reference = [base(list(p), None) for p in prompts]
    gamma = max(gammas) if gammas else 1
    from specbench.measure.stats.numerics import floor_flips

    # one teacher-forced (γ+1)-chunk replay per prompt: the gate's flips and each divergence's classifier read it
    flips = [floor_flips(target_model, list(p), ref, gamma, decoder_start_id) for p, ref in zip(prompts, reference)]
    margins, limit = floor_gate(target_model, prompts, reference, flips, decoder_start_id)
    # past the first divergence: each of our speculative engines teacher-forced along the baseline (decoding/forced.py)
    past = {
        f"γ={g}": past_divergence(
            target_model,
            proposer_factory,
            prompts,
            reference,
            g,
            flips,
            margins,
            limit,
            decoder_start_id,
            max_new_tokens,
        )
        for g in gammas
    }
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
                        list(flips[i]),
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
                model_dtype(target_model),
                max_new_tokens,
                margins,
                limit,
                past.get(name),
            )
        )
    return out


def past_divergence(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompts: Sequence[list[int]],
    reference: Sequence[list[int]],
    gamma: int,
    flips: Sequence[dict[int, int]],
    margins: tuple[float, float] | None,
    limit_ulps: float | None,
    decoder_start_id: int | None,
    max_new_tokens: int | None = None,
    bit_exact: bool = False,
) -> dict:
    """Identity past the first divergence for one speculative engine (γ): each prompt decoded by the engine's own
    steps teacher-forced along the baseline's output (decoding/forced.py), so every position is verified after the
    baseline's prefix, and every divergence classified (past_divergence.explain_forced) and gated (past_divergence.
    past_divergence_counts, with the floor's limit over these prompts). → per example and summed: positions compared,
    divergences, explained (numerics), unexplained; `classified`: every divergence with its class. `bit_exact`
    (verify --bit-exact): the forced run's passes are one-token steps and every divergence is unexplained
    (past_divergence.explain_forced_bit_exact; `flips`, `margins` and `limit_ulps` are not read)."""
    from dataclasses import asdict

    from specbench.decoding.forced import decode_forced
    from specbench.measure.stats.past_divergence import (
        explain_forced,
        explain_forced_bit_exact,
        past_divergence_counts,
    )

    target, proposer = as_cached(target_model), proposer_factory()
    examples, classified = [], []
    for i, (prompt, ref) in enumerate(zip(prompts, reference)):
        run = decode_forced(
            target,
            proposer,
            list(prompt),
            list(ref),
            gamma=gamma,
            decoder_start_id=decoder_start_id,
            max_new_tokens=max_new_tokens,
            stepwise=bit_exact,
        )
        if bit_exact:
            found = explain_forced_bit_exact(target_model, list(prompt), list(ref), asdict(run), decoder_start_id)
        else:
            found = explain_forced(target_model, list(prompt), list(ref), asdict(run), list(flips[i]), decoder_start_id)
        examples.append({"prompt": i, **past_divergence_counts(found, margins, limit_ulps)})
        classified += [{"prompt": i, **d} for d in found["divergences"]]
    totals = {k: sum(e[k] for e in examples) for k in ("positions", "divergences", "explained", "unexplained")}
    return {**totals, "examples": examples, "classified": classified}


def floor_gate(
    target_model: torch.nn.Module,
    prompts: Sequence[list[int]],
    reference: Sequence[list[int]],
    flips: Sequence[dict[int, int]],
    decoder_start_id: int | None,
) -> tuple[tuple[float, float] | None, float]:
    """The margin gate over these prompts (measure/stats/margin_gate.py), from every position where a teacher-forced
    (γ+1)-token pass over the baseline's output flips the argmax: the range of the baseline's top-2 margins
    there, and the widest gap, in spacings of the logit dtype, that the gate calls numerics. `flips`: per prompt,
    numerics.floor_flips of its baseline output (position → the argmax the chunked pass picked there)."""
    from specbench.measure.stats.margin_gate import margin_range, ulp_limit
    from specbench.measure.stats.numerics import logit_gap, step_row, top2

    margins, ulps = [], []
    for prompt, ref, flipped_at in zip(prompts, reference, flips):
        for j, flipped in flipped_at.items():
            row = step_row(target_model, list(prompt), ref, j, decoder_start_id)
            margins.append(top2(row)[1])
            ulps.append(logit_gap(target_model, row, ref[j], flipped)[1])
    return margin_range(margins), ulp_limit(ulps)


def explain_divergence(
    target_model: torch.nn.Module,
    index: int,
    prompt: list[int],
    ref: list[int],
    got: list[int],
    pos: int,
    gamma: int,
    floor: list[int],
    record,
    margin_tol: float | None,
    decoder_start_id: int | None,
) -> dict:
    """Where and why one engine's greedy output left the baseline's: the target's logit margin there and
    the numerics classifier's verdict, replayed exactly where the engine's pass record exists (our
    engines), by a search over verify-shaped chunkings otherwise (HF, test engines). `floor`: the positions where
    the chunked pass flips the baseline's argmax on this prompt (computed once per prompt by the caller)."""
    from dataclasses import asdict

    from specbench.measure.stats.numerics import classify

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
            floor,
            pass_lengths=record.pass_lengths if record else None,
            accept_lengths=record.accept_lengths if record else None,
            tree_paths=record.tree_paths if record else None,
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
        "gap": kind["gap"],  # the baseline's logit for its token minus for the engine's (1-token pass)
        "gap_ulps": kind["gap_ulps"],  # the same in spacings of the logit dtype: what the margin gate reads
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
    limit_ulps: float | None = None,
    past: dict | None = None,
) -> CheckResult:
    """One engine's greedy identity verdict: it fails on a divergence above the margin tolerance, on
    one the exact replay cannot explain, or (`past`: past_divergence's result, our engines only) on any unexplained
    divergence of the run teacher-forced along the baseline, at any position. The margin gate
    (measure/margin_gate.gated_kind: the gap in spacings against `limit_ulps`, from floor_gate; without them the raw
    margin against `margins`, the floor's flip range on these prompts) turns a replay's "numerics" at a wider gap into
    "unexplained"."""
    from specbench.measure.stats.margin_gate import gated_kind

    for d in divergences:
        replay_class = d.setdefault("replay_class", d["class"])
        gate_input = {"kind": replay_class, "margin": d["margin"], "gap_ulps": d.get("gap_ulps")}
        d["class"] = gated_kind(gate_input, margins, limit_ulps)
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
        alternative="any divergence at a logit margin above the dtype's tolerance, or unexplained at any position",
        passed=not suspicious and not (past and past["unexplained"]),
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
            "numerics_gap_limit_ulps": limit_ulps,
            # every position compared after the baseline's own prefix (None: an engine that cannot be teacher-forced)
            "past_divergence": past,
        },
    )

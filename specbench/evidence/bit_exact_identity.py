"""Greedy identity in `specbench verify --bit-exact`: every speculative engine against the baseline, no excuse left.

Under --bit-exact every target pass of the speculative engine after the prefill runs as the baseline's own one-token
decoding step (decoding/stepwise.py), so every logit its verifier reads is the baseline's bit for bit and greedy
output must equal the baseline's in any dtype. This check is therefore greedy_identity.py without its numerics
machinery: no floor, no replay, no margin gate. Each example is recorded as `specbench run --bit-exact` records it
(measure/stats/numerics.explain_bit_exact: a divergence is unexplained, with the baseline's margin and gap there for
the reader) and the check's line is that run's line (margin_gate.bit_exact_line: "bit-exact mode: N/N identical").
Past the first divergence each prompt is also decoded teacher-forced along the baseline (decoding/forced.py, its
passes one-token steps too: greedy_identity.past_divergence with `bit_exact`), and any position where the verified
token differs is unexplained. HF `generate()` runs its own multi-token loop, so it has no row here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specbench.config import SamplingConfig
from specbench.evidence.greedy_identity import past_divergence
from specbench.evidence.sequence_law import Engine, ProposerFactory, engines, model_dtype
from specbench.evidence.stat_checks import CheckResult
from specbench.measure.stats.margin_gate import BIT_EXACT, bit_exact_line
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_bit_exact


def bit_exact_checks(
    target_model: torch.nn.Module,
    proposer_factory: ProposerFactory,
    prompts: Sequence[list[int]],
    *,
    gammas: Sequence[int] = (1, 2, 4),
    max_new_tokens: int = 16,
    eos_ids: frozenset[int] = frozenset(),
    decoder_start_id: int | None = None,
    extra_engines: dict[str, Engine] | None = None,
) -> list[CheckResult]:
    """greedy_checks under --bit-exact: one check per speculative engine (γ), its passes one-token steps; it passes
    only when every output equals the baseline's and the forced comparison past the first divergence finds no
    divergence either. `extra_engines` (prompt → tokens, no forced run) lets tests feed a broken engine through it."""
    runs = engines(
        target_model,
        proposer_factory,
        gammas,
        max_new_tokens=max_new_tokens,
        sampling=SamplingConfig(temperature=0.0),
        eos_ids=eos_ids,
        decoder_start_id=decoder_start_id,
        stepwise=True,
    )
    base = runs.pop("baseline")
    runs.update(extra_engines or {})
    reference = [base(list(p), None) for p in prompts]
    out = []
    for name, run in runs.items():
        records = [
            example_record(target_model, list(prompt), ref, run(list(prompt), None), decoder_start_id)
            for prompt, ref in zip(prompts, reference)
        ]
        gamma = int(name.removeprefix("γ=")) if name.startswith("γ=") else None
        past = (
            None
            if gamma is None
            else past_divergence(
                target_model,
                proposer_factory,
                prompts,
                reference,
                gamma,
                [{} for _ in prompts],
                None,
                None,
                decoder_start_id,
                max_new_tokens,
                bit_exact=True,
            )
        )
        out.append(bit_exact_check(name, records, reference, model_dtype(target_model), max_new_tokens, past))
    return out


def example_record(
    target_model: torch.nn.Module, prompt: list[int], ref: list[int], got: list[int], decoder_start_id: int | None
) -> dict:
    """One prompt as `specbench run --bit-exact` records an example: identical or not, and its `numerics` field."""
    pos = first_divergence(ref, got)
    numerics = explain_bit_exact(target_model, prompt, {"token_ids": ref}, {"token_ids": got}, pos, decoder_start_id)
    return {"identical": pos is None, "numerics": numerics, "matched": len(ref) if pos is None else pos}


def bit_exact_check(
    name: str,
    records: list[dict],
    reference: Sequence[list[int]],
    dtype: torch.dtype,
    max_new_tokens: int,
    past: dict | None,
) -> CheckResult:
    """One engine's verdict under --bit-exact: fails on any divergence, first or later (`past`: greedy_identity.
    past_divergence's result with bit_exact; None for an engine that cannot be teacher-forced)."""
    n = len(records)
    line = bit_exact_line(records)
    divergences = [
        {"prompt": i, **r["numerics"]["divergence"], "class": "unexplained"}
        for i, r in enumerate(records)
        if r["numerics"]["divergence"] is not None
    ]
    return CheckResult(
        name=f"greedy/{name}/identity",
        kind="identity",
        statistic=len(divergences) / max(1, n),
        p_value=None,
        n=n,
        threshold=float("nan"),  # no margin tolerance: any divergence fails
        power=None,
        alternative="any divergence at any position (bit-exact mode: every verify pass the baseline's one-token step)",
        passed=not divergences and not (past and past["divergences"]),
        detail={
            "mode": BIT_EXACT,
            "identity_line": line["identity_line"],
            "dtype": str(dtype).removeprefix("torch."),
            "mismatch_rate": len(divergences) / max(1, n),
            "token_agreement": sum(r["matched"] for r in records) / max(1, sum(len(ref) for ref in reference)),
            "max_new_tokens": max_new_tokens,
            "divergences": divergences,
            "suspicious": len(divergences),
            "numerics": 0,
            "unexplained": len(divergences),
            "numerics_margin_range": None,
            "numerics_gap_limit_ulps": None,
            # every position compared after the baseline's own prefix (None: an engine that cannot be teacher-forced)
            "past_divergence": past,
        },
    )

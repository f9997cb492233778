"""Identity past the first divergence: every divergence of a run teacher-forced along the baseline, classified.

A greedy speculative run is compared with its baseline up to their first divergence (numerics.py classifies that
one); after it the prefixes differ and a later bug would hide behind an earlier near-tie. decoding/forced.py runs the
engine's own steps with the baseline's tokens as the context, so every position gets the token the engine verifies
after the baseline's prefix. This module classifies each position where that token differs, as numerics.classify
does a first divergence: the replay of the forced run's recorded passes (one replay for the whole example: the forced
run kept only baseline tokens, so each row depends on nothing else) must pick the verified token (the target itself
flips under the pass shape), and the margin gate (margin_gate.gated_kind) must admit the gap between the baseline's
logits for the two tokens. `explain_forced` gives the replay's verdicts, `past_divergence_counts` the gated counts
of one example: positions compared, divergences, explained, unexplained. Used by `specbench verify`'s greedy
identity (evidence/greedy_identity.past_divergence) and bench/planted_bug.py; runs after any timed decode. Under
--bit-exact (every pass one-token steps: no pass shape to explain) `explain_forced_bit_exact` calls every divergence
unexplained, as numerics.explain_bit_exact does a first one.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from specbench.measure.stats.margin_gate import gated_kind
from specbench.measure.stats.numerics import (
    Divergence,
    Prefilled,
    explain_bit_exact,
    logit_gap,
    prefill,
    replay,
    speculative_passes,
    step_row,
    top2,
)


def explain_forced(
    model: torch.nn.Module,
    prompt_ids: list[int],
    reference: list[int],
    forced: dict,
    floor: list[int] | None = None,
    decoder_start_id: int | None = None,
    backend=None,
    pad_to: int = 1,
    prefilled: Prefilled | None = None,
) -> dict:
    """Every divergence of a teacher-forced speculative run (decoding/forced.py: `forced` holds its `verified`,
    `divergences`, `pass_lengths`, `accept_lengths`, `tree_paths`) from `reference`, classified before the gate, as
    `classify` does a first one: one replay of the forced run's recorded passes over the reference gives, at every
    position, the row the verifier should have read (the forced run kept only reference tokens, so those rows depend
    on nothing else); a divergence is numerics when that row's argmax is the verified token (the target itself flips
    under the pass shape), unexplained otherwise. Each carries the baseline's 1-token margin and gap there (step_row),
    for the margin gate (margin_gate.gated_kind), which the caller applies with the run's limit.
    → {"positions", "divergences": [Divergence dicts]}."""
    divs = list(forced.get("divergences") or [])
    verified = forced["verified"]
    out: dict = {"positions": len(reference), "divergences": []}
    if not divs:
        return out
    shared = prefilled or prefill(model, prompt_ids, decoder_start_id, backend)
    passes = speculative_passes(
        forced.get("pass_lengths") or [], forced.get("accept_lengths") or [], forced.get("tree_paths")
    )
    rows = replay(model, prompt_ids, reference, passes, max(divs), decoder_start_id, backend, pad_to, shared)
    for d in divs:
        a, b = reference[d], verified[d]
        row_a = step_row(model, prompt_ids, reference, d, decoder_start_id, backend, pad_to, shared)
        gap, gap_ulps = logit_gap(model, row_a, a, b)
        arg, margin_b = top2(rows[d]) if d in rows else (None, None)
        numerics = arg is not None and arg == b and b != a
        margin_a = top2(row_a)[1]
        out["divergences"].append(
            asdict(
                Divergence(
                    position=d,
                    kind="numerics" if numerics else "unexplained",
                    baseline_token=a,
                    speculative_token=b,
                    step_argmax=a,
                    verify_argmax=arg,
                    step_margin=margin_a,
                    verify_margin=margin_b,
                    floor_flips_here=d in (floor or []),
                    method="forced-replay",
                    margin=margin_a,
                    gap=gap,
                    gap_ulps=gap_ulps,
                )
            )
        )
    return out


def past_divergence_counts(forced: dict, margins: tuple[float, float] | None, limit_ulps: float | None) -> dict:
    """One example's comparison past its first divergence (explain_forced's result) after the gate: positions
    compared, divergences, explained (numerics) and unexplained; each divergence gets its gated `class` beside the
    replay's `kind`."""
    for d in forced["divergences"]:
        d["class"] = gated_kind(d, margins, limit_ulps)
    explained = sum(d["class"] == "numerics" for d in forced["divergences"])
    return {
        "positions": forced["positions"],
        "divergences": len(forced["divergences"]),
        "explained": explained,
        "unexplained": len(forced["divergences"]) - explained,
    }


def explain_forced_bit_exact(
    model: torch.nn.Module,
    prompt_ids: list[int],
    reference: list[int],
    forced: dict,
    decoder_start_id: int | None = None,
    backend=None,
) -> dict:
    """explain_forced for a forced run under --bit-exact (decoding/forced.py with `stepwise`): every row the verifier
    read came from the baseline's own one-token step, so nothing is left to replay or gate and every divergence is
    unexplained, each with the baseline's margin and gap there (numerics.explain_bit_exact, one position at a time).
    → {"positions", "divergences": [Divergence dicts]}, for past_divergence_counts as explain_forced's."""
    verified = {"token_ids": forced["verified"]}
    found = [
        explain_bit_exact(model, prompt_ids, {"token_ids": reference}, verified, d, decoder_start_id, backend)
        for d in forced.get("divergences") or []
    ]
    return {"positions": len(reference), "divergences": [f["divergence"] for f in found]}

"""What the cost model predicts for a run, from the run's own measured α, draft cost c and verify cost.

Beside every measured speedup the summary carries the paper's Theorem 3.8, our extended cost model (measured
verify cost, the proposals actually made) and the finite-length model for outputs of the lengths measured, so a
reader sees how far the measurement is from the theory. metrics.summarize calls these; nothing here times anything.
"""

from __future__ import annotations

import math
from collections import Counter

from specbench.measure.stats.metric_units import NAN, batches, ratio


def accepted_length_histogram(full: list[int], gamma: int) -> list[int]:
    """Counts of 0..γ accepted over the steps that drafted all γ tokens; [] when no step did.

    Built from a Counter, so its size follows the records: γ + 1 bins exist only when some step
    really drafted γ tokens (γ ≤ the generation budget), and a run asked for γ = 10⁹ gets [] instead
    of allocating a billion bins."""
    if not full:
        return []
    counts = Counter(full)
    return [counts.get(k, 0) for k in range(gamma + 1)]


def proposal_law(records: list[dict], gamma: int) -> dict[int, float]:
    """Share of passes by the number of tokens the proposer offered, where the budget did not bind
    (a model draft: always γ; prompt lookup: often fewer, 0 = no match). Records written before
    `proposal_lengths` existed fall back to every pass (undrafted passes count as 0)."""
    lengths = [g for r in records for g in r["speculative"].get("proposal_lengths", [])]
    if not lengths:
        lengths = [g for r in records for g in r["speculative"].get("draft_lengths", [])]
        lengths += [0] * max(0, sum(r["speculative"]["target_calls"] for r in records) - len(lengths))
    if not lengths:
        return {gamma: 1.0}
    return {g: lengths.count(g) / len(lengths) for g in sorted(set(lengths))}


def predicted_decode(records: list[dict], alpha: float, gamma: int, c: float, verify_cost: float) -> dict:
    """The decode phase the cost model predicts for these very outputs, from the measured α, c,
    verify cost and proposal law (theory.decode_cost_table): `predicted_target_calls` (Σ E[passes],
    to set beside the measured `target_calls`) and `predicted_decode_speedup` (Σ decode tokens ÷
    Σ E[decode cost], to set beside `decode_speedup`).

    Unlike the stream formula it knows each output's length and how it ended: a step that emits
    an EOS wastes the drafts accepted beyond it, and the budget shortens the last drafts. An
    output that ended at an EOS is priced as if the budget were far (a small error when the EOS
    came within γ tokens of it). Prefill, the same work for both engines plus the draft's own
    prefill, is outside both sides.
    """
    from specbench.decoding import theory

    nan = {"predicted_target_calls": NAN, "predicted_decode_speedup": NAN}
    if any(math.isnan(x) for x in (alpha, c, verify_cost)):
        return nan
    law = proposal_law(records, gamma)
    lengths: dict[str, list[int]] = {"eos": [], "length": []}
    for r in records:
        spec = r["speculative"]
        if spec["n_tokens"] > 1:  # the first token comes from prefill
            lengths["length" if spec["stop_reason"] == "length" else "eos"].append(spec["n_tokens"] - 1)
    passes = cost = 0.0
    for ending, slack in (("eos", None), ("length", 0)):
        if lengths[ending]:
            p, k = theory.decode_cost_table(max(lengths[ending]), alpha, c, verify_cost, law, slack)
            passes += sum(p[n] for n in lengths[ending])
            cost += sum(k[n] for n in lengths[ending])
    tokens = sum(lengths["eos"]) + sum(lengths["length"])
    return {"predicted_target_calls": passes, "predicted_decode_speedup": ratio(tokens, cost)} if tokens else nan


def predictions(
    alpha: float,
    gamma: int,
    c: float,
    verify_cost: float,
    draft_lengths: list[int] | None = None,
    target_calls: int = 0,
) -> dict:
    """Predicted speedups from measured quantities.

    predicted_speedup: the paper's Theorem 3.8 from α and c (every step drafts γ, a target pass
    costs one token's). predicted_speedup_extended: our cost model, E[tokens per target pass] /
    (c · drafted per pass + verify_cost), with the measured verify cost and — when the steps'
    proposal lengths are known — E[tokens per pass] averaged over the proposals actually made
    (a step that drafted γ' yields (1 − α^(γ'+1))/(1 − α) in expectation; a pass with no draft
    yields 1). Model drafts always propose γ, so for them this is Theorem 3.8 with the verify
    cost; model-free drafts (prompt lookup) often propose fewer or none, which the paper's
    formula does not see.
    """
    from specbench.decoding import theory

    if any(math.isnan(x) for x in (alpha, c, verify_cost)):
        return {"predicted_tokens_per_call": NAN, "predicted_speedup": NAN, "predicted_speedup_extended": NAN}
    if draft_lengths is not None and target_calls:
        undrafted = target_calls - len(draft_lengths)  # passes with no proposal: exactly one token each
        tokens = (sum(theory.expected_tokens_per_step(alpha, g) for g in draft_lengths) + undrafted) / target_calls
        extended = tokens / (c * sum(draft_lengths) / target_calls + verify_cost)
    else:
        tokens = theory.expected_tokens_per_step(alpha, gamma)
        extended = theory.walltime_factor_extended(alpha, gamma, c, verify_cost)
    return {
        "predicted_tokens_per_call": tokens,
        "predicted_speedup": theory.walltime_factor(alpha, gamma, c),
        "predicted_speedup_extended": extended,
    }


def verified_trees(records: list[dict]) -> bool:
    """Whether some step verified a token tree: more drafted nodes than its depth (the chain formulas then do not
    describe the run: a tree's α is per node tried, and its passes carry nodes off the accepted path)."""
    for r in records:
        spec = r["speculative"]
        depths, nodes = spec.get("draft_depths") or [], spec.get("draft_lengths") or []
        if len(depths) == len(nodes) and any(n > d for n, d in zip(nodes, depths)):
            return True
    return False


def tree_check(tokens_per_call: float, c: float, verify_cost: float, nodes_per_call: float) -> dict:
    """A tree run's cost-model check at its own acceptance: the measured tokens per target pass ÷ (c · drafted nodes
    per pass + the measured verify cost). The paper's Theorem 3.8, Eq. 1 and the finite-length table describe a chain
    drafted with one α: null for trees (NaN here) rather than a chain's price put on a tree."""
    return {
        "predicted_tokens_per_call": tokens_per_call,
        "predicted_speedup": NAN,
        "predicted_speedup_extended": ratio(tokens_per_call, c * nodes_per_call + verify_cost),  # NaN in, NaN out
        "predicted_target_calls": NAN,
        "predicted_decode_speedup": NAN,
    }


def cost_model_checks(records: list[dict], measured: dict, gamma: int) -> dict:
    """The predicted_* fields of a run from its measured α, c, verify cost and counts (`measured`: metrics.summarize's
    fields so far): a chain's predictions and finite-length table, or a token tree's tree_check. Each is a cost-model
    check at the run's own acceptance, not a prediction."""
    alpha, c, verify_cost = measured["alpha"], measured["c"], measured["verify_cost"]
    if verified_trees(records):  # a tree: priced at its measured tokens per pass, never as a chain
        nodes_per_call = ratio(measured["drafted"], measured["target_calls"])
        return tree_check(measured["tokens_per_target_call"], c, verify_cost, nodes_per_call) | {"verified_trees": True}
    draft_lengths = [g for r in records for g in r["speculative"].get("draft_lengths", [])]
    out = predictions(alpha, gamma, c, verify_cost, draft_lengths, measured["target_calls"])
    return out | predicted_decode(records, alpha, gamma, c, verify_cost) | {"verified_trees": False}


def batch_prediction(records: list[dict], gamma: int, calibration: dict | None, policy: str) -> dict:
    """batch_verify_cost t(B, γ+1)/t(B, 1) and batch_draft_cost from a run's batch calibration
    (calibration.calibrate_batch_grid), and the batch cost model's predicted and replayed decode speedups
    (measure/auto/batch_model.py: each row's own steps, rows leaving as they finish, t(b, k) at every b)."""
    from specbench.measure.auto.batch_model import batch_cost_figures

    out = {
        "batch_verify_cost": NAN,
        "batch_draft_cost": NAN,
        "predicted_speedup_batch": NAN,
        "replayed_speedup_batch": NAN,
    }
    if not calibration or str(gamma) not in calibration.get("verify_cost", {}):
        return out
    out["batch_verify_cost"] = float(calibration["verify_cost"][str(gamma)])
    out["batch_draft_cost"] = float(calibration.get("draft_cost") or 0.0)
    out.update(batch_cost_figures(batches(records), calibration, gamma, policy))
    return out

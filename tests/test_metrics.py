"""The finite-output prediction of the decode speedup, from records as the runner writes them."""

from __future__ import annotations

import dataclasses

import pytest

from specbench.measure.auto.predicted_metrics import accepted_length_histogram, predicted_decode, proposal_law
from specbench.measure.results.record_checks import example_problem
from specbench.measure.results.schema import Summary, summary_dict
from specbench.measure.stats.metrics import summarize


def record(n_tokens: int, stop: str, proposals: list[int] | None, target_calls: int, draft_lengths: list[int]):
    spec = {"n_tokens": n_tokens, "stop_reason": stop, "target_calls": target_calls, "draft_lengths": draft_lengths}
    if proposals is not None:
        spec["proposal_lengths"] = proposals
    return {"speculative": spec}


def test_prediction_by_hand():
    # α = 1, γ = 3: 9 decode tokens ending at an EOS take 3 passes (4 + 4 + 1 kept of 4)
    recs = [record(10, "eos", [3, 3, 3], 3, [3, 3, 3])]
    c, v = 0.1, 1.2
    assert predicted_decode(recs, 1.0, 3, c, v) == pytest.approx(
        {"predicted_target_calls": 3.0, "predicted_decode_speedup": 9 / (3 * (3 * c + v))}
    )
    # the same length at the budget: 4 + 4 then one pass of room 1 (no draft)
    recs = [record(10, "length", [3, 3], 3, [3, 3])]
    assert predicted_decode(recs, 1.0, 3, c, v) == pytest.approx(
        {"predicted_target_calls": 3.0, "predicted_decode_speedup": 9 / (2 * (3 * c + v) + v)}
    )
    # both kinds in one run: one table per ending, summed
    both = [
        record(10, "eos", [3, 3, 3], 3, [3, 3, 3]),
        record(10, "length", [3, 3], 3, [3, 3]),
        record(1, "eos", [], 0, []),
    ]  # a 1-token output has no decode phase
    assert predicted_decode(both, 1.0, 3, c, v)["predicted_target_calls"] == pytest.approx(6.0)
    assert predicted_decode(both, 1.0, 3, c, v)["predicted_decode_speedup"] == pytest.approx(
        18 / (3 * (3 * c + v) + 2 * (3 * c + v) + v)
    )
    assert all(x != x for x in predicted_decode(recs, float("nan"), 3, c, v).values())  # NaN in, NaN out


def test_proposal_law_from_records_and_the_fallback_for_older_ones():
    assert proposal_law([record(9, "eos", [4, 0, 4, 2], 4, [4, 4, 2])], 4) == {0: 0.25, 2: 0.25, 4: 0.5}
    # written before proposal_lengths existed: every pass counts, undrafted ones as 0
    assert proposal_law([record(9, "eos", None, 4, [4, 4, 2])], 4) == {0: 0.25, 2: 0.25, 4: 0.5}
    assert proposal_law([], 3) == {3: 1.0}


def full_record(accept: list[int], drafts: list[int]) -> dict:
    """An example record whose speculative engine verified steps with these accepted / drafted counts."""
    n = sum(accept) + len(accept) + 1
    engine = {
        "text": "",
        "token_ids": [4] * n,
        "n_tokens": n,
        "stop_reason": "length",
        "prefill_s": 0.01,
        "decode_s": 0.1,
        "target_calls": len(accept),
        "draft_calls": sum(drafts),
        "drafted": sum(drafts),
        "accepted": sum(accept),
        "trials": sum(min(a + 1, g) for a, g in zip(accept, drafts)),
        "accept_lengths": accept,
        "draft_lengths": drafts,
        "expected_accept": [0.5] * len(accept),
        "draft_s": 0.04,
        "verify_s": 0.05,
    }
    return {
        "schema_version": 1,
        "example_id": "e",
        "prompt_tokens": 3,
        "reference": None,
        "baseline": dict(engine),
        "speculative": engine,
        "identical": True,
        "first_divergence": None,
    }


def test_summarize_writes_only_declared_summary_fields():
    declared = {f.name for f in dataclasses.fields(Summary)}
    for greedy in (True, False):
        assert set(summarize([full_record([1, 3], [3, 3])], 3, greedy)) <= declared
    assert set(summarize([], 3, True)) <= declared
    with pytest.raises(TypeError):
        summary_dict({"not_a_field": 1})  # a writer's typo fails loudly instead of adding an undocumented key


def test_histogram_bins_follow_the_records_not_gamma():
    rec = full_record([0, 2, 3, 1], [3, 3, 3, 2])  # the last step drafted fewer than γ: not the law's
    assert summarize([rec], 3, True)["accepted_length_histogram"] == [1, 0, 1, 1]
    huge = summarize([rec], 10**9, True)  # no step drafted 10⁹ tokens: no bins, and no 10⁹-long list
    assert huge["accepted_length_histogram"] == [] and huge["full_gamma_steps"] == 0
    assert accepted_length_histogram([], 10**12) == []
    assert example_problem(rec) is None  # the helper builds records the readers accept


def test_batch_draft_positions_take_each_steps_longest_draft():
    """Rows whose longest drafts fall on different steps: the batch drafted 3 + 3 + 2 positions, not max(5, 5)."""
    from specbench.measure.stats.metrics import batch_draft_positions

    rows = [
        {"speculative": {"draft_lengths": [3, 0, 2]}},
        {"speculative": {"draft_lengths": [2, 3]}},
        {"speculative": {"draft_lengths": []}},
    ]
    assert batch_draft_positions(rows) == 8


def test_peer_metrics_count_the_bonus_token_per_position_and_tpot_percentiles():
    """vLLM's mean acceptance length is 1 + accepted / drafting steps (our mean_accepted_length + 1); per-position
    rates divide by the steps that drafted that far; TPOT is decode seconds per decode token, p50/p99 over examples."""
    rec = full_record([0, 2, 3, 1], [3, 3, 3, 2])  # 6 accepted over 4 drafting steps
    out = summarize([rec], 3, True)
    assert out["mean_acceptance_length"] == pytest.approx(1 + 6 / 4)
    assert out["mean_acceptance_length"] == pytest.approx(out["mean_accepted_length"] + 1)
    # accepted 0, 2, 3, 1 of 3, 3, 3, 2: position 1 by 3 of 4 steps, 2 by 2 of 4, 3 by 1 of the 3 that drafted 3
    assert out["acceptance_rate_per_position"] == pytest.approx([3 / 4, 2 / 4, 1 / 3])
    assert out["acceptance_rate"] == pytest.approx(6 / 11) and "draft_acceptance_rate" not in out
    slow = full_record([0, 0], [3, 3])
    slow["speculative"] = {**slow["speculative"], "decode_s": 1.0}  # 2 decode tokens in 1 s: 0.5 s per token
    two = summarize([rec, slow], 3, True)
    fast_tpot = 0.1 / (rec["speculative"]["n_tokens"] - 1)
    assert two["speculative_tpot_p50_s"] == pytest.approx((fast_tpot + 0.5) / 2)
    assert two["speculative_tpot_p99_s"] == pytest.approx(fast_tpot + 0.99 * (0.5 - fast_tpot))
    assert two["baseline_tpot_p99_s"] < two["speculative_tpot_p99_s"]  # the baseline kept 0.1 s: engines apart


def test_the_per_example_export_carries_every_count_the_metrics_sum():
    """tidy_table's per-example columns are derived from metric_units' one list of counts: every count engine_totals
    sums comes back in the export row of a one-example run (a count added to the metrics but not exported fails)."""
    from specbench.measure.results.tidy_table import example_row
    from specbench.measure.stats.metric_units import engine_totals

    rec = full_record([1, 3], [3, 3]) | {"run_id": "r", "sweep_id": None}
    row = example_row(rec, {})
    for engine in ("baseline", "speculative"):
        summed = {f"{engine}_{k}": v for k, v in engine_totals([rec], engine).items()}
        assert summed.items() <= row.items()
    assert row["speculative_stop_reason"] == "length"


def test_a_tree_run_is_checked_at_its_own_tokens_per_pass_never_priced_as_a_chain():
    """A token tree (6 nodes, depth 3, per step) is not a chain of 6 at α = accepted ÷ trials: the chain formulas are
    null, the tree's check divides its measured tokens per pass by c · nodes per pass + verify cost, and the line the
    run prints calls it a cost-model check. Control: the same steps recorded as chains keep the chain formulas."""
    from specbench.cli.run import prediction_line

    tree = full_record([2, 3, 1], [6, 6, 6])
    tree["speculative"]["draft_depths"] = [3, 3, 3]
    out = summarize([tree], 3, True)
    assert out["predicted_speedup"] != out["predicted_speedup"]  # NaN: Theorem 3.8 is a chain's
    assert out["predicted_decode_speedup"] != out["predicted_decode_speedup"]
    assert out["predicted_tokens_per_call"] == pytest.approx(out["tokens_per_target_call"]) == pytest.approx(3.0)
    expected = out["tokens_per_target_call"] / (out["c"] * 6 + out["verify_cost"])
    assert out["predicted_speedup_extended"] == pytest.approx(expected)
    assert out["verified_trees"] is True
    shown = Summary(
        speedup_geomean=1.4, **{k: out[k] for k in ("predicted_tokens_per_call", "verify_cost", "verified_trees")}
    )
    shown.predicted_speedup_extended = out["predicted_speedup_extended"]
    line = prediction_line(shown)
    assert line.startswith("cost-model check at the measured acceptance: 3.00 tokens a target pass") and (
        "for chains" in line
    ), line
    chain = full_record([2, 3, 1], [3, 3, 3])
    chain["speculative"]["draft_depths"] = [3, 3, 3]
    both = summarize([chain], 3, True)
    assert both["predicted_speedup"] == both["predicted_speedup"] and both["predicted_decode_speedup"] > 0
    assert both["verified_trees"] is False
    assert prediction_line(
        Summary(speedup_geomean=1.4, predicted_speedup=2.0, predicted_speedup_extended=1.5, verify_cost=1.2)
    ).startswith("cost-model check at the measured α and draft cost")
    unmeasured = Summary(speedup_geomean=1.4, predicted_speedup_extended=1.5, verify_cost=1.2, verified_trees=False)
    unmeasured.predicted_tokens_per_call = 1.8  # a chain whose paper figure is null is not read as a tree
    assert "for chains" not in prediction_line(unmeasured)

"""The batch cost model (measure/auto/batch_model.py): hand-worked batches, the straggler effect, and its inputs."""

import numpy as np
import pytest

from specbench.measure.auto import batch_model as bm
from specbench.measure.auto.calibration import batch_calibration_dict, batch_row_grid


def table_of(fn, rows=4, width=4):
    """T[b, k] = fn(b, k) for b, k ≥ 1."""
    return bm.pass_ms_table({b: {k: fn(b, k) for k in range(1, width + 1)} for b in range(1, rows + 1)}, rows, width)


def test_pass_table_interpolates_linearly_between_calibrated_row_counts():
    t = bm.pass_ms_table({1: {1: 10.0, 2: 20.0}, 4: {1: 40.0, 2: 80.0}}, 6, 3)
    assert t[1, 1] == 10 and t[2, 1] == 20 and t[3, 2] == pytest.approx(60.0) and t[4, 2] == 80
    assert t[6, 1] == 40  # flat past the largest calibrated b
    assert np.isnan(t[2, 3]) and np.isnan(t[0, 1])  # k = 3 was not calibrated; b = 0 is no pass


def test_row_count_grid_doubles_up_to_the_batch():
    assert batch_row_grid(1) == [1]
    assert batch_row_grid(2) == [1, 2]
    assert batch_row_grid(16) == [1, 2, 4, 8, 16]
    assert batch_row_grid(12) == [1, 2, 4, 8, 12]


def test_row_steps_pair_each_pass_with_its_acceptance():
    engine = {"pass_lengths": [4, 1, 3, 4], "accept_lengths": [2, 1, 3]}
    assert bm.row_steps(engine) == [(3, 2), (0, 0), (2, 1), (3, 3)]


def test_baseline_steps_run_over_the_rows_still_short_of_their_length():
    t = table_of(lambda b, k: float(b))
    # lengths 3 and 5: steps 1..4 over 2, 2, 1, 1 rows (the first token comes with prefill)
    assert bm.baseline_ms([3, 5], t) == 6.0


def test_a_deterministic_batch_is_priced_pass_by_pass_under_both_policies():
    t = table_of(lambda b, k: 10.0 * b + k)
    no_draft = np.zeros(5)
    steps = [[(3, 3)], [(0, 0)]]  # row A always accepts all 3; row B never finds a draft
    # ragged: A emits 4 + 4 (room 8), B 1 + 1 (room 2): two passes over both rows, 4 wide
    assert bm.simulate_speculative_ms(steps, [9, 3], t, no_draft, "ragged", replicates=3) == pytest.approx(2 * t[2, 4])
    # min: A is held to B's one token while B lives, then runs alone: 4 tokens, then the 2 left (1 offered)
    expect = t[2, 4] + t[2, 4] + t[1, 4] + t[1, 2]
    assert bm.simulate_speculative_ms(steps, [9, 3], t, no_draft, "min", replicates=3) == pytest.approx(expect)
    # a model draft's passes are priced at the live rows: 3 per step for the widest row
    draft = np.arange(5) * 100.0
    assert bm.simulate_speculative_ms(steps, [9, 3], t, draft, "ragged", replicates=3) == pytest.approx(
        2 * t[2, 4] + 2 * 3 * 200.0
    )


def test_a_straggler_row_sets_the_batchs_passes():
    """Eight rows that accept everything but one that never drafts: the batch pays the straggler's passes
    (the batch-1 formulas, with the pooled α, miss this)."""
    t = table_of(lambda b, k: 10.0 + b * k, rows=8, width=4)
    fast, slow = [(3, 3)], [(0, 0)]
    alone = bm.simulate_speculative_ms([fast] * 8, [33] * 8, t, np.zeros(9), "ragged", replicates=2)
    with_one_slow = bm.simulate_speculative_ms([fast] * 7 + [slow], [33] * 8, t, np.zeros(9), "ragged", replicates=2)
    assert alone == pytest.approx(8 * t[8, 4])  # 32 tokens, 4 per pass
    assert with_one_slow == pytest.approx(8 * t[8, 4] + 24 * t[1, 1])  # 8 passes with all, then 24 alone


def test_monte_carlo_matches_the_exact_expectation_of_a_random_row():
    """One row whose step accepts all 2 or none with probability 1/2 each, 3 tokens to emit after prefill:
    enumerate the paths by hand. Pass cost 1 per pass (k ignored). 4,000 replicates: SE ≈ 0.01."""
    t = table_of(lambda b, k: 1.0, rows=1, width=3)
    # room 3: a full step keeps 3 (done, 1 pass); an empty one keeps 1 → room 2: offer min(2, 1) = 1,
    # full keeps 2 (done) or empty keeps 1 → room 1: offer 0, keeps 1
    expected = 0.5 * 1 + 0.5 * (1 + 0.5 * 1 + 0.5 * 2)
    got = bm.simulate_speculative_ms([[(2, 2), (2, 0)]], [4], t, np.zeros(2), "ragged", replicates=4000, seed=1)
    assert got == pytest.approx(expected, abs=0.05)


def records_for(lengths, steps, shapes):
    """Synthetic batch records: each row's speculative steps and both engines' pass shapes."""
    rows = []
    for n, row_steps in zip(lengths, steps):
        spec = {
            "n_tokens": n,
            "pass_lengths": [g + 1 for g, _ in row_steps],
            "accept_lengths": [a for g, a in row_steps if g],
            "batch_pass_rows": shapes["spec"][0],
            "batch_pass_widths": shapes["spec"][1],
        }
        base = {"n_tokens": n, "batch_pass_rows": shapes["base"][0], "batch_pass_widths": shapes["base"][1]}
        rows.append({"baseline": base, "speculative": spec})
    return rows


def calibration_for(fn, batch_size, k_max):
    per_rows = [
        {
            "rows": b,
            "context_tokens": 10,
            "repeats": 1,
            "target_ms": {k: fn(b, k) for k in range(1, k_max + 1)},
            "target_spread": {k: 0.0 for k in range(1, k_max + 1)},
            "draft_ms": None,
        }
        for b in batch_row_grid(batch_size)
    ]
    return batch_calibration_dict(batch_size, per_rows, 0.1)


def test_prediction_equals_the_replay_when_the_run_did_what_the_model_draws():
    cal = calibration_for(lambda b, k: 5.0 + 3.0 * b * k, 2, 4)
    shapes = {"spec": ([2, 2], [4, 4]), "base": ([2] * 8, [1] * 8)}
    batch = records_for([9, 9], [[(3, 3), (3, 3)], [(3, 3), (3, 3)]], shapes)
    out = bm.batch_cost_figures([batch], cal, 3, "ragged")
    assert out["predicted_speedup_batch"] == pytest.approx(out["replayed_speedup_batch"])
    assert out["predicted_speedup_batch"] == pytest.approx((8 * (5 + 6)) / (2 * (5 + 24)))
    assert cal["rows"] == {
        "1": {str(k): 5.0 + 3 * k for k in range(1, 5)},
        "2": {str(k): 5.0 + 6 * k for k in range(1, 5)},
    }
    assert cal["verify_cost"]["3"] == pytest.approx((5 + 24) / (5 + 6))


def test_prediction_is_nan_without_a_calibration_and_old_manifests_use_their_one_batch_size():
    shapes = {"spec": ([2], [4]), "base": ([2] * 3, [1] * 3)}
    batch = records_for([4, 4], [[(3, 3)], [(3, 3)]], shapes)
    assert np.isnan(bm.batch_cost_figures([batch], None, 3, "ragged")["predicted_speedup_batch"])
    old = {"batch_size": 2, "target_ms": {"1": 10.0, "2": 12.0, "3": 14.0, "4": 16.0}, "verify_cost": {"3": 1.6}}
    out = bm.batch_cost_figures([batch], old, 3, "ragged")
    assert out["predicted_speedup_batch"] == pytest.approx((3 * 10.0) / 14.0)  # room 3: 2 offered, one pass 3 wide


def test_a_batch_is_calibrated_at_the_context_of_its_longest_prompt():
    from specbench.measure.auto.calibration import batch_context

    # batches of 2 in the run's order: longest 50, 30, 5 → median 30, plus half of 8 new tokens
    assert batch_context([10, 50, 20, 30, 5], 2, 8, None, 4) == 34
    assert batch_context([10, 50, 20, 30, 5], 1, 8, None, 4) == 20 + 4  # batch 1: the median prompt
    assert batch_context([10, 50, 20, 30, 5], 2, 8, 30, 4) == 30 - 4 - 1  # within the model's positions


def test_the_grid_calibration_times_every_row_count_and_width():
    import warnings

    from conftest import tiny_llama

    from specbench.measure.auto.calibration import calibrate_batch_grid

    with warnings.catch_warnings():  # the cache goes by the name the model takes (past_key_values warns since 5.x)
        warnings.simplefilter("error", FutureWarning)
        per_rows = calibrate_batch_grid(
            tiny_llama(0),
            [[5, 6, 7, 8], [9, 10]],
            batch_size=3,
            k_max=2,
            max_new_tokens=4,
            max_positions=None,
            draft=tiny_llama(1),
            repeats=2,
        )
    assert [c["rows"] for c in per_rows] == [1, 2, 3]
    assert all(sorted(c["target_ms"]) == [1, 2] and c["draft_ms"] > 0 and c["context_tokens"] == 6 for c in per_rows)


def test_the_cache_goes_by_the_name_each_model_takes():
    from specbench.decoding.cached_model import cache_keyword

    def renamed(input_ids=None, cache=None, use_cache=None): ...

    def old(input_ids=None, past_key_values=None, use_cache=None): ...

    assert cache_keyword(renamed) == "cache" and cache_keyword(old) == "past_key_values"

"""The paper's formulas against numbers worked out by hand, and the properties they must keep.

Paper values used: Table 2 (T5-XXL target, T5-small draft, WMT EnDe, T = 0) reports α = 0.75
at γ = 7 (measured 3.4×, not asserted: Theorem 3.8 is an expectation, not a measurement). c = 0.02
for that draft is the figure our task brief gives; we could not check it against the paper's
text. The paper's bigram draft has α = 0.2, so at most 1/(1 − α) = 1.25× when drafting is free.
"""

from __future__ import annotations

import numpy as np
import pytest

from specbench.decoding.theory import (
    Optimum,
    accepted_length_law,
    alpha_from_tokens_per_step,
    arithmetic_ops_factor,
    expected_decode_cost,
    expected_tokens_per_step,
    linear_verify_cost,
    optimal_gamma,
    optimal_gamma_extended,
    verify_cost_at,
    walltime_factor,
    walltime_factor_extended,
)
from specbench.errors import SpecbenchError

ALPHAS = [0.0, 0.05, 0.2, 0.5, 0.62, 0.75, 0.8, 0.9, 0.99, 1.0]


def test_t5_small_ende_prediction():
    # 0.75^8 = 0.5625^4 = 0.1001129150390625; 0.8998870849609375 / 0.25 / 1.14 = 3.1574985437...
    f = walltime_factor(0.75, 7, 0.02)
    assert f == pytest.approx(3.157498543722588, rel=1e-12)
    assert abs(f - 3.2) < 0.05


def test_expected_tokens_by_hand():
    assert expected_tokens_per_step(0.8, 5) == pytest.approx(3.68928, rel=1e-12)  # 0.8^6 = 0.262144
    assert expected_tokens_per_step(0.5, 3) == pytest.approx(1.875, rel=1e-12)  # 1 + 1/2 + 1/4 + 1/8
    assert expected_tokens_per_step(0.0, 7) == 1.0  # the first draft is always rejected


def test_gamma_zero_is_plain_decoding():
    for a in ALPHAS:
        assert expected_tokens_per_step(a, 0) == pytest.approx(1.0, abs=1e-15)
        assert walltime_factor(a, 0, 0.3) == pytest.approx(1.0, abs=1e-15)


def test_alpha_one_limit_is_exact_and_continuous():
    assert expected_tokens_per_step(1.0, 7) == 8.0
    assert walltime_factor(1.0, 7, 0.02) == pytest.approx(8 / 1.14, rel=1e-12)
    # Σ_{i=0..7} (1−ε)^i = 8 − 28ε + 56ε² − ...; the naive (1 − α^8)/(1 − α) rounds α^8 and
    # returns 8.0 here, off by 2.8e-8, so this tolerance can tell the two apart.
    eps = 1e-9
    naive = (1 - (1 - eps) ** 8) / eps
    assert abs(naive - (8 - 28 * eps)) > 1e-9
    assert expected_tokens_per_step(1 - eps, 7) == pytest.approx(8 - 28 * eps, abs=1e-12)


def test_corollary_3_9_gamma_one():
    # At γ = 1 the factor is (1 + α)/(1 + c): an improvement exactly when α > c.
    assert walltime_factor(0.6, 1, 0.1) == pytest.approx(1.6 / 1.1, rel=1e-12)
    assert walltime_factor(0.1, 1, 0.1) == pytest.approx(1.0, rel=1e-12)


def test_bigram_draft_bound():
    assert walltime_factor(0.2, 4, 0.0) == pytest.approx(0.99968 / 0.8, rel=1e-12)  # 0.2^5 = 0.00032
    assert walltime_factor(0.2, 60, 0.0) == pytest.approx(1.25, rel=1e-12)


def test_vectorised_matches_scalar():
    arr = np.array(ALPHAS)
    for fn, args in [
        (expected_tokens_per_step, (5,)),
        (walltime_factor, (5, 0.05)),
        (arithmetic_ops_factor, (5, 0.05)),
        (walltime_factor_extended, (5, 0.05, 1.4)),
    ]:
        out = fn(arr, *args)
        assert isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, [fn(a, *args) for a in ALPHAS], rtol=1e-14)


def test_optimal_gamma_by_hand():
    # α = 0.8, c = 0.1: γ=5 → 3.68928/1.5 = 2.45952; γ=6 → 3.951424/1.6 = 2.46964; γ=7 → 4.1611392/1.7 = 2.4477
    assert optimal_gamma(0.8, 0.1) == Optimum(6, pytest.approx(2.46964, rel=1e-12))
    # α ≤ c: nothing beats plain decoding; γ = 1 is least bad, 1.2/1.3
    assert optimal_gamma(0.2, 0.3) == Optimum(1, pytest.approx(12 / 13, rel=1e-12))
    # free drafts: the factor grows with γ, so the grid's edge wins (1 + 1/2 + 1/4 + 1/8 at γ = 3)
    assert optimal_gamma(0.5, 0.0, max_gamma=3) == Optimum(3, pytest.approx(1.875, rel=1e-12))
    assert optimal_gamma(0.99, 0.0).gamma == 64
    assert optimal_gamma(0.0, 0.0) == Optimum(1, 1.0)  # all γ tie at 1×: the smallest γ is returned


def test_optimal_gamma_matches_brute_force_of_the_naive_formula():
    for a in [0.3, 0.6, 0.75, 0.9]:
        for c in [0.01, 0.05, 0.2]:
            naive = [(1 - a ** (g + 1)) / ((1 - a) * (g * c + 1)) for g in range(1, 65)]
            best = optimal_gamma(a, c)
            assert best.gamma == 1 + int(np.argmax(naive))
            assert best.factor == pytest.approx(max(naive), rel=1e-12)


def test_optimal_gamma_monotone():
    alphas = np.linspace(0.05, 0.95, 19)
    costs = [0.0, 0.01, 0.05, 0.1, 0.3, 0.6]
    for c in costs:
        gammas = [optimal_gamma(a, c).gamma for a in alphas]
        assert gammas == sorted(gammas), f"higher α gave a smaller optimal γ at c={c}"
    for a in alphas:
        gammas = [optimal_gamma(a, c).gamma for c in costs]
        assert gammas == sorted(gammas, reverse=True), f"higher c gave a larger optimal γ at α={a}"


def test_arithmetic_ops_factor():
    assert arithmetic_ops_factor(0.75, 7, 0.0) == pytest.approx(2 / 0.8998870849609375, rel=1e-12)
    assert arithmetic_ops_factor(0.5, 1, 0.1) == pytest.approx(0.5 * 2.1 / 0.75, rel=1e-12)  # = 1.4
    assert arithmetic_ops_factor(1.0, 7, 0.0) == 1.0  # every draft accepted, no work wasted
    for a in ALPHAS:
        for g in [1, 3, 7]:
            assert arithmetic_ops_factor(a, g, 0.02) >= 1.0


def test_extended_reduces_to_theorem_3_8():
    for a in ALPHAS:
        for g in [1, 4, 9]:
            assert walltime_factor_extended(a, g, 0.05, 1.0) == pytest.approx(walltime_factor(a, g, 0.05), rel=1e-14)
            assert walltime_factor_extended(a, g, 0.05, lambda _: 1.0) == walltime_factor_extended(a, g, 0.05, 1.0)
    assert optimal_gamma_extended(0.8, 0.1, {g: 1.0 for g in range(1, 65)}) == optimal_gamma(0.8, 0.1)


def test_extended_by_hand():
    # "4 tokens cost 1.55× one" (DESIGN.md): at γ = 3, 2.952 / (0.3 + 1.55) = 1.5956756...
    cost = linear_verify_cost(0.55 / 3)
    assert verify_cost_at(cost, 3) == pytest.approx(1.55, rel=1e-12)
    assert walltime_factor_extended(0.8, 3, 0.1, cost) == pytest.approx(2.952 / 1.85, rel=1e-12)
    # γ=2: 2.44/1.5667 = 1.5574; γ=3: 1.5957; γ=4: 3.3616/2.1333 = 1.5757 → γ = 3, not Thm 3.8's 6
    assert optimal_gamma_extended(0.8, 0.1, cost).gamma == 3
    measured = {1: 1.2, 2: 1.4, 3: 1.55}  # γ=1: 1.8/1.3 = 1.385; γ=2: 2.44/1.6 = 1.525
    assert optimal_gamma_extended(0.8, 0.1, measured) == Optimum(3, pytest.approx(2.952 / 1.85, rel=1e-12))
    assert optimal_gamma_extended(0.8, 0.1, measured, max_gamma=2).gamma == 2
    with pytest.raises(SpecbenchError, match="γ = 4"):
        walltime_factor_extended(0.8, 4, 0.1, measured)
    with pytest.raises(SpecbenchError, match="> 0"):
        walltime_factor_extended(0.8, 2, 0.1, 0.0)


def test_accepted_length_law():
    assert accepted_length_law(0.5, 3) == pytest.approx([0.5, 0.25, 0.125, 0.125], abs=1e-15)
    assert accepted_length_law(0.3, 0) == [1.0]
    assert accepted_length_law(1.0, 2) == [0.0, 0.0, 1.0]
    for a in ALPHAS:
        for g in [0, 1, 5, 12]:
            law = accepted_length_law(a, g)
            assert len(law) == g + 1 and min(law) >= 0.0
            assert sum(law) == pytest.approx(1.0, abs=1e-12)
            mean = sum(n * p for n, p in enumerate(law))
            assert mean == pytest.approx(expected_tokens_per_step(a, g) - 1.0, abs=1e-12)


def test_alpha_inversion_round_trips():
    assert alpha_from_tokens_per_step(3.68928, 5) == pytest.approx(0.8, abs=1e-10)
    assert alpha_from_tokens_per_step(1.0, 4) == pytest.approx(0.0, abs=1e-10)
    assert alpha_from_tokens_per_step(5.0, 4) == pytest.approx(1.0, abs=1e-10)
    for a in ALPHAS:
        for g in [1, 3, 8]:
            assert alpha_from_tokens_per_step(expected_tokens_per_step(a, g), g) == pytest.approx(a, abs=1e-9)


@pytest.mark.parametrize(
    "call",
    [
        lambda: expected_tokens_per_step(1.1, 3),
        lambda: expected_tokens_per_step(np.array([0.5, -0.1]), 3),
        lambda: expected_tokens_per_step(0.5, -1),
        lambda: expected_tokens_per_step(0.5, 2.5),
        lambda: walltime_factor(0.5, 3, -0.1),
        lambda: arithmetic_ops_factor(0.5, 3, -0.1),
        lambda: optimal_gamma(0.5, 0.1, max_gamma=0),
        lambda: alpha_from_tokens_per_step(5.5, 4),
        lambda: alpha_from_tokens_per_step(0.9, 4),
        lambda: alpha_from_tokens_per_step(1.0, 0),
        lambda: expected_decode_cost(-1, 0.5, 0.1, 1.0, {3: 1.0}),
        lambda: expected_decode_cost(10, 0.5, 0.1, 1.0, {3: 0.5}),
        lambda: expected_decode_cost(10, 0.5, 0.1, 1.0, {3: 1.0}, room=9),
        lambda: expected_decode_cost(10, 1.5, 0.1, 1.0, {3: 1.0}),
    ],
)
def test_bad_inputs_raise_one_error_type(call):
    with pytest.raises(SpecbenchError):
        call()


def test_decode_cost_by_hand():
    # α = 1: every pass emits γ+1 tokens, so 10 tokens at γ = 3 take ceil(10/4) = 3 passes (2 overshoot at an EOS)
    assert expected_decode_cost(10, 1.0, 0.1, 1.2, {3: 1.0}) == pytest.approx((3.0, 3 * (3 * 0.1 + 1.2)))
    # α = 0: one token per pass whatever the draft costs
    assert expected_decode_cost(7, 0.0, 0.1, 1.2, {3: 1.0}) == pytest.approx((7.0, 7 * 1.5))
    assert expected_decode_cost(0, 0.5, 0.1, 1.2, {3: 1.0}) == (0.0, 0.0)
    # a budget of 5 at α = 1, γ = 3: one pass drafts 3 (emits 4), the last has room 1 and drafts none
    assert expected_decode_cost(5, 1.0, 0.1, 1.2, {3: 1.0}, room=5) == pytest.approx((2.0, (0.3 + 1.2) + 1.2))
    # one token, α = 1/2, γ = 1: a single pass whatever happens
    assert expected_decode_cost(1, 0.5, 0.1, 1.0, {1: 1.0}) == pytest.approx((1.0, 1.1))
    # two tokens, α = 1/2, γ = 1: the first pass emits 2 with prob. 1/2, else a second pass follows
    assert expected_decode_cost(2, 0.5, 0.1, 1.0, {1: 1.0}) == pytest.approx((1.5, 1.5 * 1.1))


def test_decode_cost_tends_to_the_stream_formula():
    for alpha, gamma, c, v in [(0.6, 2, 0.09, 1.1), (0.8, 5, 0.02, 1.4), (0.3, 1, 0.0, 1.0)]:
        passes, cost = expected_decode_cost(4000, alpha, c, v, {gamma: 1.0})
        assert 4000 / passes == pytest.approx(expected_tokens_per_step(alpha, gamma), rel=2e-3)
        assert 4000 / cost == pytest.approx(walltime_factor_extended(alpha, gamma, c, v), rel=2e-3)
        # short outputs lose the drafts accepted past the end: a strictly lower factor
        short = expected_decode_cost(12, alpha, c, v, {gamma: 1.0})
        assert 12 / short[1] < walltime_factor_extended(alpha, gamma, c, v)


def test_decode_cost_solves_the_process_it_models():
    """Monte Carlo of the process the recursion models (i.i.d. acceptance, a proposer offering 0 or γ
    tokens, a budget) against its solution: 20,000 outputs, the mean pass count within 4 standard
    errors. (That the runner is this process where α = 1 is checked against decode_speculative in
    test_decoding.py.)"""
    rng = np.random.default_rng(7)
    alpha, gamma, law = 0.65, 4, {0: 0.3, 4: 0.7}
    for length, room in [(9, None), (13, 13)]:
        counts = []
        for _ in range(20_000):
            emitted = passes = 0
            while emitted < length:
                offered = gamma if rng.random() < law[4] else 0
                g = offered if room is None else max(0, min(offered, room - emitted - 1))
                n = 0
                while n < g and rng.random() < alpha:
                    n += 1
                emitted += n + 1
                passes += 1
            counts.append(passes)
        counts = np.array(counts, dtype=float)
        expected, _ = expected_decode_cost(length, alpha, 0.1, 1.0, law, room)
        assert abs(counts.mean() - expected) < 4 * counts.std() / np.sqrt(len(counts))
        # negative control: the stream formula's pass count misses the simulation by far more
        stream = length / (law[4] * expected_tokens_per_step(alpha, gamma) + law[0])
        assert abs(counts.mean() - stream) > 10 * counts.std() / np.sqrt(len(counts))

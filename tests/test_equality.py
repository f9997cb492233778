"""The rejection rule emits exactly the target's law: exact laws, statistical tests with stated
power, and the peers' bugs as negative controls that must fail the same checks.

Figures: the main battery draws N = 100,000 two-token outputs through the real
`verify_sampling` (γ = 2, V = 12, T = 0.9, top-k 8, top-p 0.95) and tests at level α = 1e-3.
The joint G-test (29 df after pooling) then has power 0.76 against every law at total
variation 0.01 and detects TV 0.0103 with 80% power; the TV bound is 0.012 (guaranteed power
≥ 1 − α at TV ≥ 0.024). Exact laws are compared at 1e-6 (they agree to ~1e-16). Controls use
N = 5,000: each moves some cell's probability by ≥ 0.03 in the exact law.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specbench.config import SamplingConfig
from specbench.decoding.accept import accepted_count
from specbench.evidence.controls import CONTROLS, Control
from specbench.evidence.equality import StepSetup, one_position_check, step_checks
from specbench.evidence.exact_laws import (
    TabulatedLM,
    acceptance_measure,
    closed_form_law,
    emitted_law,
    f64,
    honest_draft,
    sequence_law,
    target_laws,
    target_sequence_law,
)
from specbench.evidence.stat_checks import (
    detectable_tv,
    exact_check,
    gof_check,
    gof_power,
    homogeneity_check,
    tv_check,
    tv_power,
    tv_samples_for_power,
)

SAMPLING = SamplingConfig(temperature=0.9, top_k=8, top_p=0.95)
CONFIGS = [
    SamplingConfig(temperature=1.0),
    SamplingConfig(temperature=0.7, top_k=5),
    SamplingConfig(temperature=1.3, top_p=0.8),
    SAMPLING,
]


def law_pairs(cfg: SamplingConfig, vocab: int = 50, seed: int = 0):
    """(p, q) pairs of processed laws: a close draft, a far draft, and the edge cases."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(vocab, generator=g)
    from specbench.decoding.sampling import processed_probs

    p = processed_probs(logits, cfg)
    close = processed_probs(logits + 0.5 * torch.randn(vocab, generator=g), cfg)
    far = processed_probs(2.0 * torch.randn(vocab, generator=g), cfg)
    disjoint = processed_probs(torch.where(p > 0, -30.0, 0.0), cfg)  # q lives where p is 0
    one_hot = torch.nn.functional.one_hot(torch.tensor(int(p.argmin())), vocab).float()  # prompt lookup's q
    return {
        "close": (p, close),
        "far": (p, far),
        "equal": (p, p.clone()),
        "disjoint": (p, disjoint),
        "one-hot-q": (p, one_hot),
        "one-hot-p": (torch.nn.functional.one_hot(p.argmax(), vocab).float(), close),
    }


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"T{c.temperature}-k{c.top_k}-p{c.top_p}")
def test_one_position_law_is_exactly_p(cfg):
    for case, (p, q) in law_pairs(cfg).items():
        res = one_position_check(case, p, q)
        assert res.passed, (case, res)
        assert res.statistic <= 1e-6


def test_acceptance_measure_is_min_one_p_over_q():
    p, q = (f64(x) for x in law_pairs(SAMPLING)["close"])
    for x in q.nonzero().flatten().tolist():
        a, u_acc, u_rej = acceptance_measure(accepted_count, x, p, q)
        assert a == pytest.approx(min(1.0, float(p[x] / q[x])), abs=1e-12)
        if 0 < a < 1:
            assert u_acc < a < u_rej


def test_closed_form_and_implemented_law_agree_and_differ_from_p_when_broken():
    p, q = (f64(x) for x in law_pairs(SAMPLING)["far"])
    torch.testing.assert_close(closed_form_law(p, q), p, atol=1e-12, rtol=0)
    torch.testing.assert_close(emitted_law(p, q), p, atol=1e-12, rtol=0)
    # fed a wrong residual, both must move away from p
    wrong = CONTROLS["abs-residual"].residual_fn
    assert float((closed_form_law(p, q, wrong) - p).abs().max()) > 1e-3
    assert float((emitted_law(p, q, residual_fn=wrong) - p).abs().max()) > 1e-3


@pytest.mark.parametrize(
    "gamma,cfg",
    [(1, SAMPLING), (2, SAMPLING), (2, SamplingConfig(temperature=1.0)), (3, SamplingConfig(temperature=0.8, top_k=3))],
)
def test_joint_law_of_first_two_tokens_is_targets(gamma, cfg):
    target, draft = StepSetup(vocab=5).models()
    p_fn, d_fn = target_laws(target, cfg), honest_draft(draft, cfg)
    law = sequence_law(p_fn, d_fn, gamma=gamma, length=2)
    res = exact_check("joint2", law, target_sequence_law(p_fn, 2))
    assert res.passed, res
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)


def test_tabulated_laws_depend_on_the_prefix_and_draft_differs_from_target():
    target, draft = StepSetup(vocab=5).models()
    assert not torch.equal(target.logits(()), target.logits((1,)))
    p_fn, d_fn = target_laws(target, SAMPLING), honest_draft(draft, SAMPLING)
    betas = [float(torch.minimum(p_fn(pre), d_fn(pre)[1]).sum()) for pre in [(), (0,), (1,), (2,), (3,), (4,)]]
    assert 0.3 < sum(betas) / len(betas) < 0.95  # both accept and reject branches carry mass
    assert sum(0 < b < 1 for b in betas) >= 4


@pytest.fixture(scope="module")
def battery():
    return step_checks(SAMPLING, n=100_000, seed=0)


def test_step_battery_passes_with_stated_n_level_and_power(battery):
    names = {r.name.rsplit("/", 2)[-2] + "/" + r.kind for r in battery}
    assert names >= {"exact/exact", "pos1/gof", "pos1/tv", "pos2/gof", "pos2/tv", "joint2/gof", "joint2/tv"}
    failed = [r for r in battery if not r.passed]
    assert not failed, failed
    for r in battery:
        if r.kind in ("gof", "tv"):
            assert r.n == 100_000 and r.threshold == 1e-3
            assert r.power is not None and r.alternative
    joint = next(r for r in battery if r.name.endswith("joint2/gof"))
    assert joint.detail["df"] >= 10
    assert joint.power >= 0.5  # against every law at TV ≥ 0.01
    assert joint.detail["tv_detectable_at_80pct_power"] <= 0.012
    tv = next(r for r in battery if r.name.endswith("joint2/tv"))
    assert tv.detail["bound"] < 0.03


def test_step_battery_without_truncation():
    res = step_checks(SamplingConfig(temperature=1.2), n=10_000, seed=1)
    assert all(r.passed for r in res), [r for r in res if not r.passed]


@pytest.mark.parametrize("name", list(CONTROLS))
def test_negative_control_fails(name):
    res = {r.name.split("/", 3)[-1]: r for r in step_checks(SAMPLING, n=5_000, seed=2, control=CONTROLS[name])}
    assert not res["exact/joint2"].passed, res["exact/joint2"]
    if name not in ("count-past-rejection", "verified-one-late"):  # need a second drafted token to show
        assert not res["exact/pos1"].passed, res["exact/pos1"]
    assert not res["joint2/gof"].passed, res["joint2/gof"]
    assert not res["joint2/tv"].passed, res["joint2/tv"]
    assert not res["pos1/gof"].passed, res["pos1/gof"]


def test_faithful_rebuild_of_verify_passes():
    """The controls' verify is verify_sampling's body with swappable pieces: unswapped, it must pass."""

    res = step_checks(SAMPLING, n=5_000, seed=3, control=Control("none"))
    assert all(r.passed for r in res), [r for r in res if not r.passed]


# ---- the statistics themselves ---------------------------------------------------------------


def _law(k: int, seed: int) -> dict:
    w = np.random.default_rng(seed).dirichlet(np.ones(k))
    return {(i,): float(x) for i, x in enumerate(w)}


def _shift(law: dict, tv: float) -> dict:
    """Move mass tv from the lower half of the cells (by index) to the upper half, proportionally."""
    cells = sorted(law)
    lo, hi = cells[: len(cells) // 2], cells[len(cells) // 2 :]
    mlo, mhi = sum(law[c] for c in lo), sum(law[c] for c in hi)
    return {**{c: law[c] * (1 - tv / mlo) for c in lo}, **{c: law[c] * (1 + tv / mhi) for c in hi}}


def _counts(law: dict, n: int, rng) -> dict:
    cells = list(law)
    draws = rng.multinomial(n, [law[c] for c in cells])
    return {c: int(k) for c, k in zip(cells, draws)}


def test_gof_level_and_power_are_honest():
    """Rejection rates over 300 replicates: ≈ α under H0, ≥ the stated power bound under an alternative."""
    rng = np.random.default_rng(0)
    law, n, level, tv = _law(10, 0), 2_000, 0.05, 0.05
    alt = _shift(law, tv)
    null_rate = np.mean([not gof_check("h0", _counts(law, n, rng), law, level=level).passed for _ in range(300)])
    alt_rate = np.mean([not gof_check("h1", _counts(alt, n, rng), law, level=level).passed for _ in range(300)])
    bound = gof_power(9, n, tv, level)
    assert null_rate < 0.1
    assert alt_rate >= bound - 0.08, (alt_rate, bound)
    assert 0.3 < bound < 0.99  # the comparison above is informative


def test_power_bound_is_monotone_and_detectable_tv_inverts_it():
    assert gof_power(10, 1e4, 0.01, 1e-3) < gof_power(10, 1e4, 0.02, 1e-3) < gof_power(10, 4e4, 0.02, 1e-3)
    tv = detectable_tv(10, 1e4, 1e-3)
    assert gof_power(10, 1e4, tv, 1e-3) == pytest.approx(0.8, abs=1e-3)
    assert gof_power(0, 1e4, 0.5, 1e-3) == 0.0


def test_statistical_checks_catch_a_small_shift_and_pass_the_truth():
    rng = np.random.default_rng(1)
    law = _law(20, 1)
    assert gof_check("ok", _counts(law, 100_000, rng), law).passed
    assert tv_check("ok", _counts(law, 100_000, rng), law).passed
    shifted = _counts(_shift(law, 0.02), 100_000, rng)
    assert not gof_check("shift", shifted, law).passed
    assert not tv_check("shift", _counts(_shift(law, 0.06), 100_000, rng), law).passed


def test_draw_outside_support_fails_outright_and_serialises():
    law = {(0,): 0.5, (1,): 0.5}
    res = gof_check("impossible", {(0,): 500, (1,): 499, (7,): 1}, law)
    assert not res.passed and res.p_value == 0.0
    assert res.detail["impossible"] == {"7": 1}
    d = res.to_dict()
    assert d["statistic"] is None
    json.dumps(d, allow_nan=False)


def test_rare_cells_are_pooled():
    law = {(i,): 0.9 / 5 for i in range(5)} | {(i,): 0.1 / 50 for i in range(5, 55)}
    rng = np.random.default_rng(2)
    res = gof_check("rare", _counts(law, 1_000, rng), law)
    assert res.detail["bins"] == 6 and res.detail["pooled_cells"] == 50
    assert res.passed


def test_homogeneity_detects_different_laws_and_accepts_equal_ones():
    rng = np.random.default_rng(3)
    law = _law(8, 3)
    same = homogeneity_check("same", _counts(law, 5_000, rng), _counts(law, 5_000, rng))
    diff = homogeneity_check("diff", _counts(law, 5_000, rng), _counts(_shift(law, 0.06), 5_000, rng))
    assert same.passed and not diff.passed
    assert same.power == pytest.approx(gof_power(same.detail["df"], 2_500, 0.05, 1e-3))


def test_exact_check_fails_on_tiny_difference():
    assert not exact_check("x", {(0,): 0.5 + 2e-6, (1,): 0.5 - 2e-6}, {(0,): 0.5, (1,): 0.5}).passed
    assert exact_check("x", {(0,): 0.5 + 5e-7, (1,): 0.5 - 5e-7}, {(0,): 0.5, (1,): 0.5}).passed


def test_tabulated_lm_is_deterministic():
    a, b = TabulatedLM(6, seed=4), TabulatedLM(6, seed=4)
    assert torch.equal(a.logits((1, 2)), b.logits((1, 2)))


# ---- verdicts: "pass" needs power ----------------------------------------------------------------


def test_pass_needs_power_and_inconclusive_says_how_many_samples():
    """A true law at N = 200 (α = 1e-3): not rejected, but its power against TV 0.05 is small, so the verdict
    is inconclusive with about the N that would reach 0.8; at 1.2 × that N the bound says ≥ 0.8 and it passes.
    Negative control: a law at TV 0.2 from the reference at N = 2,000 must fail."""
    rng = np.random.default_rng(5)
    law = _law(10, 5)
    small = gof_check("small", _counts(law, 200, rng), law)
    assert small.passed and small.power < 0.8 and small.verdict == "inconclusive"
    assert small.n_needed and f"about {small.n_needed:,} samples would reach 0.8" in small.verdict_text()
    # "about": pooling at N = 200 left fewer degrees of freedom than the larger sample has
    big = gof_check("big", _counts(law, int(1.2 * small.n_needed), rng), law)
    assert big.n_needed <= big.n and big.power >= 0.8 and big.verdict == "pass", (big.power, big.detail["df"])
    bad = gof_check("bad", _counts(_shift(law, 0.2), 2_000, rng), law)
    assert bad.verdict == "fail" and bad.to_dict()["verdict"] == "fail"


def test_tv_power_bound_is_honest():
    """At the N tv_samples_for_power gives (k = 11 bins, α = 1e-3, TV 0.05), 200 replicates under an alternative at
    TV 0.05 reject at a rate ≥ the bound's 0.8 (the bound is conservative), and the true law passes."""

    law = _law(10, 6)
    n = tv_samples_for_power(11, 0.05, 1e-3)
    assert tv_power(11, n, 0.05, 1e-3) >= 0.8 > tv_power(11, int(n * 0.9), 0.05, 1e-3)
    rng = np.random.default_rng(6)
    alt = _shift(law, 0.05)
    rate = np.mean([not tv_check("a", _counts(alt, n, rng), law).passed for _ in range(200)])
    assert rate >= 0.8, rate
    ok = tv_check("h0", _counts(law, n, rng), law)
    assert ok.passed and ok.verdict == "pass" and ok.n_needed == n

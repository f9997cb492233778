"""Perplexity equality at T > 0 (evidence/perplexity.py): the scores, the U test, its simulated power, and a
negative control (a deliberately different sampler) that must fail.

Every test states N, the level and the power it relies on; the power is computed, not assumed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import sharpen, tiny_llama, tiny_t5

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.speculative import decode_speculative
from specbench.evidence.perplexity import (
    LEVEL,
    MARGIN,
    detectable_shift,
    finite,
    mw_power,
    nll_check,
    nll_equivalence,
    tost_n_needed,
    tost_power,
)
from specbench.measure.stats.nll import example_nll, mean_nll, token_nlls

PROMPT = [5, 17, 99, 3, 250, 31, 7, 64]


def direct_nlls(model, prompt, tokens, decoder_start_id=None) -> list[float]:
    """The same scores from one plain HF forward over the whole sequence (no cache)."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            dec = torch.tensor([[decoder_start_id] + tokens[:-1]])
            logits = model(input_ids=torch.tensor([prompt]), decoder_input_ids=dec).logits[0]
        else:
            logits = model(input_ids=torch.tensor([prompt + tokens[:-1]])).logits[0, len(prompt) - 1 :]
    logp = torch.log_softmax(logits.float(), -1)
    return [-float(logp[i, t]) for i, t in enumerate(tokens)]


@pytest.mark.parametrize("kind", ["llama", "t5"])
def test_token_nlls_match_a_plain_forward(kind):
    model = tiny_llama(3) if kind == "llama" else tiny_t5(3)
    start = 0 if kind == "t5" else None
    tokens = [11, 42, 7, 300, 2, 9]
    ours = token_nlls(model, PROMPT, tokens, start)
    assert ours == pytest.approx(direct_nlls(model, PROMPT, tokens, start), abs=1e-4)
    assert mean_nll(model, PROMPT, tokens, start) == pytest.approx(np.mean(ours))
    assert mean_nll(model, PROMPT, [], start) is None
    both = example_nll(model, PROMPT, {"token_ids": tokens}, {"token_ids": tokens[:3]}, start)
    assert both["baseline"] == pytest.approx(np.mean(ours)) and both["speculative"] == pytest.approx(np.mean(ours[:3]))


def test_simulated_power_agrees_with_the_known_value():
    """Normal scores, n = 50 per side, shift 0.5 σ, two-sided α = 0.05: the U test's power is about 0.68
    (t-test power 0.70 times Pitman efficiency 3/π). The simulation (400 redraws, s.e. ≤ 0.025) must land within
    0.08."""
    pooled = np.random.default_rng(1).normal(0.0, 1.0, 4000)
    power = mw_power(pooled, 50, 50, shift=0.5, level=0.05)
    assert abs(power - 0.68) < 0.08, power
    assert mw_power(pooled, 50, 50, shift=0.0, level=0.05) < 0.1  # at H0 it is the level (±3 s.e.)
    shift = detectable_shift(pooled, 50, 50, level=0.05)
    assert 0.45 < shift < 0.7 and mw_power(pooled, 50, 50, shift=shift, level=0.05) >= 0.78


def test_equal_laws_pass_and_a_shifted_law_fails():
    """N = 200 per side, level 0.01. Same law: false failure probability 0.01. Shifted by 0.4 σ: power stated by
    the check itself (≥ 0.9 is asserted), so the failure is not luck."""
    rng = np.random.default_rng(7)
    a, b, shifted = rng.normal(3.0, 1.0, 200), rng.normal(3.0, 1.0, 200), rng.normal(3.4, 1.0, 200)
    same = nll_check("same", a, b, shift=0.4)
    assert same.passed and same.n == 400 and same.threshold == LEVEL and same.power >= 0.9
    assert same.detail["diff_ci95"][0] < 0 < same.detail["diff_ci95"][1]
    control = nll_check("control", a, shifted, shift=0.4)
    assert not control.passed and control.p_value < LEVEL and control.power >= 0.9
    assert control.detail["perplexity_speculative"] > control.detail["perplexity_baseline"]


def test_too_few_or_unusable_scores_fail_with_a_reason():
    check = nll_check("tiny", [1.0, None, "x", float("nan")], [1.0, 2.0])
    assert not check.passed and check.power == 0.0 and "fewer than 2" in check.detail["why"]
    assert list(finite([1, None, True, "2", float("inf"), 3.5])) == [1.0, 2.0, 3.5]


N_SAMPLES = 150  # outputs per engine in the model test
NEW_TOKENS = 10


def _samples(decode, n: int) -> list[list[int]]:
    return [decode(seed).token_ids for seed in range(n)]


@pytest.fixture(scope="module")
def scored():
    """Per-sample mean NLL under a sharpened tiny target: the baseline and speculative sampling at T = 1 (a tiny
    model draft, γ = 3), and a deliberately different sampler (the baseline at T = 0.7)."""
    target, draft = sharpen(tiny_llama(10), 6.0), sharpen(tiny_llama(11), 6.0)
    eos = frozenset([2])

    def base(sampling):
        return lambda seed: decode_autoregressive(
            CachedModel(target),
            PROMPT,
            max_new_tokens=NEW_TOKENS,
            sampling=sampling,
            generator=torch.Generator().manual_seed(seed),
            eos_ids=eos,
        )

    def spec(seed):
        return decode_speculative(
            CachedModel(target),
            ModelDraft(draft, "tiny"),
            PROMPT,
            gamma=3,
            max_new_tokens=NEW_TOKENS,
            sampling=SamplingConfig(temperature=1.0),
            generator=torch.Generator().manual_seed(10_000 + seed),
            eos_ids=eos,
        )

    outputs = {
        "baseline": _samples(base(SamplingConfig(temperature=1.0)), N_SAMPLES),
        "speculative": _samples(spec, N_SAMPLES),
        "control": _samples(base(SamplingConfig(temperature=0.7)), N_SAMPLES),
    }
    return {k: [mean_nll(target, PROMPT, t) for t in v] for k, v in outputs.items()}


def test_speculative_samples_pass_and_a_different_sampler_fails(scored):
    """N = 150 per engine, level 0.01, two-sided U. The control's power is computed at the shift it actually
    has (the observed difference of means) and must be ≥ 0.95, so its failure is the test working, not luck;
    the speculative check's power against 0.1 nats/token is reported by the check itself."""
    ok = nll_check("speculative", scored["baseline"], scored["speculative"])
    assert ok.passed, (ok.p_value, ok.detail)
    assert ok.n == 2 * N_SAMPLES and 0.0 < ok.power <= 1.0 and ok.detail["detectable_shift"] is not None
    gap = abs(np.mean(scored["control"]) - np.mean(scored["baseline"]))
    control = nll_check("different sampler", scored["baseline"], scored["control"], shift=gap)
    assert control.power >= 0.95, control.power
    assert not control.passed and control.p_value < LEVEL, control.p_value
    assert math.isfinite(control.statistic)


# ---- quality by equivalence: the paired TOST ----------------------------------------------------------------


def test_tost_power_formula_is_honest():
    """At the n tost_n_needed gives (sd 0.2 nats/token, margin 0.05, level 0.05 each side) the formula says ≥ 0.8;
    400 simulated paired samples at a true difference of 0 must reach "holds" at least that often (−3 s.e.),
    and at a true difference of 0.05 (on the margin) at most the level (+3 s.e.)."""
    n = tost_n_needed(0.2, MARGIN)
    assert tost_power(n, 0.2, MARGIN) >= 0.8 > tost_power(n - 1, 0.2, MARGIN)
    rng = np.random.default_rng(3)
    zeros = np.zeros(n)
    holds = np.mean([nll_equivalence(zeros, rng.normal(0, 0.2, n)).verdict == "holds" for _ in range(400)])
    assert holds >= 0.8 - 0.06, (n, holds)
    edge = np.mean([nll_equivalence(zeros, rng.normal(MARGIN, 0.2, n)).verdict == "holds" for _ in range(400)])
    assert edge <= 0.05 + 0.033, edge


def test_tost_three_verdicts_and_a_negative_control():
    """n = 300 pairs, sd 0.1: equal laws hold (power ≥ 0.95 stated); a shift of 0.15 nats/token must not hold
    (the negative control); n = 12 at sd 0.3 is inconclusive and says how many pairs would do."""
    rng = np.random.default_rng(4)
    base = rng.normal(3.0, 0.5, 300)
    same = nll_equivalence(base, base + rng.normal(0.0, 0.1, 300))
    assert same.verdict == "holds" and same.n == 300 and same.power >= 0.95, same
    assert -MARGIN < same.interval[0] < same.estimate < same.interval[1] < MARGIN
    worse = nll_equivalence(base, base + rng.normal(0.15, 0.1, 300))
    assert worse.verdict == "does not hold" and worse.interval[0] > MARGIN, worse
    few = nll_equivalence(base[:12], base[:12] + rng.normal(0.0, 0.3, 12))
    assert few.verdict == "inconclusive" and few.power < 0.8 and few.n_needed > 12, few
    assert f"about {few.n_needed:,} pairs" in few.sentence()
    # pairs with a missing score drop out as pairs; identical outputs hold exactly
    assert nll_equivalence([1.0, None, 2.0], [1.0, 5.0, 2.0]).n == 2
    assert nll_equivalence([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).verdict == "holds"
    with pytest.raises(ValueError):
        nll_equivalence([1.0], [1.0, 2.0])


def test_pairing_is_what_gives_power():
    """A per-example spread of 1 nat/token shared by both engines (prompts differ in difficulty) and a paired
    noise of 0.05: the paired TOST holds at n = 60, where the unpaired spread (≈ 1) would need thousands."""
    rng = np.random.default_rng(5)
    difficulty = rng.normal(3.0, 1.0, 60)
    res = nll_equivalence(difficulty + rng.normal(0, 0.05, 60), difficulty + rng.normal(0, 0.05, 60))
    assert res.verdict == "holds" and res.sd < 0.1, res
    assert tost_n_needed(1.0, MARGIN) > 1_000


def test_tost_on_model_samples_and_a_different_sampler(scored):
    """N = 150 pairs (same prompt; the baseline's sample i against the speculative engine's sample i), margin
    0.05 nats/token: the speculative engine must not come out "does not hold"; the control (the baseline at
    T = 0.7, whose NLL is lower by far more than the margin) must come out "does not hold"."""
    ok = nll_equivalence(scored["baseline"], scored["speculative"])
    assert ok.verdict in ("holds", "inconclusive") and ok.n == N_SAMPLES, ok
    assert ok.verdict == "holds" or ok.n_needed > N_SAMPLES
    control = nll_equivalence(scored["baseline"], scored["control"])
    assert control.verdict == "does not hold", control

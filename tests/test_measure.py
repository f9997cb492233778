"""Calibration, auto-γ, noise detection, the speedup's interval, γ policies and hardware identity.

Why: a speedup measured on one machine says little about another (the pass-cost curve t(k)
differs by CPU and dtype), so specbench measures t(k) before a run, picks γ from it and flags
timings taken on a busy machine. These tests pin every piece as a pure function (fake clocks,
synthetic records, the measured AMD EPYC fp32 curve), run calibration once on a tiny model, and
check that γ policies which look at the past keep decoding exact.

The one statistical test (test_past_dependent_gamma_keeps_the_sampling_law): a 1-layer llama on
a vocabulary of 24, T = 1, top-k 2, draws 6-token outputs with HeuristicGamma(max 3, start 1),
so the second step drafts 2 tokens after a full accept and 1 after a rejection (both > 10 % of
runs, asserted). The draft is the target's own weights with logits ÷ 10 (same top-2 everywhere,
other weights; α ≈ 0.73). N = 1,500 outputs (generator seeds 0..1499) are compared with the
target's exact law of 6-token sequences (chain rule over processed_probs, 64 cells) by a G-test
(specbench.evidence.stat_checks.gof_check) at level 1e-3; asserted power ≥ 0.95 against any law at total
variation ≥ 0.1 on the tested bins (0.989 here: df 21 after pooling). Negative control: 500
outputs of the draft alone (same sampling, every one inside the target's support, exact joint
TV 0.64 from the target's law) must fail it at p < 1e-6 — fewer draws than the test makes
failing harder, not easier. All seeds are fixed: deterministic.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections import Counter

import pytest
import torch
from conftest import small_llama, tiny_llama

from specbench.config import SamplingConfig
from specbench.decoding import theory
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.gamma_policy import AdaptiveGamma, FixedGamma, HeuristicGamma
from specbench.decoding.sampling import processed_probs
from specbench.decoding.speculative import decode_speculative
from specbench.evidence.stat_checks import gof_check
from specbench.measure.auto.calibration import (
    Calibration,
    calibrate,
    context_ids,
    draft_token_ms,
    median_and_spread,
    time_passes,
    typical_context,
)
from specbench.measure.auto.choose import PilotResult, rank_candidates
from specbench.measure.machine import hardware, noise
from specbench.measure.stats.metrics import bootstrap_speedup_ci, median_example_speedup, timing_noise

GREEDY = SamplingConfig()
PROMPTS = [[5, 17, 99, 3, 250, 31, 7, 64, 12, 400], [9, 8, 7, 6, 5], [300, 301, 302, 42]]

# SmolLM2-135M, float32, 2-core AMD EPYC: 3 tokens cost 2.1× one, 4 only 1.36× (measured)
EPYC_FP32_MS = {1: 43.4, 2: 73.6, 3: 90.3, 4: 59.1, 5: 52.4, 8: 57.3, 16: 68.0}


def curve_calibration(target_ms: dict[int, float], dtype: str = "float32") -> Calibration:
    return Calibration(
        dtype=dtype,
        device="cpu",
        context_tokens=100,
        target_ms=dict(target_ms),
        target_spread={k: 0.02 for k in target_ms},
        repeats=7,
    )


# ---------------------------------------------------------------------------------------------
# 1–2. Auto-γ and the cost model


def test_auto_gamma_on_the_epyc_fp32_curve_follows_the_measured_curve():
    cal = curve_calibration(EPYC_FP32_MS)
    pilot = PilotResult(draft="m", alpha=0.65, steps=100, lookup_law=None, model_fills=True, examples=[])
    ranked = rank_candidates({"float32": cal}, {"float32": {"m": 0.06 * 43.4}}, {"m": pilot}, list(range(1, 16)))
    # only γ whose verify pass over γ+1 tokens was measured are ranked
    assert sorted(r.gamma for r in ranked) == [1, 2, 3, 4, 7, 15]
    verify = {g: EPYC_FP32_MS[g + 1] / EPYC_FP32_MS[1] for g in range(1, 16) if g + 1 in EPYC_FP32_MS}
    expected = theory.optimal_gamma_extended(0.65, 0.06, verify, 15)
    best = ranked[0]
    assert best.gamma != 2  # the curve's worst point (3 tokens cost 2.1×) is avoided
    assert best.gamma == expected.gamma
    assert best.speedup == pytest.approx(expected.factor, rel=1e-12)
    assert best.ms_per_token == pytest.approx(43.4 / expected.factor, rel=1e-12)
    assert theory.best_gamma_from_curve(0.65, 0.06, cal.pass_cost(), 15) == expected
    assert next(r for r in ranked if r.gamma == 2).speedup < 1.0  # γ 2 would be slower than plain decoding


@pytest.mark.parametrize("alpha", [0.3, 0.65, 0.9])
def test_curve_speedup_on_a_flat_curve_is_theorem_3_8(alpha):
    flat = {k: 1.0 for k in range(1, 10)}
    for gamma in (1, 3, 8):
        for c in (0.0, 0.06, 0.3):
            assert theory.pass_cost_curve_speedup(alpha, gamma, c, flat) == pytest.approx(
                theory.walltime_factor(alpha, gamma, c), rel=1e-12
            )


def test_curve_speedup_of_lookup_and_hybrid_drafts():
    cost = curve_calibration(EPYC_FP32_MS).pass_cost()
    for c in (0.0, 5.0):  # prompt lookup without a match: one token per one-token pass, whatever c is
        lookup = theory.pass_cost_curve_speedup(0.65, 4, c, cost, {0: 1.0}, model_fills=False)
        assert lookup == pytest.approx(1.0, abs=1e-12)
    # lookup finds all γ tokens: the hybrid's model drafts none, so c drops out
    model_free = theory.pass_cost_curve_speedup(0.65, 4, 0.0, cost)
    hybrid = theory.pass_cost_curve_speedup(0.65, 4, 0.5, cost, {4: 1.0}, model_fills=True)
    assert hybrid == pytest.approx(model_free, rel=1e-12)
    assert theory.pass_cost_curve_speedup(0.65, 4, 0.5, cost) < hybrid  # a model draft pays 4·c
    # lookup finds nothing: the hybrid is the model draft
    assert theory.pass_cost_curve_speedup(0.65, 4, 0.5, cost, {0: 1.0}, model_fills=True) == pytest.approx(
        theory.pass_cost_curve_speedup(0.65, 4, 0.5, cost), rel=1e-12
    )


# ---------------------------------------------------------------------------------------------
# 3–4. The noise detector


class FakeMachine:
    """A perf_counter that only moves when a pass runs: each pass costs pass_ms (× jitter), 3× while hogged."""

    def __init__(self, pass_ms: float, jitter: float = 0.0, seed: int = 0):
        self.t, self.pass_ms, self.jitter, self.hog = 1000.0, pass_ms, jitter, False
        self.rng = random.Random(seed)

    def clock(self) -> float:
        return self.t

    def step(self) -> None:
        ms = self.pass_ms * (1 + self.rng.uniform(-self.jitter, self.jitter)) * (3 if self.hog else 1)
        self.t += ms / 1e3


def test_probe_flags_a_hog_but_not_jitter():
    busy = FakeMachine(40.0)
    probes = []
    for i in range(6):
        busy.hog = i >= 3  # another process takes the cores after the third example
        probes.append(noise.probe_ms(busy.step, clock=busy.clock))
    assert probes == pytest.approx([40.0] * 3 + [120.0] * 3, rel=1e-9)
    reasons = noise.noise_verdict(probes, [], [])
    assert len(reasons) == 1 and "machine was busy" in reasons[0] and "from probe 4" in reasons[0], reasons
    # one slow reading alone (1.6×, as an idle shared VM shows now and then) is not a shift
    assert noise.noise_verdict([40.0] * 5 + [64.0] + [40.0] * 5, [], []) == []
    quiet = FakeMachine(40.0, jitter=0.10, seed=1)  # ±10 %: at most 1.1/0.9 = 1.22× apart, below 1.5
    calm = [noise.probe_ms(quiet.step, clock=quiet.clock) for _ in range(12)]
    assert len(set(calm)) > 1 and noise.noise_verdict(calm, [], []) == []


def test_per_token_spread_flags_the_5_7x_run():
    rng = random.Random(2)
    normal = [45.0 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(7)]
    assert noise.noise_verdict([], normal, []) == []
    # the run that printed 5.741×: its baseline took 128 s for 8 tokens on one example
    reasons = noise.noise_verdict([], normal + [16000.0], [])
    assert len(reasons) == 1 and "1 of 8 examples" in reasons[0] and "16000.0" in reasons[0], reasons


def test_repeat_ratio_rule():
    assert noise.noise_verdict([], [], [1.0, 1.2, noise.REPEAT_TOLERANCE]) == []  # at the tolerance: fine
    reasons = noise.noise_verdict([], [], [1.0, 1.36, 2.0])
    assert len(reasons) == 1 and "2 of 3 repeated decodes" in reasons[0] and "2.00×" in reasons[0], reasons


def engine(n_tokens: int, decode_s: float, prefill_s: float = 0.01, repeat_s: list[float] | None = None) -> dict:
    return {"n_tokens": n_tokens, "decode_s": decode_s, "prefill_s": prefill_s, "repeat_s": repeat_s or []}


def record(base: dict, spec: dict) -> dict:
    return {"baseline": base, "speculative": spec}


def test_timing_noise_on_records_and_sweep_drift():
    # 40 ms per decoded token everywhere: nothing to flag
    records = [record(engine(n, 0.04 * (n - 1)), engine(n, 0.02 * (n - 1))) for n in (9, 17, 33, 65)]
    assert timing_noise(records) == {"suspect_timing": False, "timing_notes": []}
    assert timing_noise(records, drift=1.05)["suspect_timing"] is False
    for drift in (1.3, 0.8):
        out = timing_noise(records, drift=drift)
        assert out["suspect_timing"] is True and f"{drift:.2f}×" in out["timing_notes"][0], out
    busy = records + [record(engine(9, 1.6), engine(9, 0.16))]  # 200 ms/token on one example
    assert timing_noise(busy)["suspect_timing"] is True
    repeats = [record(engine(9, 0.32, repeat_s=[0.32, 0.48]), engine(9, 0.16, repeat_s=[0.16, 0.24]))] + records
    assert "repeated decodes" in timing_noise(repeats)["timing_notes"][0]
    calm = record(engine(9, 0.32, repeat_s=[0.32, 0.33]), engine(9, 0.16, repeat_s=[0.16, 0.17]))
    one_off = [record(engine(9, 0.32, repeat_s=[0.32, 0.45]), engine(9, 0.16, repeat_s=[0.16, 0.17]))] + [calm] * 7
    assert timing_noise(one_off)["suspect_timing"] is False  # 1 of 16 pairs 1.41× apart: an idle VM does that
    assert timing_noise([record(engine(1, 0.0), engine(1, 0.0))])["suspect_timing"] is False  # no 0-token division


# ---------------------------------------------------------------------------------------------
# 5. The speedup's bootstrap interval


def test_bootstrap_speedup_ci():
    rng = random.Random(3)
    exact = [
        record(engine(n, s, 0.1), engine(n, s / 2, 0.05))
        for n, s in ((rng.randint(5, 60), rng.uniform(0.5, 4.0)) for _ in range(12))
    ]
    lo, hi = bootstrap_speedup_ci(exact)
    assert abs(lo - 2.0) < 1e-12 and abs(hi - 2.0) < 1e-12
    assert median_example_speedup(exact) == pytest.approx(2.0, rel=1e-12)
    varied = [
        record(engine(n, s, 0.1), engine(rng.randint(5, 60), s / rng.uniform(0.8, 3.0), 0.05))
        for n, s in ((rng.randint(5, 60), rng.uniform(0.5, 4.0)) for _ in range(12))
    ]
    tot = {
        e: [sum(r[e]["n_tokens"] for r in varied), sum(r[e]["decode_s"] + r[e]["prefill_s"] for r in varied)]
        for e in ("baseline", "speculative")
    }
    point = (tot["speculative"][0] / tot["speculative"][1]) / (tot["baseline"][0] / tot["baseline"][1])
    ci = bootstrap_speedup_ci(varied)
    assert ci[0] < point < ci[1] and ci[1] - ci[0] > 0.05, (ci, point)
    assert bootstrap_speedup_ci(varied) == ci  # the same numbers every time
    assert bootstrap_speedup_ci(varied, seed=1) == ci  # t on the log (issue 40): no resampling, so no seed
    for few in ([], varied[:1]):
        assert all(math.isnan(x) for x in bootstrap_speedup_ci(few))


# ---------------------------------------------------------------------------------------------
# 6–7. Calibration


def test_time_passes_recovers_medians_in_rotated_order():
    cost_s = {1: 0.03125, 2: 0.0625, 3: 0.015625}  # dyadic: clock differences and ms are exact
    t, calls = [0.0], []

    def step(k):
        calls.append(k)
        slow = 8 if 3 <= len(calls) - 1 < 6 else 1  # the second repeat runs on a busy machine
        t[0] += cost_s[k] * slow

    samples = time_passes(step, [1, 2, 3], 5, clock=lambda: t[0])
    # each repeat starts one k later, so the busy repeat hits every k once, not the last k only
    assert calls == [1, 2, 3, 2, 3, 1, 3, 1, 2, 1, 2, 3, 2, 3, 1]
    med, spread = median_and_spread(samples)
    assert med == {1: 31.25, 2: 62.5, 3: 15.625}
    assert spread == {1: 7.0, 2: 7.0, 3: 7.0}
    assert samples[2] == [62.5, 500.0, 62.5, 62.5, 62.5]
    calls.clear()  # one round at a time (the auto replay's rounds): round i starts where repeat i would
    for i in range(4):
        time_passes(step, [1, 2, 3], 1, clock=lambda: t[0], start=i)
    assert calls == [1, 2, 3, 2, 3, 1, 3, 1, 2, 1, 2, 3]


def test_context_helpers():
    prompts = [[6, 7, 8, 9, 10], [1, 2], [3, 4, 5]]
    assert context_ids(prompts, 7) == [3, 4, 5, 3, 4, 5, 3]  # the median-length prompt, repeated
    assert context_ids(prompts, 2) == [3, 4]
    with pytest.raises(ValueError):
        context_ids([], 4)
    assert typical_context([10, 20, 30], 64, None, 4) == 20 + 32
    assert typical_context([10, 20, 30], 64, 40, 4) == 40 - 4 - 1  # room for the k_max new tokens
    assert typical_context([10], 4, 3, 4) == 1


def test_calibration_round_trip():
    cal = curve_calibration(EPYC_FP32_MS)
    cal.draft, cal.draft_ms, cal.extra = "m", 2.604, {"backend": "eager"}
    assert cal.pass_cost()[1] == 1.0 and cal.pass_cost()[3] == pytest.approx(90.3 / 43.4)
    assert cal.c == pytest.approx(0.06)
    d = json.loads(json.dumps(cal.to_dict()))  # JSON-safe: string keys
    assert d["pass_cost"]["1"] == 1.0
    assert Calibration.from_dict(d) == cal


def test_calibrate_a_tiny_llama():
    lm = CachedModel(tiny_llama(0))
    cal = calibrate(lm, PROMPTS, k_max=4, max_new_tokens=16, max_positions=512, dtype="float32", repeats=3)
    assert sorted(cal.target_ms) == [1, 2, 3, 4] and all(v > 0 for v in cal.target_ms.values())
    assert all(math.isfinite(s) and s >= 0 for s in cal.target_spread.values())
    assert cal.context_tokens == typical_context([len(p) for p in PROMPTS], 16, 512, 4)
    assert (cal.repeats, cal.device, cal.extra) == (3, "cpu", {"backend": "eager"}) and cal.seconds > 0
    # calibration leaves the cache in any state: the next decode starts its own
    after = decode_autoregressive(
        lm, PROMPTS[0], max_new_tokens=12, sampling=GREEDY, generator=None, eos_ids=frozenset([2])
    ).token_ids
    fresh = decode_autoregressive(
        CachedModel(tiny_llama(0)),
        PROMPTS[0],
        max_new_tokens=12,
        sampling=GREEDY,
        generator=None,
        eos_ids=frozenset([2]),
    ).token_ids
    assert after == fresh
    assert draft_token_ms(CachedModel(tiny_llama(1)), PROMPTS, max_new_tokens=16, max_positions=512, repeats=3) > 0


def test_a_tree_drafts_calibration_times_tree_steps_beside_the_causal_passes(monkeypatch):
    """With trees, the same rounds time a token tree's step over 2..k_max tokens (the tree mask, the path's cache
    compaction: each step runs both, and the cache is back at the context after it); tree prices read those, and fall
    back to the causal curve for t(1) and for calibrations without them (control: a chain run's calibration)."""
    calls = Counter()
    for name in ("forward_tree", "keep_path"):
        real = getattr(CachedModel, name)
        monkeypatch.setattr(
            CachedModel, name, lambda self, *a, _real=real, _n=name: calls.update([_n]) or _real(self, *a)
        )
    lm = CachedModel(tiny_llama(0))
    cal = calibrate(lm, PROMPTS, k_max=4, max_new_tokens=16, max_positions=512, dtype="float32", repeats=3, trees=True)
    assert sorted(cal.target_ms) == [1, 2, 3, 4] and sorted(cal.tree_ms) == [2, 3, 4]
    assert calls == {"forward_tree": 4 * 3, "keep_path": 4 * 3}  # k = 2..4, a warm-up round and 3 repeats
    assert lm.length == cal.context_tokens
    assert cal.tree_target_ms() == cal.target_ms | {-k: v for k, v in cal.tree_ms.items()}  # −k: a tree step
    assert cal.tree_cost()[-3] == pytest.approx(cal.tree_ms[3] / cal.target_ms[1])
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    chain = calibrate(lm, PROMPTS, k_max=4, max_new_tokens=16, max_positions=512, dtype="float32", repeats=1)
    assert chain.tree_ms == {} and chain.tree_target_ms() == chain.target_ms


# ---------------------------------------------------------------------------------------------
# 8. γ policies


def test_heuristic_and_fixed_gamma():
    h = HeuristicGamma(max_gamma=8, start=4)
    assert h.next_gamma() == 4
    h.update(drafted=4, accepted=4)
    assert h.next_gamma() == 6  # full accept: +2
    h.update(drafted=6, accepted=2)
    assert h.next_gamma() == 5  # partial: −1
    h.update(drafted=0, accepted=0)
    assert h.next_gamma() == 5  # an empty proposal is no evidence
    seen = []
    for accepted_all in [True] * 5 + [False] * 10:
        g = h.next_gamma()
        h.update(g, g if accepted_all else 0)
        seen.append(h.next_gamma())
    assert max(seen) == 8 and min(seen) == 1 and all(1 <= g <= 8 for g in seen)
    assert HeuristicGamma(3, start=10).next_gamma() == 3 and HeuristicGamma(3, start=0).next_gamma() == 1
    f = FixedGamma(5)
    for accepted in (0, 5, 2):
        f.update(5, accepted)
        assert f.next_gamma() == 5


def test_adaptive_gamma_follows_the_running_alpha():
    flat = {k: 1.0 for k in range(1, 10)}
    policy = AdaptiveGamma(max_gamma=8, pass_cost=flat, c=0.01, prior_alpha=0.9)
    gammas = []
    for _ in range(200):
        g = policy.next_gamma()
        assert g == theory.best_gamma_from_curve(policy.alpha_estimate(), 0.01, flat, 8).gamma
        gammas.append(g)
        policy.update(drafted=g, accepted=0)  # every draft rejected
    assert gammas[0] == 8  # prior α 0.9, cheap draft, free verification: draft a lot
    assert gammas[-1] == 1 and gammas == sorted(gammas, reverse=True) and len(set(gammas)) > 3
    before = policy.alpha_estimate()
    policy.update(drafted=0, accepted=0)
    assert policy.alpha_estimate() == before
    # on the EPYC curve it never lands on γ 2, the curve's worst point
    epyc = curve_calibration(EPYC_FP32_MS).pass_cost()
    assert AdaptiveGamma(15, epyc, 0.06, 0.65).next_gamma() == 4


# ---------------------------------------------------------------------------------------------
# 9. Policies keep decoding exact


def noisy_copy(model: torch.nn.Module, noise: float, seed: int) -> torch.nn.Module:
    """A draft close to its target: the target with noise on the output layer (partial acceptance)."""
    draft = copy.deepcopy(model)
    with torch.no_grad():
        w = draft.get_output_embeddings().weight
        w.add_(noise * torch.randn(w.shape, generator=torch.Generator().manual_seed(seed)))
    return draft


def test_policies_keep_greedy_identity():
    target = tiny_llama(0)
    draft = noisy_copy(target, 0.005, seed=1)
    curve = {k: 1.0 + 0.1 * (k - 1) for k in range(1, 8)}
    steps = Counter()
    for prompt in PROMPTS:
        ref = decode_autoregressive(
            CachedModel(target), prompt, max_new_tokens=24, sampling=GREEDY, generator=None, eos_ids=frozenset([2])
        ).token_ids
        for policy in (HeuristicGamma(max_gamma=6, start=1), AdaptiveGamma(6, curve, 0.05, 0.5)):
            res = decode_speculative(
                CachedModel(target),
                ModelDraft(draft, "m"),
                prompt,
                gamma=policy,
                max_new_tokens=24,
                sampling=GREEDY,
                generator=None,
                eos_ids=frozenset([2]),
            )
            assert res.token_ids == ref, (type(policy).__name__, prompt)
            steps.update(("full" if n == g else "partial", g) for g, n in zip(res.draft_lengths, res.accept_lengths))
    # both kinds of verdict happened, at several γ: the policies really changed γ mid-example
    assert {kind for kind, _ in steps} == {"full", "partial"} and len({g for _, g in steps}) >= 4, steps


V = 24
LAW_PROMPT = [4, 6, 8, 10, 12, 13]
LAW_SAMPLING = SamplingConfig(temperature=1.0, top_k=2)  # 2 tokens possible per position: 2^6 = 64 sequences
LAW_NEW, LAW_N, CONTROL_N = 6, 1_500, 500  # 6 tokens: the fewest where step 2's γ is not capped by the budget
# no EOS (eos_ids empty): every output has 6 tokens, so the exact law is the plain chain rule


def sequence_law(model, prompt: list[int], sampling: SamplingConfig, length: int) -> dict[tuple[int, ...], float]:
    """The exact law of the first `length` sampled tokens: the chain rule over every reachable prefix."""
    law = {(): 1.0}
    for _ in range(length):
        prefixes = list(law)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + list(p) for p in prefixes])).logits[:, -1]
        rows = processed_probs(logits, sampling)
        law = {
            p + (t,): law[p] * float(row[t]) for p, row in zip(prefixes, rows) for t in row.nonzero().flatten().tolist()
        }
    return law


def test_past_dependent_gamma_keeps_the_sampling_law():
    # the draft: the target at temperature 10 (its logits ÷ 10), so its law differs in weights, not in support
    target, draft = small_llama(0, sharpen=40.0), small_llama(0, sharpen=4.0)
    law = sequence_law(target, LAW_PROMPT, LAW_SAMPLING, LAW_NEW)
    draft_law = sequence_law(draft, LAW_PROMPT, LAW_SAMPLING, LAW_NEW)
    tv = 0.5 * sum(abs(law.get(s, 0.0) - draft_law.get(s, 0.0)) for s in set(law) | set(draft_law))
    assert len(law) == 64 and set(draft_law) == set(law) and tv > 0.5, tv  # the control's law is far from the target's
    lm, proposer, counts, second = CachedModel(target), ModelDraft(draft, "m"), Counter(), Counter()
    for seed in range(LAW_N):
        res = decode_speculative(
            lm,
            proposer,
            LAW_PROMPT,
            gamma=HeuristicGamma(max_gamma=3, start=1),
            max_new_tokens=LAW_NEW,
            sampling=LAW_SAMPLING,
            generator=torch.Generator().manual_seed(seed),
            eos_ids=frozenset(),
        )
        counts[tuple(res.token_ids)] += 1
        # step 1 drafts 1 token (room 5); step 2 drafts 2 after a full accept (γ 3, room 3), else 1
        assert res.draft_lengths[1] == (2 if res.accept_lengths[0] == 1 else 1)
        second[res.draft_lengths[1]] += 1
    assert min(second.values()) > LAW_N // 10 and len(second) == 2, second
    check = gof_check("heuristic-gamma/6 tokens", counts, law, level=1e-3, alt_tv=0.1)
    assert check.passed, check
    assert check.power >= 0.95, check
    # negative control: the draft's own samples must fail the same test
    dlm, control = CachedModel(draft), Counter()
    for seed in range(CONTROL_N):
        out = decode_autoregressive(
            dlm,
            LAW_PROMPT,
            max_new_tokens=LAW_NEW,
            sampling=LAW_SAMPLING,
            generator=torch.Generator().manual_seed(seed),
            eos_ids=frozenset(),
        )
        control[tuple(out.token_ids)] += 1
    bad = gof_check("draft-alone/6 tokens", control, law, level=1e-3, alt_tv=0.1)
    assert not bad.passed and bad.p_value < 1e-6 and not bad.detail["impossible"], bad  # wrong weights, not support


# ---------------------------------------------------------------------------------------------
# 10. Hardware identity

EPYC_HW = {
    "cpu_model": "AMD EPYC 7B13",
    "isa_flags": ["avx2", "avx512f", "avx512_bf16"],
    "cpu_count": 2,
    "usable_cpus": 2,
    "torch_threads": 2,
    "memory_gib": 23.4,
    "gpus": [],
    "cuda": None,
    "gpu_driver": None,
    "machine": "x86_64",
}


def test_hardware_sentence_and_bf16():
    epyc = hardware.describe(EPYC_HW)
    assert epyc.startswith("AMD EPYC 7B13, 2 CPUs (avx2, avx512f, avx512_bf16; no AMX)") and epyc.endswith("no GPU")
    xeon = hardware.describe(
        EPYC_HW | {"cpu_model": "Intel Xeon Platinum 8481C", "isa_flags": ["avx512f", "amx_tile", "amx_bf16"]}
    )
    assert "Intel Xeon Platinum 8481C" in xeon and "no AMX" not in xeon and "amx_tile" not in xeon
    arm = hardware.describe(EPYC_HW | {"cpu_model": "Neoverse-V2", "isa_flags": ["asimd", "sve"], "machine": "aarch64"})
    assert "no AMX" not in arm  # AMX is an x86 question
    gpu = hardware.describe(
        EPYC_HW
        | {
            "gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0"}],
            "cuda": "12.4",
            "gpu_driver": "550.54",
        }
    )
    assert gpu.endswith("1× NVIDIA H200 (CUDA 12.4, driver 550.54)") and "no GPU" not in gpu
    assert hardware.describe(None).startswith("unknown hardware")
    assert hardware.bf16_support("cpu", {"isa_flags": ["avx2"]})[0] is False
    assert hardware.bf16_support("cpu", {"isa_flags": ["avx512_bf16"]})[0] is True
    assert hardware.bf16_support("mps")[0] is False


def test_positional_alpha_counts_reached_and_accepted_positions():
    from types import SimpleNamespace

    from specbench.measure.auto.choose import POSITION_PRIOR, positional_alpha

    # steps (accepted n of drafted g): all 3 accepted; first rejected; 2 accepted then a rejection
    res = [SimpleNamespace(accept_lengths=[3, 0, 2], draft_lengths=[3, 3, 3])]
    pooled = 0.5
    est = positional_alpha(res, pooled)
    raw = [(2, 3), (2, 2), (1, 2)]  # (accepted, reached) at positions 1, 2, 3
    assert est == pytest.approx([(a + POSITION_PRIOR * pooled) / (t + POSITION_PRIOR) for a, t in raw])
    assert positional_alpha([SimpleNamespace(accept_lengths=[], draft_lengths=[])], pooled) is None
    # one α for every position is Eq. (1); a decaying list predicts fewer tokens for long proposals
    assert theory.expected_tokens_positional([0.7], 5) == pytest.approx(theory.expected_tokens_per_step(0.7, 5))
    assert theory.expected_tokens_positional([0.9, 0.7, 0.5], 5) < theory.expected_tokens_per_step(0.9, 5)
    flat = {k: 1.0 for k in range(1, 7)}
    assert theory.pass_cost_curve_speedup([0.7], 5, 0.0, flat) == pytest.approx(theory.walltime_factor(0.7, 5, 0.0))

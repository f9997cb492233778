"""Greedy identity past the first divergence (decoding/forced.py, measure/stats/past_divergence.py, verify).

What must hold, on the bf16-sensitive tiny pair of tests/test_numerics.py (a target and a noisy copy as the draft):
1. The teacher-forced run is the engine's: until the free run's first divergence it verifies exactly the free run's
   tokens, and a replay of its own pass record gives back its verified token at every position (so the classifier
   reads the rows the verifier read). In float32 it verifies the baseline's token everywhere.
2. Clean bf16: the free runs diverge (numerics) and the forced runs find divergences past them too; every position of
   every example is compared, and 0 are unexplained (verify's check passes).
3. The case the first-divergence check masked: a bug striking after an earlier numerics divergence (the late verified
   logits, planted only past that position) leaves the free run's first divergence, and its "numerics" verdict,
   unchanged; the forced comparison classifies the later planted divergence unexplained.
4. Negative controls through verify's own check: a planted bug (the late logits, a 64-spacing lowering of the verified
   argmax) fails it, and each graded plant of ≥ 8 spacings (and the shift) is caught on ≥ 95 % of the examples it
   touches, with ≥ 6 touched.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from helpers import noisy_pair

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.forced import decode_forced
from specbench.decoding.speculative import decode_speculative
from specbench.evidence.greedy_identity import greedy_checks
from specbench.evidence.planted import late_verified_logits, lowered_verified_argmax
from specbench.measure.stats.margin_gate import identity_line, ulp_limit
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_example, replay, speculative_passes
from specbench.measure.stats.past_divergence import explain_forced, past_divergence_counts

GREEDY = SamplingConfig()
EOS = frozenset([2])
GAMMA = 4
MAX_NEW = 32
PROMPTS = [[5 + 7 * i + j * (i + 3) % 400 for j in range(12)] for i in range(12)]  # test_numerics.py's


@pytest.fixture(scope="module")
def bf16_pair():
    return noisy_pair(torch.bfloat16)


def baseline(target, prompt) -> list[int]:
    return decode_autoregressive(
        CachedModel(target), prompt, max_new_tokens=MAX_NEW, sampling=GREEDY, generator=None, eos_ids=EOS
    ).token_ids


def free(target, draft, prompt):
    return decode_speculative(
        CachedModel(target),
        ModelDraft(draft, "d"),
        prompt,
        gamma=GAMMA,
        max_new_tokens=MAX_NEW,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
    )


def forced(target, draft, prompt, ref):
    return decode_forced(CachedModel(target), ModelDraft(draft, "d"), prompt, ref, gamma=GAMMA, max_new_tokens=MAX_NEW)


def checks(target, draft):
    (check,) = greedy_checks(
        target,
        lambda: ModelDraft(draft, "d"),
        PROMPTS,
        gammas=(GAMMA,),
        max_new_tokens=MAX_NEW,
        eos_ids=EOS,
        hf_generate=False,
    )
    return check


# ---- 1: the forced run is the engine's -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_forced_run_is_the_free_run_until_it_diverges_and_replays_exactly(dtype):
    target, draft = noisy_pair(dtype)
    parted = 0
    for prompt in PROMPTS:
        ref = baseline(target, prompt)
        spec = free(target, draft, prompt).token_ids
        run = forced(target, draft, prompt, ref)
        assert len(run.verified) == len(ref)
        d = first_divergence(ref, spec)
        upto = len(ref) if d is None else d + 1
        assert run.verified[:upto] == spec[:upto]  # the same steps on the same prefix, the divergence included
        rows = replay(target, prompt, ref, speculative_passes(run.pass_lengths, run.accept_lengths), len(ref) - 1)
        assert [int(rows[j].argmax()) for j in range(len(ref))] == run.verified  # the verifier's rows, rebuilt
        if dtype == torch.float32:
            assert run.divergences == [], (prompt, run.divergences)
        parted += d is not None
    if dtype == torch.bfloat16:
        assert parted >= 3  # bf16 does diverge on this pair (5 of 12 when written)


# ---- 2: clean bf16 -------------------------------------------------------------------------------------------------


def test_clean_bf16_compares_every_position_and_finds_nothing_unexplained(bf16_pair):
    target, draft = bf16_pair
    check = checks(target, draft)
    past = check.detail["past_divergence"]
    assert past["positions"] == sum(len(baseline(target, p)) for p in PROMPTS)
    assert len(past["examples"]) == len(PROMPTS)
    assert past["divergences"] >= 3 and past["divergences"] == past["explained"], past  # numerics only
    assert past["unexplained"] == 0 and check.passed, check.detail
    # every free run's first divergence is among the forced run's, with the same class: the forced run extends it
    firsts = {(d["prompt"], d["position"]): d["class"] for d in check.detail["divergences"]}
    forced_at = {(d["prompt"], d["position"]): d["class"] for d in past["classified"]}
    assert firsts and all(forced_at.get(key) == kind for key, kind in firsts.items()), (firsts, forced_at)


# ---- 3: the case the first-divergence check masked -----------------------------------------------------------------


def test_a_bug_after_an_explained_divergence_is_unexplained_past_it(bf16_pair):
    target, draft = bf16_pair
    floors, cases = [], []
    for prompt in PROMPTS:
        ref = baseline(target, prompt)
        spec = free(target, draft, prompt)
        d = first_divergence(ref, spec.token_ids)
        s = {"token_ids": spec.token_ids, "pass_lengths": spec.pass_lengths, "accept_lengths": spec.accept_lengths}
        numerics = explain_example(target, prompt, {"token_ids": ref}, s, GAMMA, d)
        floors.append(numerics)
        if d is not None and d < len(ref) - GAMMA - 2:
            cases.append((prompt, ref, d))
    limit = ulp_limit(u for f in floors for u in f["floor_flip_ulps"])
    floor_only = [{"identical": True, "numerics": {**f, "divergence": None}} for f in floors]
    assert len(cases) >= 2, "the pair must diverge early enough on some prompts"
    masked = 0
    for prompt, ref, d in cases:
        with late_verified_logits(every=1, after=d + 1) as seen:
            spec = free(target, draft, prompt)
        assert first_divergence(ref, spec.token_ids) == d  # the bug strikes only past it: the free run is unchanged
        s = {"token_ids": spec.token_ids, "pass_lengths": spec.pass_lengths, "accept_lengths": spec.accept_lengths}
        record = {"identical": False, "numerics": explain_example(target, prompt, {"token_ids": ref}, s, GAMMA, d)}
        old = identity_line([record] + floor_only)  # the run's floors set the gate, as in test_numerics.py
        assert old["divergences_unexplained"] == 0  # the first-divergence check sees numerics only: masked
        with late_verified_logits(every=1, after=d + 1) as seen:
            run = forced(target, draft, prompt, ref)
        touched = [
            j for j in seen.changed_before(len(ref)) if run.verified[j] != ref[j]
        ]  # the bug made the output leave the baseline
        if not touched:
            continue  # the late rows happened to agree with the baseline: nothing planted to find
        found = explain_forced(target, prompt, ref, asdict(run))
        counts = past_divergence_counts(found, None, limit)
        by_position = {x["position"]: x["class"] for x in found["divergences"]}
        assert by_position.get(d) == "numerics", found  # the earlier divergence is still explained
        assert any(by_position.get(j) == "unexplained" for j in touched), (touched, found)
        assert counts["unexplained"] >= 1 and counts["explained"] >= 1
        masked += 1
    assert masked >= 2, f"only {masked} prompts had a planted divergence after an explained one"


# ---- 4: negative controls through verify's check, and the graded plants -------------------------------------------


@pytest.mark.parametrize(
    "plant",
    [lambda: late_verified_logits(every=3), lambda: lowered_verified_argmax(64, every=3)],
    ids=["shift", "lower-64"],
)
def test_a_planted_bug_fails_verify_identity(bf16_pair, plant):
    target, draft = bf16_pair
    with plant():
        check = checks(target, draft)
    assert not check.passed and check.detail["past_divergence"]["unexplained"] >= 1, check.detail["past_divergence"]


@pytest.mark.parametrize("name,spacings", [("shift", None), ("lower-8", 8.0), ("lower-16", 16.0), ("lower-64", 64.0)])
def test_graded_plants_are_caught_on_the_examples_they_touch(bf16_pair, name, spacings):
    """One bugged verification step in 2 (more than bench/planted_bug.py's 1 in 50, so the tiny run has enough): of
    the examples a plant touched (a planted verdict emitted another token than the clean one, and not the baseline's),
    ≥ 95 % must have an unexplained divergence at a touched position, and ≥ 6 must be touched."""
    target, draft = bf16_pair
    refs = [baseline(target, p) for p in PROMPTS]
    floors = [
        explain_example(target, p, {"token_ids": r}, {"token_ids": r}, GAMMA, None) for p, r in zip(PROMPTS, refs)
    ]
    limit = ulp_limit(u for f in floors for u in f["floor_flip_ulps"])
    touched = caught = 0
    for prompt, ref in zip(PROMPTS, refs):
        plant = late_verified_logits(every=2) if spacings is None else lowered_verified_argmax(spacings, every=2)
        with plant as seen:
            run = forced(target, draft, prompt, ref)
        hit = [
            j for j in seen.changed_before(len(ref)) if run.verified[j] != ref[j]
        ]  # the bug made the output leave the baseline
        if not hit:
            continue
        touched += 1
        found = explain_forced(target, prompt, ref, asdict(run))
        past_divergence_counts(found, None, limit)
        caught += any(x["class"] == "unexplained" and x["position"] in hit for x in found["divergences"])
    assert touched >= 6, touched
    assert caught >= 0.95 * touched, (caught, touched)


def test_a_model_call_bug_within_the_gate_is_missed_and_a_wide_one_is_caught(bf16_pair):
    """The gate's blind zone, and the negative control of the catch count above: the same lowering inside the target's
    multi-token model call (evidence/planted.lowered_multi_token_argmax, rows predicting one position in 3), where the
    floor, the forced run and the replays all run under it. At 1 spacing (below the gate's 2) every divergence it
    causes is called numerics, so not one touched example is caught; at 64 spacings (beyond the gate's cap of 8) some
    are. ≥ 3 touched examples at 1 spacing, so that the miss is not for lack of a hit."""
    from specbench.evidence.planted import lowered_multi_token_argmax

    target, draft = bf16_pair
    every = 3
    result = {}
    for spacings in (1.0, 64.0):
        touched = caught = 0
        for prompt in PROMPTS:
            ref = baseline(target, prompt)
            clean = forced(target, draft, prompt, ref)
            with lowered_multi_token_argmax(spacings, every=every):
                run = forced(target, draft, prompt, ref)
                found = explain_forced(target, prompt, ref, asdict(run))
                floor = explain_example(target, prompt, {"token_ids": ref}, {"token_ids": ref}, GAMMA, None)
            keyed = [j for j in range(1, len(ref)) if (len(prompt) + j) % every == 0]
            hit = [j for j in keyed if clean.verified[j] == ref[j] != run.verified[j]]
            if not hit:
                continue
            touched += 1
            past_divergence_counts(found, None, ulp_limit(floor["floor_flip_ulps"]))
            caught += any(x["class"] == "unexplained" and x["position"] in hit for x in found["divergences"])
        result[spacings] = (caught, touched)
    assert result[1.0][1] >= 3 and result[1.0][0] == 0, result  # the blind zone: touched, never caught
    assert result[64.0][0] >= 1, result

"""The numerics classifier (measure/stats/numerics.py): a bf16 divergence is explained or flagged, never guessed.

What must hold, on tiny random Llamas (a target and a noisy copy as the draft, so that drafts are
accepted often and rejected often):
1. Replays reproduce the runs they replay: the baseline's 1-token passes give its tokens back as
   argmaxes, and the speculative run's recorded passes give *its* tokens back, in float32 and in
   bfloat16. Without this, a classification would compare the wrong logits.
2. With the correct verifier every divergence is classified numerics (0 unexplained), in bf16,
   where 5 of 12 examples diverge (exact or 1-ulp ties of the top two logits: bf16 ties are common,
   which is why the classifier takes argmax, as the engines do, and not topk's first index).
3. The exact-shapes mode (every pass of both engines padded to γ+1 tokens) makes bf16 greedy output
   identical on the same 12 prompts where 5 diverge without it, and its floor is 0.
4. Negative control: a deliberately wrong verifier (it accepts every drafted token) produces
   divergences that are unexplained in ≥ 90 % of diverging examples, in float32 and in bfloat16.
5. The margin gate (measure/stats/margin_gate.py) reads the logit gap in the dtype's spacings: issue 27's
   bf16 case (0.25 at a logit of 40, one spacing) is numerics; a planted bug the replay reproduces (a logit
   bias in the multi-token model call) is unexplained in ≥ 95 % of its divergences; planted late logits
   in the verifier likewise; verify's identity check applies the same gate.
"""

from __future__ import annotations

import pytest
import torch
from helpers import noisy_pair

import specbench.decoding.speculative as speculative_module
from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.base import Verdict
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.speculative import decode_speculative
from specbench.measure.stats.margin_gate import FLOOR_CAP_ULPS, ROUNDING_ULPS, identity_line, in_spacings, spacing
from specbench.measure.stats.metric_units import first_divergence
from specbench.measure.stats.numerics import explain_example, replay, speculative_passes, step_passes

GREEDY = SamplingConfig()
EOS = frozenset([2])
GAMMA = 4
MAX_NEW = 32
PROMPTS = [[5 + 7 * i + j * (i + 3) % 400 for j in range(12)] for i in range(12)]


pair = noisy_pair  # the bf16-sensitive pair (helpers.py), shared with test_bit_exact


def run(target, draft, prompt, pad_to: int = 1):
    base = decode_autoregressive(
        CachedModel(target), prompt, max_new_tokens=MAX_NEW, sampling=GREEDY, generator=None, eos_ids=EOS, pad_to=pad_to
    )
    spec = decode_speculative(
        CachedModel(target),
        ModelDraft(draft, "d"),
        prompt,
        gamma=GAMMA,
        max_new_tokens=MAX_NEW,
        sampling=GREEDY,
        generator=None,
        eos_ids=EOS,
        pad_to=pad_to,
    )
    return base, spec


def records(target, draft, pad_to: int = 1) -> list[dict]:
    out = []
    for prompt in PROMPTS:
        base, spec = run(target, draft, prompt, pad_to)
        b = {"token_ids": base.token_ids}
        s = {"token_ids": spec.token_ids, "pass_lengths": spec.pass_lengths, "accept_lengths": spec.accept_lengths}
        d = first_divergence(base.token_ids, spec.token_ids)
        out.append({"identical": d is None, "numerics": explain_example(target, prompt, b, s, GAMMA, d, pad_to=pad_to)})
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_replays_reproduce_both_runs(dtype):
    target, draft = pair(dtype, noise=0.1)
    seen = []
    for prompt in PROMPTS[:6]:
        base, spec = run(target, draft, prompt)
        rows = replay(target, prompt, base.token_ids, step_passes(len(base.token_ids)), len(base.token_ids) - 1)
        assert [int(rows[j].argmax()) for j in range(len(base.token_ids))] == base.token_ids
        passes = speculative_passes(spec.pass_lengths, spec.accept_lengths)
        assert sum(kept for _, kept in passes) >= len(spec.token_ids) - 1  # the record covers every emitted token
        rows = replay(target, prompt, spec.token_ids, passes, len(spec.token_ids) - 1)
        assert [int(rows[j].argmax()) for j in range(len(spec.token_ids))] == spec.token_ids
        seen += passes
    assert any(fed > 1 and kept == fed for fed, kept in seen) and any(
        kept < fed for fed, kept in seen
    )  # full + partial


def test_correct_verifier_in_bf16_only_numerics():
    target, draft = pair(torch.bfloat16)
    summary = identity_line(records(target, draft))
    assert summary["divergences_numerics"] >= 3, summary  # bf16 does diverge here (5 of 12 when written)
    assert summary["divergences_unexplained"] == 0, summary
    assert "all at near-ties" in summary["identity_line"]
    assert summary["divergences_unclassified"] == 0, summary
    assert summary["numerics_floor_positions"] > 0 and summary["numerics_floor"] is not None


def always_accept(draft_tokens: list[int], target_best: list[int]) -> Verdict:
    """A wrong verifier: every drafted token is kept, the bonus token follows."""
    return Verdict(
        n_accepted=len(draft_tokens),
        next_token=target_best[len(draft_tokens)],
        expected_accept=[1.0] * len(draft_tokens),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_negative_control_wrong_verifier_is_unexplained(dtype, monkeypatch):
    target, draft = pair(dtype, noise=0.3)  # a worse draft: its tokens often differ from the target's choice
    monkeypatch.setattr(speculative_module, "verify_greedy", always_accept)
    summary = identity_line(records(target, draft))
    diverged = summary["divergences_numerics"] + summary["divergences_unexplained"]
    assert diverged >= 6, summary  # the control must actually break outputs
    assert summary["divergences_unexplained"] >= 0.9 * diverged, summary
    assert "unexplained (candidate bugs)" in summary["identity_line"]


def test_exact_shapes_make_bf16_identical():
    """Identical without AMX (AVX-512 and AVX2 kernels: a logit does not depend on its row in a pass of fixed
    shape). On a CPU with AMX tiles oneDNN's bf16 kernels still flipped 1 near-tie in 12 (a Xeon, 2026-12-05): there
    the padding must leave fewer divergences than the unpadded run (≥ 3 here), every one a near-tie."""
    from specbench.engines.llama_cpp.backend import cpu_has_amx

    target, draft = pair(torch.bfloat16)
    summary = identity_line(records(target, draft, pad_to=GAMMA + 1))
    if not cpu_has_amx():
        assert summary["identity_line"] == f"{len(PROMPTS)}/{len(PROMPTS)} identical", summary
        assert summary["numerics_floor"] == 0.0, summary
        return
    unpadded = identity_line(records(target, draft))
    assert summary["divergences_numerics"] < unpadded["divergences_numerics"], (summary, unpadded)
    assert summary["divergences_numerics"] <= 2 and summary["divergences_unexplained"] == 0, summary


# ---- the margin gate, and a planted bug in the verification path -------------------------------------------------


def _record(kind: str, margin: float, flips: list[float] | None) -> dict:
    divergence = {"kind": kind, "step_margin": margin, "margin": margin, "position": 3}
    numerics = {"floor_positions": 10, "floor_flips": len(flips or []), "seconds": 0.0, "divergence": divergence}
    if flips is not None:
        numerics["floor_flip_margins"] = flips
    return {"identical": False, "numerics": numerics}


def test_records_without_gaps_keep_the_raw_margin_gate_and_older_ones_stay_readable():
    """Records written before gaps were stored (no gap_ulps, no floor_flip_ulps) keep the raw-margin gate: the
    replay says numerics for both divergences; the floor saw flips at margins up to 0.125, so the one at margin
    0.5 is unexplained. Records without floor margins (written before any gate) keep their replay class and say
    they were not gated."""
    gated = identity_line([_record("numerics", 0.0625, [0.0, 0.125]), _record("numerics", 0.5, [])])
    assert gated["numerics_margin_range"] == [0.0, 0.125]
    assert gated["divergences_numerics"] == 1 and gated["divergences_unexplained"] == 1
    assert gated["divergences_above_margin_range"] == 1 and "above the floor's flip range" in gated["identity_line"]
    no_flips = identity_line([_record("numerics", 0.0, [])])  # the floor never flipped: nothing is numerics
    assert no_flips["divergences_unexplained"] == 1 and no_flips["numerics_margin_range"] is None
    old = identity_line([_record("numerics", 0.5, None)])
    assert old["divergences_numerics"] == 1 and old["divergences_above_margin_range"] is None
    assert "not margin-gated" in old["identity_line"]


def test_planted_late_logits_are_unexplained_and_the_clean_engine_is_not():
    """bf16, 12 prompts, γ = 4, 32 tokens: the verifier gets the target's logits one position late on one step in 3
    (one in 50 on the real model, bench/planted_bug.py; here more often so that the tiny run has enough). Of the
    divergences it causes (first divergence at or after the first bugged step), ≥ 95 % must be unexplained,
    and at least 6 must happen so that the share means something; the clean engine, same prompts: 0 unexplained."""
    from specbench.evidence.planted import caused, late_verified_logits

    target, draft = pair(torch.bfloat16)
    clean_records = records(target, draft)
    clean = identity_line(clean_records)
    assert clean["divergences_unexplained"] == 0, clean
    # the run's floor (its flip margins set the gate's range), without the clean run's own divergences
    floor_only = [{"identical": True, "numerics": {**r["numerics"], "divergence": None}} for r in clean_records]
    hit = []
    with late_verified_logits(every=3) as planted:
        for prompt in PROMPTS:
            planted.reset()
            base, spec = run(target, draft, prompt)
            d = first_divergence(base.token_ids, spec.token_ids)
            if not caused(d, planted.first()):
                continue
            b = {"token_ids": base.token_ids}
            s = {"token_ids": spec.token_ids, "pass_lengths": spec.pass_lengths, "accept_lengths": spec.accept_lengths}
            hit.append({"identical": False, "numerics": explain_example(target, prompt, b, s, GAMMA, d)})
    summary = identity_line(hit + floor_only)
    assert len(hit) >= 6, summary
    assert summary["divergences_unexplained"] >= 0.95 * len(hit), summary


# ---- the gap in spacings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,value,ulp",
    [
        (torch.bfloat16, 40.0, 0.25),
        (torch.bfloat16, 32.0, 0.25),
        (torch.bfloat16, 31.5, 0.125),
        (torch.bfloat16, -12.0, 0.0625),
        (torch.float16, 1.0, 2.0**-10),
        (torch.float32, 3.0, 2.0**-22),
    ],
)
def test_spacing_is_the_distance_to_the_next_number_of_the_dtype(dtype, value, ulp):
    """spacing() against the dtype itself: |value| and |value| + spacing are representable, the midpoint is not."""
    assert spacing(value, dtype) == ulp
    v = abs(value)
    assert float(torch.tensor(v, dtype=dtype)) == v and float(torch.tensor(v + ulp, dtype=dtype)) == v + ulp
    assert float(torch.tensor(v + ulp / 2, dtype=dtype)) != v + ulp / 2


def _gap_record(kind: str, gap_ulps: float, flip_ulps: list[float]) -> dict:
    record = _record(kind, 0.25, [0.125] * len(flip_ulps))
    record["numerics"]["divergence"]["gap_ulps"] = gap_ulps
    record["numerics"]["floor_flip_ulps"] = flip_ulps
    return record


def test_gate_reads_the_gap_in_spacings():
    """Issue 27's case: a bf16 gap of 0.25 at a logit of 40 is one spacing; the floor's flips (raw margins up to
    0.125) were at most one spacing too. One spacing is within the final rounding's reach: numerics. Three
    spacings are not, unless the floor saw the pass shape flip that wide; a gap beyond FLOOR_CAP_ULPS is
    unexplained even when a (possibly buggy) floor flipped wider."""
    one = in_spacings(0.25, 40.0, torch.bfloat16)
    assert one == 1.0
    assert identity_line([_gap_record("numerics", one, [0.0, 1.0])])["divergences_unexplained"] == 0
    assert identity_line([_gap_record("numerics", ROUNDING_ULPS, [])])["divergences_numerics"] == 1
    wide = identity_line([_gap_record("numerics", 3.0, [0.0, 1.0])])
    assert wide["divergences_unexplained"] == 1 and wide["divergences_above_margin_range"] == 1
    assert f"wider than {ROUNDING_ULPS:g} spacings" in wide["identity_line"], wide
    seen = identity_line([_gap_record("numerics", 3.0, [3.0])])  # the floor flipped a gap this wide
    assert seen["divergences_numerics"] == 1 and "all at near-ties" in seen["identity_line"], seen
    capped = identity_line([_gap_record("numerics", FLOOR_CAP_ULPS + 1, [1e6])])
    assert capped["divergences_unexplained"] == 1, capped
    replay_says_no = identity_line([_gap_record("unexplained", 0.0, [1.0])])
    assert replay_says_no["divergences_unexplained"] == 1


def test_bias_in_the_model_call_fools_the_replay_but_not_the_gate():
    """A logit bias planted in the model call of every multi-token pass (evidence/planted.biased_multi_token_rows:
    +10 on token 3 in every row): the classifier's replays run that call too, so they reproduce the emitted token
    and say numerics; the floor, run under the bug as well, flips at gaps far beyond rounding (so its widening of
    the gate stops at FLOOR_CAP_ULPS). bf16, 12 prompts: every example must diverge (≥ 10), the replay alone must
    call most of them numerics (≥ 80 %: the replay is fooled), and after the gate ≥ 95 % are unexplained, all of
    them at gaps wider than the gate's limit. The clean engine's numerics (0 unexplained) are
    test_correct_verifier_in_bf16_only_numerics's, on the same pair and prompts."""
    from specbench.evidence.planted import biased_multi_token_rows

    target, draft = pair(torch.bfloat16)
    with biased_multi_token_rows(token=3):
        bugged = [r for r in records(target, draft) if not r["identical"]]
    assert len(bugged) >= 10, len(bugged)
    divergences = [r["numerics"]["divergence"] for r in bugged]
    assert sum(d["kind"] == "numerics" for d in divergences) >= 0.8 * len(bugged), divergences  # the replay is fooled
    summary = identity_line(bugged)
    assert summary["divergences_unexplained"] >= 0.95 * len(bugged), summary
    assert all(d["gap_ulps"] > FLOOR_CAP_ULPS for d in divergences if d["kind"] == "numerics"), divergences


def test_verify_identity_check_gates_on_the_gap_in_spacings():
    """verify's greedy identity (evidence/greedy_identity.identity_check) reads the same gate: a divergence the
    replay calls numerics at 1 spacing passes, at 3 spacings (limit 2) it is unexplained and fails the check,
    both within the dtype's margin tolerance."""
    from specbench.evidence.greedy_identity import identity_check

    def div(gap_ulps):
        return {
            "margin": 0.25,
            "tolerance": 1.0,
            "class": "numerics",
            "class_method": "replay-last-pass",
            "gap_ulps": gap_ulps,
        }

    ok = identity_check("x", [div(1.0)], 4, 0.9, None, torch.bfloat16, 16, (0.0, 0.125), ROUNDING_ULPS)
    assert ok.passed and ok.detail["numerics"] == 1 and ok.detail["numerics_gap_limit_ulps"] == ROUNDING_ULPS
    bad = identity_check("x", [div(3.0)], 4, 0.9, None, torch.bfloat16, 16, (0.0, 0.125), ROUNDING_ULPS)
    assert not bad.passed and bad.detail["unexplained"] == 1

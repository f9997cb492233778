"""`specbench verify` on tiny random models: sequence-level laws, greedy identity, checks.json.

Figures: K = 300 continuations of 4 tokens per engine (baseline, γ = 1, γ = 3; top-k 2 so the
16 sequences are enumerable), level α = 1e-3. At that K the one-sample G-test detects a
deviation of total variation ≈ 0.17 with 80% power and the two-sample test ≈ 0.24: enough for
the gross bugs below (a greedy draft moves the law by TV ≈ 0.3), not for subtle ones — those
are the job of tests/test_equality.py (N = 100,000 on tabulated laws).
"""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import torch
from conftest import sharpen, tiny_llama

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.sampling import processed_probs
from specbench.errors import SpecbenchError
from specbench.evidence.controls import CONTROLS
from specbench.evidence.greedy_identity import greedy_checks, hf_greedy, identity_check, margin_at
from specbench.evidence.pair_step import pair_step_checks
from specbench.evidence.sequence_law import homogeneity_on_prefixes, model_sequence_law, sequence_checks
from specbench.evidence.verification import run_checks, write_checks
from specbench.measure.stats.metric_units import first_divergence

EOS = frozenset({2})
SAMPLING = SamplingConfig(temperature=1.0, top_k=2)
PROMPTS = [[5, 17, 33, 4], [9, 9, 120, 7, 301], [44, 3], [250, 251, 252], [6, 60, 11, 400, 8, 13]]
K = 300


def perturbed(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A draft close to its target: the same network with noise on the output layer."""
    draft = copy.deepcopy(model)
    with torch.no_grad():
        torch.manual_seed(seed)
        w = draft.get_output_embeddings().weight
        w.add_(scale * w.std() * torch.randn_like(w))
    return draft


@pytest.fixture(scope="module")
def pair():
    target = sharpen(tiny_llama(0, layers=1), 5.0)
    return target, perturbed(target, 0.5, seed=5)


@pytest.fixture(scope="module")
def checks(pair):
    target, draft = pair
    return run_checks(
        target,
        lambda: ModelDraft(draft, "draft"),
        PROMPTS,
        SAMPLING,
        gammas=(1, 3),
        n_samples=K,
        sample_length=4,
        greedy_tokens=10,
        eos_ids=EOS,
        step_samples=1_000,
        control_samples=0,
        pair_step_samples=1_000,
        seed=0,
    )


def by_name(checks):
    return {c.name: c for c in checks}


def test_run_checks_covers_every_kind(checks):
    names = set(by_name(checks))
    assert {
        "sequence/baseline/exact",
        "sequence/γ=1/exact",
        "sequence/γ=3/exact",
        "sequence/γ=1/vs-baseline",
        "sequence/γ=3/vs-baseline",
        "greedy/hf-generate/identity",
        "greedy/γ=1/identity",
        "greedy/γ=3/identity",
    } <= names
    assert any(n.startswith("step/") and n.endswith("exact/joint2") for n in names)
    assert {"pair-step/γ=1/joint2/gof", "pair-step/γ=3/joint2/gof", "pair-step/γ=3/pos1/tv"} <= names
    assert {c.kind for c in checks} == {"exact", "gof", "tv", "homogeneity", "identity"}


def test_sequence_level_law_is_targets_with_stated_power(checks):
    seq = [c for c in checks if c.name.startswith("sequence/")]
    assert all(c.passed for c in seq), [c for c in seq if not c.passed]
    for c in seq:
        assert c.threshold == 1e-3 and c.power is not None and c.detail["exact_law"] == "enumerated"
    one = by_name(checks)["sequence/γ=3/exact"]
    assert one.n == K and one.detail["df"] >= 8
    assert one.detail["tv_detectable_at_80pct_power"] < 0.2
    two = by_name(checks)["sequence/γ=3/vs-baseline"]
    assert two.n == 2 * K and two.detail["tv_detectable_at_80pct_power"] < 0.3


def test_greedy_identity_in_float32(checks):
    greedy = [c for c in checks if c.kind == "identity"]
    assert len(greedy) == 3
    for c in greedy:
        assert c.passed and c.statistic == 0.0 and c.detail["divergences"] == [], c
        assert c.detail["token_agreement"] == 1.0 and c.n == len(PROMPTS)


def test_model_law_sums_to_one_and_respects_top_k(pair):
    law = model_sequence_law(pair[0], PROMPTS[0], 3, SAMPLING, eos_ids=EOS)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-6)
    assert len(law) <= 2**3
    assert (
        model_sequence_law(pair[0], PROMPTS[0], 3, SamplingConfig(temperature=1.0), eos_ids=EOS, max_cells=1000) is None
    )


class GreedyDraftControl:
    """Negative control: drafts the argmax of its law but reports the processed law as q."""

    is_model = True
    name = "greedy-draft-control"

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def begin(self, prompt_ids, max_new_tokens=0):
        self.prompt = list(prompt_ids)

    @torch.inference_mode()
    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0):
        ids, laws = list(tokens), []
        for _ in range(gamma):
            q = processed_probs(self.model(input_ids=torch.tensor([ids])).logits[0, -1], sampling)
            laws.append(q)
            ids.append(int(q.argmax()))
        return Proposal(tokens=torch.tensor(ids[len(tokens) :]), q_probs=torch.stack(laws), forward_calls=gamma)


def test_greedy_draft_control_fails_sequence_level(pair):
    target, draft = pair
    res = by_name(
        sequence_checks(
            target,
            lambda: GreedyDraftControl(draft),
            PROMPTS[0],
            SAMPLING,
            gammas=(3,),
            n_samples=K,
            length=4,
            eos_ids=EOS,
            seed=1,
        )
    )
    assert res["sequence/baseline/exact"].passed  # the baseline still samples the target
    assert not res["sequence/γ=3/exact"].passed, res["sequence/γ=3/exact"]
    assert not res["sequence/γ=3/vs-baseline"].passed, res["sequence/γ=3/vs-baseline"]


def tie_break_high(model: torch.nn.Module, max_new_tokens: int):
    """A greedy engine that breaks exact logit ties towards the higher id: a kernel resolving a tie differently."""
    cm = CachedModel(model)

    def run(prompt, _gen):
        cm.start()
        logits, out = cm.forward(torch.tensor(prompt)), []
        while len(out) < max_new_tokens:
            tok = int((logits == logits.max()).nonzero().max())
            out.append(tok)
            if tok in EOS:
                break
            logits = cm.forward(torch.tensor([tok]))
        return out

    return run


def corrupt_at(model: torch.nn.Module, max_new_tokens: int, position: int):
    """A broken engine: the baseline's output with one token replaced by the target's least likely one."""
    from specbench.decoding.autoregressive import decode_autoregressive

    cm = CachedModel(model)

    def run(prompt, _gen):
        out = decode_autoregressive(
            cm, prompt, max_new_tokens=max_new_tokens, sampling=SamplingConfig(), generator=None, eos_ids=frozenset()
        ).token_ids
        logits = model(input_ids=torch.tensor([prompt + out[:position]])).logits[0, -1]
        return out[:position] + [int(logits.argmin())] + out[position + 1 :]

    return run


def test_bf16_greedy_reports_mismatch_rate_and_margins():
    target = tiny_llama(0, layers=1).to(torch.bfloat16)  # unsharpened: bf16 ties are common
    draft = perturbed(target, 0.5, seed=6)
    prompts = [[i, 3 * i + 1, 7] for i in range(3, 15)]
    res = by_name(
        greedy_checks(
            target,
            lambda: ModelDraft(draft, "draft"),
            prompts,
            gammas=(2,),
            max_new_tokens=10,
            eos_ids=frozenset(),
            extra_engines={"tie-high": tie_break_high(target, 10), "corrupt": corrupt_at(target, 10, 3)},
        )
    )
    for c in res.values():
        assert c.detail["dtype"] == "bfloat16" and 0.0 <= c.detail["mismatch_rate"] <= 1.0
        for d in c.detail["divergences"]:
            assert {"prompt", "position", "margin", "noise", "tolerance"} <= set(d)
    ties = res["greedy/tie-high/identity"]
    assert ties.detail["divergences"], "expected exact bf16 ties among 120 positions"
    assert ties.passed and all(d["margin"] <= d["tolerance"] for d in ties.detail["divergences"]), ties
    bad = res["greedy/corrupt/identity"]
    assert not bad.passed and bad.statistic == 1.0
    assert {d["position"] for d in bad.detail["divergences"]} == {3}
    assert res["greedy/γ=2/identity"].passed, res["greedy/γ=2/identity"]


def test_margin_noise_is_small_in_float32(pair):
    m = margin_at(pair[0], PROMPTS[0], [7, 8, 9])
    assert m["margin"] > 0 and m["noise"] < 1e-4 and m["tolerance"] < 1e-3


def test_homogeneity_falls_back_to_shorter_prefixes_when_continuations_are_all_distinct():
    import random

    rng = random.Random(0)
    a = Counter((rng.randrange(2), rng.randrange(2), rng.randrange(10**6), rng.randrange(10**6)) for _ in range(400))
    b = Counter((rng.randrange(2), rng.randrange(2), rng.randrange(10**6), rng.randrange(10**6)) for _ in range(400))
    r = homogeneity_on_prefixes("h", a, b, 4, level=1e-3, alt_tv=0.05)
    assert r.detail["tokens_compared"] == 2 and r.detail["df"] == 3 and r.passed
    skewed = Counter({k: v for k, v in b.items() if k[1] == 0})  # second token never 1
    assert not homogeneity_on_prefixes("h", a, skewed, 4, level=1e-3, alt_tv=0.05).passed


def test_run_checks_rejects_missing_prompts(pair):
    with pytest.raises(SpecbenchError, match="prompt"):
        run_checks(pair[0], lambda: ModelDraft(pair[1], "d"), [], SAMPLING, step_samples=0)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_write_checks_is_atomic_and_strict_json(checks, tmp_path):
    json_path, jsonl_path = write_checks(checks, tmp_path / "verify")
    summary = json.loads(json_path.read_text())
    assert summary["schema_version"] == 1 and summary["n_checks"] == len(checks)
    assert summary["passed"] == all(c.passed for c in checks) and summary["n_failed"] == len(summary["failed"])
    lines = jsonl_path.read_text().splitlines()
    assert [json.loads(x)["name"] for x in lines] == [c.name for c in checks]
    assert sorted(p.name for p in (tmp_path / "verify").iterdir()) == ["checks.json", "checks.jsonl"]
    json.loads(json_path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_seq2seq_greedy_identity_and_law(t5_pair):
    # sharpened copies: an unsharpened random T5 repeats one token, which would make identity trivial
    target, draft = (sharpen(copy.deepcopy(m), 20.0) for m in t5_pair)
    prompts = [[5, 17, 33, 4], [9, 120, 7]]
    res = greedy_checks(
        target,
        lambda: ModelDraft(draft, "draft", decoder_start_id=0),
        prompts,
        gammas=(2,),
        max_new_tokens=6,
        eos_ids=frozenset({1}),
        decoder_start_id=0,
    )
    assert [c.name for c in res] == ["greedy/hf-generate/identity", "greedy/γ=2/identity"]
    assert all(c.passed and c.statistic == 0.0 for c in res), res
    assert len(set(hf_greedy(target, prompts[0], 6, frozenset({1})))) > 2  # varied, not one repeated token
    law = model_sequence_law(target, prompts[0], 2, SAMPLING, eos_ids=frozenset({1}), decoder_start_id=0)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-6) and len(law) <= 4


# ---- the step law on a pair, with power, and the negative controls through the same path ----------------------


class ArgmaxDraft:
    """A deterministic model-free proposer: the target's own greedy continuation, reported as one-hot q (as prompt
    lookup reports its copies). Its drafts are accepted often at T = 1, so acceptance bugs show."""

    is_model = False
    name = "argmax"

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def begin(self, prompt_ids, max_new_tokens=0):
        pass

    @torch.inference_mode()
    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0):
        ids = list(tokens)
        for _ in range(gamma):
            ids.append(int(self.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        drafted = torch.tensor(ids[len(tokens) :])
        vocab = self.model.config.vocab_size
        return Proposal(tokens=drafted, q_probs=torch.nn.functional.one_hot(drafted, vocab).float(), forward_calls=0)


VERIFY_DEFAULT = SamplingConfig(temperature=1.0, top_k=3)  # `specbench verify`'s default sampling


@pytest.fixture(scope="module")
def sharp_target():
    return sharpen(tiny_llama(0, layers=1), 15.0)  # top-3 laws far from uniform, so a one-sided temperature shows


def test_pair_step_law_passes_with_power_at_verify_defaults(sharp_target):
    """N = 5,000 steps (γ = 3) from one prompt, level 1e-3: the joint law of the first two tokens (9 cells, df ≤ 8)
    has power ≥ 0.8 against total variation 0.05, so the verdict is pass (not merely "not rejected");
    about 2,600 steps would do, which the check states."""
    res = by_name(
        pair_step_checks(
            sharp_target, lambda: ArgmaxDraft(sharp_target), PROMPTS[0], VERIFY_DEFAULT, gamma=3, n=5_000, eos_ids=EOS
        )
    )
    joint = res["pair-step/γ=3/joint2/gof"]
    assert joint.verdict == "pass" and joint.power >= 0.8 and joint.n_needed < 5_000, joint
    assert joint.detail["drafted_steps"] > 0 and joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert all(c.verdict != "fail" for c in res.values()), [c for c in res.values() if c.verdict == "fail"]
    small = by_name(
        pair_step_checks(
            sharp_target, lambda: ArgmaxDraft(sharp_target), PROMPTS[0], VERIFY_DEFAULT, gamma=3, n=300, eos_ids=EOS
        )
    )["pair-step/γ=3/joint2/gof"]
    assert small.verdict == "inconclusive" and "samples would reach 0.8" in small.verdict_text(), small


def test_every_control_fails_through_run_checks_at_the_default_sampling(sharp_target):
    """run_checks at verify's default sampling (T = 1, top-k 3), controls at 2,000 draws each (level 1e-3): every
    known bug, model-free (5 samplers + the off-by-one + the one-sided temperature) and verify-side on the pair,
    must be rejected; a control row passes only when its bug was caught."""
    checks = run_checks(
        sharp_target,
        lambda: ArgmaxDraft(sharp_target),
        PROMPTS[:2],
        VERIFY_DEFAULT,
        gammas=(3,),
        n_samples=50,
        sample_length=3,
        greedy_tokens=6,
        eos_ids=EOS,
        step_samples=3_000,
        control_samples=2_000,
        pair_step_samples=3_000,
        hf_generate=False,
    )
    controls = [c for c in checks if c.kind == "control"]
    names = {c.name for c in controls}
    assert {f"control/{n}/step" for n in CONTROLS} <= names
    assert {f"control/{n}/pair-step" for n, c in CONTROLS.items() if c.verify_side} <= names
    missed = [c.name for c in controls if not c.detail["caught"]]
    assert not missed, missed
    assert all(c.verdict == "pass" for c in controls)
    assert not [c for c in checks if c.verdict == "fail"], [c.name for c in checks if c.verdict == "fail"]


def test_identity_check_applies_the_margin_gate():
    """A divergence the replay calls numerics, at a margin (0.5) within the dtype's tolerance (1.0) but above every
    margin the floor saw flip (0.1), is unexplained and fails the check; at margin 0.05 it stays numerics."""

    def div(margin):
        return {"margin": margin, "tolerance": 1.0, "class": "numerics", "class_method": "replay-last-pass"}

    bad = identity_check("x", [div(0.5)], 4, 0.9, None, torch.bfloat16, 16, (0.0, 0.1))
    assert (
        not bad.passed and bad.detail["unexplained"] == 1 and bad.detail["divergences"][0]["replay_class"] == "numerics"
    )
    ok = identity_check("x", [div(0.05)], 4, 0.9, None, torch.bfloat16, 16, (0.0, 0.1))
    assert ok.passed and ok.detail["numerics"] == 1 and ok.detail["numerics_margin_range"] == [0.0, 0.1]

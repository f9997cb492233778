"""An EAGLE-3 head (issue 43): `specbench distill --kind eagle3` on a tiny random Llama target (the teacher keeps the
fused layers' outputs, training, vLLM's eagle3 layout), `--draft eagle3:<folder>` in specbench's loop (each proposal
is the head's own prediction from the target's layer outputs, greedy identity, the target's law at T > 0, one-line
refusals), and, where `make setup-vllm` has been run, the same folder in vLLM's eagle3 method accepting what
specbench's loop accepts, step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from eagle_builders import (
    ROWS,
    VLLM_PYTHON,
    accepted_by_engine,
    assert_same_acceptance,
    distill_args,
    distilled,
    invoke,
    offline_first_token,
    proposals,
    save_target,
    step_law,
    teacher_data,
    write_rows,
)
from helpers import save_tiny
from safetensors.torch import load_file

from specbench.config import SamplingConfig
from specbench.decoding.drafts.eagle import EagleDraft
from specbench.decoding.drafts.factory import make_proposer
from specbench.distill import get_preset
from specbench.distill.shards import KIND_ON_POLICY
from specbench.engines.vllm.heads import check_head
from specbench.evidence.sequence_law import sequence_checks
from specbench.models import load_model
from specbench.models.eagle3_head import default_aux_layers, new_eagle3_head, save_eagle3_head
from specbench.run_specs import parse_draft

needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> str:
    return save_target(tmp_path_factory.mktemp("eagle3-target") / "t")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory) -> str:
    return write_rows(tmp_path_factory.mktemp("eagle3-task") / "toy.jsonl")


@pytest.fixture(scope="module")
def trained(target, task_file, tmp_path_factory):
    return distilled("eagle3", target, task_file, tmp_path_factory.mktemp("eagle3") / "head")


def random_head(target: str, folder: Path) -> str:
    """An untrained EAGLE-3 head in the same layout: the negative control of the learning checks."""
    t = load_model(target, device="cpu")
    save_eagle3_head(new_eagle3_head(t.model, seed=1), folder, torch.float32)
    return str(folder)


def test_the_feature_layers_are_vllms_default_and_distinct_in_layer_order():
    assert default_aux_layers(30) == (2, 15, 27)  # SmolLM2-135M: vLLM's (2, L // 2, L - 3)
    assert default_aux_layers(32) == (2, 16, 29)
    assert default_aux_layers(2) == (0, 1) and default_aux_layers(4) == (1, 2, 3)  # too shallow: the last inputs
    assert all(list(default_aux_layers(n)) == sorted(set(default_aux_layers(n))) for n in range(1, 64))
    assert all(max(default_aux_layers(n)) < n for n in range(1, 64))  # never L: transformers' L is after the norm


def test_cli_writes_vllms_eagle3_layout_and_a_manifest(trained, target):
    out, manifest = trained
    assert manifest["status"] == "done" and manifest["command"].startswith("specbench distill --kind eagle3 ")
    assert manifest["training"]["loss_curve"][-1][1] < manifest["training"]["loss_curve"][0][1]
    t_config = json.loads((Path(target) / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    H, V = t_config["hidden_size"], t_config["vocab_size"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1] and config["draft_vocab_size"] == V
    w = load_file(str(out / "model.safetensors"))
    assert w["fc.weight"].shape == (H, 2 * H)  # two layers' outputs fused (a 2-layer target)
    assert w["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * H  # attention reads embedding ⊕ fused state
    assert w["lm_head.weight"].shape == (V, H) and w["norm.weight"].shape == (H,)
    assert "midlayer.hidden_norm.weight" in w and "midlayer.input_layernorm.weight" in w
    assert not any(k.startswith("rotary") or k.startswith("layers.") for k in w)
    check_head("eagle3", str(out), 3, f"eagle3:{out}")  # what --engine vllm checks before its worker loads


def test_the_teacher_keeps_the_fused_layers_outputs_at_every_label(trained, target):
    out, _ = trained
    data = teacher_data(out)
    t = load_model(target, device="cpu")
    H = t.model.config.hidden_size
    assert data.hidden is not None and data.hidden.shape == (data.topk_idx.shape[0], 2 * H)
    checked = 0
    for d in range(len(data.kind)):
        if int(data.kind[d]) != KIND_ON_POLICY:
            continue
        s, n = int(data.doc_start[d]), int(data.doc_len[d])
        with torch.no_grad():
            hs = t.model(data.tokens[s : s + n].long()[None], output_hidden_states=True).hidden_states
        ls, le = int(data.label_start[d]), int(data.label_end[d])
        rows = slice(int(data.label_off[d]), int(data.label_off[d + 1]))
        want = torch.cat([hs[0][0, ls:le], hs[1][0, ls:le]], dim=-1)
        torch.testing.assert_close(data.hidden[rows].float(), want, atol=2e-2, rtol=1e-2)
        torch.testing.assert_close(t.model.lm_head(hs[-1][0, ls:le]).argmax(-1), data.topk_idx[rows, 0].long())
        checked += 1
    assert checked == 15  # 12 training rows + 3 held-out rows


def untrained_evaluation(out: Path, target: str, folder: Path) -> dict:
    """The held-out checks of an untrained head on `out`'s teacher data (the learning checks' negative control)."""
    from specbench.distill.eagle_training import EagleTrainer

    data = teacher_data(out)
    t = load_model(target, device="cpu")
    heldout = torch.nonzero(data.heldout).view(-1).tolist()
    fresh = make_proposer(parse_draft(f"eagle3:{random_head(target, folder)}"), t)
    return EagleTrainer(fresh.head.head, t, get_preset("small", "eagle3"), data).evaluate(heldout)


def test_the_trained_head_agrees_with_the_target_more_than_an_untrained_one(trained, target, tmp_path):
    out, manifest = trained
    untrained = untrained_evaluation(out, target, tmp_path / "fresh")
    after = manifest["checks"]["heldout_after_export"]
    assert after["agreement_reply"] > untrained["agreement_reply"] + 0.1, (after, untrained)
    assert after["kl"] < untrained["kl"]


def test_each_proposal_is_the_heads_own_prediction_from_the_targets_layers(trained, target, monkeypatch):
    """Every proposal's first token equals the head run from scratch on the target's layer outputs of the sequence so
    far (the loop keeps the right layers, the draft fuses only the target's, crops its cache after rejections); a
    hand-over off by one position (negative control) breaks it. Greedy identity: test_run_draft_eagle3_end_to_end."""
    out, _ = trained
    t = load_model(target, device="cpu")
    prompts = [t.tokenizer(r["prompt"])["input_ids"] for r in ROWS[4:8]]
    draft = make_proposer(parse_draft(f"eagle3:{out}"), t)
    assert isinstance(draft, EagleDraft) and draft.feature_layers == (0, 1)
    seen = proposals(t, draft, prompts, 3)
    assert len(seen) > len(prompts)
    assert [offline_first_token(t, draft.head, tokens) for tokens, _ in seen] == [first for _, first in seen]

    observe = EagleDraft.observe_hidden
    monkeypatch.setattr(EagleDraft, "observe_hidden", lambda self, h: observe(self, h.roll(1, 0)))
    broken = make_proposer(parse_draft(f"eagle3:{out}"), t)
    seen = proposals(t, broken, prompts, 3)
    assert [offline_first_token(t, broken.head, tokens) for tokens, _ in seen] != [first for _, first in seen]


def test_sampled_output_keeps_the_targets_law(trained, target):
    """T = 1, top-k 3: three tokens of speculative runs against the target's exact law (G-test, power ≥ 0.8 against a
    total variation of 0.1)."""
    out, _ = trained
    t = load_model(target, device="cpu")
    prompt = t.tokenizer(ROWS[9]["prompt"])["input_ids"]
    sampling = SamplingConfig(temperature=1.0, top_k=3)

    def factory():
        return make_proposer(parse_draft(f"eagle3:{out}"), t)

    kw = dict(gammas=(2,), n_samples=1100, length=3, eos_ids=t.eos_ids, alt_tv=0.1)
    checks = {c.name: c for c in sequence_checks(t.model, factory, prompt, sampling, **kw)}
    exact = checks["sequence/γ=2/exact"]
    assert exact.passed and exact.power >= 0.8, exact


def test_verify_step_law_feeds_the_heads_layers_and_catches_a_verify_side_bug(trained, target):
    """`specbench verify`'s step law (evidence/pair_step.py hands the head the target's outputs of its layers for each
    state's tokens) at T = 1, top-k 3, with power; the always-accept control through the same path fails."""
    from specbench.evidence.controls import CONTROLS

    out, _ = trained
    joint = step_law(target, f"eagle3:{out}", 10)
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert not step_law(target, f"eagle3:{out}", 10, control=CONTROLS["always-accept"]).passed


def test_a_head_of_the_other_kind_or_shape_is_one_line_exit_2(trained, target, task_file, tmp_path):
    from tiny_heads import save_head as save_random_head

    out, _ = trained
    eagle1 = save_random_head(tmp_path / "e1", target, "eagle")
    other = save_tiny(tmp_path / "other", 1, hidden=64)
    cases = {  # a reduced draft vocabulary's refusals: tests/test_eagle3_vocab.py
        f"eagle:{out}": "pass it as --draft eagle3:<folder>",
        f"eagle3:{eagle1}": "pass it as --draft eagle:<folder>",
        f"eagle3:{save_random_head(tmp_path / 'h64', other, 'eagle3')}": "the head's hidden_size is 64",
        "eagle3:": "eagle3 needs its head's folder",
    }
    for draft, message in cases.items():
        args = ["run", "--target", target, "--draft", draft, "--task", task_file, "--limit", "1", "--device", "cpu"]
        result = invoke(*args, "--results-dir", tmp_path / "res", catch=True)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and message in lines[-1] and lines[-1].startswith("error:"), result.output


def test_run_draft_eagle3_end_to_end(trained, target, task_file, tmp_path):
    out, _ = trained
    args = ["run", "--target", target, "--draft", f"eagle3:{out}", "--task", task_file, "--limit", "2"]
    args += ["--max-new-tokens", "10", "--gamma", "3", "--device", "cpu", "--results-dir", tmp_path / "res"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "res").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["greedy_identity"] == 1.0 and summary["drafted"] > 0
    listing = invoke("list", "drafts")
    assert listing.exit_code == 0 and "eagle3:<folder>" in listing.output


@needs_vllm
def test_vllm_runs_the_exported_eagle3_head_and_accepts_what_specbench_accepts(vllm_session, tmp_path):
    """A head distilled for the vLLM session's tiny target decodes in vLLM's eagle3 method (greedy identity, fp32), and
    specbench's loop, reading the same folder, accepts what vLLM accepts step by step: the same fused layers, the same
    layer, read the same way."""

    s = vllm_session
    task = write_rows(tmp_path / "toy.jsonl")
    out = tmp_path / "head"
    result = invoke(*distill_args("eagle3", s.load.target, str(task), out), "--device", "cpu", "--steps", 24)
    assert result.exit_code == 0, result.output
    accepted = accepted_by_engine(s, f"eagle3:{out}", str(task), tmp_path)
    loaded = [e["speculative_config"] for e in s.engines.values() if e["speculative_config"]]
    assert {"method": "eagle3", "num_speculative_tokens": 2, "model": str(out)} in loaded
    assert_same_acceptance(accepted)


def test_the_unrolled_chain_is_what_drafting_computes_at_each_depth(target):
    """--unroll's chained steps (UnrolledKV) at index p equal the draft's own chain after position p: step 1's keys at
    ≤ p from the target's features, then depth 2 and 3 fed the head's own outputs one position at a time through the
    drafting cache. The control, step j attending causally over every earlier key (what a plain concatenation would
    do), differs."""
    from specbench.models.eagle3_head import UnrolledKV, _KVCache

    head = new_eagle3_head(load_model(target, device="cpu").model, seed=3).eval()
    H, L, depth = head.config.hidden_size, 6, 3
    gen = torch.Generator().manual_seed(0)
    emb, g_true = torch.randn(1, L + depth, H, generator=gen), torch.randn(1, L, H, generator=gen)

    def unrolled(cache) -> list[torch.Tensor]:
        g, outs = g_true, []
        for j in range(depth):
            normed, g = head(emb[:, 1 + j : L + 1 + j], g, torch.arange(j, L + j)[None], cache=cache)
            outs.append(normed[0])
        return outs

    class Causal(UnrolledKV):
        def allowed(self, queries, past, device):
            return _KVCache.allowed(self, queries, past, device)

    with torch.no_grad():
        chained, control = unrolled(UnrolledKV()), unrolled(Causal())
        for p in range(L):
            cache = _KVCache()
            normed, g = head(emb[:, 1 : p + 2], g_true[:, : p + 1], torch.arange(p + 1)[None], cache=cache)
            drafted = [normed[0, -1]]
            for j in range(1, depth):
                normed, g = head(emb[:, p + 1 + j : p + 2 + j], g[:, -1:], torch.tensor([[p + j]]), cache=cache)
                drafted.append(normed[0, -1])
            for j in range(depth):
                torch.testing.assert_close(chained[j][p], drafted[j], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(control[1][: L - 1], chained[1][: L - 1], atol=1e-3)  # the control must differ


def test_the_chained_loss_weighs_each_step_as_eagle3_does():
    from specbench.distill.eagle_training import CHAIN_DECAY, chained_loss_rows

    steps = [
        (torch.zeros(m, 2), torch.arange(m) + 10 * j, torch.ones(m, dtype=torch.bool)) for j, m in enumerate([6, 4, 0])
    ]
    f, rows, weights = chained_loss_rows(steps)
    kls = torch.tensor([1.0] * 6 + [3.0] * 4)
    assert f.shape == (10, 2) and rows[:6].tolist() == list(range(6)) and rows[6:].tolist() == [10, 11, 12, 13]
    assert float((weights * kls).sum() / len(kls)) == pytest.approx(1.0 + CHAIN_DECAY * 3.0)  # Σ 0.8^(j-1) · mean_j


def test_unroll_trains_the_chain_and_reports_the_second_tokens_agreement(trained, target, task_file, tmp_path):
    """--unroll 2 is recorded (command, checkpoint key), changes the steps (a silently ignored option would retrace
    the unroll-1 run's loss curve exactly), still learns, and the held-out checks report the second chained token's
    agreement for both heads; a head kind it does not apply to, or 0 steps, is a one-line exit 2."""
    _, plain = trained
    out, manifest = distilled("eagle3", target, task_file, tmp_path / "u2", extra=("--unroll", "2"))
    assert "--unroll 2" in manifest["command"] and "--unroll" not in plain["command"]
    assert manifest["training"]["loss_curve"] != plain["training"]["loss_curve"]
    after, before = manifest["checks"]["heldout_after_export"], plain["checks"]["heldout_after_export"]
    assert after["chained_positions"] > 0 and before["chained_positions"] == after["chained_positions"]
    assert 0.0 <= after["agreement_chained"] <= 1.0 and 0.0 <= before["agreement_chained"] <= 1.0
    untrained = untrained_evaluation(out, target, tmp_path / "fresh")
    assert after["agreement_reply"] > untrained["agreement_reply"] + 0.1, (after, untrained)  # still learns
    for kind, unroll, message in [("eagle", "2", "use --kind eagle3"), ("eagle3", "0", "--unroll must be >= 1")]:
        args = [*distill_args(kind, target, task_file, tmp_path / f"x{kind}"), "--unroll", unroll]
        r = invoke(*args, catch=True)
        assert r.exit_code == 2 and message in r.output.strip().splitlines()[-1], r.output

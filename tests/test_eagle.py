"""An EAGLE-style head (issue 43): `specbench distill --kind eagle` on a tiny random Llama target (teacher hidden
states, training, resume, vLLM's eagle layout), `--draft eagle:<folder>` in specbench's loop (the hidden states handed
over, greedy identity, the target's law at T > 0, one-line refusals), and, where `make setup-vllm` has been run, the
same exported folder decoding in vLLM."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from eagle_builders import (
    ROWS,
    VLLM_PYTHON,
    decode,
    distill_args,
    distilled,
    invoke,
    proposals,
    save_target,
    step_law,
    teacher_data,
    write_rows,
)
from helpers import save_tiny
from safetensors.torch import load_file

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.eagle import EagleDraft
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.sampling import processed_probs
from specbench.distill import DistillConfig, distill, get_preset
from specbench.distill.settings import EAGLE_PRESETS, PRESETS
from specbench.distill.shards import KIND_ON_POLICY
from specbench.engines.vllm.heads import check_head
from specbench.evidence.sequence_law import sequence_checks
from specbench.models import load_model
from specbench.models.eagle_head import new_head, save_head
from specbench.run_specs import parse_draft

needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> str:
    return save_target(tmp_path_factory.mktemp("eagle-target") / "t")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory) -> str:
    return write_rows(tmp_path_factory.mktemp("eagle-task") / "toy.jsonl")


@pytest.fixture(scope="module")
def trained(target, task_file, tmp_path_factory):
    """One uninterrupted small-preset eagle run through the CLI, shared by the tests that read it."""
    return distilled("eagle", target, task_file, tmp_path_factory.mktemp("eagle") / "head")


def random_head(target: str, folder: Path) -> str:
    """An untrained head for the target, in the same layout: the negative control of every learning check."""
    t = load_model(target, device="cpu")
    folder.mkdir(parents=True, exist_ok=True)
    save_head(new_head(t.model, seed=1), folder, torch.float32)
    return str(folder)


# --------------------------------------------------------------------------- distill --kind eagle


def test_cli_small_preset_writes_vllms_eagle_layout_and_a_manifest(trained, target, task_file):
    out, manifest = trained
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["steps"] == {"done": 40, "total": 40}
    assert manifest["command"].startswith(f"specbench distill --kind eagle --target {target} --out {out} ")
    training = manifest["training"]
    assert [row[0] for row in training["heldout"]] == [8, 16, 24, 32, 40]
    assert training["loss_curve"][-1][1] < training["loss_curve"][0][1]  # the loss falls
    checks = manifest["checks"]
    assert checks["cost"] is None and checks["speculative"]["trials"] > 0
    assert checks["heldout_after_export"]["reply_positions"] > 0
    by_task = checks["heldout_by_task"]  # each task's own figure; their positions add up to the whole
    assert sum(ev["positions"] for ev in by_task.values()) == checks["heldout_after_export"]["positions"]
    assert {"config.json", "model.safetensors", "manifest.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.rglob(".*")]  # no temporary file left behind
    t_config = json.loads((Path(target) / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    hidden = t_config["hidden_size"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (
        1,
        hidden,
        t_config["vocab_size"],
    )
    weights = load_file(str(out / "model.safetensors"))
    assert weights["fc.weight"].shape == (hidden, 2 * hidden)
    assert all(k == "fc.weight" or k.startswith("layers.0.") for k in weights)
    assert "layers.0.self_attn.q_proj.weight" in weights and "layers.0.mlp.down_proj.weight" in weights
    assert not any("input_layernorm" in k or "embed" in k or "lm_head" in k for k in weights)
    check_head("eagle", str(out), 3, f"eagle:{out}")  # what --engine vllm checks before its worker loads


def test_the_teacher_keeps_the_targets_final_hidden_state_at_every_label(trained, target):
    """Each labelled position's hidden state in the shards is what the target's output layer reads there."""
    out, _ = trained
    data = teacher_data(out)
    assert data.hidden is not None and data.hidden.dtype == torch.float16
    assert data.hidden.shape[0] == data.topk_idx.shape[0]
    t = load_model(target, device="cpu")
    checked = 0
    for d in range(len(data.kind)):
        if int(data.kind[d]) != KIND_ON_POLICY:
            continue
        s, n = int(data.doc_start[d]), int(data.doc_len[d])
        with torch.no_grad():
            h = t.model(data.tokens[s : s + n].long()[None], output_hidden_states=True).hidden_states[-1][0]
        ls, le = int(data.label_start[d]), int(data.label_end[d])
        rows = slice(int(data.label_off[d]), int(data.label_off[d + 1]))
        torch.testing.assert_close(data.hidden[rows].float(), h[ls:le], atol=2e-2, rtol=1e-2)
        torch.testing.assert_close(t.model.lm_head(h[ls:le]).argmax(-1), data.topk_idx[rows, 0].long())
        checked += 1
    assert checked == 15  # 12 training rows + 3 held-out rows


def test_a_training_batch_pairs_token_t_plus_1_and_h_t_with_h_t_plus_1_from_the_prompts_start(trained, target):
    """make_eagle_batch on an on-policy document: every fed position t holds the target's h_t (its task's shared
    prefix from the prefix document) and token t+1 at RoPE position t; every loss position's target is h_{t+1}."""
    from specbench.distill.eagle_training import make_eagle_batch, prefix_docs

    out, _ = trained
    data = teacher_data(out)
    t = load_model(target, device="cpu")
    d = next(d for d in range(len(data.kind)) if int(data.kind[d]) == KIND_ON_POLICY)
    s, n = int(data.doc_start[d]), int(data.doc_len[d])
    tokens = data.tokens[s : s + n].long()
    with torch.no_grad():
        h = t.model(tokens[None], output_hidden_states=True).hidden_states[-1][0]  # [n, H]
    b = make_eagle_batch(data, [d], 512, prefix_docs(data))
    w = int(b.mask.sum())
    pos = b.pos[0, :w]
    # from position 0 (the prefix in front) to n-3: the last label is at n-2 (the newest token was never fed)
    assert pos.tolist() == list(range(w)) and w == n - 2
    assert torch.equal(b.ids[0, :w], tokens[1 : w + 1])
    torch.testing.assert_close(data.hidden[b.src[0, :w]].float(), h[:w], atol=2e-2, rtol=1e-2)
    loss_pos = pos[b.cols]
    assert int(loss_pos[0]) == int(data.label_start[d]) > 0  # the loss starts after the prefix
    torch.testing.assert_close(data.hidden[b.target].float(), h[loss_pos + 1], atol=2e-2, rtol=1e-2)


def test_the_trained_head_agrees_with_the_target_more_than_an_untrained_one(trained, target, tmp_path):
    from specbench.distill.eagle_training import EagleTrainer

    out, manifest = trained
    data = teacher_data(out)
    t = load_model(target, device="cpu")
    heldout = torch.nonzero(data.heldout).view(-1).tolist()
    fresh = make_proposer(parse_draft(f"eagle:{random_head(target, tmp_path / 'fresh')}"), t)
    untrained = EagleTrainer(fresh.head, t, get_preset("small", "eagle"), data).evaluate(heldout)
    after = manifest["checks"]["heldout_after_export"]
    exported = make_proposer(parse_draft(f"eagle:{out}"), t)
    whole = EagleTrainer(exported.head, t, get_preset("small", "eagle"), data).evaluate(heldout)
    assert after.pop("agreement_chained") is None is whole.pop("agreement_chained")  # an EAGLE-3 head's figure
    assert after == pytest.approx(whole, rel=1e-5)  # pooled from the tasks' own passes: one pass over all, the same
    assert after["agreement_reply"] > untrained["agreement_reply"] + 0.1, (after, untrained)
    assert after["kl"] < untrained["kl"]


def test_a_head_trained_under_bf16_autocast_learns_and_says_so(trained, target, task_file, tmp_path):
    """--train-dtype bfloat16: the steps differ from the float32 run's (autocast is on: a silently ignored option would
    retrace the float32 loss curve exactly), the head still learns (held-out agreement over the untrained head's by
    > 0.1, as the float32 head must), and the command and checkpoint key say so; a draft refuses it (exit 2)."""
    from specbench.distill.eagle_training import EagleTrainer

    out, manifest = distilled(
        "eagle", target, task_file, tmp_path / "bf16", steps=40, extra=("--train-dtype", "bfloat16")
    )
    assert "--train-dtype bfloat16" in manifest["command"]
    assert manifest["training"]["loss_curve"] != trained[1]["training"]["loss_curve"]
    t = load_model(target, device="cpu")
    data = teacher_data(out)
    heldout = torch.nonzero(data.heldout).view(-1).tolist()
    fresh = make_proposer(parse_draft(f"eagle:{random_head(target, tmp_path / 'fresh')}"), t)
    untrained = EagleTrainer(fresh.head, t, get_preset("small", "eagle"), data).evaluate(heldout)
    assert manifest["checks"]["heldout_after_export"]["agreement_reply"] > untrained["agreement_reply"] + 0.1
    cfg = DistillConfig(target, tmp_path / "k", get_preset("small", "eagle"), (task_file,), train_dtype="bfloat16")
    assert (
        cfg.training_key()["train_dtype"] == "bfloat16"
        and "train_dtype" not in dataclasses.replace(cfg, train_dtype="float32").training_key()
    )
    r = invoke("distill", "--target", target, "--out", tmp_path / "d", "--train-dtype", "bfloat16", catch=True)
    assert r.exit_code == 2 and "trains a head" in r.output


def test_a_draft_kind_run_keeps_its_command_and_key(target, task_file, tmp_path):
    """--kind draft (the default) writes what it wrote before kinds existed: same preset objects, key and command."""
    cfg = DistillConfig(target=target, out=tmp_path / "d", preset=get_preset("small"), tasks=(task_file,))
    assert cfg.preset is PRESETS["small"] and "kind" not in cfg.training_key()
    assert "--kind" not in cfg.command()
    eagle = DistillConfig(target, tmp_path / "e", get_preset("small", "eagle"), (task_file,))
    assert eagle.kind == "eagle" and eagle.training_key()["kind"] == "eagle" and eagle.validate()
    result = invoke("distill", "--kind", "medusa", "--target", target, "--out", tmp_path / "m", catch=True)
    assert result.exit_code == 2 and "unknown distill kind" in result.output


def test_a_killed_eagle_run_resumes_to_the_same_weights(target, task_file, tmp_path):
    def config(out, **kw) -> DistillConfig:
        preset = get_preset("small", "eagle")
        return DistillConfig(target, out, preset, (task_file,), steps=20, device="cpu", **kw)

    whole = distill(config(tmp_path / "whole"))

    class Killed(Exception):
        pass

    def kill_at_13(step):
        if step == 13:
            raise Killed

    with pytest.raises(Killed):
        distill(config(tmp_path / "killed"), on_step=kill_at_13)
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    resumed = distill(config(tmp_path / "killed", resume=True))
    a, b = (
        load_file(str(tmp_path / "whole" / "model.safetensors")),
        load_file(str(tmp_path / "killed" / "model.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.manifest["training"]["loss_curve"] == whole.manifest["training"]["loss_curve"]
    assert resumed.manifest["training"]["heldout"] == whole.manifest["training"]["heldout"]


# --------------------------------------------------------------------------- --draft eagle:<folder> in the torch loop


def test_greedy_identity_and_the_trained_heads_acceptance(trained, target, tmp_path):
    out, _ = trained
    t = load_model(target, device="cpu")
    prompts = [t.tokenizer(r["prompt"])["input_ids"] for r in ROWS[:4]]
    fresh = random_head(target, tmp_path / "fresh")
    alpha = {}
    for name, folder in (("trained", str(out)), ("untrained", fresh)):
        draft = make_proposer(parse_draft(f"eagle:{folder}"), t)
        assert isinstance(draft, EagleDraft) and draft.is_model
        accepted = trials = 0
        for prompt in prompts:
            base = decode_autoregressive(
                CachedModel(t.model),
                prompt,
                max_new_tokens=16,
                sampling=SamplingConfig(),
                generator=None,
                eos_ids=t.eos_ids,
            )
            for gamma in (1, 3):
                res = decode(t, draft, prompt, gamma)
                assert res.token_ids == base.token_ids  # fp32: token for token
                assert res.draft_calls == res.drafted  # one head pass per drafted token
                accepted, trials = accepted + res.accepted, trials + res.trials
        alpha[name] = accepted / trials
    assert alpha["trained"] > alpha["untrained"], alpha


def offline_first_token(t, head, tokens: list[int]) -> int:
    """The head's first token after `tokens`, computed from scratch: the target's hidden states over tokens[:-1] in one
    pass, the head over every position at once (token t+1's embedding ⊕ h_t at position t), no cache."""
    with torch.no_grad():
        h = t.model(torch.tensor([tokens[:-1]]), output_hidden_states=True).hidden_states[-1]  # [1, n-1, H]
        emb = t.model.get_input_embeddings()(torch.tensor([tokens[1:]]))
        f = head(emb, h, torch.arange(len(tokens) - 1)[None])
        return int(t.model.get_output_embeddings()(f[0, -1]).argmax())


def test_each_proposal_is_the_heads_prediction_from_the_targets_own_hidden_states(trained, target, monkeypatch):
    """The loop hands over the kept positions' hidden states and the draft crops its cache after rejections: every
    proposal's first token equals the head run from scratch on the target's hidden states of the sequence so far. A
    hand-over off by one position (negative control) breaks it."""
    out, _ = trained
    t = load_model(target, device="cpu")
    prompts = [t.tokenizer(r["prompt"])["input_ids"] for r in ROWS[4:8]]
    draft = make_proposer(parse_draft(f"eagle:{out}"), t)
    seen = proposals(t, draft, prompts, gamma=3)
    assert len(seen) > len(prompts)  # several proposals per prompt, after accepts and rejections
    assert [offline_first_token(t, draft.head, tokens) for tokens, _ in seen] == [first for _, first in seen]

    observe = EagleDraft.observe_hidden
    monkeypatch.setattr(EagleDraft, "observe_hidden", lambda self, h: observe(self, h.roll(1, 0)))
    broken = make_proposer(parse_draft(f"eagle:{out}"), t)
    seen = proposals(t, broken, prompts, gamma=3)
    assert [offline_first_token(t, broken.head, tokens) for tokens, _ in seen] != [first for _, first in seen]


def test_sampled_output_keeps_the_targets_law_and_a_greedy_draft_is_caught(trained, target, monkeypatch):
    """T = 1, top-k 3: the first three tokens of speculative runs against the target's exact law (G-test, power ≥ 0.8
    against a total variation of 0.1), and homogeneity with the baseline; a head that drafts its argmax while
    reporting its law (a peer's bug) fails."""
    out, _ = trained
    t = load_model(target, device="cpu")
    prompt = t.tokenizer(ROWS[9]["prompt"])["input_ids"]
    sampling = SamplingConfig(temperature=1.0, top_k=3)

    def factory():
        return make_proposer(parse_draft(f"eagle:{out}"), t)

    kw = dict(gammas=(2,), n_samples=1100, length=3, eos_ids=t.eos_ids, alt_tv=0.1)  # power ≥ 0.8 vs TV 0.1 at 1,015
    checks = {c.name: c for c in sequence_checks(t.model, factory, prompt, sampling, **kw)}
    exact = checks["sequence/γ=2/exact"]
    assert exact.passed and exact.power >= 0.8, exact
    assert checks["sequence/γ=2/vs-baseline"].passed

    def argmax_reporting_its_law(logits, cfg, generator, laws):  # the bug: draws the argmax, reports the law
        laws.append(processed_probs(logits, cfg))
        return laws[-1].argmax(-1)

    monkeypatch.setattr("specbench.decoding.drafts.eagle.draft_token", argmax_reporting_its_law)
    caught = {c.name: c for c in sequence_checks(t.model, factory, prompt, sampling, **kw)}
    assert not caught["sequence/γ=2/exact"].passed


def test_verify_step_law_passes_with_power_and_catches_a_verify_side_bug(trained, target):
    """`specbench verify`'s step law on the real pair (evidence/pair_step.py: the head fed the target's hidden states of
    each state's tokens) at T = 1, top-k 3, with power; the always-accept control through the same path fails."""
    from specbench.evidence.controls import CONTROLS

    out, _ = trained
    joint = step_law(target, f"eagle:{out}", 10)
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert not step_law(target, f"eagle:{out}", 10, control=CONTROLS["always-accept"]).passed


def test_run_draft_eagle_end_to_end_and_list_drafts(trained, target, task_file, tmp_path):
    out, _ = trained
    args = ["run", "--target", target, "--draft", f"eagle:{out}", "--task", task_file, "--limit", "2"]
    args += ["--max-new-tokens", "10", "--gamma", "3", "--device", "cpu", "--results-dir", tmp_path / "res"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "res").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["greedy_identity"] == 1.0 and summary["drafted"] > 0
    listing = invoke("list", "drafts")
    assert listing.exit_code == 0 and "eagle:<folder>" in listing.output


def test_a_wrong_head_folder_is_one_line_exit_2(trained, target, task_file, tmp_path):
    from tiny_heads import save_head as save_random_head

    out, _ = trained
    other = save_tiny(tmp_path / "other", 1, hidden=64)  # another target: hidden 64, not 32
    cases = {
        f"eagle:{tmp_path / 'missing'}": "is not a folder",
        f"eagle:{target}": "is not an EAGLE head",  # a whole model: two layers, no fc
        f"eagle:{save_random_head(tmp_path / 'h64', other, 'eagle')}": "the head's hidden_size is 64",
    }
    for draft, message in cases.items():
        args = ["run", "--target", target, "--draft", draft, "--task", task_file, "--limit", "1", "--device", "cpu"]
        result = invoke(*args, "--results-dir", tmp_path / "res", catch=True)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and message in lines[-1] and lines[-1].startswith("error:"), result.output
    args = ["run", "--target", target, "--draft", f"eagle:{out}", "--task", task_file, "--batch-size", "2"]
    result = invoke(*args, "--gamma", "2", "--device", "cpu", "--results-dir", tmp_path / "res2", catch=True)
    assert result.exit_code == 2 and "--batch-size 1" in result.output
    result = invoke(
        *args[:-2], "--backend", "compiled", "--device", "cpu", "--results-dir", tmp_path / "r3", catch=True
    )
    assert result.exit_code == 2 and "--backend eager or static" in result.output


# --------------------------------------------------------------------------- the same folder in vLLM


@needs_vllm
@pytest.mark.parametrize("layers", [1, 2])
def test_vllm_loads_the_exported_head_and_decodes_with_it(layers, vllm_session, tmp_path, monkeypatch):
    """A head distilled for the vLLM session's tiny target decodes in vLLM's eagle method (greedy identity, fp32), and
    in specbench's loop the same folder accepts what vLLM accepts: the same layout, read the same way, for EAGLE's one
    layer and a deeper head (the preset's head_layers; vLLM drops only layer 0's input norm). On vLLM every
    record's accepted and drafted counts are those of vLLM's own per-request metrics, which equal its counters' growth
    over the request (read in the worker around each request)."""
    from specbench.engines.vllm.engine import VllmEngine
    from specbench.engines.vllm.session import PLAIN

    s = vllm_session
    task = write_rows(tmp_path / "toy.jsonl")
    out = tmp_path / "head"
    monkeypatch.setitem(EAGLE_PRESETS, "small", dataclasses.replace(EAGLE_PRESETS["small"], head_layers=layers))
    result = invoke(*distill_args("eagle", s.load.target, str(task), out), "--device", "cpu", "--steps", 24)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == layers
    assert result.exit_code == 0, result.output
    monkeypatch.setattr(VllmEngine, "open_session", lambda self, load: s)
    answers: list[dict] = []
    request = s.client.request

    def spy(op, status=None, **fields):
        result = request(op, status, **fields)
        if op == "generate" and fields.get("key") != PLAIN:
            answers.append(result)
        return result

    monkeypatch.setattr(s.client, "request", spy)
    accepted, summaries = {}, {}
    for engine in ("vllm", "specbench"):
        args = ["run", "--engine", engine, "--target", s.load.target, "--draft", f"eagle:{out}", "--gamma", "2"]
        args += ["--limit", "2", "--task", task, "--max-new-tokens", "12", "--device", "cpu", "--dtype", "float32"]
        result = invoke(*args, "--results-dir", tmp_path / engine)
        assert result.exit_code == 0, result.output
        (run,) = (tmp_path / engine).iterdir()
        records = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
        summaries[engine] = json.loads((run / "summary.json").read_text())
        assert len(records) == 2 and all(r["identical"] for r in records)
        accepted[engine] = [r["speculative"]["accept_lengths"] for r in records]
        if engine == "vllm":
            vllm_records = records
    loaded = [e["speculative_config"] for e in s.engines.values() if e["speculative_config"]]
    assert {"method": "eagle", "num_speculative_tokens": 2, "model": str(out)} in loaded
    for record in vllm_records:
        spec = record["speculative"]
        same = [a for a in answers if a["token_ids"] == spec["token_ids"]]  # the timed decode (repeats decode alike)
        assert same, "no eagle request produced this record's tokens"
        per_step, grown = same[-1]["per_step"], same[-1]["counters"]
        assert spec["accept_lengths"] == per_step["accepted"] and spec["draft_lengths"] == per_step["drafted"]
        counted = (len(spec["accept_lengths"]), spec["drafted"], spec["accepted"])
        assert counted == (grown["drafts"], grown["draft_tokens"], grown["accepted"])
        assert all(0 <= n <= g <= 2 for n, g in zip(per_step["accepted"], per_step["drafted"], strict=True))
    drafted = sum(r["speculative"]["drafted"] for r in vllm_records)
    taken = sum(r["speculative"]["accepted"] for r in vllm_records)
    assert drafted > 0 and taken > 0 and summaries["vllm"]["acceptance_rate"] == pytest.approx(taken / drafted)
    # step by step the same acceptance, up to the budget's end (there vLLM still drafts γ and specbench cuts it)
    for a, b in zip(accepted["vllm"], accepted["specbench"], strict=True):
        k = min(len(a), len(b)) - 1
        assert k > 3 and a[:k] == b[:k], accepted

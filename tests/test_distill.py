"""`specbench distill` end to end on a tiny random target: teacher data, training, export, resume, exactness."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.model import ModelDraft
from specbench.decoding.speculative import decode_speculative
from specbench.distill import DistillConfig, distill
from specbench.distill.settings import PRESETS
from specbench.distill.training import checkpoint_path, load_checkpoint
from specbench.errors import SpecbenchError
from specbench.models import load_model

WORDS = (
    "the cat dog bird sat ran flew on under over a mat log tree and then quickly slowly big small red "
    "green house garden river near far"
).split()


def sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3 + j * j) % len(WORDS)] for j in range(n))


ROWS = [
    {"id": f"r{i}", "prompt": f"translate : {sentence(i, 4 + i % 5)}", "reference": sentence(i + 3, 3 + i % 4)}
    for i in range(24)
]


def save_target(path) -> str:
    """A tiny random Llama with a word-level tokenizer (ids 0..2 are <unk>, <s>, </s>; </s> ends a turn)."""
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [" ".join(WORDS) + " translate :"], trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"])
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # peaked laws, like a trained model's, so agreement is learnable and meaningful
        model.lm_head.weight.mul_(30)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return save_target(tmp_path_factory.mktemp("target") / "t")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


def invoke(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def small(target, task_file, out, **kw) -> DistillConfig:
    return DistillConfig(target=target, out=out, preset=PRESETS["small"], tasks=(task_file,), device="cpu", **kw)


def read_weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def trained(target, task_file, tmp_path_factory):
    """One uninterrupted small-preset run through the CLI, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("distill") / "draft"
    result = invoke(
        "distill",
        "--target",
        target,
        "--out",
        str(out),
        "--preset",
        "small",
        "--task",
        task_file,
        "--device",
        "cpu",
        "--steps",
        "40",
        "--json",
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_cli_small_preset_writes_a_loadable_draft_and_manifest(trained, target, task_file):
    out, manifest = trained
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["steps"] == {"done": 40, "total": 40}
    assert manifest["command"] == (
        f"specbench distill --target {target} --out {out} --preset small --task {task_file} --steps 40 --seed 0"
    )
    data = manifest["data"]
    assert data["rows"]["toy"] == {"train": 12, "heldout": 3, "max_new_tokens": 8}
    assert data["labels"] == data["score_tokens"] + data["gen_tokens"] > 100
    assert len(data["sha256"]) == 64
    training = manifest["training"]
    assert [row[0] for row in training["heldout"]] == [8, 16, 24, 32, 40]
    assert training["loss_curve"][-1][0] == 40
    # training lowers the KL on the training batches (first 5 steps vs last 5)
    first, last = training["loss_curve"][0][1], training["loss_curve"][-1][1]
    assert last < first
    checks = manifest["checks"]
    assert checks["cost"]["c"] > 0 and checks["speculative"]["trials"] > 0 and 0 <= checks["speculative"]["alpha"] <= 1
    assert checks["heldout_after_export"]["reply_positions"] > 0
    # no work files in what gets shipped: model, tokenizer, manifest at the top, the rest under work/
    assert {"config.json", "model.safetensors", "tokenizer.json", "manifest.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.rglob(".*")]  # no temporary file or folder left behind
    assert sorted(p.name for p in (out / "work").iterdir()) == ["checkpoint.pt", "teacher"]


def test_distilled_draft_passes_greedy_identity_against_its_target(trained, target):
    from specbench.decoding.drafts.factory import make_proposer
    from specbench.run_specs import parse_draft

    out, _ = trained
    t = load_model(target, device="cpu")
    draft = load_model(str(out), device="cpu")
    assert draft.vocab_size == t.vocab_size
    assert draft.model.config.tie_word_embeddings
    prompts = [t.tokenizer(r["prompt"])["input_ids"] for r in ROWS[:3]]
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
            proposer = make_proposer(parse_draft(str(out)), t, device="cpu")
            assert isinstance(proposer, ModelDraft)
            spec = decode_speculative(
                CachedModel(t.model),
                proposer,
                prompt,
                gamma=gamma,
                max_new_tokens=16,
                sampling=SamplingConfig(),
                generator=None,
                eos_ids=t.eos_ids,
            )
            assert spec.token_ids == base.token_ids


def test_teacher_labels_are_the_targets_laws_and_continuations_its_greedy_output(trained, target):
    """Batched, left-padded, shared-prefix scoring gives what a plain forward gives, and the on-policy
    continuation is exactly the target's greedy decode of the prompt."""
    from specbench.distill.shards import KIND_ON_POLICY, KIND_REFERENCE, KIND_SAMPLED, load_teacher_data

    out, manifest = trained
    index = json.loads((out / "work" / "teacher" / "index.json").read_text())
    shards = [index["shards"][k] for k in sorted(index["shards"], key=int)]
    data = load_teacher_data({"folder": str(out / "work" / "teacher"), "shards": shards})
    t = load_model(target, device="cpu")
    kinds = data.kind.tolist()
    assert {KIND_ON_POLICY, KIND_REFERENCE, KIND_SAMPLED} <= set(kinds)
    checked = 0
    for d in range(len(kinds)):
        s, n = int(data.doc_start[d]), int(data.doc_len[d])
        tokens = data.tokens[s : s + n].long()
        with torch.no_grad():
            logp = t.model(tokens[None]).logits[0].float().log_softmax(-1)  # [n, V]
        ls, le = int(data.label_start[d]), int(data.label_end[d])
        rows = slice(int(data.label_off[d]), int(data.label_off[d + 1]))
        idx, lp = data.topk_idx[rows].long(), data.topk_logp[rows].float()
        assert torch.equal(idx[:, 0], logp[ls:le].argmax(-1))
        torch.testing.assert_close(lp, logp[ls:le].gather(1, idx), atol=2e-2, rtol=1e-2)
        if kinds[d] == KIND_ON_POLICY:
            r = int(data.reply_start[d])
            greedy = decode_autoregressive(
                CachedModel(t.model),
                tokens[: r + 1].tolist(),
                max_new_tokens=8,
                sampling=SamplingConfig(),
                generator=None,
                eos_ids=t.eos_ids,
            )
            assert greedy.token_ids == tokens[r + 1 :].tolist()
            checked += 1
    assert checked == 15  # 12 training rows + 3 held-out rows


def test_training_never_sees_the_benchmark_picks(trained, task_file):
    from specbench.tasks.examples import select_examples
    from specbench.tasks.specs import load_task

    out, _ = trained
    plan = json.loads((out / "work" / "teacher" / "plan.json").read_text())
    picked = {e.id for e in select_examples(load_task(task_file), 3, 0)}
    heldout = {rid for _, is_heldout, _, ids in plan["jobs"] if is_heldout for rid in ids}
    train = {rid.split("/")[-1] for _, is_heldout, _, ids in plan["jobs"] if not is_heldout for rid in ids}
    assert heldout == picked and not (train & picked) and len(train) == 12


def test_a_killed_run_resumes_to_the_same_weights(target, task_file, tmp_path):
    """Checkpoints every 8 steps; a crash at step 13 loses steps 9..13, the rerun redoes them and ends with
    weights, loss curve and held-out curve identical to an uninterrupted run (the batch at a step is a pure
    function of seed and step, optimizer and RNG state are restored, CPU kernels on one thread are deterministic)."""
    whole = distill(small(target, task_file, tmp_path / "whole", steps=20))

    class Killed(Exception):
        pass

    def kill_at_13(step):
        if step == 13:
            raise Killed

    with pytest.raises(Killed):
        distill(small(target, task_file, tmp_path / "killed", steps=20), on_step=kill_at_13)
    assert load_checkpoint(checkpoint_path(tmp_path / "killed"))["step"] == 8
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    resumed = distill(small(target, task_file, tmp_path / "killed", steps=20, resume=True))
    a, b = read_weights(tmp_path / "whole"), read_weights(tmp_path / "killed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.manifest["training"]["loss_curve"] == whole.manifest["training"]["loss_curve"]
    assert resumed.manifest["training"]["heldout"] == whole.manifest["training"]["heldout"]
    assert resumed.manifest["data"]["sha256"] == whole.manifest["data"]["sha256"]


def test_cli_session_limit_stops_then_the_same_command_continues(target, task_file, tmp_path):
    args = (
        "distill",
        "--target",
        target,
        "--out",
        str(tmp_path / "d"),
        "--preset",
        "small",
        "--task",
        task_file,
        "--device",
        "cpu",
        "--steps",
        "12",
    )
    first = invoke(*args, "--max-session-steps", "5")
    assert first.exit_code == 0, first.output
    assert "stopped at step 5 of 12" in first.stdout
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["status"] == "training" and manifest["steps"]["done"] == 5
    second = invoke(*args)
    assert second.exit_code == 0, second.output
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["status"] == "done" and [r[0] for r in manifest["training"]["loss_curve"]] == list(range(1, 13))


def test_bad_inputs_are_one_line_errors(target, task_file, tmp_path):
    base = ("distill", "--target", target, "--task", task_file, "--device", "cpu", "--preset", "small")
    r = invoke(*base, "--out", str(tmp_path / "a"), "--resume")
    assert r.exit_code == 1 and "no checkpoint" in r.output
    r = invoke(*base, "--out", str(tmp_path / "a"), "--preset", "huge")
    assert r.exit_code == 2 and "unknown distill preset" in r.output  # a bad option value: a usage error
    r = invoke(*base, "--out", str(tmp_path / "a"), "--steps", "0")
    assert r.exit_code == 2 and "--steps" in r.output
    assert invoke(*base, "--out", str(tmp_path / "b"), "--steps", "3").exit_code == 0
    r = invoke(*base, "--out", str(tmp_path / "b"), "--steps", "3", "--seed", "1")
    assert r.exit_code == 1 and "other settings" in r.output
    r = invoke(*base, "--out", str(tmp_path / "b"), "--steps", "2")
    assert r.exit_code == 1 and "already trained to step 3" in r.output


def test_a_bf16_teacher_labels_with_the_bf16_target_and_never_mixes_with_a_float32_one(target, task_file, tmp_path):
    """--teacher-dtype bfloat16: the labels are the bf16 target's laws (closer to them than to the float32
    target's), the plan and the rebuild command say so, the draft still trains in float32, and the folder refuses
    a float32 teacher afterwards (exit 1) as it refuses a bad dtype (exit 2)."""
    from specbench.distill.shards import load_teacher_data

    out = tmp_path / "bf16"
    manifest = distill(small(target, task_file, out, steps=2, teacher_dtype="bfloat16")).manifest
    assert "--teacher-dtype bfloat16" in manifest["command"]
    assert json.loads((out / "work" / "teacher" / "plan.json").read_text())["teacher_dtype"] == "bfloat16"
    index = json.loads((out / "work" / "teacher" / "index.json").read_text())
    data = load_teacher_data({"folder": str(out / "work" / "teacher"), "shards": list(index["shards"].values())})
    errors = {}
    for dtype in ("bfloat16", "float32"):
        t = load_model(target, device="cpu", dtype=dtype)
        gaps = []
        for d in range(len(data.doc_len)):
            s, n = int(data.doc_start[d]), int(data.doc_len[d])
            with torch.no_grad():
                logp = t.model(data.tokens[s : s + n].long()[None]).logits[0].float().log_softmax(-1)
            rows = slice(int(data.label_off[d]), int(data.label_off[d + 1]))
            idx, lp = data.topk_idx[rows].long(), data.topk_logp[rows].float()
            gaps.append((lp - logp[int(data.label_start[d]) : int(data.label_end[d])].gather(1, idx)).abs().mean())
        errors[dtype] = float(torch.stack(gaps).mean())
    assert errors["bfloat16"] < errors["float32"], errors
    with pytest.raises(SpecbenchError, match="teacher dtype"):
        distill(small(target, task_file, out, steps=2))
    base = ("distill", "--target", target, "--task", task_file, "--device", "cpu", "--preset", "small")
    r = invoke(*base, "--out", str(tmp_path / "x"), "--teacher-dtype", "int8")
    assert r.exit_code == 2 and "--teacher-dtype must be one of" in r.output


def test_a_damaged_teacher_shard_is_refused(target, task_file, tmp_path):
    distill(small(target, task_file, tmp_path / "d", steps=2))
    shard = sorted((tmp_path / "d" / "work" / "teacher").glob("shard-*.safetensors"))[-1]
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    with pytest.raises(SpecbenchError, match="sha256"):
        distill(small(target, task_file, tmp_path / "d", steps=3))


def test_chunked_kl_gradient_equals_plain_autograd():
    from specbench.distill.training import kl_loss

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    x = torch.randn(7, 8, requires_grad=True)
    hidden = x * 2  # a graph upstream of the chunked head, as the draft body is
    logp = torch.randn(7, 5).log_softmax(-1)
    idx = torch.stack([torch.randperm(50)[:5] for _ in range(7)])
    loss, argmax, _ = kl_loss(head, hidden, idx, logp, backward=True, chunk=3)
    got_x, got_w = x.grad.clone(), head.weight.grad.clone()
    x.grad = None
    head.weight.grad = None
    p = logp.softmax(-1)
    ref = (p * (p.log() - head(x * 2).log_softmax(-1).gather(1, idx))).sum(-1).mean()
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-5)
    torch.testing.assert_close(got_x, x.grad)
    torch.testing.assert_close(got_w, head.weight.grad)
    assert torch.equal(argmax, head(x * 2).argmax(-1))


def test_svd_init_starts_the_draft_head_in_the_targets_principal_subspace(target):
    from specbench.distill.training import new_draft

    t = load_model(target, device="cpu")
    preset = dataclasses.replace(PRESETS["small"], hidden=16, heads=2, kv_heads=1)
    draft = new_draft(preset, t, seed=0)
    E = t.model.get_output_embeddings().weight.detach()
    D = draft.get_output_embeddings().weight.detach()
    assert D.shape == (E.shape[0], 16) and draft.get_input_embeddings().weight is draft.get_output_embeddings().weight
    # D ∝ E V_16: D Dᵀ is, up to scale, the Gram matrix of E's best rank-16 approximation
    U, S, _ = torch.linalg.svd(E, full_matrices=False)
    best = (U[:, :16] * S[:16]) @ (U[:, :16] * S[:16]).T
    torch.testing.assert_close(D @ D.T / (D**2).sum(), best / best.trace(), atol=1e-4, rtol=1e-3)
    assert float(D.std()) == pytest.approx(draft.config.initializer_range, rel=1e-3)  # the usual init scale


def test_draft_alias_distilled_finds_the_shipped_draft_and_lists_it(trained, target, tmp_path, monkeypatch):
    import shutil

    import specbench.models.shipped as shipped_module
    from specbench.decoding.drafts.factory import draft_rows, make_proposer
    from specbench.decoding.drafts.hybrid import HybridDraft
    from specbench.run_specs import parse_draft

    t = load_model(target, device="cpu")
    monkeypatch.setattr(shipped_module, "DRAFTS_DIR", tmp_path / "drafts")
    with pytest.raises(SpecbenchError, match="specbench distill --target"):
        make_proposer(parse_draft("distilled"), t, device="cpu")
    out, _ = trained
    shutil.copytree(out, tmp_path / "drafts" / "t-distilled", ignore=shutil.ignore_patterns("work"))
    assert isinstance(make_proposer(parse_draft("distilled"), t, device="cpu"), ModelDraft)
    assert isinstance(make_proposer(parse_draft("lookup+distilled"), t, device="cpu"), HybridDraft)
    rows = [r for r in draft_rows() if r["kind"] == "model (distilled)"]
    assert len(rows) == 1 and "c = " in rows[0]["description"] and "specbench distill" in rows[0]["description"]


def test_a_failed_export_leaves_the_previous_draft_and_no_temporary_files(trained, target, tmp_path, monkeypatch):
    """The export is built in a hidden folder under work/; a failure half-way (here: the disk fills while the
    tokenizer is written) removes it and leaves every shipped file as it was; the next export replaces them."""
    import errno
    import shutil

    from specbench.distill.save_draft import export_draft

    out, _ = trained
    folder = tmp_path / "d"
    shutil.copytree(out, folder)

    def shipped() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}

    before = shipped()
    t = load_model(target, device="cpu")
    draft = load_model(str(folder), device="cpu")

    def disk_full(path, *args, **kwargs):
        (tmp_path / "reached").touch()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(t.tokenizer, "save_pretrained", disk_full)
    with pytest.raises(SpecbenchError, match="no space left"):
        export_draft(draft.model, t, folder, "float32")
    assert (tmp_path / "reached").exists()  # it failed after the model's files were written aside
    assert shipped() == before
    assert sorted(p.name for p in (folder / "work").iterdir()) == ["checkpoint.pt", "teacher"]
    assert not list(folder.rglob(".*"))

    monkeypatch.undo()
    with torch.no_grad():
        draft.model.get_input_embeddings().weight.mul_(2)
    export_draft(draft.model, t, folder, "float32")
    after = shipped()
    assert after.keys() == before.keys() and after["model.safetensors"] != before["model.safetensors"]
    assert after["tokenizer.json"] == before["tokenizer.json"]
    assert sorted(p.name for p in (folder / "work").iterdir()) == ["checkpoint.pt", "teacher"]
    assert not list(folder.rglob(".*"))

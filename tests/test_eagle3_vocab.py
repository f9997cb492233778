"""An EAGLE-3 head over a reduced draft vocabulary (issue 43): `specbench distill --kind eagle3 --draft-vocab K` on a
finished folder re-exports without training, over the K ids the target predicts most often in the training documents,
with EAGLE-3's d2t/t2d; `--draft-vocab` heads run in specbench's loop with greedy identity and the target's step law at
T = 1 (with power; the always-accept control fails), and in vLLM's eagle3 method where `make setup-vllm` has been
run; folders whose d2t is missing or maps two draft ids onto one target id are one line, exit 2."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from eagle_builders import (
    VLLM_PYTHON,
    accepted_by_engine,
    assert_same_acceptance,
    distill_args,
    distilled,
    invoke,
    save_target,
    step_law,
    teacher_data,
    write_rows,
)
from safetensors.torch import load_file, save_file

from specbench.cli.distill import outcome_line
from specbench.decoding.drafts.factory import make_proposer
from specbench.distill.pipeline import Outcome
from specbench.distill.shards import KIND_ON_POLICY
from specbench.evidence.controls import CONTROLS
from specbench.models import load_model
from specbench.run_specs import parse_draft

needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


def reexported(full: Path, target: str, task_file: str, out: Path, size: int, steps: int = 40) -> tuple[Path, dict]:
    """A copy of the finished folder `full`, rerun with `--draft-vocab size` (the same steps: nothing to train)."""
    shutil.copytree(full, out)
    return distilled("eagle3", target, task_file, out, steps, ("--draft-vocab", str(size)))


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """(target, task file, the full head's folder and manifest, the reduced head's folder and manifest, its size)."""
    root = tmp_path_factory.mktemp("eagle3-vocab")
    target, task_file = save_target(root / "t"), write_rows(root / "toy.jsonl")
    full, full_manifest = distilled("eagle3", target, task_file, root / "full")
    size = json.loads((Path(full) / "config.json").read_text())["vocab_size"] // 2
    small, small_manifest = reexported(full, target, task_file, root / "small", size)
    return target, task_file, (full, full_manifest), (small, small_manifest), size


def most_predicted(out: Path, size: int) -> list[int]:
    """The `size` ids the target's top-1 names most often at the training documents' label rows, counted one
    document at a time (ties to the lower id; ids never predicted after, in id order)."""
    data = teacher_data(out)
    counts: Counter[int] = Counter()
    for d in range(len(data.heldout)):
        if not bool(data.heldout[d]):
            counts.update(int(i) for i in data.topk_idx[int(data.label_off[d]) : int(data.label_off[d + 1]), 0])
    vocab = int(json.loads((out / "config.json").read_text())["vocab_size"])
    return sorted(sorted(range(vocab), key=lambda i: (-counts[i], i))[:size])


def test_rerunning_with_draft_vocab_reexports_over_the_most_predicted_ids(heads):
    target, _, (full, full_manifest), (small, manifest), size = heads
    assert manifest["training"] == full_manifest["training"]  # no step trained again
    assert manifest["command"].endswith(f"--draft-vocab {size}") and "draft_vocab" not in full_manifest["checks"]
    config = json.loads((small / "config.json").read_text())
    tensors = load_file(str(small / "model.safetensors"))
    assert config["draft_vocab_size"] == size and tensors["lm_head.weight"].shape[0] == size
    ids = torch.arange(size) + tensors["d2t"]
    assert tensors["d2t"].dtype == torch.int64 and ids.tolist() == most_predicted(small, size)
    assert tensors["t2d"].dtype == torch.bool and torch.nonzero(tensors["t2d"]).view(-1).tolist() == ids.tolist()
    whole = load_file(str(full / "model.safetensors"))
    assert torch.equal(tensors["lm_head.weight"], whole["lm_head.weight"][ids])
    assert torch.equal(tensors["fc.weight"], whole["fc.weight"])

    data = teacher_data(small)
    off, start = data.label_off, data.label_start
    reply = [
        int(data.topk_idx[r, 0])
        for d in range(len(data.heldout))
        if bool(data.heldout[d]) and int(data.kind[d]) == KIND_ON_POLICY
        for r in range(int(off[d]) + int(data.reply_start[d] - start[d]), int(off[d + 1]))
    ]
    check = manifest["checks"]["draft_vocab"]
    assert check["size"] == size and check["reply_positions"] == len(reply) > 0
    assert check["coverage_reply"] == pytest.approx(sum(i in set(ids.tolist()) for i in reply) / len(reply))
    after = manifest["checks"]["heldout_after_export"]
    assert after["agreement_reply"] <= check["coverage_reply"] + 1e-9  # a target id outside the vocabulary: a miss
    line = outcome_line(Outcome(manifest, finished=True), small, "eagle3")
    assert f"eagle3 head over {size} ids (held-out reply coverage {check['coverage_reply']:.3f})" in line
    assert " over " not in outcome_line(Outcome(full_manifest, finished=True), full, "eagle3")


def test_the_draft_vocabulary_is_counted_over_training_rows_and_filled_to_its_size():
    """Three training rows predict 3, 3, 1 and two held-out rows 7, 7: the 2-id vocabulary is {1, 3} (counting the
    held-out rows would make it {3, 7}), and a 6-id one, past every predicted id, is filled with the lowest others."""
    from types import SimpleNamespace

    from specbench.distill.save_head import draft_vocab_ids

    data = SimpleNamespace(
        topk_idx=torch.tensor([[3, 0], [3, 0], [1, 0], [7, 0], [7, 0]]),
        label_off=torch.tensor([0, 3, 5]),
        heldout=torch.tensor([False, True]),
    )
    assert draft_vocab_ids(data, 2).tolist() == [1, 3]
    assert draft_vocab_ids(data, 6).tolist() == [0, 1, 2, 3, 4, 5]  # 7 (held out only) is not favoured


def test_the_reduced_heads_law_is_the_full_heads_on_its_ids_and_nothing_elsewhere(heads):
    target, _, (full, _), (small, _), size = heads
    t = load_model(target, device="cpu")
    whole = make_proposer(parse_draft(f"eagle3:{full}"), t).head
    reduced = make_proposer(parse_draft(f"eagle3:{small}"), t).head
    ids = reduced.head.draft_ids
    x = torch.randn(5, int(t.model.config.hidden_size), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = whole.out_layer(x), reduced.out_layer(x)
    outside = torch.ones(a.shape[-1], dtype=torch.bool).index_fill_(0, ids, False)
    assert torch.allclose(a[:, ids], b[:, ids]) and bool(torch.isinf(b[:, outside]).all()) and outside.sum() > 0
    assert set(b.argmax(-1).tolist()) <= set(ids.tolist())


def test_a_reduced_head_keeps_greedy_identity_and_the_targets_step_law(heads, tmp_path):
    """Greedy identity end to end; at T = 1, top-k 3 `verify`'s step law (power ≥ 0.8 against a total variation of
    0.1) passes, with draws both accepted and rejected, and the always-accept control through the same path fails."""
    target, task_file, _, (small, _), _ = heads
    args = ["run", "--target", target, "--draft", f"eagle3:{small}", "--task", task_file, "--limit", "2"]
    result = invoke(*args, "--max-new-tokens", "10", "--gamma", "3", "--device", "cpu", "--results-dir", tmp_path)
    assert result.exit_code == 0, result.output
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["greedy_identity"] == 1.0 and summary["drafted"] > 0
    joint = step_law(target, f"eagle3:{small}", 10)
    assert joint.verdict == "pass" and joint.power >= 0.8, joint
    assert joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert not step_law(target, f"eagle3:{small}", 10, control=CONTROLS["always-accept"]).passed


def test_bad_draft_vocab_options_and_folders_are_one_line_exit_2(heads, tmp_path):
    target, task_file, (full, _), (small, _), _ = heads
    refusals = {
        ("--kind", "eagle", "--draft-vocab", "8"): "is an EAGLE-3 head's",
        ("--kind", "eagle3", "--draft-vocab", "0"): "is an EAGLE-3 head's",
        ("--kind", "eagle3", "--draft-vocab", "100000"): "exceeds the target's",
    }
    for (_, kind, *rest), message in refusals.items():
        copy = tmp_path / f"d{kind}{rest[-1]}"
        shutil.copytree(full, copy)
        args = [*distill_args(kind, target, task_file, copy), "--device", "cpu", "--steps", "40", *rest]
        result = invoke(*args, catch=True)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and message in lines[-1] and lines[-1].startswith("error:"), result.output

    def broken(name: str, change) -> str:
        folder = tmp_path / name
        shutil.copytree(small, folder, ignore=shutil.ignore_patterns("work"))
        weights = load_file(str(folder / "model.safetensors"))
        change(weights)
        save_file(weights, str(folder / "model.safetensors"))
        return f"eagle3:{folder}"

    def twice(w: dict) -> None:
        w["d2t"] = w["d2t"].clone()
        w["d2t"][1] = w["d2t"][0] - 1  # draft ids 0 and 1 both map to draft 0's target id

    cases = {
        broken("no-d2t", lambda w: w.pop("d2t")): "lack an integer d2t",
        broken("twice", twice): "twice onto one",
    }
    for draft, message in cases.items():
        args = ["run", "--target", target, "--draft", draft, "--task", task_file, "--limit", "1", "--device", "cpu"]
        result = invoke(*args, "--results-dir", tmp_path / "res", catch=True)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and message in lines[-1] and lines[-1].startswith("error:"), result.output


@needs_vllm
def test_vllm_runs_a_reduced_head_and_accepts_what_specbench_accepts(vllm_session, tmp_path):
    """The same re-exported head in vLLM's eagle3 method (its d2t) and in specbench's loop: greedy identity in both,
    and the same tokens accepted step by step, as for a full-vocabulary head (tests/test_eagle3.py)."""
    s = vllm_session
    task = write_rows(tmp_path / "toy.jsonl")
    full, _ = distilled("eagle3", s.load.target, task, tmp_path / "full", steps=24)
    size = json.loads((full / "config.json").read_text())["vocab_size"] // 2
    small, _ = reexported(full, s.load.target, task, tmp_path / "small", size, steps=24)
    assert_same_acceptance(accepted_by_engine(s, f"eagle3:{small}", task, tmp_path))

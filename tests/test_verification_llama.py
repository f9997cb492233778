"""`specbench verify --engine llama-cpp` (issue 28 item 3): the step law on llama.cpp's kernels, on a tiny GGUF.

The target is the tiny random Llama of tests/tiny_gguf.py in llama.cpp (F32 weights: batch shapes change its
logits by rounding only). The draft proposes the target's own greedy continuation as one-hot q (computed in a
second llama.cpp context), so its drafts are accepted often at T = 1 and verifier bugs move the law.

Figures: verify's default sampling (T = 1, top-k 3), γ = 3, level 1e-3 (the checks' own). N = 4,000 steps from one
prompt: the joint law of the first two tokens (≤ 9 cells, df ≤ 8) reaches power ≥ 0.8 against total variation 0.05
at about 2,600 steps (the check computes and states it), so its "pass" is one the test could have failed; at
N = 300 the same check must say inconclusive. Negative control through the same path, on the same engine: the
always-accept verifier at N = 2,000 steps must be rejected (its law puts the target's argmax first with
probability 1, a total variation of 1 − p(argmax) from the target's law, far above what 2,000 steps detect).
Skipped with one line where llama-cpp-python is not built (`make setup-llama-cpp`).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from tiny_gguf import EOS_ID, VOCAB, write_tiny_gguf

from specbench.config import SamplingConfig
from specbench.decoding.base import Proposal
from specbench.evidence.controls import CONTROLS
from specbench.evidence.pair_step import pair_step_checks
from specbench.evidence.sequence_law import model_sequence_law

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not built (make setup-llama-cpp)"
)
pytestmark = needs_llama
VERIFY_DEFAULT = SamplingConfig(temperature=1.0, top_k=3)  # `specbench verify`'s default sampling
EOS = frozenset({EOS_ID})
PROMPT = [1] + [3 + b for b in b"the cat sat on the mat. the cat sat on the"]
JOINT = "pair-step/γ=3/joint2/gof"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return str(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", quant="F32"))


@pytest.fixture(scope="module")
def target(gguf):
    from specbench.engines.llama_cpp.backend import LlamaCppModel

    return LlamaCppModel(gguf, n_ctx=256, threads=1)


class ArgmaxCopy:
    """A deterministic model-free proposer on llama.cpp: the target's greedy continuation, reported as one-hot q."""

    is_model = False
    name = "argmax"

    def __init__(self, lm):
        self.lm = lm

    def begin(self, prompt_ids, max_new_tokens=0):
        pass

    def propose(self, tokens, gamma, sampling, generator, min_confidence=0.0):
        self.lm.start(capacity=len(tokens) + gamma)
        logits = self.lm.forward(list(tokens))
        out: list[int] = []
        for _ in range(gamma):
            out.append(int(logits.argmax()))
            logits = self.lm.forward(out[-1:])
        drafted = torch.tensor(out)
        return Proposal(tokens=drafted, q_probs=torch.nn.functional.one_hot(drafted, VOCAB).float(), forward_calls=0)


@pytest.fixture(scope="module")
def draft(gguf):
    from specbench.engines.llama_cpp.backend import LlamaCppModel

    return ArgmaxCopy(LlamaCppModel(gguf, n_ctx=256, threads=1))


def test_sequence_law_on_llama_cpp_sums_to_one_within_top_k(target):
    law = model_sequence_law(target, PROMPT, 2, VERIFY_DEFAULT, eos_ids=EOS)
    assert law is not None and abs(sum(law.values()) - 1.0) < 1e-6  # float32 laws
    assert len({s[0] for s in law}) <= 3 and all(len(s) == 2 or s[-1] in EOS for s in law)


def test_step_law_on_llama_cpp_passes_with_power(target, draft):
    checks = {c.name: c for c in pair_step_checks(target, lambda: draft, PROMPT, VERIFY_DEFAULT, gamma=3, n=4_000)}
    joint = checks[JOINT]
    assert joint.verdict == "pass" and joint.power >= 0.8 and joint.n_needed < 4_000, joint
    assert joint.detail["drafted_steps"] > 0 and joint.detail["accepted"] > 0 and joint.detail["rejected"] > 0
    assert all(c.verdict != "fail" for c in checks.values()), [c for c in checks.values() if c.verdict == "fail"]
    small = {c.name: c for c in pair_step_checks(target, lambda: draft, PROMPT, VERIFY_DEFAULT, gamma=3, n=300)}
    assert small[JOINT].verdict == "inconclusive", small[JOINT]


def test_always_accept_control_fails_on_llama_cpp(target, draft):
    """Negative control through the same path: the bug must be rejected on this engine too."""
    found = pair_step_checks(
        target, lambda: draft, PROMPT, VERIFY_DEFAULT, gamma=3, n=2_000, seed=1, control=CONTROLS["always-accept"]
    )
    joint = {c.name: c for c in found}[JOINT.replace("/joint2", "/control=always-accept/joint2")]
    assert joint.verdict == "fail", joint


def test_verify_command_on_llama_cpp(tmp_path, monkeypatch, gguf):
    """`specbench verify --engine llama-cpp` end to end: the step law on the pair with its power and the pair's
    controls, sequence level and greedy identity on llama.cpp; no HF generate row (there is no torch model)."""
    from typer.testing import CliRunner

    from specbench.cli import app

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "the cat sat on the mat and the cat sat on the", "reference": "x"}) + "\n")
    args = ["verify", "--engine", "llama-cpp", "--threads", "1", "--target", gguf, "--task", str(task)]
    args += ["--draft", "prompt-lookup", "--gamma", "2", "--limit", "1", "--n-samples", "30", "--length", "2"]
    args += ["--step-samples", "3000", "--pair-step-samples", "3000", "--control-samples", "2000"]
    args += ["--results-dir", str(tmp_path / "res"), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "res").iterdir()
    assert folder.name.endswith("-llama-cpp")
    doc = json.loads((folder / "checks.json").read_text())
    assert doc["engine"] == "llama-cpp" and doc["engine_info"]["threads"] == 1
    names = {c["name"]: c for c in doc["checks"]}
    step = names["pair-step/γ=2/joint2/gof"]
    assert step["power"] is not None and step["n"] == 3000 and step["detail"]["steps"] >= 3000
    assert "greedy/γ=2/identity" in names and "greedy/hf-generate/identity" not in names
    assert any(n.startswith("sequence/γ=2/") for n in names)
    assert any(n.startswith("control/") and n.endswith("/pair-step") for n in names)

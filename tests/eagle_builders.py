"""Builders shared by the EAGLE and EAGLE-3 head tests (tests/test_eagle.py, tests/test_eagle3*.py,
tests/test_eagle_tree.py): the toy task's rows, a tiny target with peaked laws, the CLI runner, the teacher shards of
a distill folder, one speculative decode, the proposals a decode asked for and an EAGLE-3 head's first token from
scratch."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import sharpen
from helpers import CORPUS, save_tiny
from transformers import LlamaForCausalLM
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import SamplingConfig
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.distill.shards import load_teacher_data

WORDS = sorted({w for line in CORPUS for w in line.split()})


def sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3 + j * j) % len(WORDS)] for j in range(n))


PREFIX = "a small draft model proposes"  # every prompt's shared start (the teacher's prefix document)
ROWS = [
    {"id": f"r{i}", "prompt": f"{PREFIX} {sentence(i, 4 + i % 5)}", "reference": sentence(i + 3, 3 + i % 4)}
    for i in range(24)
]


def save_target(path, **kw) -> str:
    """A tiny random Llama (helpers.save_tiny) whose output layer is sharpened: peaked laws, like a trained model's."""
    folder = save_tiny(path, 0, **kw)
    model = LlamaForCausalLM.from_pretrained(folder)
    sharpen(model, 20.0)
    model.save_pretrained(folder)
    return folder


def write_rows(path: Path) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


def invoke(*args, catch: bool = False):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=catch)


def teacher_data(out: Path):
    index = json.loads((out / "work" / "teacher" / "index.json").read_text())
    shards = [index["shards"][k] for k in sorted(index["shards"], key=int)]
    return load_teacher_data({"folder": str(out / "work" / "teacher"), "shards": shards})


def decode(t, proposer, prompt, gamma, sampling=SamplingConfig(), generator=None, max_new=16):
    return decode_speculative(
        CachedModel(t.model),
        proposer,
        prompt,
        gamma=gamma,
        max_new_tokens=max_new,
        sampling=sampling,
        generator=generator,
        eos_ids=t.eos_ids,
    )


VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def distill_args(kind: str, target: str, task_file: str, out) -> list:
    return ["distill", "--kind", kind, "--target", target, "--out", out, "--preset", "small", "--task", task_file]


def distilled(
    kind: str, target: str, task_file: str, out: Path, steps: int = 40, extra: tuple[str, ...] = ()
) -> tuple[Path, dict]:
    """One uninterrupted small-preset run of `kind` through the CLI → (its folder, its manifest as printed)."""
    result = invoke(*distill_args(kind, target, task_file, out), "--device", "cpu", "--steps", steps, *extra, "--json")
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def step_law(target: str, draft: str, row: int, control=None):
    """`specbench verify`'s step law (evidence/pair_step.py) for `draft` on the target at T = 1, top-k 3, γ 2, 1,500
    steps (power against a total variation of 0.1) from ROWS[row]'s prompt → its joint goodness-of-fit check."""
    from specbench.decoding.drafts.factory import make_proposer
    from specbench.evidence.pair_step import pair_step_checks
    from specbench.models import load_model
    from specbench.run_specs import parse_draft

    t = load_model(target, device="cpu")
    prompt = t.tokenizer(ROWS[row]["prompt"])["input_ids"]

    def factory():
        return make_proposer(parse_draft(draft), t)

    sampling = SamplingConfig(temperature=1.0, top_k=3)
    kw = dict(gamma=2, n=1_500, eos_ids=t.eos_ids, alt_tv=0.1, control=control)
    checks = pair_step_checks(t.model, factory, prompt, sampling, **kw)
    return next(c for c in checks if c.name.endswith("joint2/gof"))


def proposals(t, draft, prompts, gamma: int) -> list[tuple[list[int], int]]:
    """(the sequence, the first drafted token) of every proposal the loop asked the draft for, greedy."""
    seen: list[tuple[list[int], int]] = []
    propose = draft.propose

    def spy(tokens, *args, **kw):
        proposal = propose(tokens, *args, **kw)
        seen.append((list(tokens), int(proposal.tokens[0])))
        return proposal

    draft.propose = spy
    for prompt in prompts:
        decode(t, draft, prompt, gamma)
    return seen


def offline_first_token(t, runner, tokens: list[int]) -> int:
    """An EAGLE-3 head's first token after `tokens` from scratch: the target's layer outputs over tokens[:-1] in one
    pass, fused, the head over every position at once (token t+1's embedding ⊕ g_t at position t), no cache."""
    with torch.no_grad():
        hs = t.model(torch.tensor([tokens[:-1]]), output_hidden_states=True).hidden_states
        g = runner.fuse(torch.cat([hs[i] for i in runner.head.aux_layers], dim=-1))
        emb = t.model.get_input_embeddings()(torch.tensor([tokens[1:]]))
        out = runner(emb, g, torch.arange(len(tokens) - 1)[None])
        return int(runner.out_layer(out[0, -1]).argmax())


def accepted_by_engine(session, draft: str, task: str, folder: Path) -> dict[str, list[list[int]]]:
    """`--draft draft` in vLLM (the test session's engine) and in specbench's loop, greedy, fp32, γ 2, 2 examples:
    each engine's accepted lengths per example, after asserting both runs are token-identical to plain decoding."""
    import pytest

    from specbench.engines.vllm.engine import VllmEngine

    accepted = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(VllmEngine, "open_session", lambda self, load: session)
        for engine in ("vllm", "specbench"):
            args = ["run", "--engine", engine, "--target", session.load.target, "--draft", draft, "--gamma", "2"]
            args += ["--limit", "2", "--task", task, "--max-new-tokens", "12", "--device", "cpu"]
            result = invoke(*args, "--dtype", "float32", "--results-dir", folder / engine)
            assert result.exit_code == 0, result.output
            (run,) = (folder / engine).iterdir()
            records = [json.loads(line) for line in (run / "examples.jsonl").read_text().splitlines()]
            assert len(records) == 2 and all(r["identical"] for r in records)
            accepted[engine] = [r["speculative"]["accept_lengths"] for r in records]
    return accepted


def assert_same_acceptance(accepted: dict[str, list[list[int]]]) -> None:
    """vLLM accepted some drafted tokens, and the same ones as specbench's loop, step by step (the last step aside: a
    budget's end cuts it differently)."""
    assert sum(sum(a) for a in accepted["vllm"]) > 0
    for a, b in zip(accepted["vllm"], accepted["specbench"], strict=True):
        k = min(len(a), len(b)) - 1
        assert k > 3 and a[:k] == b[:k], accepted

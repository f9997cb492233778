"""A GGUF draft model inside llama.cpp (issue 28 item 2; engines/llama_cpp/draft.py), on two tiny GGUFs.

Target: the tiny 2-layer Llama of tests/tiny_gguf.py; draft: a 1-layer one written from the same seed, so it
shares the target's vocabulary, embeddings and output head (its drafts are often accepted). What must hold:
specbench's loop with the draft in llama.cpp is greedy-identical to plain decoding (or diverges only at a near
tie of the plain target, as tests/test_llama_cpp.py allows for prompt lookup); `run --engine llama-cpp --draft
<file.gguf>` loads the draft into llama.cpp, never through torch; a draft of another id space is a one-line
error; llama-cpp-python's own speculative loop drives the same draft through its draft hook. Skipped with one
line where llama-cpp-python is not built (`make setup-llama-cpp`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import llama_replay
import pytest
from tiny_gguf import EOS_ID, VOCAB, write_tiny_gguf

from specbench.config import SamplingConfig
from specbench.errors import SpecbenchError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import llama_peers  # noqa: E402  (bench/: llama-cpp-python's own decoders)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not built (make setup-llama-cpp)"
)
GREEDY = SamplingConfig(temperature=0.0)
EOS = frozenset({EOS_ID})
PROMPTS = [[1] + [3 + b for b in b"the cat sat on the mat. the cat sat on the"], [1] + [3 + b for b in b"abc abd"]]
NEAR_TIE = 0.05  # logit margin under which a divergence is rounding (as tests/test_llama_cpp.py)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return str(write_tiny_gguf(folder / "target.gguf")), str(write_tiny_gguf(folder / "draft.gguf", layers=1))


@pytest.fixture(scope="module")
def target(paths):
    from specbench.engines.llama_cpp.backend import LlamaCppModel

    return LlamaCppModel(paths[0], n_ctx=256, threads=1)


def test_gguf_draft_in_llama_cpp_is_greedy_identical(target, paths):
    from specbench.decoding.autoregressive import decode_autoregressive
    from specbench.decoding.speculative import decode_speculative
    from specbench.engines.llama_cpp import backend as lc
    from specbench.engines.llama_cpp.draft import LlamaModelDraft, load_gguf_draft

    draft = LlamaModelDraft(load_gguf_draft(paths[1], n_ctx=256, threads=1, target_vocab=VOCAB), paths[1])
    assert isinstance(draft.model_caches()[0], lc.LlamaCppModel)
    accepted = 0
    for prompt in PROMPTS:
        plain = decode_autoregressive(target, prompt, max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=EOS)
        res = decode_speculative(
            target, draft, prompt, gamma=3, max_new_tokens=32, sampling=GREEDY, generator=None, eos_ids=EOS
        )
        assert res.drafted > 0 and res.draft_calls > 0
        accepted += res.accepted
        div = llama_replay.classify(target, prompt, plain.token_ids, res.token_ids)
        assert div is None or div.margin < NEAR_TIE, div
        if div is None:
            assert res.token_ids == plain.token_ids
    assert accepted > 0  # the draft's tokens were verified and kept, not only corrected


def test_sampling_with_a_gguf_draft_is_reproducible(target, paths):
    import torch

    from specbench.decoding.speculative import decode_speculative
    from specbench.engines.llama_cpp.draft import LlamaModelDraft, load_gguf_draft

    draft = LlamaModelDraft(load_gguf_draft(paths[1], n_ctx=256, threads=1, target_vocab=VOCAB), paths[1])
    hot = SamplingConfig(temperature=1.0)

    def once(seed):
        g = torch.Generator().manual_seed(seed)
        return decode_speculative(
            target, draft, PROMPTS[0], gamma=3, max_new_tokens=24, sampling=hot, generator=g, eos_ids=frozenset()
        ).token_ids

    a, b, c = once(1), once(1), once(2)
    assert a == b and a != c and all(0 <= t < VOCAB for t in a)


def test_a_draft_of_another_vocabulary_is_one_line(paths):
    from specbench.engines.llama_cpp.draft import load_gguf_draft

    with pytest.raises(SpecbenchError, match="vocabularies differ") as err:
        load_gguf_draft(paths[1], n_ctx=64, threads=1, target_vocab=VOCAB + 1)
    assert "\n" not in str(err.value)


def test_binding_loop_with_the_gguf_draft_hook(paths):
    """llama-cpp-python's own speculative decoding with the draft GGUF behind its hook: it drafts, its passes are
    fewer than its tokens, and its greedy output equals its plain generate (the binding verifies by token match)."""
    from specbench.engines.llama_cpp import backend as lc
    from specbench.engines.llama_cpp.draft import GgufDraftHook, load_gguf_draft

    plain = llama_peers.peer_generate(
        lc.load_llama(paths[0], 256, 1), PROMPTS[0], max_new_tokens=30, eos_ids=frozenset()
    )
    hook = llama_peers.CountingDraft(
        GgufDraftHook(load_gguf_draft(paths[1], n_ctx=256, threads=1, target_vocab=VOCAB), 4), 4
    )
    peer = lc.load_llama(paths[0], 256, 1, draft_model=hook)
    res = llama_peers.peer_generate(peer, PROMPTS[0], max_new_tokens=30, eos_ids=frozenset(), draft=hook)
    assert len(res.token_ids) == 30 and res.drafted > 0 and res.accepted > 0 and res.target_calls < 30
    assert res.token_ids == plain.token_ids


@pytest.mark.parametrize("hybrid", [False, True])
def test_run_loads_a_gguf_draft_into_llama_cpp_not_torch(tmp_path, monkeypatch, paths, hybrid):
    """`specbench run --engine llama-cpp --draft draft.gguf` (or `lookup+draft.gguf`): the torch loader must not be
    called for the draft."""
    from typer.testing import CliRunner

    import specbench.decoding.drafts.factory as factory
    from specbench.cli import app

    def no_torch(*a, **k):
        raise AssertionError("the GGUF draft went through torch")

    monkeypatch.setattr(factory, "load_model", no_torch)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "the cat sat on the mat and the cat sat on the", "reference": "x"}) + "\n")
    args = ["run", "--engine", "llama-cpp", "--threads", "1", "--target", paths[0], "--task", str(task)]
    args += [
        "--draft",
        ("lookup+" if hybrid else "") + paths[1],
        "--gamma",
        "3",
        "--limit",
        "1",
        "--max-new-tokens",
        "16",
    ]
    args += ["--results-dir", str(tmp_path / "res"), "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "res").iterdir()
    (row,) = [json.loads(x) for x in (run / "examples.jsonl").read_text().splitlines()]
    assert row["speculative"]["drafted"] > 0 and row["speculative"]["draft_calls"] > 0
    assert row["identical"] or row["numerics"]["divergence"]["kind"] == "numerics", row["numerics"]

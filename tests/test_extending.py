"""docs/extending.md is followed, block by block: each block marked `file=` is written where it says, registered as
the page says, and must then work (a draft: greedy identity; an engine: listed, validated, decoding; a claim: its
three verdicts). A page that drifts from the code fails here."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, tiny_llama

import specbench.engines
import specbench.engines.registry as registry
from specbench.config import RunConfig, SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.speculative import decode_speculative
from specbench.errors import SpecbenchError

PAGE = Path(__file__).resolve().parent.parent / "docs" / "extending.md"
BLOCK = re.compile(r"```python file=(\S+)\n(.*?)```", re.S)
ROOT_PACKAGE = "specbench/"


def blocks() -> dict[str, str]:
    """{path inside the repository: source} of every block marked with a file name."""
    return dict(BLOCK.findall(PAGE.read_text(encoding="utf-8")))


@pytest.fixture
def written(tmp_path, monkeypatch):
    """The page's files written under tmp_path/specbench/... and made importable as specbench's own modules, by
    extending each package's __path__ (nothing is written into the checkout)."""
    for rel, source in blocks().items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    for rel in blocks():
        parts = Path(rel).parent.parts  # e.g. ('specbench', 'engines', 'greedy_torch')
        for depth in range(2, len(parts) + 1):
            package = ".".join(parts[:depth])
            extra = str(tmp_path.joinpath(*parts[:depth]))
            try:
                module = importlib.import_module(package)
            except ModuleNotFoundError:
                continue  # a new package of the page's: found through its parent's extended __path__
            if extra not in module.__path__:
                monkeypatch.setattr(module, "__path__", [*module.__path__, extra])
    yield tmp_path
    for name in [
        m for m in sys.modules if m.endswith(("greedy_torch", "greedy_torch.engine", "repeat", "claim_example"))
    ]:
        sys.modules.pop(name, None)


def test_the_page_has_its_three_examples():
    assert set(blocks()) == {
        "specbench/decoding/drafts/repeat.py",
        "specbench/engines/greedy_torch/__init__.py",
        "specbench/engines/greedy_torch/engine.py",
        "specbench/report/claim_example.py",
    }


def test_the_draft_is_exact_at_t0_and_proposes_what_the_page_says(written):
    from specbench.decoding.drafts.repeat import RepeatDraft

    model = tiny_llama(0)
    greedy = SamplingConfig(0.0)
    draft = RepeatDraft(VOCAB, torch.device("cpu"))
    proposal = draft.propose([5, 7, 9], 3, greedy, None)
    assert proposal.tokens.tolist() == [9, 9, 9] and proposal.q_probs is None
    assert draft.propose([5, 9], 2, SamplingConfig(1.0), None).q_probs.sum(-1).tolist() == [1.0, 1.0]
    for prompt in ([1, 2, 3, 4], [9, 9, 9, 9, 9, 9], [3, 1, 4, 1, 5, 9, 2, 6]):
        plain = decode_autoregressive(
            CachedModel(model), prompt, max_new_tokens=12, sampling=greedy, generator=None, eos_ids=frozenset()
        )
        spec = decode_speculative(
            CachedModel(model),
            draft,
            prompt,
            gamma=3,
            max_new_tokens=12,
            sampling=greedy,
            generator=None,
            eos_ids=frozenset(),
        )
        assert spec.token_ids == plain.token_ids and spec.drafted > 0


def test_the_engine_registers_lists_validates_and_decodes(written, monkeypatch):
    from specbench.engines import greedy_torch

    monkeypatch.setitem(registry.ENGINES, greedy_torch.SPEC.name, greedy_torch.SPEC)  # the page's registry line
    rows = {row["name"]: row for row in specbench.engines.engine_rows()}
    assert rows["greedy-torch"]["sampling"] == "no" and rows["greedy-torch"]["session"] == "torch"
    config = RunConfig("t", "prompt-lookup", "x", engine="greedy-torch")
    assert specbench.engines.check_config(config) is config
    with pytest.raises(
        SpecbenchError,
        match="--temperature 1 is not supported by --engine greedy-torch: it decodes greedily only; use 0",
    ):
        specbench.engines.check_config(
            RunConfig("t", "prompt-lookup", "x", sampling=SamplingConfig(1.0), engine="greedy-torch")
        )
    with pytest.raises(SpecbenchError, match="--draft-confidence is not supported by --engine greedy-torch"):
        specbench.engines.check_config(RunConfig("t", "tiny-draft", "x", draft_confidence=0.5, engine="greedy-torch"))
    assert type(specbench.engines.runtime("greedy-torch")).__name__ == "LoopEngine"
    assert registry.same_session("torch", config)  # shares the loaded torch session with specbench's engines


def test_the_claim_gives_each_verdict(written):
    from specbench.report.claim_example import faster_claim

    assert faster_claim([0.3, 0.25, 0.35, 0.28, 0.31, 0.22, 0.4, 0.3, 0.27, 0.33]).verdict == "holds"
    assert faster_claim([-0.3, -0.25, -0.35, -0.28, -0.31, -0.22, -0.4, -0.3, -0.27, -0.33]).verdict == "does not hold"
    assert faster_claim([0.3, -0.25, 0.35, -0.28, 0.31, -0.22, 0.4, -0.3, 0.27, -0.33]).verdict == "inconclusive"
    few = faster_claim([0.3, 0.3, 0.3])
    assert few.verdict == "inconclusive" and "measure at least" in few.numbers

